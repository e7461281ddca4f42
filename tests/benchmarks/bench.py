"""hermesd against supervisord 4.x: the same child program, the same N, the same measurements.

Run ``bash tests/benchmarks/run.sh [--quick]`` (or ``python tests/benchmarks/bench.py`` from
hermesd's virtual environment). supervisord's PyPI distribution installs a top-level package
called ``supervisor``, hermesd's own import name, so it lives in a separate virtual environment
(``.venv-supervisord/`` in the repository by default, created on first use); this process imports
hermesd only and runs ``supervisord``/``supervisorctl`` from that environment as programs.

For each N (3, 20, 100; ``--quick``: 3, 20) each supervisor, in turn, manages N copies of
``child.py`` in its own temporary folder:

* start: from launching the supervisor to every child running (its ``gateway_state.json`` names
  a live process whose parent is the supervisor);
* RSS of the supervisor process (``VmRSS``) after start-up and after the whole workload;
* idle CPU: CPU time of the supervisor (all threads, ``/proc/PID/task/*/schedstat``) over an idle
  window (``--idle-seconds``, default 20 s), scaled to seconds per minute;
* status: wall time of ``hermesd status`` / ``supervisorctl status`` as a process (median);
* respawn: SIGKILL a healthy child; the time to the new child's fork (and exec) comes from the
  kernel's own timestamps (proc connector, root only; otherwise /proc polled every 0.2 ms).
  Round-robin over the children, one restart at a time: each kill comes 0.5 s after the previous
  respawn and only once the victim has run longer than hermesd's ``healthy_after`` (0.5 s), so
  every kill takes hermesd's restart-at-once path;
* stop: from launching the stop command (``hermesd stop`` / ``supervisorctl shutdown``: every
  child and the supervisor) to every child gone.

Then (when N = 100 is not among the Ns) ``hermesd status`` alone at N = 100, hermesd's conflict
scan over 1,000 generated profiles (``--scan-profiles``), and the targets: issue 38's goals, each
with supervisord's figure from the same run beside it. With ``--soak [SECONDS]`` instead of all
that: random SIGKILLs across 20 children under hermesd.

Every process started here carries ``HBENCH_TAG=<random>`` in its environment; at the end (also on
Ctrl-C or an error) each supervisor is stopped by PID (SIGTERM, then SIGKILL after 10 s), then every
process still carrying the tag is killed, and the temporary folders are removed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import random
import secrets
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
CHILD = HERE / "child.py"
CLK_TCK = os.sysconf("SC_CLK_TCK")
MIB = 1024 * 1024
# Issue 38's goals (on a quiet machine): respawn with isolation, cgroup and journal on; the daemon's
# RSS after the workload at N = 20; `hermesd status` at N = 100; the cold 1,000-profile scan (below).
RESPAWN_GOAL_MS = 2.0
RSS_GOAL_MIB = 20.0
STATUS_GOAL_MS = 40.0

HEALTHY_AFTER = 0.5  # hermesd restart.healthy_after for the benchmark
KILL_SPACING = HEALTHY_AFTER + 0.2  # a victim's replacement runs at least this long before the next kill
KILL_GAP = 0.5  # and any kill comes this long after the previous respawn: one restart at a time, quiet loop
POLL = 0.0002  # respawn polling interval (seconds)


# ----------------------------------------------------------------------------------------------
# /proc helpers


@dataclass(frozen=True, slots=True)
class Stat:
    state: str
    ppid: int
    start: int


def proc_stat(pid: int) -> Stat | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read()
    except OSError:
        return None
    try:
        after = raw[raw.rindex(b")") + 2 :].split()
        return Stat(after[0].decode(), int(after[1]), int(after[19]))
    except (ValueError, IndexError):
        return None


def live(pid: int) -> bool:
    st = proc_stat(pid)
    return st is not None and st.state not in ("Z", "X")


def cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read()
    except OSError:
        return b""


def is_child_program(pid: int) -> bool:
    return str(CHILD).encode() in cmdline(pid)


def rss_bytes(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def fd_count(pid: int) -> int | None:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


def thread_count(pid: int) -> int | None:
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return None


def cpu_seconds(pid: int) -> float | None:
    """CPU time of every live thread of ``pid`` (ns precision from schedstat; ticks as fallback)."""
    total = 0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    ok = True
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as fh:
                total += int(fh.read().split()[0])
        except (OSError, ValueError, IndexError):
            ok = False
            break
    if ok:
        return total / 1e9
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read()
        after = raw[raw.rindex(b")") + 2 :].split()
        return (int(after[11]) + int(after[12])) / CLK_TCK
    except (OSError, ValueError, IndexError):
        return None


def context_switches(pid: int) -> int | None:
    """Voluntary + involuntary context switches of every live thread: how often the process wakes."""
    total = 0
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/status") as fh:
                for line in fh:
                    if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                        total += int(line.split()[1])
    except (OSError, ValueError):
        return None
    return total


def last_pid() -> int:
    """The PID most recently allocated on the system (5th field of /proc/loadavg)."""
    with open("/proc/loadavg") as fh:
        return int(fh.read().split()[4])


def pid_max() -> int:
    try:
        return int(Path("/proc/sys/kernel/pid_max").read_text())
    except (OSError, ValueError):
        return 1 << 22


def pids_between(lo: int, hi: int) -> Iterator[int]:
    """PIDs allocated after ``lo`` up to ``hi`` (allocation wraps at pid_max)."""
    if hi >= lo:
        yield from range(lo + 1, hi + 1)
    else:
        yield from range(lo + 1, pid_max())
        yield from range(300, hi + 1)


def tagged_pids(tag: str) -> list[int]:
    needle = f"HBENCH_TAG={tag}".encode()
    me = os.getpid()
    out = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as fh:
                env = fh.read()
        except OSError:
            continue
        if needle + b"\0" in env + b"\0":
            out.append(int(entry.name))
    return out


class ProcEvents:
    """The kernel's own fork/exec timestamps (Linux proc connector, CLOCK_MONOTONIC; needs root).

    Polling /proc shows a new child only when the benchmark gets a CPU to look, which on a busy
    machine is late; the connector's timestamps are taken by the kernel in fork and exec, so the
    respawn figures do not depend on when the poller ran. Without root (or without
    CONFIG_PROC_EVENTS) ``ok`` is False and the polled times are used.
    """

    FORK, EXEC, EXIT = 0x1, 0x2, 0x80000000

    def __init__(self) -> None:
        self.sock: socket.socket | None = None
        self.forks: dict[int, tuple[int, int]] = {}  # child pid -> (parent pid, ns)
        self.execs: dict[int, int] = {}  # pid -> ns
        self.exits: dict[int, int] = {}  # pid -> ns
        self.lost = False
        try:
            s = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, 11)  # NETLINK_CONNECTOR
        except (OSError, AttributeError):
            return
        try:
            with contextlib.suppress(OSError):
                s.setsockopt(socket.SOL_SOCKET, 33, 32 * MIB)  # SO_RCVBUFFORCE
            s.bind((os.getpid(), 1))  # CN_IDX_PROC
            # nlmsghdr (NLMSG_DONE) + cn_msg (CN_IDX_PROC, CN_VAL_PROC) + PROC_CN_MCAST_LISTEN
            s.send(struct.pack("=IHHII", 40, 3, 0, 0, os.getpid()) + struct.pack("=IIIIHH", 1, 1, 0, 0, 4, 0)
                   + struct.pack("=I", 1))
            s.setblocking(False)
        except OSError:
            s.close()
            return
        self.sock = s

    @property
    def ok(self) -> bool:
        return self.sock is not None

    def drain(self) -> None:
        if self.sock is None:
            return
        while True:
            try:
                data = self.sock.recv(65536)
            except BlockingIOError:
                return
            except OSError:  # ENOBUFS: the kernel dropped events
                self.lost = True
                continue
            off = 0
            while off + 52 <= len(data):
                length = struct.unpack_from("=I", data, off)[0]
                what, _cpu, ts = struct.unpack_from("=IIQ", data, off + 36)
                if what == self.FORK:
                    _ppid, ptgid, cpid, ctgid = struct.unpack_from("=IIII", data, off + 52)
                    if cpid == ctgid:  # a process, not a thread
                        self.forks[cpid] = (ptgid, ts)
                elif what == self.EXEC:
                    pid, tgid = struct.unpack_from("=II", data, off + 52)
                    if pid == tgid:
                        self.execs[pid] = ts
                elif what == self.EXIT:
                    pid, tgid = struct.unpack_from("=II", data, off + 52)
                    if pid == tgid:
                        self.exits[pid] = ts
                off += max(length, 52) + (-length % 4)

    def clear(self) -> None:
        self.drain()
        self.forks.clear()
        self.execs.clear()
        self.exits.clear()
        self.lost = False

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None


# ----------------------------------------------------------------------------------------------
# statistics


def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile."""
    s = sorted(values)
    return s[max(0, math.ceil(q * len(s)) - 1)]


def median(values: list[float]) -> float:
    return statistics.median(values)


# ----------------------------------------------------------------------------------------------
# clean-up


class Cleanup:
    """Everything this run starts or creates, torn down by PID (never by name) at the end."""

    def __init__(self) -> None:
        self.tag = secrets.token_hex(8)
        self.procs: list[subprocess.Popen[bytes]] = []
        self.dirs: list[Path] = []

    def mkdtemp(self, prefix: str) -> Path:
        d = Path(tempfile.mkdtemp(prefix=prefix))
        self.dirs.append(d)
        return d

    def popen(self, argv: list[str], **kw: Any) -> subprocess.Popen[bytes]:
        p = subprocess.Popen(argv, **kw)
        self.procs.append(p)
        return p

    def kill_procs(self) -> list[int]:
        """Stop our supervisors by PID (SIGTERM, so that hermesd removes its cgroups; SIGKILL after
        10 s), then SIGKILL every process still carrying the tag; return those."""
        for p in self.procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    p.terminate()
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    p.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(10)
        self.procs = [p for p in self.procs if p.poll() is None]
        leftovers = tagged_pids(self.tag)
        for pid in leftovers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return leftovers

    def remove_dir(self, d: Path) -> None:
        shutil.rmtree(d, ignore_errors=True)
        if d in self.dirs:
            self.dirs.remove(d)

    def close(self) -> None:
        self.kill_procs()
        for d in list(self.dirs):
            self.remove_dir(d)


# ----------------------------------------------------------------------------------------------
# the two supervisors


def base_env(tag: str, home: Path) -> dict[str, str]:
    """A small, identical environment for both supervisors (no PYTHONPATH: two 'supervisor' packages)."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "HBENCH_TAG": tag,
    }


def child_argv(name: str) -> list[str]:
    return [sys.executable, "-S", str(CHILD), "-p", name, "gateway", "run", "--external-supervisor"]


def profile_names(n: int) -> list[str]:
    return [f"p{i:03d}" for i in range(n)]


def write_profile_files(home: Path, i: int) -> None:
    """A small, conflict-free .env and config.yaml, so hermesd does its real per-profile reading."""
    (home / ".env").write_text(f"# profile {i}\nTELEGRAM_BOT_TOKEN={7000000 + i}:AAbench{i:06d}token\n")
    (home / "config.yaml").write_text("model: openai/gpt-4o-mini\nagent:\n  max_turns: 60\n")


class Supervisor:
    """One supervisor managing ``n`` children under ``work``."""

    label = ""

    def __init__(self, work: Path, n: int, clean: Cleanup) -> None:
        self.work = work
        self.n = n
        self.clean = clean
        self.names = profile_names(n)
        self.root = work / "root"
        self.homes = {name: self.root / "profiles" / name for name in self.names}
        (work / "home").mkdir(parents=True, exist_ok=True)
        for i, home in enumerate(self.homes.values()):
            home.mkdir(parents=True)
            write_profile_files(home, i)
        self.env = base_env(clean.tag, work / "home")
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = work / f"{self.label}.out"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def launch_argv(self) -> list[str]:
        raise NotImplementedError

    def status_argv(self) -> list[str]:
        raise NotImplementedError

    def stop_argv(self) -> list[str]:
        raise NotImplementedError

    def launch(self) -> None:
        with self.log.open("ab") as logf:
            self.proc = self.clean.popen(
                self.launch_argv(), stdin=subprocess.DEVNULL, stdout=logf, stderr=logf, env=self.env,
                cwd=str(self.work), start_new_session=True,
            )

    def child_pid(self, name: str) -> int | None:
        """The profile's current child: named by its state file, alive, our child, the child program."""
        try:
            rec = json.loads((self.homes[name] / "gateway_state.json").read_bytes())
        except (OSError, ValueError):
            return None
        pid = rec.get("pid") if isinstance(rec, dict) else None
        if not isinstance(pid, int):
            return None
        st = proc_stat(pid)
        if st is None or st.state in ("Z", "X") or st.ppid != self.pid or not is_child_program(pid):
            return None
        return pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-3000:]
        except OSError:
            return ""


class Hermesd(Supervisor):
    label = "hermesd"

    def __init__(self, work: Path, n: int, clean: Cleanup, extra: dict[str, Any] | None = None) -> None:
        super().__init__(work, n, clean)
        import yaml

        cfg = {
            "command": [sys.executable, "-S", str(CHILD)],
            "restart": {"initial_delay": 0.1, "max_delay": 1.0, "factor": 2, "jitter": 0.0,
                        "healthy_after": HEALTHY_AFTER},
            "stop_timeout": 10,
            "profiles": {"default": {"enabled": False}},  # exactly the N named profiles
            **(extra or {}),
        }
        (self.root / "hermesd.yaml").write_text(yaml.safe_dump(cfg))
        self.hermesd = hermesd_argv()

    def launch_argv(self) -> list[str]:
        return [*self.hermesd, "run", "--root", str(self.root)]

    def status_argv(self) -> list[str]:
        return [*self.hermesd, "status", "--root", str(self.root)]

    def stop_argv(self) -> list[str]:
        return [*self.hermesd, "stop", "--root", str(self.root)]

    def log_tail_all(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""

    def request(self, payload: dict[str, Any]) -> dict[str, Any]:
        from supervisor.control.client import Client
        from supervisor.layout import Layout

        payload = dict(payload)
        return Client(Layout(self.root.resolve())).call(payload.pop("cmd"), wait=10.0, **payload)

    def rows(self) -> dict[str, dict[str, Any]]:
        return {r["name"]: r for r in self.request({"cmd": "status"})["status"]["profiles"]}


class Supervisord(Supervisor):
    label = "supervisord"

    def __init__(self, work: Path, n: int, clean: Cleanup, venv: Path) -> None:
        super().__init__(work, n, clean)
        self.bin = venv / "bin"
        self.conf = work / "supervisord.conf"
        logs = work / "logs"
        logs.mkdir()
        sections = [
            f"[unix_http_server]\nfile={work}/supervisor.sock\nchmod=0700\n",
            f"[supervisord]\nnodaemon=true\nlogfile={work}/supervisord.log\npidfile={work}/supervisord.pid\n"
            f"childlogdir={logs}\nloglevel=info\n",
            "[rpcinterface:supervisor]\n"
            "supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface\n",
            f"[supervisorctl]\nserverurl=unix://{work}/supervisor.sock\n",
        ]
        for name, home in self.homes.items():
            sections.append(
                f"[program:{name}]\ncommand={' '.join(child_argv(name))}\n"
                f'environment=HERMES_HOME="{home}"\n'
                "autostart=true\nautorestart=true\nstartsecs=0\nstartretries=3\nstopsignal=TERM\nstopwaitsecs=10\n"
                f"stdout_logfile={logs}/{name}.log\nredirect_stderr=true\n"
            )
        self.conf.write_text("\n".join(sections))

    def launch_argv(self) -> list[str]:
        return [str(self.bin / "supervisord"), "-n", "-c", str(self.conf)]

    def status_argv(self) -> list[str]:
        return [str(self.bin / "supervisorctl"), "-c", str(self.conf), "status"]

    def stop_argv(self) -> list[str]:
        return [str(self.bin / "supervisorctl"), "-c", str(self.conf), "shutdown"]

    def log_tail(self) -> str:
        text = super().log_tail()
        with contextlib.suppress(OSError):
            text += (self.work / "supervisord.log").read_text(errors="replace")[-3000:]
        return text


def hermesd_argv() -> list[str]:
    script = Path(sys.executable).parent / "hermesd"
    return [str(script)] if script.exists() else [sys.executable, "-m", "supervisor"]


# ----------------------------------------------------------------------------------------------
# measurements


class BenchError(RuntimeError):
    pass


def wait_until(pred: Callable[[], Any], timeout: float, what: str, interval: float = 0.005) -> Any:
    deadline = time.perf_counter() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.perf_counter() > deadline:
            raise BenchError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def measure_start(sup: Supervisor, timeout: float = 120.0) -> tuple[float, dict[str, int]]:
    """Seconds from launching the supervisor to all N children running; their PIDs."""
    pending = set(sup.names)
    pids: dict[str, int] = {}
    t0 = time.perf_counter()
    sup.launch()
    while pending:
        for name in list(pending):
            pid = sup.child_pid(name)
            if pid is not None:
                pids[name] = pid
                pending.discard(name)
        if not pending:
            break
        if not sup.alive():
            raise BenchError(f"{sup.label} exited during start-up:\n{sup.log_tail()}")
        if time.perf_counter() - t0 > timeout:
            raise BenchError(f"{sup.label}: {len(pending)} of {sup.n} children not running after {timeout:.0f}s")
        time.sleep(0.005)
    return time.perf_counter() - t0, pids


def measure_idle_cpu(sup: Supervisor, seconds: float) -> tuple[float, float]:
    """CPU seconds per minute and wake-ups per second of the supervisor over ``seconds`` of idling."""
    c0, w0, t0 = cpu_seconds(sup.pid), context_switches(sup.pid), time.perf_counter()
    time.sleep(seconds)
    c1, w1, t1 = cpu_seconds(sup.pid), context_switches(sup.pid), time.perf_counter()
    if c0 is None or c1 is None or w0 is None or w1 is None:
        raise BenchError(f"{sup.label}: cannot read its CPU time")
    return (c1 - c0) / (t1 - t0) * 60.0, (w1 - w0) / (t1 - t0)


def timed_run(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float, int, bytes]:
    """Run ``argv`` to completion: (wall seconds, CPU seconds of the process, exit code, stderr)."""
    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, env=env,
                                cwd=str(cwd))
        try:
            _pid, status, usage = os.wait4(proc.pid, 0)
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        return wall, usage.ru_utime + usage.ru_stime, proc.returncode, err.read()


def measure_cli(argv: list[str], env: dict[str, str], cwd: Path, runs: int) -> dict[str, Any]:
    """Wall and CPU seconds of ``runs`` invocations (after one unmeasured warm-up), medians in ms."""
    walls, cpus = [], []
    rc = 0
    for i in range(runs + 1):
        wall, cpu, rc, err = timed_run(argv, env, cwd)
        if i == 0 and rc not in (0, 1):
            raise BenchError(f"{' '.join(argv)} exited {rc}: {err.decode(errors='replace')[-500:]}")
        if i:
            walls.append(wall * 1000)
            cpus.append(cpu * 1000)
    return {"wall_ms": walls, "cpu_ms": cpus, "median_ms": median(walls), "cpu_median_ms": median(cpus),
            "exit_code": rc}


@dataclass(slots=True)
class Respawn:
    fork_ms: list[float] = field(default_factory=list)
    exec_ms: list[float] = field(default_factory=list)
    cpu_ms: list[float] = field(default_factory=list)  # supervisor CPU from the kill until the poller saw the fork
    exit_to_fork_ms: list[float] = field(default_factory=list)  # the victim's death to the new fork (kernel)
    fallbacks: int = 0  # kills timed by polling because the connector missed the event


def wait_new_child(sup_pid: int, old: int, last: int, t0: float, timeout: float = 30.0) -> tuple[int, float]:
    """Poll the PID allocator until a new child of ``sup_pid`` appears; (pid, seconds since t0)."""
    pending: dict[int, float] = {}  # allocated but not visible in /proc yet (or already gone)
    deadline = t0 + timeout
    while True:
        cur = last_pid()
        now = time.perf_counter()
        if cur != last:
            for pid in pids_between(last, cur):
                pending[pid] = now
            last = cur
        for pid in list(pending):
            st = proc_stat(pid)
            if st is not None and st.ppid == sup_pid and pid != old:
                return pid, time.perf_counter() - t0
            if st is not None or now - pending[pid] > 0.5:
                del pending[pid]
        if now > deadline:
            raise BenchError(f"no new child of PID {sup_pid} within {timeout:.0f}s of the kill")
        time.sleep(POLL)


def measure_respawn(sup: Supervisor, kills: int, pids: dict[str, int], events: ProcEvents) -> Respawn:
    """Kill round-robin; respawn times from the kernel's fork/exec timestamps when ``events.ok``."""
    out = Respawn()
    names = list(sup.names)
    ready_at = {name: time.perf_counter() for name in names}  # children just started; spacing applies
    previous = time.perf_counter()
    for i in range(kills):
        name = names[i % len(names)]
        wait = max(ready_at[name] + KILL_SPACING, previous + KILL_GAP) - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        old = wait_until(lambda n=name: sup.child_pid(n), 30, f"{sup.label} {name} running")
        last = last_pid()
        events.clear()
        cpu0 = cpu_seconds(sup.pid) or 0.0
        t0 = time.perf_counter()
        ns0 = time.monotonic_ns()
        os.kill(old, signal.SIGKILL)
        new, fork_s = wait_new_child(sup.pid, old, last, t0)
        out.cpu_ms.append(((cpu_seconds(sup.pid) or 0.0) - cpu0) * 1000)
        exec_s = fork_s
        while not is_child_program(new):
            if not live(new):
                raise BenchError(f"{sup.label}: new child {new} of {name} died before exec")
            time.sleep(POLL)
            exec_s = time.perf_counter() - t0
        if events.ok:
            events.drain()
            fork = events.forks.get(new)
            if fork is not None and fork[0] == sup.pid:
                fork_s = (fork[1] - ns0) / 1e9
                if old in events.exits:
                    out.exit_to_fork_ms.append((fork[1] - events.exits[old]) / 1e6)
                if new in events.execs:
                    exec_s = (events.execs[new] - ns0) / 1e9
            else:
                out.fallbacks += 1
        out.fork_ms.append(fork_s * 1000)
        out.exec_ms.append(exec_s * 1000)
        ready_at[name] = previous = t0 + fork_s
        pids[name] = new
    # Leave every replacement healthy before anything else runs.
    time.sleep(KILL_SPACING)
    return out


def measure_stop(sup: Supervisor, pids: dict[str, int], timeout: float = 60.0) -> dict[str, float]:
    """Seconds from launching the stop command to every child gone; also CLI return and supervisor exit."""
    pending = {pid for pid in pids.values() if live(pid)}
    if len(pending) != sup.n:
        raise BenchError(f"{sup.label}: only {len(pending)} of {sup.n} children alive before stop")
    t0 = time.perf_counter()
    cli = subprocess.Popen(sup.stop_argv(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           env=sup.env, cwd=str(sup.work))
    gone_s = cli_s = exit_s = None
    assert sup.proc is not None
    while gone_s is None or cli_s is None or exit_s is None:
        now = time.perf_counter() - t0
        if gone_s is None:
            pending = {pid for pid in pending if live(pid)}
            if not pending:
                gone_s = now
        if cli_s is None and cli.poll() is not None:
            cli_s = now
        if exit_s is None and sup.proc.poll() is not None:
            exit_s = now
        if now > timeout:
            cli.kill()
            cli.wait()
            raise BenchError(f"{sup.label}: stop did not finish within {timeout:.0f}s ({len(pending)} children left)")
        time.sleep(0.001)
    return {"children_gone_s": gone_s, "cli_returned_s": cli_s, "supervisor_exited_s": exit_s}


@contextlib.contextmanager
def py_spy(args: argparse.Namespace, sup: Supervisor, phase: str) -> Iterator[None]:
    """With ``--py-spy``: sample the supervisor during one phase into ``--profile-dir`` (collapsed stacks)."""
    if not args.py_spy:
        yield
        return
    args.profile_dir.mkdir(parents=True, exist_ok=True)
    out = args.profile_dir / f"{sup.label}-N{sup.n}-{phase}.txt"
    rec = sup.clean.popen([args.py_spy, "record", "--pid", str(sup.pid), "--rate", "1000", "--nonblocking",
                           "--threads", "--format", "raw", "--output", str(out)],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # let it attach
    try:
        yield
    finally:
        rec.send_signal(signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            rec.wait(30)


def run_one(kind: str, n: int, args: argparse.Namespace, clean: Cleanup, events: ProcEvents) -> dict[str, Any]:
    work = clean.mkdtemp(f"hbench-{kind}-{n}-")
    sup: Supervisor = Hermesd(work, n, clean) if kind == "hermesd" else Supervisord(work, n, clean, args.sv_venv)
    res: dict[str, Any] = {"n": n, "supervisor": kind}
    try:
        start_s, pids = measure_start(sup)
        res["start_s"] = start_s
        time.sleep(args.settle)
        res["rss_idle_bytes"] = rss_bytes(sup.pid)
        with py_spy(args, sup, "idle"):
            res["idle_cpu_s_per_min"], res["idle_wakeups_per_s"] = measure_idle_cpu(sup, args.idle_seconds)
        res["idle_window_s"] = args.idle_seconds
        with py_spy(args, sup, "status"):
            st = measure_cli(sup.status_argv(), sup.env, sup.work, args.status_runs)
        res["status_ms"], res["status_cpu_ms"] = st["wall_ms"], st["cpu_ms"]
        res["status_median_ms"], res["status_cpu_median_ms"] = st["median_ms"], st["cpu_median_ms"]
        res["status_exit_code"] = st["exit_code"]
        with py_spy(args, sup, "respawn"):
            res["processes_on_host"] = sum(1 for e in os.listdir("/proc") if e.isdigit())
            rsp = measure_respawn(sup, args.kills, pids, events)
        res["respawn_timing"] = "proc-connector" if events.ok else "poll"
        res["respawn_poll_fallbacks"] = rsp.fallbacks
        res["respawn_fork_ms"] = rsp.fork_ms
        res["respawn_exec_ms"] = rsp.exec_ms
        res["respawn_cpu_ms"] = rsp.cpu_ms
        res["respawn_exit_to_fork_ms"] = rsp.exit_to_fork_ms
        for key, vals in (("respawn", rsp.fork_ms), ("respawn_exec", rsp.exec_ms), ("respawn_cpu", rsp.cpu_ms)):
            res[f"{key}_median_ms"] = median(vals)
            res[f"{key}_p90_ms"] = pct(vals, 0.9)
            res[f"{key}_max_ms"] = max(vals)
        pids = {name: wait_until(lambda nm=name: sup.child_pid(nm), 30, f"{name} running") for name in sup.names}
        if isinstance(sup, Hermesd):
            rows = sup.rows()
            res["restarts_reported"] = sum(rows[nm]["restarts"] for nm in sup.names)
            # Every kill must have taken the restart-at-once path, never a backoff.
            res["backoffs"] = sup.log_tail_all().count(": retry in ")
        res["rss_after_bytes"] = rss_bytes(sup.pid)
        res["fds_after"] = fd_count(sup.pid)
        res["threads"] = thread_count(sup.pid)
        with py_spy(args, sup, "stop"):
            res.update(measure_stop(sup, pids))
        res["stop_s"] = res["children_gone_s"]
    except BaseException:
        sys.stderr.write(f"--- {kind} N={n} log tail:\n{sup.log_tail()}\n")
        raise
    finally:
        leftovers = clean.kill_procs()
        if leftovers:
            res["leftover_pids_killed"] = leftovers
        clean.remove_dir(work)
    return res


def run_status_only(n: int, args: argparse.Namespace, clean: Cleanup) -> dict[str, Any]:
    """``hermesd status`` at ``n`` children alone (``--quick`` runs no N = 100 otherwise): start, the
    status runs, stop."""
    work = clean.mkdtemp(f"hbench-status-{n}-")
    sup = Hermesd(work, n, clean)
    try:
        measure_start(sup)
        time.sleep(args.settle)
        st = measure_cli(sup.status_argv(), sup.env, sup.work, args.status_runs)
        subprocess.run(sup.stop_argv(), env=sup.env, cwd=str(sup.work), capture_output=True, timeout=120)
        return {"n": n, "status_ms": st["wall_ms"], "status_cpu_ms": st["cpu_ms"],
                "status_median_ms": st["median_ms"], "status_cpu_median_ms": st["cpu_median_ms"],
                "status_exit_code": st["exit_code"]}
    except BaseException:
        sys.stderr.write(f"--- hermesd N={n} (status only) log tail:\n{sup.log_tail()}\n")
        raise
    finally:
        clean.kill_procs()
        clean.remove_dir(work)


# ----------------------------------------------------------------------------------------------
# what hermesd's optional features cost (issues 12, 13, 14): one daemon per variant at N = 20


def variant_configs(work: Path) -> dict[str, dict[str, Any]]:
    """hermesd.yaml additions per variant; ``baseline`` is hermesd's defaults (isolation: auto)."""
    return {
        "baseline": {},
        "limits on": {"limits": {"memory_max": "1G", "tasks_max": 512}},
        "metrics on": {"metrics": {"listen": f"unix:{work}/metrics.sock"}},
        "isolation off": {"isolation": "off"},
    }


def run_variant(label: str, n: int, args: argparse.Namespace, clean: Cleanup, events: ProcEvents) -> dict[str, Any]:
    work = clean.mkdtemp(f"hbench-variant-{n}-")
    sup = Hermesd(work, n, clean, variant_configs(work)[label])
    res: dict[str, Any] = {"n": n, "variant": label}
    try:
        start_s, pids = measure_start(sup)
        res["start_s"] = start_s
        time.sleep(args.settle)
        rows = sup.rows()
        mine = [r for name, r in rows.items() if name in sup.names]
        res["limits_mechanism"] = sorted({str(r.get("mechanism")) for r in mine})
        res["isolation"] = sorted({(iso.get("mechanism") or "none") + ("" if iso.get("enforced") else " (not enforced)")
                                   if isinstance(iso := r.get("isolation"), dict) else "none" for r in mine})
        res["rss_idle_bytes"] = rss_bytes(sup.pid)
        res["idle_cpu_s_per_min"], res["idle_wakeups_per_s"] = measure_idle_cpu(sup, args.idle_seconds)
        rsp = measure_respawn(sup, args.kills, pids, events)
        res["respawn_median_ms"] = median(rsp.fork_ms)
        res["respawn_p90_ms"] = pct(rsp.fork_ms, 0.9)
        res["respawn_exec_median_ms"] = median(rsp.exec_ms)
        pids = {name: wait_until(lambda nm=name: sup.child_pid(nm), 30, f"{name} running") for name in sup.names}
        res["rss_after_bytes"] = rss_bytes(sup.pid)
        res.update(measure_stop(sup, pids))
    except BaseException:
        sys.stderr.write(f"--- hermesd variant {label!r} N={n} log tail:\n{sup.log_tail()}\n")
        raise
    finally:
        clean.kill_procs()
        clean.remove_dir(work)
    return res


def variants_table(rows: list[dict[str, Any]]) -> str:
    head = (f"hermesd at N={rows[0]['n']}", "RSS idle MiB", "RSS after MiB", "idle CPU s/min", "wake-ups/s",
            "respawn med ms", "to exec med ms", "start s")
    body = [(r["variant"], fmt(r["rss_idle_bytes"], "MiB"), fmt(r["rss_after_bytes"], "MiB"),
             fmt(r["idle_cpu_s_per_min"], "cpu"), f"{r['idle_wakeups_per_s']:.1f}", fmt(r["respawn_median_ms"], "ms"),
             fmt(r["respawn_exec_median_ms"], "ms"), fmt(r["start_s"], "s")) for r in rows]
    widths = [max(len(str(x[i])) for x in [head, *body]) for i in range(len(head))]
    lines = ["  ".join(str(c).rjust(w) if i else str(c).ljust(w)
                       for i, (c, w) in enumerate(zip(x, widths, strict=True))) for x in [head, *body]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    notes = [f"  {r['variant']}: limits mechanism {', '.join(r['limits_mechanism'])}; "
             f"isolation {', '.join(r['isolation'])}" for r in rows]
    return "\n".join(lines + notes)


# ----------------------------------------------------------------------------------------------
# conflict scan over many profiles


CONFIG_TEMPLATE = """\
# Hermes profile {i}
model: {model}
toolsets:
  - hermes-cli
agent:
  max_turns: {turns}
  gateway_timeout: 1800
  restart_drain_timeout: {drain}
terminal:
  backend: local
  cwd: .
  timeout: 180
display:
  compact: false
  tool_progress: all
memory:
  memory_enabled: true
  user_profile_enabled: true
platforms:
  telegram:
    enabled: true
    extra:
      require_mention: false
  discord:
    enabled: {discord}
  webhook:
    enabled: {webhook}
    extra:
      port: {webhook_port}
      host: 127.0.0.1
  api_server:
    enabled: false
"""


def generate_profiles(root: Path, count: int, seed: int = 1) -> dict[str, int]:
    """``count`` profiles with .env and config.yaml; some share tokens and ports. Returns what was planted."""
    rng = random.Random(seed)
    (root / "profiles").mkdir(parents=True)
    planted = {"shared_telegram": 0, "shared_discord": 0, "shared_api_port": 0, "shared_webhook_port": 0}
    for i in range(count):
        home = root / "profiles" / f"prof{i:04d}"
        home.mkdir()
        tg = i - 1 if i % 97 == 5 else i  # ~1 % copy the previous profile's bot token
        planted["shared_telegram"] += tg != i
        lines = [
            f"# .env of profile {i}",
            f"OPENROUTER_API_KEY=sk-or-v1-{rng.getrandbits(128):032x}",
            f"TELEGRAM_BOT_TOKEN={6000000000 + tg}:AA{tg:08d}{'x' * 24}",
            f"TELEGRAM_ALLOWED_USERS={rng.randrange(10**8, 10**9)}",
        ]
        if i % 3 == 0:
            dc = i - 3 if i % 150 == 9 else i
            planted["shared_discord"] += dc != i
            lines.append(f'DISCORD_BOT_TOKEN="MTA{dc:010d}.G{dc:05d}.{"y" * 30}"')
        if i % 4 == 0:
            port = 9000 + (i - 4 if i % 200 == 8 else i)
            planted["shared_api_port"] += port != 9000 + i
            lines += ["API_SERVER_ENABLED=true", f"API_SERVER_PORT={port}",
                      f"API_SERVER_KEY=key-{i:04d}-0123456789abcdef"]  # upstream listens with a 16+ key only
        if i % 10 == 0:
            lines.append(f"SLACK_BOT_TOKEN=xoxb-{i}-bench\nSLACK_APP_TOKEN=xapp-{i}-bench")
        (home / ".env").write_text("\n".join(lines) + "\n")
        webhook = i % 5 == 0
        wport = 20000 + (i - 5 if i % 250 == 10 else i)
        planted["shared_webhook_port"] += webhook and wport != 20000 + i
        (home / "config.yaml").write_text(CONFIG_TEMPLATE.format(
            i=i, model=rng.choice(["openai/gpt-4o-mini", "anthropic/claude-sonnet-4", "qwen/qwen3-32b"]),
            turns=rng.choice([60, 90, 120]), drain=rng.choice([0, 30, 60]),
            discord=str(i % 3 == 0).lower(), webhook=str(webhook).lower(), webhook_port=wport,
        ))
    return planted


def scan_library(root: Path, salt: bytes) -> tuple[int, int]:
    """What the daemon does for every profile on a rescan, then one conflict resolution.

    Library calls only, in the daemon's order: list the profiles; per profile read .env and
    config.yaml and derive the credential and port claims and the content digest
    (``profiles.snapshot.read_profile``, the one reader the daemon, doctor and export share); then
    ``supervisor.plan.conflicts.find_conflicts`` once over all of them.
    """
    from profiles.discovery import profiles_to_serve
    from profiles.snapshot import read_profile
    from supervisor.plan.conflicts import find_conflicts

    served = profiles_to_serve(True, root=root)
    claims = {}
    for name, home in served:
        facts = read_profile(name, Path(home), salt)
        claims[name] = facts.claims
    conflicts = find_conflicts([n for n, _ in served], claims, set())
    return len(served), len(conflicts)


def scan_daemon(root: Path) -> tuple[float, float, int]:
    """The daemon's own planner, not running: every profile's facts read and handed to it
    (``Planner.set_facts``, as ``Daemon._read`` does), then its first judgement (``Planner.start``)."""
    import logging

    from profiles.discovery import profiles_to_serve
    from profiles.snapshot import read_profile
    from supervisor import config as config_mod
    from supervisor.daemon import effective
    from supervisor.plan.planner import Planner

    logging.getLogger("hermesd").setLevel(logging.CRITICAL)
    salt = b"0123456789abcdef"
    cfg = config_mod.load(root / "hermesd.yaml")
    planner = Planner(effective.build(cfg).planner, clock=time.monotonic, wall=time.time)
    t0 = time.perf_counter()
    served = profiles_to_serve(True, root=root)
    planner.set_served([(n, Path(h)) for n, h in served])
    for name, home in served:
        planner.set_facts(name, read_profile(name, Path(home), salt))
    t1 = time.perf_counter()
    planner.start()  # the first judgement: every profile's own files, then every contested claim
    t2 = time.perf_counter()
    held = sum(p.hold is not None for p in planner.profiles.values())
    return t1 - t0, t2 - t1, held


def scan_worker(root: Path) -> None:
    """One fresh process (cold parse caches): prints timings as JSON."""
    salt = b"0123456789abcdef"
    import importlib

    for module in ("profiles.snapshot", "profiles.discovery", "supervisor.plan.conflicts",
                   "supervisor.plan.planner", "supervisor.daemon.loop"):
        importlib.import_module(module)  # import cost is not part of the scan

    t0 = time.perf_counter()
    count, conflicts = scan_library(root, salt)
    cold = time.perf_counter() - t0
    t0 = time.perf_counter()
    scan_library(root, salt)
    warm = time.perf_counter() - t0
    print(json.dumps({"profiles": count, "conflicts": conflicts, "cold_s": cold, "warm_s": warm}))


def scan_daemon_worker(root: Path) -> None:
    refresh, admit, held = scan_daemon(root)
    print(json.dumps({"refresh_all_s": refresh, "conflict_for_all_s": admit, "held": held}))


def run_scan(count: int, reps: int, clean: Cleanup) -> dict[str, Any]:
    work = clean.mkdtemp("hbench-scan-")
    try:
        root = work / "root"
        planted = generate_profiles(root, count)
        runs = []
        for _ in range(reps):
            out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--scan-worker", str(root)],
                                 capture_output=True, text=True, timeout=600, cwd=str(REPO))
            if out.returncode:
                raise BenchError(f"scan worker failed: {out.stderr[-2000:]}")
            runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
        out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--scan-daemon-worker", str(root)],
                             capture_output=True, text=True, timeout=600, cwd=str(REPO))
        if out.returncode:
            raise BenchError(f"scan daemon worker failed: {out.stderr[-2000:]}")
        daemon = json.loads(out.stdout.strip().splitlines()[-1])
    finally:
        clean.remove_dir(work)
    return {
        "profiles": count,
        "planted": planted,
        "conflicts_found": runs[0]["conflicts"],
        "cold_s": [r["cold_s"] for r in runs],
        "warm_s": [r["warm_s"] for r in runs],
        "cold_median_s": median([r["cold_s"] for r in runs]),
        "warm_median_s": median([r["warm_s"] for r in runs]),
        "daemon_refresh_all_s": daemon["refresh_all_s"],
        "daemon_conflict_for_all_s": daemon["conflict_for_all_s"],
        "daemon_held": daemon["held"],
    }


# ----------------------------------------------------------------------------------------------
# soak


def run_soak(seconds: float, args: argparse.Namespace, clean: Cleanup) -> dict[str, Any]:
    n = 20
    work = clean.mkdtemp("hbench-soak-")
    sup = Hermesd(work, n, clean)
    rng = random.Random(args.seed)
    kills = dict.fromkeys(sup.names, 0)
    samples: list[dict[str, Any]] = []
    res: dict[str, Any] = {"children": n, "seconds": seconds}
    try:
        _start_s, _pids = measure_start(sup)
        time.sleep(KILL_SPACING)
        sup.rows()  # the first status answer sizes its buffers: before the baseline, not in it

        def sample(label: str) -> dict[str, Any]:
            s = {"at_s": round(time.perf_counter() - t_start, 1), "label": label, "rss_bytes": rss_bytes(sup.pid),
                 "fds": fd_count(sup.pid), "threads": thread_count(sup.pid), "kills": sum(kills.values())}
            samples.append(s)
            print(f"  soak {label:>8}: t={s['at_s']:7.1f}s kills={s['kills']:6d} "
                  f"rss={s['rss_bytes'] / MIB:6.2f} MiB fds={s['fds']} threads={s['threads']}", flush=True)
            return s

        t_start = time.perf_counter()
        first = sample("start")
        deadline = t_start + seconds
        warm_at = t_start + min(30.0, seconds * 0.1)
        warm: dict[str, Any] | None = None
        next_sample = t_start + max(10.0, seconds / 10)
        while time.perf_counter() < deadline:
            now = time.perf_counter()
            if warm is None and now >= warm_at:
                warm = sample("warm")
            if now >= next_sample:
                sample("running")
                next_sample = now + max(10.0, seconds / 10)
            name = rng.choice(sup.names)
            pid = sup.child_pid(name)
            if pid is not None:
                os.kill(pid, signal.SIGKILL)
                kills[name] += 1
            time.sleep(rng.uniform(0.01, 0.25))
        # Let every backoff run out, then every child must be running and healthy again.
        def all_healthy() -> dict[str, dict[str, Any]] | None:
            rows = sup.rows()
            ok = all(rows[nm]["state"] == "running" and sup.child_pid(nm) == rows[nm]["pid"] for nm in sup.names)
            return rows if ok else None

        rows = wait_until(all_healthy, 60, "every soak child running", interval=0.1)
        time.sleep(2.0)  # quiet: no control connection of ours in flight
        end = sample("end")
        restarts = {nm: rows[nm]["restarts"] for nm in sup.names}
        mismatched = {nm: (kills[nm], restarts[nm]) for nm in sup.names if kills[nm] != restarts[nm]}
        base = warm or first
        rss_growth = (end["rss_bytes"] - base["rss_bytes"]) if end["rss_bytes"] and base["rss_bytes"] else None
        # A leak grows with the kills; CPython's allocator grows in 1 MiB arenas up to a high-water mark
        # early on. So "flat" is judged on the second half of the run: at most one arena (+1 %).
        half = min(samples[:-1], key=lambda x: abs(x["at_s"] - seconds / 2))
        rss_growth_2nd = end["rss_bytes"] - half["rss_bytes"]
        procs = [pid for pid in tagged_pids(clean.tag) if pid != sup.pid and live(pid)]
        res.update(
            kills=sum(kills.values()),
            restarts=sum(restarts.values()),
            per_profile_mismatch=mismatched,
            all_healthy=True,
            tagged_processes=len(procs),
            samples=samples,
            rss_growth_after_warmup_bytes=rss_growth,
            rss_growth_second_half_bytes=rss_growth_2nd,
            fd_start=first["fds"],
            fd_end=end["fds"],
        )
        res["pass"] = {
            "all_healthy": True,
            "restarts_equal_kills": not mismatched,
            "no_extra_processes": len(procs) == n,
            "fds_flat": end["fds"] == first["fds"],
            "rss_flat_second_half": rss_growth_2nd <= MIB + 0.01 * half["rss_bytes"],
        }
        sup_stop = measure_stop(sup, {nm: rows[nm]["pid"] for nm in sup.names})
        res["stop"] = sup_stop
    except BaseException:
        sys.stderr.write(f"--- soak log tail:\n{sup.log_tail()}\n")
        raise
    finally:
        clean.kill_procs()
        clean.remove_dir(work)
    return res


# ----------------------------------------------------------------------------------------------
# supervisord's environment


def ensure_supervisord(venv: Path) -> str:
    """Create ``venv`` with supervisor 4.x unless it is there; return supervisord's version."""
    sd = venv / "bin" / "supervisord"
    if not sd.exists():
        print(f"creating {venv} with supervisor>=4,<5 (supervisord cannot share hermesd's environment)", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "supervisor>=4,<5"], check=True)
    out = subprocess.run([str(sd), "--version"], capture_output=True, text=True, check=True,
                         env={"PATH": "/usr/bin:/bin"})
    version = out.stdout.strip()
    if not version.startswith("4."):
        raise BenchError(f"{sd} is supervisord {version}, expected 4.x")
    return version


# ----------------------------------------------------------------------------------------------
# report


def fmt(value: Any, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "MiB":
        return f"{value / MIB:.1f}"
    if unit in ("ms",):
        return f"{value:.1f}"
    if unit == "s":
        return f"{value:.3f}"
    if unit == "cpu":
        return f"{value:.3f}"
    return str(value)


METRICS = [
    ("start N children (s)", "start_s", "s"),
    ("stop N children (s)", "stop_s", "s"),
    ("supervisor exit after stop (s)", "supervisor_exited_s", "s"),
    ("respawn median (ms)", "respawn_median_ms", "ms"),
    ("respawn p90 (ms)", "respawn_p90_ms", "ms"),
    ("respawn to exec median (ms)", "respawn_exec_median_ms", "ms"),
    ("respawn to exec p90 (ms)", "respawn_exec_p90_ms", "ms"),
    ("supervisor CPU per respawn, median (ms)", "respawn_cpu_median_ms", "ms"),
    ("RSS idle (MiB)", "rss_idle_bytes", "MiB"),
    ("RSS after workload (MiB)", "rss_after_bytes", "MiB"),
    ("idle CPU (s/min)", "idle_cpu_s_per_min", "cpu"),
    ("idle wake-ups (per s)", "idle_wakeups_per_s", "ms"),
    ("status CLI wall median (ms)", "status_median_ms", "ms"),
    ("status CLI CPU median (ms)", "status_cpu_median_ms", "ms"),
]


def table(results: dict[int, dict[str, dict[str, Any]]]) -> str:
    head = ("metric", "N", "hermesd", "supervisord", "h/s")
    rows = [head]
    for label, key, unit in METRICS:
        for n, pair in results.items():
            h, s = pair.get("hermesd", {}).get(key), pair.get("supervisord", {}).get(key)
            ratio = f"{h / s:.2f}" if isinstance(h, int | float) and isinstance(s, int | float) and s else "-"
            rows.append((label, str(n), fmt(h, unit), fmt(s, unit), ratio))
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = []
    for i, r in enumerate(rows):
        cells = zip(r, widths, strict=True)
        lines.append("  ".join(c.ljust(w) if j == 0 else c.rjust(w) for j, (c, w) in enumerate(cells)))
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def targets(results: dict[int, dict[str, dict[str, Any]]], scan: dict[str, Any] | None,
            status100: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []

    def add(name: str, value: Any, limit: Any, ok: bool | None, note: str = "") -> None:
        out.append({"target": name, "value": value, "limit": limit,
                    "result": "n/a" if ok is None else ("PASS" if ok else "MISS"), "note": note})

    def beside(pair: dict[str, dict[str, Any]], key: str, fmt_value: Callable[[float], str]) -> str:
        sv = pair.get("supervisord", {}).get(key)
        return f"supervisord {fmt_value(sv)}" if sv is not None else "supervisord not run"

    # Issue 38's goals; supervisord's figure from the same run beside each.
    for n, pair in results.items():
        h = pair.get("hermesd", {})
        if "respawn_median_ms" in h:
            add(f"respawn median <= {RESPAWN_GOAL_MS:g} ms (N={n})", round(h["respawn_median_ms"], 2),
                RESPAWN_GOAL_MS, h["respawn_median_ms"] <= RESPAWN_GOAL_MS,
                beside(pair, "respawn_median_ms", lambda v: f"{v:.1f} ms"))
    p20 = results.get(20, {})
    h20, s20 = p20.get("hermesd", {}), p20.get("supervisord", {})
    if h20.get("rss_after_bytes"):
        add(f"RSS <= {RSS_GOAL_MIB:g} MiB (N=20)", f"{h20['rss_after_bytes'] / MIB:.1f} MiB", f"{RSS_GOAL_MIB:g} MiB",
            h20["rss_after_bytes"] <= RSS_GOAL_MIB * MIB,
            "after the workload; " + beside(p20, "rss_after_bytes", lambda v: f"{v / MIB:.1f} MiB"))
    else:
        add(f"RSS <= {RSS_GOAL_MIB:g} MiB (N=20)", None, None, None, "N=20 not run")
    if "idle_cpu_s_per_min" in h20 and "idle_cpu_s_per_min" in s20:
        add("idle CPU <= supervisord's (N=20)", f"{h20['idle_cpu_s_per_min']:.3f} s/min",
            f"{s20['idle_cpu_s_per_min']:.3f} s/min", h20["idle_cpu_s_per_min"] <= s20["idle_cpu_s_per_min"])
    else:
        add("idle CPU <= supervisord's (N=20)", None, None, None, "needs both supervisors at N=20")
    h100 = {**(status100 or {}), **results.get(100, {}).get("hermesd", {})}
    for name, key, limit, unit in (
        (f"hermesd status <= {STATUS_GOAL_MS:g} ms (N=100)", "status_median_ms", STATUS_GOAL_MS, "ms"),
        ("start 100 children <= 2 s", "start_s", 2.0, "s"),
        ("stop 100 children <= 2 s", "stop_s", 2.0, "s"),
    ):
        if key in h100:
            add(name, f"{h100[key]:.{1 if unit == 'ms' else 3}f} {unit}", f"{limit:g} {unit}", h100[key] <= limit)
        else:
            add(name, None, f"{limit:g} {unit}", None, "N=100 not run")
    if scan is not None:
        add(f"scan of {scan['profiles']} profiles <= 0.5 s", f"{scan['cold_median_s']:.3f} s", "0.5 s",
            scan["cold_median_s"] <= 0.5, "cold parse caches, median")
    return out


def print_targets(rows: list[dict[str, Any]]) -> None:
    print("\nTargets")
    for r in rows:
        value = "-" if r["value"] is None else r["value"]
        note = f"  ({r['note']})" if r["note"] else ""
        print(f"  {r['result']:4}  {r['target']:34} {value!s:>10}  limit {r['limit']}{note}")


# ----------------------------------------------------------------------------------------------
# main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="N = 3 and 20 only, 10 kills, 10 s idle windows")
    p.add_argument("--ns", help="comma-separated N values (default 3,20,100; --quick: 3,20)")
    p.add_argument("--kills", type=int, help="SIGKILLs per supervisor and N (default 20; --quick: 10)")
    p.add_argument("--idle-seconds", type=float, help="idle CPU window (default 20; --quick: 10)")
    p.add_argument("--status-runs", type=int, default=7, help="status invocations per measurement (median)")
    p.add_argument("--settle", type=float, default=2.0, help="seconds after start-up before RSS and idle CPU")
    p.add_argument("--scan-profiles", type=int, default=1000, help="profiles for the conflict scan")
    p.add_argument("--scan-reps", type=int, default=5, help="fresh-process repetitions of the scan")
    p.add_argument("--only", choices=["hermesd", "supervisord"], help="run one supervisor only")
    p.add_argument("--no-scan", action="store_true", help="skip the conflict scan")
    p.add_argument("--no-status-100", action="store_true",
                   help="without N=100 among --ns: skip the status-only run at N=100 (hermesd only)")
    p.add_argument("--no-variants", action="store_true",
                   help="skip hermesd's feature variants at N=20 (limits, metrics, isolation off vs baseline)")
    p.add_argument("--soak", type=float, nargs="?", const=600.0, metavar="SECONDS",
                   help="soak mode instead of the benchmark: random SIGKILLs across 20 children (default 600 s)")
    p.add_argument("--seed", type=int, default=12345)
    p.add_argument("--sv-venv", type=Path, default=REPO / ".venv-supervisord",
                   help="virtual environment for supervisord 4.x (created if missing)")
    p.add_argument("--out", type=Path, default=Path("bench-results.json"), help="JSON results file")
    p.add_argument("--py-spy", metavar="PATH", help="py-spy executable: profile each supervisor per phase")
    p.add_argument("--profile-dir", type=Path, default=Path("bench-profiles"), help="where --py-spy writes")
    p.add_argument("--scan-worker", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--scan-daemon-worker", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.ns = [int(x) for x in args.ns.split(",")] if args.ns else ([3, 20] if args.quick else [3, 20, 100])
    args.kills = args.kills or (10 if args.quick else 20)
    args.idle_seconds = args.idle_seconds or (10.0 if args.quick else 20.0)
    return args


def python_startup(args: argparse.Namespace) -> dict[str, Any]:
    """``python -c pass`` in each environment: the floor under both status commands."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}
    out = {"hermesd_venv": measure_cli([sys.executable, "-c", "pass"], env, Path("/"), args.status_runs)}
    if args.only != "hermesd":
        sv_python = str(args.sv_venv / "bin" / "python")
        out["supervisord_venv"] = measure_cli([sv_python, "-c", "pass"], env, Path("/"), args.status_runs)
    return out


def git_commit() -> str | None:
    """The hermesd source the run measured (``-dirty``: uncommitted changes to tracked files)."""
    try:
        out = subprocess.run(["git", "-C", str(REPO), "describe", "--always", "--dirty", "--exclude", "*"],
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None


def meta(args: argparse.Namespace, sv_version: str | None) -> dict[str, Any]:
    from supervisor import __version__ as hermesd_version

    return {
        "commit": git_commit(),
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "host": platform.node(),
        "kernel": platform.release(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "hermesd": hermesd_version,
        "supervisord": sv_version,
        "loadavg_start": os.getloadavg(),
        "quick": args.quick,
        "ns": args.ns,
        "kills": args.kills,
        "idle_seconds": args.idle_seconds,
        "status_runs": args.status_runs,
        "healthy_after_s": HEALTHY_AFTER,
        "kill_spacing_s": KILL_SPACING,
        "child": [sys.executable, "-S", str(CHILD)],
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.scan_worker:
        scan_worker(args.scan_worker)
        return 0
    if args.scan_daemon_worker:
        scan_daemon_worker(args.scan_daemon_worker)
        return 0

    def on_term(_sig: int, _frame: object) -> None:
        raise KeyboardInterrupt

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_term)
    clean = Cleanup()
    events: ProcEvents | None = None
    doc: dict[str, Any] = {}
    try:
        if args.soak is not None:
            doc = {"meta": meta(args, None)}
            print(f"soak: {args.soak:.0f} s of random SIGKILLs across 20 children under hermesd", flush=True)
            soak = run_soak(args.soak, args, clean)
            doc["soak"] = soak
            print(f"\nkills {soak['kills']}, restarts {soak['restarts']}, tagged processes {soak['tagged_processes']}")
            print(f"fds start {soak['fd_start']} end {soak['fd_end']}; RSS growth after warm-up "
                  f"{(soak['rss_growth_after_warmup_bytes'] or 0) / 1024:.0f} KiB, over the second half "
                  f"{soak['rss_growth_second_half_bytes'] / 1024:.0f} KiB (limit: one 1 MiB allocator arena + 1 %)")
            for name, ok in soak["pass"].items():
                print(f"  {'PASS' if ok else 'MISS'}  {name}")
            ok_all = all(soak["pass"].values())
        else:
            sv_version = None if args.only == "hermesd" else ensure_supervisord(args.sv_venv)
            doc = {"meta": meta(args, sv_version), "runs": {}}
            doc["meta"]["python_startup"] = python_startup(args)
            kinds = [args.only] if args.only else ["hermesd", "supervisord"]
            events = ProcEvents()
            doc["meta"]["respawn_timing"] = "kernel fork/exec timestamps (proc connector)" if events.ok else "polling"
            results: dict[int, dict[str, dict[str, Any]]] = {}
            for n in args.ns:
                results[n] = {}
                for kind in kinds:
                    print(f"{kind}: N={n} ...", end="", flush=True)
                    t0 = time.perf_counter()
                    r = run_one(kind, n, args, clean, events)
                    results[n][kind] = r
                    print(f" {time.perf_counter() - t0:.0f}s (start {r['start_s']:.2f}s, respawn median "
                          f"{r['respawn_median_ms']:.1f}ms, status {r['status_median_ms']:.0f}ms, "
                          f"stop {r['stop_s']:.2f}s)", flush=True)
            doc["runs"] = {str(n): v for n, v in results.items()}
            status100 = None
            if 100 not in results and args.only != "supervisord" and not args.no_status_100:
                print("hermesd: status at N=100 ...", end="", flush=True)
                status100 = run_status_only(100, args, clean)
                doc["status_100"] = status100
                print(f" median {status100['status_median_ms']:.0f} ms wall, "
                      f"{status100['status_cpu_median_ms']:.0f} ms CPU", flush=True)
            scan = None
            if not args.no_scan:
                print(f"conflict scan of {args.scan_profiles} profiles ...", end="", flush=True)
                scan = run_scan(args.scan_profiles, args.scan_reps, clean)
                doc["scan"] = scan
                print(f" cold {scan['cold_median_s']:.3f}s, warm {scan['warm_median_s']:.3f}s, "
                      f"{scan['conflicts_found']} profiles held", flush=True)
            variant_rows: list[dict[str, Any]] = []
            if not args.no_variants and args.only != "supervisord":
                for label in variant_configs(Path("/nonexistent")):
                    print(f"hermesd variant {label!r}: N=20 ...", end="", flush=True)
                    t0 = time.perf_counter()
                    r = run_variant(label, 20, args, clean, events)
                    variant_rows.append(r)
                    print(f" {time.perf_counter() - t0:.0f}s", flush=True)
                doc["variants"] = variant_rows
            doc["meta"]["loadavg_end"] = os.getloadavg()
            doc["meta"]["commit_end"] = git_commit()
            if doc["meta"]["commit_end"] != doc["meta"]["commit"]:
                print(f"\nWARNING: the hermesd source changed during the run ({doc['meta']['commit']} -> "
                      f"{doc['meta']['commit_end']}): the figures mix two versions", flush=True)
            print()
            print(table(results))
            if scan is not None:
                print(f"\nconflict scan, {scan['profiles']} profiles (library calls, fresh process each): "
                      f"cold median {scan['cold_median_s'] * 1000:.0f} ms, "
                      f"warm median {scan['warm_median_s'] * 1000:.0f} ms; "
                      f"{scan['conflicts_found']} held")
                print(f"daemon planner: read_profile+set_facts x{scan['profiles']} "
                      f"{scan['daemon_refresh_all_s'] * 1000:.0f} ms, first judgement "
                      f"{scan['daemon_conflict_for_all_s'] * 1000:.0f} ms")
            if variant_rows:
                print("\nwhat the optional features cost (same workload, one daemon per variant):")
                print(variants_table(variant_rows))
            ps = doc["meta"]["python_startup"]
            print("\npython -c pass (the floor under both status commands): " + ", ".join(
                f"{k.replace('_venv', '')} venv {v['median_ms']:.0f} ms wall / {v['cpu_median_ms']:.0f} ms CPU"
                for k, v in ps.items()))
            print(f"idle CPU measured over {args.idle_seconds:g} s windows and scaled to one minute; "
                  f"respawn = SIGKILL to the new child's fork ({args.kills} kills; "
                  f"{doc['meta']['respawn_timing']}); processes on the host "
                  f"{max(r.get('processes_on_host', 0) for p in results.values() for r in p.values())} at most; "
                  f"load average {doc['meta']['loadavg_start'][0]:.2f} -> {doc['meta']['loadavg_end'][0]:.2f}")
            tg = targets(results, scan, status100)
            doc["targets"] = tg
            print_targets(tg)
            ok_all = all(t["result"] != "MISS" for t in tg)
        args.out.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
        print(f"\nresults written to {args.out}")
        return 0 if ok_all else 1
    except KeyboardInterrupt:
        print("\ninterrupted; cleaning up", file=sys.stderr)
        return 130
    except BenchError as exc:
        print(f"\nbenchmark error: {exc}", file=sys.stderr)
        return 2
    finally:
        clean.close()
        if events is not None:
            events.close()


if __name__ == "__main__":
    sys.exit(main())
