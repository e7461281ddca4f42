"""A slow daemon is not a stopped one: the root's lock is the truth.

* ``hermesd stop`` typed the moment ``hermesd start`` holds the lock, the daemon still starting: the
  stop wins, every time, and no gateway is left running.
* The daemon SIGSTOPped (a debugger, a swapped-out machine): ``status``, ``restart`` and ``stop``
  never say "not running" and never print a traceback; once it is SIGCONTed, what the operator
  asked for happens.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakegw import write_behaviour
from tests.faults.helpers import eventually, gateway_leaders, lost_on_failure
from tests.harness import REPO, pid_alive, tagged_pids, wait_for, write_config

STOPPED_FOR = 3.0  # longer than any client-side "is it up?" guess (the old one gave up after 2 s)


def cli_argv(d, *args: str) -> list[str]:
    return [sys.executable, "-m", "supervisor", *args, "--root", str(d.root)]


def cli_popen(d, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(cli_argv(d, *args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=d.env, cwd=str(REPO))


def finish(proc: subprocess.Popen[str], timeout: float = 60) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        return -9, out, err + f"\n(killed after {timeout:.0f}s)"
    return proc.returncode, out, err


def says_not_running(*texts: str) -> bool:
    return any("not running" in t.lower() for t in texts)


def lock_holder_alive(d) -> bool:
    """A process holds the root's lock (read from /proc/locks, as the client does)."""
    try:
        st = os.stat(d.layout.lock, follow_symlinks=False)
        table = Path("/proc/locks").read_text()
    except OSError:
        return False
    want = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    return any(len(p := line.split()) > 5 and p[1] == "FLOCK" and p[5] == want for line in table.splitlines())


def daemon_pid_of(d) -> int | None:
    try:
        text = d.layout.pidfile.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() and pid_alive(int(text)) else None


@pytest.mark.slow
def test_stop_right_after_start_wins(fake_root, hermesd_factory, faults):
    """20 profiles; ``hermesd start`` then, once it holds the root's lock, ``hermesd stop``; five times."""
    names = [f"p{i:02d}" for i in range(20)]
    for n in names:
        (fake_root / "profiles" / n).mkdir()
    write_config(fake_root, profiles={"default": {"enabled": False}, "coder": {"enabled": False},
                                 "writer": {"enabled": False}})
    d = hermesd_factory(fake_root, start=False)  # its close() kills anything tagged that is left
    daemons: set[int] = set()
    try:
        for i in range(5):
            start = cli_popen(d, "start")
            # The stop comes the moment ``start`` holds the root's lock, the daemon still starting.
            # (A fixed 0.15 s could come, under load, before ``start`` ran at all: then "not
            # running" is the true answer, and the race this tests never happened.)
            wait_for(lambda s=start: lock_holder_alive(d) or s.poll() is not None, 30, what="start's lock")
            faults.inject()
            if (pid := daemon_pid_of(d)) is not None:
                daemons.add(pid)
            code, out, err = finish(cli_popen(d, "stop"), 120)
            s_code, s_out, s_err = finish(start, 120)
            if (pid := daemon_pid_of(d)) is not None:
                daemons.add(pid)
            gone = eventually(lambda: not lock_holder_alive(d), 20) is not None
            left = eventually(lambda: not tagged_pids(fake_root), 10) is None and tagged_pids(fake_root)
            ok = (code == 0 and "hermesd stopped" in out and not says_not_running(out, err) and gone and not left
                  and "Traceback" not in err + s_err)
            faults.check(ok, f"round {i + 1}: stop exit {code} {out.strip()!r} {err.strip()[-200:]!r}; start exit "
                             f"{s_code} {(s_out + s_err).strip()[-200:]!r}; daemon gone {gone}; left running {left}")
            assert ok, (code, out, err, s_code, s_out, s_err, gone, left)
    finally:
        for pid in daemons:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@contextlib.contextmanager
def frozen_daemon(root, hermesd_factory):
    """A running daemon with three gateways; SIGCONT is always sent back at the end."""
    for home in (root, root / "profiles" / "coder", root / "profiles" / "writer"):
        write_behaviour(home, write_counter=True)
    d = hermesd_factory(root)
    before = d.wait_running("default", "coder", "writer")
    try:
        yield d, before
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(d.proc.pid, signal.SIGCONT)


@pytest.mark.parametrize("args", [
    pytest.param(("ping", "--wait", "1"), id="ping"),
    pytest.param(("status", "--wait", "1"), id="status"),
    pytest.param(("status", "--json", "--wait", "1"), id="status_json"),
])
def test_sigstopped_daemon_status(fake_root, hermesd_factory, faults, args):
    """``status`` (text and JSON) and ``ping`` of a frozen daemon: it is there but does not answer."""
    with frozen_daemon(fake_root, hermesd_factory) as (d, _before):
        os.kill(d.proc.pid, signal.SIGSTOP)
        outs = [d.cli(*args)]
        for o in outs:
            faults.inject()
            said = o.stdout + o.stderr
            ok = (not says_not_running(said) and "Traceback" not in o.stderr and o.returncode not in (0, 3)
                  and ("not answer" in said or "not accepting" in said))
            faults.check(ok, f"hermesd {' '.join(o.args[3:-2])} while SIGSTOPped: exit {o.returncode}; "
                             + ("says 'not running'; " if says_not_running(said) else "")
                             + ("never says it does not answer; " if "not answer" not in said else "")
                             + repr(said.strip()[-160:]))
        assert faults.lost == 0, [(o.args[3:-2], o.returncode, o.stdout, o.stderr) for o in outs]


@pytest.mark.slow
def test_sigstopped_daemon_restart_and_stop_of_a_profile(fake_root, hermesd_factory, faults):
    """``restart coder`` and ``stop writer`` typed while the daemon is frozen: they wait, then happen."""
    with frozen_daemon(fake_root, hermesd_factory) as (d, before):
        os.kill(d.proc.pid, signal.SIGSTOP)
        faults.inject(2)
        restart, stop_one = cli_popen(d, "restart", "coder"), cli_popen(d, "stop", "writer")
        early = eventually(lambda: restart.poll() is not None or stop_one.poll() is not None, STOPPED_FOR)
        os.kill(d.proc.pid, signal.SIGCONT)
        results = {"restart coder": finish(restart), "stop writer": finish(stop_one)}
        for what, (code, out, err) in results.items():
            ok = not early and code == 0 and not says_not_running(out, err) and "Traceback" not in err
            faults.check(ok, f"{what} typed while SIGSTOPped: exit {code}, {(out + err).strip()[-300:]!r}"
                             + (" (returned while the daemon was frozen)" if early else ""))
        assert all(r[0] == 0 for r in results.values()) and not early, results
        coder = wait_for(lambda: (r := d.row("coder"))["state"] == "running" and r["pid"] != before["coder"] and r, 15,
                         what="coder restarted")
        writer = d.row("writer")
        assert writer["state"] == "stopped" and writer["reason"] == "stopped by operator", writer
        assert coder["restarts"] == 1 and d.row("default")["pid"] == before["default"]


@pytest.mark.slow
def test_sigstopped_daemon_stop(fake_root, hermesd_factory, faults):
    """``stop`` (the daemon and every gateway) typed while it is frozen: it waits, then stops all."""
    with frozen_daemon(fake_root, hermesd_factory) as (d, _before):
        os.kill(d.proc.pid, signal.SIGSTOP)
        faults.inject()
        stop_all = cli_popen(d, "stop")
        early = eventually(lambda: stop_all.poll() is not None, STOPPED_FOR)
        os.kill(d.proc.pid, signal.SIGCONT)
        code, out, err = finish(stop_all, 60)
        with lost_on_failure(faults, "daemon still running after the stop"):
            assert d.proc.wait(20) == 0
        left = eventually(lambda: not gateway_leaders(fake_root), 10) is None and gateway_leaders(fake_root)
        ok = not early and code == 0 and "hermesd stopped" in out and not says_not_running(out, err) \
            and "Traceback" not in err and not left
        faults.check(ok, f"stop typed while SIGSTOPped: exit {code}, {(out + err).strip()[-300:]!r}, left {left}"
                         + (" (returned while the daemon was frozen)" if early else ""))
        assert ok, (code, out, err, left)


def test_stop_typed_during_start_up_is_not_lost_with_a_busy_daemon(fake_root, hermesd_factory, faults):
    """The daemon is SIGSTOPped before it answers anything: ``stop`` waits for it and then wins."""
    d = hermesd_factory(fake_root, start=False)
    d.start(wait_ready=False)
    wait_for(lambda: lock_holder_alive(d), 15, what="the daemon holding the root's lock")
    os.kill(d.proc.pid, signal.SIGSTOP)
    try:
        faults.inject()
        stop = cli_popen(d, "stop")
        early = eventually(lambda: stop.poll() is not None, STOPPED_FOR)
        os.kill(d.proc.pid, signal.SIGCONT)
        code, out, err = finish(stop, 60)
        exited = eventually(lambda: d.proc.poll() is not None, 20) is not None
        left = eventually(lambda: not tagged_pids(fake_root), 10) is None and tagged_pids(fake_root)
        ok = not early and code == 0 and not says_not_running(out, err) and exited and not left
        faults.check(ok, f"stop during a frozen start-up: exit {code} {(out + err).strip()[-300:]!r}, "
                         f"daemon exited {exited}, left {left}")
        assert ok, (code, out, err, exited, left)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(d.proc.pid, signal.SIGCONT)


@pytest.mark.slow
def test_sigstopped_daemon_restart_racing_a_stop(fake_root, hermesd_factory, faults):
    """``restart coder`` and ``stop`` typed together while the daemon is frozen: whichever the daemon
    takes first, neither command prints a traceback, and once the stop has happened nothing runs."""
    with frozen_daemon(fake_root, hermesd_factory) as (d, _before):
        os.kill(d.proc.pid, signal.SIGSTOP)
        faults.inject(2)
        restart, stop_all = cli_popen(d, "restart", "coder"), cli_popen(d, "stop")
        early = eventually(lambda: restart.poll() is not None or stop_all.poll() is not None, STOPPED_FOR)
        os.kill(d.proc.pid, signal.SIGCONT)
        results = {"restart coder": finish(restart), "stop": finish(stop_all)}
        for what, (code, out, err) in results.items():
            ok = not early and "Traceback" not in err and (code == 0 if what == "stop" else code in (0, 1, 3))
            faults.check(ok, f"{what} typed while SIGSTOPped, racing the other: exit {code}, "
                             f"{(out + err).strip()[-300:]!r}")
        with lost_on_failure(faults, "daemon still running after the stop"):
            assert d.proc.wait(30) == 0
        left = eventually(lambda: not tagged_pids(fake_root), 10) is None and tagged_pids(fake_root)
        assert not left, left
        assert faults.lost == 0, results
