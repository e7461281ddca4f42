"""Who holds a profile's ``gateway.lock``, asked of the kernel (``/proc/locks``), and what occupies a
profile before hermesd starts a gateway there: real processes holding real ``flock`` locks."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from profiles.upstream import files as gf
from profiles.upstream.process import proc_start_time
from supervisor.plan.model import Ident
from supervisor.processes import identity
from tests.harness import pid_alive, wait_for

# Takes the lock, says so, and keeps it until its stdin closes. With "fork", the taker forks a child that
# inherits the locked descriptor and exits at once: the lock outlives the PID the kernel names for it.
HOLDER = r"""
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
if sys.argv[2] == "fork" and os.fork() != 0:
    os._exit(0)
print(os.getpid(), flush=True)
sys.stdin.read()
"""


def hold(procs, lock: Path, how: str = "plain") -> tuple[subprocess.Popen[str], int]:
    """A process holding ``lock``; its PID (with ``fork``: the child's, the taker being gone)."""
    p = subprocess.Popen([sys.executable, "-c", HOLDER, str(lock), how], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    procs.append(p)
    assert p.stdout is not None
    pid = int(p.stdout.readline())
    return p, pid


def test_the_holder_is_named_while_it_holds_and_not_after(tmp_path, procs):
    lock = tmp_path / gf.LOCK_FILE
    assert identity.gateway_lock_holder(tmp_path) is None  # no file
    lock.write_text("{}")
    assert identity.gateway_lock_holder(tmp_path) is None  # a file nobody holds
    p, pid = hold(procs, lock)
    assert identity.gateway_lock_holder(tmp_path) == pid == p.pid
    assert p.stdin is not None
    p.stdin.close()
    p.wait(10)
    assert identity.gateway_lock_holder(tmp_path) is None
    with open(lock, "a") as fh:  # asking never took it: it is free now
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)


def test_a_link_is_not_followed(tmp_path, procs):
    """``gateway.lock`` is in the profile's home: a link to a held lock elsewhere names nobody."""
    elsewhere = tmp_path / "elsewhere.lock"
    hold(procs, elsewhere)
    home = tmp_path / "home"
    home.mkdir()
    (home / gf.LOCK_FILE).symlink_to(elsewhere)
    assert identity.gateway_lock_holder(home) is None


def test_a_lock_whose_taker_is_gone_names_nobody(tmp_path, procs):
    """The kernel names the process that took the lock; a child that inherited it keeps it held after the
    taker exits. There is then no process to wait for: not returned (the gateway it may be is found by
    its gateway.pid or refused by upstream's own lock guard)."""
    lock = tmp_path / gf.LOCK_FILE
    p, child = hold(procs, lock, "fork")
    p.wait(10)  # the taker is gone; its child holds the lock
    try:
        assert pid_alive(child)
        with open(lock, "a") as fh, pytest.raises(BlockingIOError):
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)  # still held...
        assert identity.gateway_lock_holder(tmp_path) is None  # ...by nobody alive the kernel can name
        assert identity.occupant(tmp_path, "coder") is None
    finally:
        os.kill(child, 9)
        wait_for(lambda: not pid_alive(child), 10, what="the inheriting child gone")


def test_occupant_is_the_proven_gateway_else_the_lock_holder(tmp_path, procs):
    """Before a spawn: the gateway ``gateway.pid`` proves, else whoever holds the lock, pinned by start time."""
    home = tmp_path / "root" / "profiles" / "coder"
    home.mkdir(parents=True)
    assert identity.occupant(home, "coder") is None
    _p, pid = hold(procs, home / gf.LOCK_FILE)
    assert identity.occupant(home, "coder") == Ident(pid, proc_start_time(pid))  # no gateway.pid yet
    # A gateway.pid naming a process that is not this home's gateway hides nothing: the lock still decides.
    (home / gf.PID_FILE).write_text(json.dumps({"pid": os.getpid(), "start_time": proc_start_time(os.getpid())}))
    assert identity.occupant(home, "coder") == Ident(pid, proc_start_time(pid))
    # A proven gateway named by gateway.pid comes first (its file is the more precise claim).
    gw = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()", "-p", "coder", "gateway", "run"],
                          stdin=subprocess.PIPE, text=True, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                                                                 "HOME": "/nonexistent", "HERMES_HOME": str(home)})
    procs.append(gw)
    wait_for(lambda: "gateway" in gf.proc_argv(gw.pid), 10, what="the gateway's exec")
    (home / gf.PID_FILE).write_text(json.dumps({"pid": gw.pid, "start_time": proc_start_time(gw.pid)}))
    assert identity.occupant(home, "coder") == Ident(gw.pid, proc_start_time(gw.pid))
