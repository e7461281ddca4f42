"""Profiles must never silently stop being supervised: a saved failure count past the
backoff's overflow, a spawn that fails for another reason than exec (a read-only log file system), a
state file that cannot be written, and a descriptor limit of 64 with 60 profiles. (Non-finite numbers
in hermesd.yaml are refused by its parser: ``tests/supervisor/test_config.py``.)
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from supervisor.processes import identity
from tests.fakegw import write_behaviour
from tests.faults.helpers import (
    converged,
    eventually,
    gateway_leaders,
    lost_on_failure,
    respawn_after_kill,
    retry_delays,
    timed,
)
from tests.harness import REPO, Hermesd, kill_tagged, wait_for, write_config


def homes(root: Path) -> dict[str, Path]:
    return {"default": root, "coder": root / "profiles" / "coder", "writer": root / "profiles" / "writer"}


# --------------------------------------------------------------------------- backoff past the overflow


def test_saved_failure_count_of_5000_still_retries_at_the_cap(fake_root, hermesd_factory, faults):
    """``factor ** (failures - 1)`` overflows a float after 1025 failures; a state file saying 5000 must
    still give a retry at the cap, again and again, never a profile stopped for good."""
    write_config(fake_root, restart={"initial_delay": 0.2, "max_delay": 0.5, "factor": 2.0, "jitter": 0.0,
                                "healthy_after": 3.0})
    write_behaviour(homes(fake_root)["coder"], exit_at_start=1, write_counter=True)
    (fake_root / ".hermesd").mkdir(mode=0o700)
    (fake_root / ".hermesd" / "state.json").write_text(json.dumps({
        "version": 1, "boot_id": identity.boot_id(), "daemon_pid": 1, "saved_at": time.time(),
        "profiles": {"coder": {"home": str(homes(fake_root)["coder"]), "restarts": 5000, "failures": 5000,
                               "last_exit": None, "down": None}},
    }))
    faults.inject()
    d = hermesd_factory(fake_root)
    d.wait_running("default", "writer")
    with lost_on_failure(faults, "no retry at the cap after a saved failure count of 5000"):
        delays = wait_for(lambda: len(x := retry_delays(d.log.read_text(), "coder")) >= 4 and x, 15,
                          what="four announced retries of coder")
    row = d.row("coder")
    ok = all(x == 0.5 for x in delays) and row["state"] in ("backoff", "starting") and row["restarts"] >= 5004
    faults.check(ok, f"delays {delays}, coder {row['state']} ({row['reason']}), restarts {row['restarts']}")
    assert ok, (delays, row)
    # Fixed: it runs, and the next crash starts the backoff from the beginning again.
    write_behaviour(homes(fake_root)["coder"], write_counter=True)
    d.wait_running("coder", timeout=10)


# --------------------------------------------------------------------------- spawns that fail, not at exec


class SpawnBreaker:
    """Makes the daemon's next spawns fail for another reason than exec, and mends it.

    ``read_only_log``: a read-only tmpfs over ``<root>/.hermesd/logs`` (opening a child's log fails with
    EROFS; logs already open keep working). ``fork_eagain``: the daemon moved into a cgroup v1 ``pids``
    group with no room left (``posix_spawn`` fails with EAGAIN, as under a real process limit).
    """

    def __init__(self, kind: str, root: Path) -> None:
        self.kind = kind
        self.logs = root / ".hermesd" / "logs"
        self.cgroup = Path(f"/sys/fs/cgroup/pids/hermesd-faults-{os.getpid()}-{id(self)}")
        self.mounted = False
        self.expect = {"read_only_log": "Read-only file system",
                       "fork_eagain": "Resource temporarily unavailable"}[kind]

    def prepare(self) -> None:
        if self.kind == "read_only_log":
            self.logs.parent.mkdir(mode=0o700, exist_ok=True)
            self.logs.mkdir(mode=0o700, exist_ok=True)
        elif not self.cgroup.parent.is_dir():
            pytest.skip("no cgroup v1 pids controller at /sys/fs/cgroup/pids")

    def break_(self, daemon_pid: int) -> None:
        if self.kind == "read_only_log":
            out = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m,mode=0700", "tmpfs", str(self.logs)],
                                 capture_output=True, text=True)
            if out.returncode != 0:
                pytest.skip(f"cannot mount a tmpfs here ({out.stderr.strip() or out.returncode}); needs CAP_SYS_ADMIN")
            self.mounted = True
        else:
            self.cgroup.mkdir(exist_ok=True)
            (self.cgroup / "cgroup.procs").write_text(f"{daemon_pid}\n")
            (self.cgroup / "pids.max").write_text((self.cgroup / "pids.current").read_text())

    def fix(self) -> None:
        if self.kind == "read_only_log":
            if self.mounted and subprocess.run(["umount", str(self.logs)], capture_output=True).returncode != 0:
                subprocess.run(["umount", "-l", str(self.logs)], capture_output=True)
            self.mounted = False
        elif self.cgroup.is_dir():
            (self.cgroup / "pids.max").write_text("max\n")

    def close(self) -> None:
        self.fix()
        if self.kind == "fork_eagain" and self.cgroup.is_dir():
            for pid in (self.cgroup / "cgroup.procs").read_text().split():
                with contextlib.suppress(OSError):
                    (self.cgroup.parent / "cgroup.procs").write_text(f"{pid}\n")
            with contextlib.suppress(OSError):
                self.cgroup.rmdir()


@pytest.fixture
def spawn_breaker(fake_root, request) -> Iterator[SpawnBreaker]:
    """Requested before ``hermesd_factory``, so it is mended after the daemons are gone."""
    b = SpawnBreaker(request.param, fake_root)
    b.prepare()
    try:
        yield b
    finally:
        b.close()


@pytest.mark.slow
@pytest.mark.parametrize("spawn_breaker", ["read_only_log", "fork_eagain"], indirect=True)
def test_spawn_error_that_is_not_exec_backs_off_and_recovers(fake_root, spawn_breaker, hermesd_factory, faults):
    """coder's gateway is SIGKILLed while a spawn cannot succeed (EROFS opening its log, or EAGAIN from
    fork): a backoff with the reason in status, control requests answered meanwhile (a restart of the
    failing profile included), and running again once mended."""
    write_config(fake_root, restart={"initial_delay": 0.2, "max_delay": 1.0, "healthy_after": 0.3, "jitter": 0.0})
    d = hermesd_factory(fake_root)
    before = d.wait_running("default", "coder", "writer")
    spawn_breaker.break_(d.proc.pid)
    faults.inject()
    os.kill(before["coder"], 9)

    def backing_off():
        r = d.row("coder")
        return r if r["state"] == "backoff" and spawn_breaker.expect in (r["reason"] or "") else None

    with lost_on_failure(faults, f"no backoff naming {spawn_breaker.expect!r}"):
        row = wait_for(backing_off, 10, what=f"coder backing off with {spawn_breaker.expect!r} in its reason")
    named = str(d.layout.child_log("coder")) if spawn_breaker.kind == "read_only_log" else "cannot execute"
    ok = named in row["reason"] and row["next_retry_at"] is not None and d.proc.poll() is None
    faults.check(ok, f"coder while spawns fail: {row['state']}: {row['reason']}")
    text = d.cli("status")
    assert spawn_breaker.expect in text.stdout and "Traceback" not in text.stderr, text

    # control requests meanwhile: answered (a restart of the failing profile included)
    for verb in (("ping",), ("status", "--json"), ("restart", "coder", "--no-wait"), ("stop", "writer", "--no-wait")):
        faults.inject()
        seconds, out = timed(d.cli, *verb, timeout=20)
        ok = out.returncode in (0, 1) and "Traceback" not in out.stderr and seconds < 10
        faults.check(ok, f"hermesd {' '.join(verb)} during the failures: exit {out.returncode} in {seconds:.1f}s "
                         f"{(out.stdout + out.stderr).strip()[-200:]!r}")
        assert ok, out
    wait_for(backing_off, 10, what="coder still backing off after the restart request")
    assert d.row("default")["pid"] == before["default"]

    spawn_breaker.fix()
    faults.inject()
    with lost_on_failure(faults, "coder did not recover once mended"):
        d.wait_running("coder", timeout=10)
    faults.check(d.row("coder")["state"] == "running", "coder running again")
    assert d.cli("start", "writer").returncode == 0
    converged(d, fake_root, {"default", "coder", "writer"}, faults)


# --------------------------------------------------------------------------- an unwritable state file


def test_failing_state_write_is_shown_in_status(fake_root, hermesd_factory, faults):
    """state.json replaced by a directory: the next save fails, status says so (JSON and text), and the
    problem clears by itself once the file can be written again."""
    d = hermesd_factory(fake_root)
    d.wait_running("default", "coder", "writer")
    state = d.layout.state
    wait_for(state.exists, 10, what="a first state.json")
    state.unlink()
    state.mkdir()
    faults.inject()
    assert d.cli("stop", "writer").returncode == 0  # an operator stop: exactly what must be remembered

    def problem():
        return d.status()["supervisor"].get("state_problem")

    with lost_on_failure(faults, "a failed state.json write never shown"):
        said = wait_for(problem, 10, what="state_problem in status")
    text = d.cli("status")
    ok = str(state) in said and str(state) in text.stdout and "Traceback" not in text.stderr
    faults.check(ok, f"status says: {said!r}")
    assert ok, (said, text.stdout)
    state.rmdir()
    faults.inject()
    with lost_on_failure(faults, "state_problem did not clear once state.json was writable"):
        wait_for(lambda: not problem(), 15, what="state_problem cleared")
    saved = json.loads(state.read_text())
    ok = saved["profiles"]["writer"]["down"] == "stopped by operator"
    faults.check(ok, f"writer in the state file once writable: {saved['profiles']['writer']}")
    assert ok


# --------------------------------------------------------------------------- 64 descriptors, 60 profiles


class LimitedHermesd(Hermesd):
    """A daemon started under ``RLIMIT_NOFILE`` = ``(soft, hard)``."""

    def __init__(self, root: Path, soft: int, hard: int) -> None:
        super().__init__(root)
        self.limits = (soft, hard)

    def start(self, wait_ready: bool = True) -> LimitedHermesd:
        logf = self.log.open("ab")
        limits = self.limits
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "supervisor", "run", "--root", str(self.root)],
            stdin=subprocess.DEVNULL, stdout=logf, stderr=logf, env=self.env, cwd=str(REPO),
            start_new_session=True, preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, limits),
        )
        logf.close()
        if wait_ready:
            wait_for(lambda: self.ping().get("ready"), 20, what=f"hermesd ready; log:\n{self.log_text()}")
        return self


def _connect(path: Path):
    import socket

    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(str(path))
    return s


def line_count(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    return data.count(b"\n"), len(data)


@pytest.mark.slow
@pytest.mark.parametrize("hard", [64, 4096], ids=["hard_64", "hard_4096"])
def test_64_descriptors_and_60_profiles(tmp_path, faults, hard):
    """``ulimit -n 64`` and 60 profiles. With a hard limit of 64: no crash, every gateway supervised,
    the refused spawns backing off with a clear reason, the log not flooded, ``stop`` works. With a
    hard limit above it, hermesd raises its soft limit and runs all 60."""
    root = tmp_path / "root"
    names = [f"p{i:02d}" for i in range(60)]
    for n in names:
        (root / "profiles" / n).mkdir(parents=True)
    max_delay = 1.0
    write_config(root, profiles={"default": {"enabled": False}},
                 restart={"initial_delay": 0.2, "max_delay": max_delay, "healthy_after": 3.0, "jitter": 0.0})
    d = LimitedHermesd(root, 64, hard)
    try:
        faults.inject()
        with lost_on_failure(faults, "daemon not ready under 64 descriptors"):
            d.start()

        def settled():
            rows = d.status()["profiles"]
            return rows if all(r["state"] in ("running", "backoff", "stopped") for r in rows) and any(
                r["state"] == "running" for r in rows) else None

        rows = wait_for(settled, 30, what="every profile running or backing off")
        # Every gateway that exists is one the daemon lists: nothing unsupervised. A profile in backoff
        # may be retried between the status and the /proc scan, so a gateway counts as listed when the
        # status before or the one after the scan names it (a stray stays unlisted in both).
        leaders = gateway_leaders(root)
        listed = {r["name"]: r["pid"] for r in rows if r["pid"]}
        after = {r["name"]: r["pid"] for r in d.status()["profiles"] if r["pid"]}
        strays = {n: p for n, p in leaders.items() if len(p) != 1 or p[0] not in (listed.get(n), after.get(n))}
        faults.check(not strays and d.proc.poll() is None, f"unsupervised or duplicated gateways: {strays}")
        running = [r for r in rows if r["state"] == "running"]
        refused = [r for r in rows if r["state"] == "backoff"]
        if hard > 64:
            faults.inject()
            ok = len(running) == 60
            faults.check(ok, f"soft limit not raised: {len(running)} of 60 running")
            assert ok, [(r["name"], r["state"], r["reason"]) for r in rows if r["state"] != "running"]
        else:
            reasons = {r["reason"] for r in refused}
            faults.inject()
            ok = bool(refused) and all("out of file descriptors" in x and "limit of 64" in x for x in reasons)
            faults.check(ok, f"{len(running)} running, {len(refused)} refused: {sorted(reasons)[:2]}")
            assert ok, reasons
            # No flood: each refused profile logs its failure once per retry (at most every max_delay),
            # measured once the backoff has reached its cap.
            last = refused[-1]["name"]
            wait_for(lambda: retry_delays(d.log.read_text(), last)[-2:] == [max_delay, max_delay], 15,
                     what=f"{last}'s backoff at its cap")
            lines0, bytes0 = line_count(d.log)
            window = 4.0
            t0 = time.monotonic()
            eventually(lambda: d.proc.poll() is not None, window)  # a measurement window; a crash ends it early
            seconds = time.monotonic() - t0
            lines1, bytes1 = line_count(d.log)
            rate = (lines1 - lines0) / seconds
            budget = 2 * len(refused) / max_delay * 1.5 + 10
            faults.inject()
            ok = rate <= budget and (bytes1 - bytes0) / seconds < 64 * 1024 and d.proc.poll() is None
            faults.check(ok, f"daemon log: {rate:.0f} lines/s, {(bytes1 - bytes0) / seconds / 1024:.1f} KiB/s "
                             f"(budget {budget:.0f} lines/s for {len(refused)} refused profiles)")
            faults.note(f"{len(running)} of 60 running under 64 descriptors; log {rate:.0f} lines/s, "
                        f"{(bytes1 - bytes0) / seconds / 1024:.1f} KiB/s")
            assert ok
            # A crash of a running one is still noticed and handled.
            victim = running[0]
            faults.inject()
            got = respawn_after_kill(d.proc.pid, victim["pid"])
            faults.check(got is not None, f"{victim['name']} not respawned under the limit")
            assert got is not None, f"{victim['name']} not respawned under the limit"
        assert not strays, strays

        # stop. Under the hard limit of 64, 40 idle clients first take the daemon's last descriptors:
        # accept() fails with EMFILE until their read timeout frees them; the log must not flood, and
        # the stop must wait for the daemon and win.
        held = [_connect(d.layout.socket) for _ in range(40 if hard == 64 else 0)]
        _, bytes0 = line_count(d.log)
        faults.inject()
        t0 = time.monotonic()
        try:
            out = subprocess.run([sys.executable, "-m", "supervisor", "stop", "--root", str(root)],
                                 capture_output=True, text=True, env=d.env, cwd=str(REPO), timeout=120)
        finally:
            for sock in held:
                sock.close()
        took = time.monotonic() - t0
        code = d.proc.wait(60) if out.returncode == 0 else None
        left = eventually(lambda: not gateway_leaders(root), 10) is None and gateway_leaders(root)
        text = d.log.read_bytes()[bytes0:].decode(errors="replace")
        records = [x for x in text.splitlines() if " hermesd[" in x]  # one per log call (tracebacks follow)
        accept_errors = sum("accept() out of system resource" in x for x in records)
        # The repeat filter lets 20 identical records through per 10 s window.
        ok = (out.returncode == 0 and code == 0 and "not running" not in out.stdout + out.stderr and not left
              and accept_errors <= 20 * (2 + int(took / 10)) and len(text) < 256 * 1024)
        what = f"with {len(held)} idle clients holding the last descriptors " if held else ""
        faults.check(ok, f"stop {what}under 64 descriptors: exit {out.returncode} "
                         f"{(out.stdout + out.stderr).strip()[-200:]!r} after {took:.1f}s; left {left}; "
                         f"{len(records)} log records ({len(text) >> 10} KiB), {accept_errors} about accept()")
        if held:
            faults.note(f"stop with the descriptors exhausted by idle clients: {took:.1f}s, {len(records)} daemon "
                        f"log records ({len(text) >> 10} KiB), {accept_errors} about accept()")
        assert ok, (out, left, accept_errors, len(text))
    finally:
        with contextlib.suppress(Exception):
            d.close()
        kill_tagged(root)
