"""``hermesd stop`` ends in bounded time whatever a gateway does (issue 33, hole 3).

``agent.restart_drain_timeout: 1e12`` and a gateway that ignored SIGTERM made hermesd wait 10¹² s:
``hermesd stop`` never returned. The drain is now bounded (1,800 s, so a 1,830 s stop timeout),
which the daemon applies (its log says the timeout it chose) and the exports too
(``tests/profiles/test_numbers.py``). With the stop timeout short (hermesd.yaml's ``stop_timeout``,
so the test need not wait half an hour), each way a gateway can resist is tried, per profile and all
at once: SIGTERM ignored, SIGSTOPped, and frozen in a cgroup v1 freezer, which puts it in
uninterruptible sleep ("D"), where even SIGKILL waits until it is thawed. Every stop returns within
its timeout plus ``KILL_WAIT`` (and a margin for a loaded machine); the frozen gateway is named as
left behind, and dies the moment it is thawed, its SIGKILL pending.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from supervisor.plan.policy import KILL_WAIT
from tests.fakegw import write_behaviour
from tests.harness import make_root, pid_alive, wait_for, write_config

FREEZER = Path("/sys/fs/cgroup/freezer")
STOP_S = 2.0
MARGIN_S = 8.0  # two other suites may load the two cores meanwhile


@contextlib.contextmanager
def freezer() -> Iterator[Path]:
    """A cgroup v1 freezer group of this test's own, thawed and removed at the end, whatever happened."""
    if os.geteuid() != 0 or not (FREEZER / "cgroup.procs").exists():
        pytest.skip("needs root and the cgroup v1 freezer (/sys/fs/cgroup/freezer) to put a process in D state")
    group = FREEZER / f"hermesd-test-{uuid.uuid4().hex[:8]}"
    group.mkdir()
    try:
        yield group
    finally:
        with contextlib.suppress(OSError):
            (group / "freezer.state").write_text("THAWED")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                group.rmdir()
                break
            time.sleep(0.05)


def freeze(group: Path, pid: int) -> None:
    (group / "cgroup.procs").write_text(str(pid))
    (group / "freezer.state").write_text("FROZEN")
    wait_for(lambda: (group / "freezer.state").read_text().strip() == "FROZEN", 10, what="the freezer froze")
    assert proc_state(pid) == "D", proc_state(pid)


def proc_state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def timed_cli(d, *args: str) -> tuple[float, object]:
    began = time.monotonic()
    out = d.cli(*args, timeout=120)
    return time.monotonic() - began, out


def test_a_huge_drain_is_bounded_where_the_daemon_stops(tmp_path: Path, hermesd_factory, faults) -> None:
    """No ``stop_timeout`` in hermesd.yaml: the profile's drain of 10¹² s decides, bounded to 1,800 s."""
    root = make_root(tmp_path, ("coder",))
    write_config(root, stop_timeout=None, profiles={"default": {"enabled": False}})
    home = root / "profiles" / "coder"
    (home / "config.yaml").write_text("agent:\n  restart_drain_timeout: 1e12\n")
    write_behaviour(home, ignore_sigterm=True)
    d = hermesd_factory(root)
    pid = d.wait_running("coder")["coder"]
    faults.inject()
    out = d.cli("stop", "coder", "--no-wait")
    assert out.returncode == 0, out
    said = wait_for(lambda: re.search(rf"profile coder: stopping PID {pid} \(timeout (\d+)s\)", d.log_text()), 10,
                    what="the daemon's stop of coder in its log")
    faults.check(said.group(1) == "1830", f"stop timeout chosen: {said.group(1)} s")
    assert said.group(1) == "1830"
    doctor = d.cli("doctor")
    assert "drain_timeout_clamped" in doctor.stdout and f"{home / 'config.yaml'}" in doctor.stdout, doctor.stdout
    d.kill9()  # not 30 minutes: the harness kills what is left by PID
    assert pid_alive(pid)


def test_every_stop_ends_in_bounded_time_whatever_the_gateway_does(tmp_path: Path, hermesd_factory, faults) -> None:
    root = make_root(tmp_path, ("coder", "writer"))
    write_config(root, stop_timeout=STOP_S, restart={"initial_delay": 0.2, "max_delay": 1.0, "healthy_after": 0.5,
                                                     "jitter": 0.0})
    homes = {"default": root, "coder": root / "profiles" / "coder", "writer": root / "profiles" / "writer"}
    for home in homes.values():
        (home / "config.yaml").write_text("agent:\n  restart_drain_timeout: 1e12\n")
        write_behaviour(home, ignore_sigterm=True)
    limit = {"coder": STOP_S + MARGIN_S, "writer": STOP_S + MARGIN_S, "default": STOP_S + KILL_WAIT + MARGIN_S}
    with freezer() as group:
        d = hermesd_factory(root)

        def resist() -> dict[str, int]:
            pids = d.wait_running(*homes, timeout=30)
            os.kill(pids["writer"], signal.SIGSTOP)  # coder only ignores SIGTERM
            freeze(group, pids["default"])
            return pids

        # One profile at a time.
        pids = resist()
        for name in ("coder", "writer", "default"):
            faults.inject()
            took, out = timed_cli(d, "stop", name)
            ok = out.returncode == 0 and took <= limit[name]
            faults.check(ok, f"stop {name}: exit {out.returncode} after {took:.1f}s (limit {limit[name]:.0f}s)")
            faults.note(f"stop {name}: {took:.1f}s")
            assert ok, (took, out)
        row = d.row("default")
        assert row["state"] == "stopped" and f"PID {pids['default']} did not end" in row["last_exit"]["reason"], row
        assert proc_state(pids["default"]) == "D"  # still there, its SIGKILL pending
        (group / "freezer.state").write_text("THAWED")
        wait_for(lambda: not pid_alive(pids["default"]), 10, what="the thawed gateway dying of its pending SIGKILL")

        # All at once: the daemon's own stop.
        for name in homes:
            assert d.cli("start", name).returncode == 0
        pids = resist()
        faults.inject()
        took, out = timed_cli(d, "stop")
        ok = out.returncode == 0 and took <= STOP_S + KILL_WAIT + MARGIN_S and d.proc is not None \
            and d.proc.wait(5) == 0
        faults.check(ok, f"full stop: exit {out.returncode} after {took:.1f}s")
        faults.note(f"full stop: {took:.1f}s")
        assert ok, (took, out, d.log_text())
        assert not pid_alive(pids["coder"]) and not pid_alive(pids["writer"])
        assert f"PID {pids['default']} did not end" in d.log_text()
        (group / "freezer.state").write_text("THAWED")
        wait_for(lambda: not pid_alive(pids["default"]), 10, what="the thawed gateway dying of its pending SIGKILL")
