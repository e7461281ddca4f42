"""Observation helpers for fault scenarios: who runs for which profile, and what the daemon costs.

Everything here reads ``/proc`` (or psutil) and signals only processes the tests started
themselves, by PID.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from profiles.upstream.process import proc_start_time
from supervisor.processes import identity
from tests.harness import wait_for


def gateway_leaders(root: Path) -> dict[str, list[int]]:
    """Per profile, the tagged processes that are gateways as hermesd starts them (session leaders)."""
    out: dict[str, list[int]] = {}
    for pid, name, env in identity.find_tagged(root.resolve()):
        if (
            identity.session_id(pid) == pid
            and env.get("HERMES_HOME")
            and identity.is_gateway_cmdline(identity.proc_cmdline(pid))
        ):
            out.setdefault(name, []).append(pid)
    return {k: sorted(v) for k, v in out.items()}


def tagged_by_profile(root: Path) -> dict[str, list[int]]:
    """Every live process carrying the root's tag (gateways and all their descendants), per profile."""
    out: dict[str, list[int]] = {}
    for pid, name, _env in identity.find_tagged(root.resolve()):
        out.setdefault(name, []).append(pid)
    return {k: sorted(v) for k, v in out.items()}


def eventually(pred, timeout: float, interval: float = 0.05):
    """Like ``wait_for`` but returns ``None`` on timeout, so a scenario can record what it saw first."""
    try:
        return wait_for(pred, timeout, interval)
    except AssertionError:
        return None


def alive_exact(pid: int, start_time: int | None) -> bool:
    """The process that had ``start_time`` still exists (a recycled PID does not count)."""
    return start_time is not None and proc_start_time(pid) == start_time


def daemon_cpu_seconds(pid: int) -> float:
    t = psutil.Process(pid).cpu_times()
    return t.user + t.system


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def rss_bytes(pid: int) -> int:
    return psutil.Process(pid).memory_info().rss


def retry_delays(log_text: str, profile: str) -> list[float]:
    """The backoff delays hermesd announced for ``profile`` ("profile p: retry in 0.4s"), in order."""
    marker = f"profile {profile}: retry in "
    out = []
    for line in log_text.splitlines():
        i = line.find(marker)
        if i >= 0:
            out.append(float(line[i + len(marker):].rstrip().rstrip("s")))
    return out


def sample_max_leaders(root: Path, profile: str, seconds: float, interval: float = 0.05) -> tuple[int, int]:
    """Watch ``profile`` for ``seconds``: (most gateways seen at once, number of samples)."""
    most, n = 0, 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        most = max(most, len(gateway_leaders(root).get(profile, [])))
        n += 1
        time.sleep(interval)
    return most, n


def converged(d, root, running: set[str], faults=None, timeout: float = 30.0) -> dict[str, int]:
    """Exactly one gateway per profile in ``running``, none for the others, no stray process, and
    the daemon's rows name exactly those gateways."""
    def check():
        leaders = gateway_leaders(root)
        rows = {r["name"]: r for r in d.status()["profiles"]}
        ok = (
            set(leaders) == running
            and all(len(p) == 1 for p in leaders.values())
            and all(rows[n]["state"] == "running" and rows[n]["pid"] == leaders[n][0] for n in running)
            and all(rows[n]["pid"] is None for n in rows if n not in running)
        )
        return {n: p[0] for n, p in leaders.items()} if ok else None

    pids = wait_for(check, timeout, what=f"exactly one gateway for each of {sorted(running)}")
    strays = {n: [p for p in ps if p != pids.get(n)] for n, ps in tagged_by_profile(root).items()}
    strays = {n: p for n, p in strays.items() if p}
    if faults is not None:
        faults.lose(sum(map(len, strays.values())), f"unsupervised processes: {strays}")
    assert strays == {}
    return pids


@dataclass
class Sleeper:
    """An unrelated python process that just sleeps: the victim of PID-reuse scenarios."""

    proc: subprocess.Popen[bytes]
    start_time: int

    @classmethod
    def start(cls, seconds: int = 600) -> Sleeper:
        env = {k: v for k, v in os.environ.items() if not k.startswith("HERMESD_")}
        proc = subprocess.Popen(
            [sys.executable, "-c", f"import time; time.sleep({seconds})"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True, env=env,
        )
        start = wait_for(lambda: proc_start_time(proc.pid), 10, what="sleeper started")
        return cls(proc, start)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None and alive_exact(self.pid, self.start_time)

    def kill(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            self.proc.wait(10)


# -- respawn timing, the way the benchmark measures it: the PID allocator, not the daemon's word


def last_pid() -> int:
    """The PID most recently allocated on the system (5th field of ``/proc/loadavg``)."""
    with open("/proc/loadavg") as fh:
        return int(fh.read().split()[4])


def parent_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read()
        return int(raw[raw.rindex(b")") + 2 :].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def respawn_after_kill(parent: int, victim: int, timeout: float = 10.0) -> tuple[int, float] | None:
    """SIGKILL ``victim`` (a child of ``parent``) and return (the new child of ``parent``, seconds
    from the kill to that child's appearance in ``/proc``), or ``None`` when none came in ``timeout``.

    New PIDs are found through the allocator's last PID, so the cost of one poll is a few ``stat``
    reads however many processes the host runs, and the figure is the fork, not the child's
    start-up or a status request.
    """
    try:
        with open("/proc/sys/kernel/pid_max") as fh:
            pid_max = int(fh.read())
    except (OSError, ValueError):
        pid_max = 1 << 22
    last = last_pid()
    pending: dict[int, float] = {}
    t0 = time.perf_counter()
    os.kill(victim, signal.SIGKILL)
    while True:
        cur, now = last_pid(), time.perf_counter()
        if cur != last:
            fresh = range(last + 1, cur + 1) if cur > last else [*range(last + 1, pid_max), *range(300, cur + 1)]
            for pid in fresh:
                pending[pid] = now
            last = cur
        for pid in list(pending):
            ppid = parent_of(pid)
            if ppid == parent and pid != victim:
                return pid, now - t0
            if ppid is not None or now - pending[pid] > 0.5:
                del pending[pid]
        if now - t0 > timeout:
            return None
        time.sleep(0.0005)


def timed(fn, *args, **kwargs) -> tuple[float, object]:
    """(seconds, result) of one call."""
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return time.perf_counter() - t0, out


NOBODY = 65534


def as_nobody(argv: list[str]) -> list[str]:
    """``argv`` run as uid/gid 65534 with no supplementary groups (needs root)."""
    return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--", *argv]


@contextlib.contextmanager
def lost_on_failure(faults, what: str):
    """Count one thing lost (``what``) when the block fails before its own check could count it."""
    try:
        yield
    except BaseException as exc:
        faults.lose(1, f"{what}: {str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__}")
        raise
