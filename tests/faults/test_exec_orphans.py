"""A ``hermesd exec`` session of a profile without limits leaves an orphan behind (issue 33, hole 4).

Without limits there was no session cgroup: a ``setsid`` + ``env -i`` orphan (no tag, no parent)
landed in the root cgroup and outlived the session, ``hermesd stop PROFILE`` and a full stop. Now
every session gets a cgroup wherever profiles get one, limits or not: the orphan is in it, so it
ends when the session's command ends, or, for a session still running (or whose keeping command
was SIGKILLed before it could clean up), when the operator stops the profile or the fleet.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from supervisor.limits import cgroup as cg
from supervisor.limits import detect_only
from tests.harness import REPO, make_root, pid_alive, wait_for, write_config

# Prints the orphan's PID, then (``live``) keeps the session running.
ORPHAN = "setsid env -i /bin/sleep 300 </dev/null >/dev/null 2>&1 & echo $!; {rest}"


def _cgroup_of(pid: int) -> str:
    lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    return next((line[3:] for line in lines if line.startswith("0::")), "")


def _exec(d, profile: str, script: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "supervisor", "exec", "--root", str(d.root), profile, "--",
                             "sh", "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=d.env, cwd=str(REPO))


@pytest.fixture
def fleet(tmp_path: Path, hermesd_factory):
    root = make_root(tmp_path, ("coder", "writer"))
    write_config(root)  # no limits anywhere
    det = detect_only(str(root.resolve()))
    if not det.usable:
        pytest.skip(f"profiles get no cgroup here: {det.problems[0] if det.problems else 'cgroup v2 not usable'}")
    d = hermesd_factory(root)
    d.wait_running("default", "coder", "writer")
    started: list[subprocess.Popen[str]] = []
    orphans: list[int] = []
    yield d, started, orphans
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
    for pid in orphans:  # whatever the test found, nothing it started survives it
        if pid_alive(pid):
            os.kill(pid, signal.SIGKILL)


def _ends(pid: int, within: float = 10.0) -> bool:
    try:
        wait_for(lambda: not pid_alive(pid), within, what=f"PID {pid} ending")
    except AssertionError:
        return False
    return True


def _orphan_of(proc: subprocess.Popen[str], orphans: list[int]) -> int:
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    assert line.isdigit(), (line, proc.stderr.read() if proc.poll() is not None else "")
    orphans.append(int(line))
    return int(line)


def test_an_orphan_ends_with_its_session(fleet, faults) -> None:
    d, started, orphans = fleet
    proc = _exec(d, "coder", ORPHAN.format(rest="exit 0"))
    started.append(proc)
    orphan = _orphan_of(proc, orphans)
    assert proc.wait(30) == 0, proc.stderr.read()  # type: ignore[union-attr]
    faults.inject()
    gone = _ends(orphan)
    faults.check(gone, f"orphan {orphan} outlived its session")
    assert gone
    base = detect_only(str(d.root)).base
    assert base and not [e for e in os.listdir(base) if e.startswith(cg.EXEC_PREFIX)], "the session's cgroup is left"


@pytest.mark.parametrize("how", ["stop coder", "stop coder after its keeper was SIGKILLed", "full stop"])
def test_an_orphan_of_a_running_session_ends_with_its_profile(fleet, faults, how: str) -> None:
    d, started, orphans = fleet
    proc = _exec(d, "coder", ORPHAN.format(rest="exec /bin/sleep 300"))
    started.append(proc)
    orphan = _orphan_of(proc, orphans)
    assert f"/{cg.EXEC_PREFIX}coder." in _cgroup_of(orphan), _cgroup_of(orphan)  # the session's, not the root's
    other = _exec(d, "writer", ORPHAN.format(rest="exec /bin/sleep 300"))
    started.append(other)
    bystander = _orphan_of(other, orphans)
    if "SIGKILLed" in how:
        proc.kill()  # the keeping command dies before it can clean up: its session's cgroup stays populated
        proc.wait(10)
        assert pid_alive(orphan)
    faults.inject()
    out = d.cli(*how.split()[:2]) if how.startswith("stop coder") else d.cli("stop")
    assert out.returncode == 0, out
    ended = _ends(orphan)
    faults.check(ended, f"orphan {orphan} outlived {how}")
    assert ended
    if "SIGKILLed" not in how:
        assert proc.wait(30) == 128 + signal.SIGKILL  # the session itself ended with its profile
    if how == "full stop":
        assert not pid_alive(bystander)
    else:
        assert pid_alive(bystander) and other.poll() is None  # another profile's session is untouched
