"""The cgroup I/O layer on this kernel's real cgroup v2 mount (a bare one beside cgroup v1 here).

What a bare cgroup2 mount offers without controllers: child cgroups, moving processes, exact
membership, cgroup.kill, cgroup.freeze, cgroup.events (and inotify on it). Each test skips, saying
why, where the kernel or the privileges lack it. Every cgroup a test makes is killed and removed.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import select
import struct
import subprocess
import sys
import uuid

import pytest

from supervisor import limits as lim
from supervisor.limits import cgroup, cgroup_io
from supervisor.limits.cgroup import MigrateAll, Mkdir
from supervisor.limits.watcher import CgroupRoot, TreeWatcher
from tests.limits.helpers import alive, wait_for

TREE = r"""
import json, os, signal, subprocess, sys, time
signal.alarm(120)
sys.stdin.readline()  # forks only once the test has moved us into the cgroup
plain = subprocess.Popen([sys.executable, "-c", "import signal,time; signal.alarm(120); time.sleep(600)"])
esc = subprocess.Popen(
    [sys.executable, "-c",
     "import os,signal,time\npid=os.fork()\nif pid==0:\n signal.alarm(120); time.sleep(600); os._exit(0)\n"
     "print(pid, flush=True)\nos._exit(0)"],
    start_new_session=True, stdout=subprocess.PIPE)
orphan = int(esc.stdout.readline())
esc.wait()
print(json.dumps({"gateway": os.getpid(), "plain": plain.pid, "orphan": orphan}), flush=True)
time.sleep(600)
"""


SLEEPER = "import signal,time; signal.alarm(60); time.sleep(60)"


def _v2_mount() -> str | None:
    from pathlib import Path

    lay = cgroup.locate(Path("/proc/self/mountinfo").read_text(), Path("/proc/self/cgroup").read_text())
    return lay.mount.mount_point if lay.mount is not None else None


MOUNT = _v2_mount()


@pytest.fixture
def cg():
    """A fresh test cgroup under the real v2 mount: ``<mount>/hermesd-test-<pid>-<rand>``."""
    if MOUNT is None:
        pytest.skip("no cgroup v2 mount on this host")
    if os.geteuid() != 0 and not os.access(MOUNT, os.W_OK):
        pytest.skip(f"{MOUNT} is not writable by this user (needs root or delegation)")
    base = os.path.join(MOUNT, f"hermesd-test-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        cgroup_io.apply([Mkdir(base)])
    except cgroup_io.CgroupError as exc:
        pytest.skip(f"cannot create a cgroup under {MOUNT}: {exc}")
    made = [base]

    def child(name: str) -> str:
        d = os.path.join(base, name)
        cgroup_io.apply([Mkdir(d)])
        made.append(d)
        return d

    yield child
    for d in reversed(made):
        if os.path.isdir(d):
            with contextlib.suppress(OSError):
                cgroup_io.kill(d)
            assert cgroup_io.remove(d, timeout=5), f"could not remove test cgroup {d}"


def start_tree(trees, d):
    p = subprocess.Popen(
        [sys.executable, "-c", TREE], env=trees.env("a"), stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    trees.popens.append(p)
    cgroup_io.attach(d, p.pid)
    p.stdin.write(b"go\n")
    p.stdin.flush()
    info = json.loads(p.stdout.readline())
    return p, info


def need(d, name):
    if not os.path.exists(os.path.join(d, name)):
        pytest.skip(f"this kernel has no {name} (cgroup.kill needs Linux 5.14, cgroup.freeze 5.2)")


def test_attach_membership_and_cgroup_kill(trees, cg):
    d = cg("profile-a")
    need(d, "cgroup.kill")
    p, info = start_tree(trees, d)
    pids = {info["gateway"], info["plain"], info["orphan"]}
    assert set(cgroup_io.procs(d)) == pids  # the setsid'd orphan too: membership is exact
    rel = d[len(MOUNT):]
    assert all(cgroup_io.current_cgroup(pid) == rel for pid in pids)
    assert cgroup_io.populated(d) is True
    s = TreeWatcher(trees.tag, salt=trees.salt).scan({"a": CgroupRoot(d)})["a"]
    assert set(s.pids) == pids and s.tasks >= 3
    u = lim.usage("a", CgroupRoot(d), TreeWatcher(trees.tag, salt=trees.salt))
    assert u.processes == 3 and u.memory_bytes > 0  # no memory controller here: the watch figure
    assert cgroup_io.read_events(d) == cgroup.Events()  # no memory/pids controller on this mount
    assert cgroup_io.usage(d) is None
    assert cgroup_io.kill(d) == "cgroup.kill"
    wait_for(lambda: cgroup_io.populated(d) is False, timeout=5, what="the cgroup to empty")
    p.wait(timeout=5)
    assert not any(alive(x) for x in pids)


@pytest.mark.parametrize("method", ["freeze", "signal"])
def test_kill_fallbacks(trees, cg, method):
    d = cg(f"profile-{method}")
    if method == "freeze":
        need(d, "cgroup.freeze")
    p, info = start_tree(trees, d)
    pids = {info["gateway"], info["plain"], info["orphan"]}
    assert cgroup_io.kill(d, method=method) == method
    wait_for(lambda: cgroup_io.populated(d) is False, timeout=5, what="the cgroup to empty")
    p.wait(timeout=5)
    assert not any(alive(x) for x in pids)
    if method == "freeze":
        with open(os.path.join(d, "cgroup.freeze")) as fh:
            assert fh.read().strip() == "0"  # thawed for the next gateway
    # the cgroup is reusable: a new process attached to it runs
    q = subprocess.Popen([sys.executable, "-c", SLEEPER], env=trees.env("a"))
    trees.popens.append(q)
    cgroup_io.attach(d, q.pid)
    assert cgroup_io.procs(d) == [q.pid] and alive(q.pid)


def test_migrate_all_between_real_cgroups(trees, cg):
    src, dst = cg("src"), cg("dst")
    ps = [subprocess.Popen([sys.executable, "-c", SLEEPER],
                           env=trees.env("a")) for _ in range(3)]
    trees.popens.extend(ps)
    for q in ps:
        cgroup_io.attach(src, q.pid)
    cgroup_io.apply([MigrateAll(src, dst)])
    assert cgroup_io.procs(src) == [] and sorted(cgroup_io.procs(dst)) == sorted(q.pid for q in ps)


def test_adopting_a_running_tree_moves_every_member(trees, cg):
    """An adopted gateway whose tree was started outside any cgroup: attach_all moves all of it."""
    info = trees.gateway_tree(hog_mb=1, subreaper=False)
    d = cg("adopted")
    w = TreeWatcher(trees.tag, salt=trees.salt)
    from supervisor.limits.watcher import ProcRoot

    members = [p for p, _ in w.rescan_members("a", ProcRoot(info["gateway"], info["start"]))]
    assert set(members) == {info["gateway"], info["plain"], info["orphan"], info["hog"]}
    assert sorted(cgroup_io.attach_all(d, [*members, 0x3FFFFF])) == sorted(members)
    assert sorted(cgroup_io.procs(d)) == sorted(members)


def test_attach_a_gone_pid_is_process_lookup_error(cg):
    d = cg("gone")
    q = subprocess.Popen(["true"])
    q.wait()
    with pytest.raises(ProcessLookupError):
        cgroup_io.attach(d, q.pid)


def test_inotify_reports_cgroup_events_changes(trees, cg):
    """The loop can learn that a tree emptied (or, with controllers, hit a limit) from inotify
    IN_MODIFY on the cgroup's events files, without polling."""
    d = cg("notify")
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
    assert fd >= 0
    try:
        assert libc.inotify_add_watch(fd, os.path.join(d, "cgroup.events").encode(), 0x2) >= 0  # IN_MODIFY
        q = subprocess.Popen([sys.executable, "-c", SLEEPER],
                             env=trees.env("a"))
        trees.popens.append(q)
        cgroup_io.attach(d, q.pid)
        assert select.select([fd], [], [], 5)[0], "no inotify event when the cgroup became populated"
        os.read(fd, 4096)
        q.kill()
        q.wait()
        assert select.select([fd], [], [], 5)[0], "no inotify event when the cgroup emptied"
        mask = struct.unpack_from("iIII", os.read(fd, 4096))[1]
        assert mask & 0x2 and cgroup_io.populated(d) is False
    finally:
        os.close(fd)


def test_setup_on_this_host(trees):
    """lim.setup for a (made-up) root on the real host, the profile plan, attach, kill, teardown;
    a populated cgroup (--keep-children) survives teardown, an emptied one does not."""
    if MOUNT is None or os.geteuid() != 0:
        pytest.skip("needs root and a cgroup v2 mount")
    root = f"/nonexistent/hermesd-limits-setup-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    det = lim.setup(root)
    if not det.usable:
        pytest.skip(f"cgroup v2 not usable here: {det.problems}")
    try:
        assert os.path.isdir(det.base)
        procs = {}
        for name in ("coder", "writer"):
            d = cgroup.profile_dir(det, name)
            cgroup_io.apply(cgroup.profile_plan(det, name, lim.Limits(memory_max=1 << 30, tasks_max=50)))
            q = subprocess.Popen([sys.executable, "-c", SLEEPER], env=trees.env(name))
            trees.popens.append(q)
            cgroup_io.attach(d, q.pid)
            procs[name] = q
        root_ = CgroupRoot(cgroup.profile_dir(det, "coder"))
        TreeWatcher(trees.tag, salt=trees.salt).kill("coder", root_)
        procs["coder"].wait(timeout=5)
        wait_for(lambda: cgroup_io.populated(root_.path) is False, what="coder's cgroup to empty")
        left = lim.teardown(det)
        assert left == [cgroup.profile_dir(det, "writer")] and not os.path.exists(root_.path)
        procs["writer"].kill()
        procs["writer"].wait()
        wait_for(lambda: cgroup_io.populated(left[0]) is False, what="writer's cgroup to empty")
        assert lim.teardown(det) == [] and not os.path.exists(det.base)
    finally:
        for sub in sorted(os.listdir(det.base)) if os.path.isdir(det.base) else []:
            path = os.path.join(det.base, sub)
            if os.path.isdir(path):
                cgroup_io.kill(path)
                cgroup_io.remove(path, timeout=5)
        if det.create_base and os.path.isdir(det.base):
            cgroup_io.remove(det.base, timeout=5)


def test_usage_needs_both_controllers_and_reads_tasks_only_with_memory(tmp_path):
    """A folder stands in for a cgroup (no host here enables the memory controller for us)."""
    d = str(tmp_path)
    (tmp_path / "pids.current").write_text("7\n")
    assert cgroup_io.usage(d) is None  # pids alone: the watch figure is used instead
    (tmp_path / "memory.current").write_text("123456\n")
    assert cgroup_io.usage(d) == (123456, 7)
    (tmp_path / "pids.current").unlink()
    assert cgroup_io.usage(d) is None
    u = lim.usage("a", CgroupRoot(d), TreeWatcher("/nonexistent-root", salt=None))
    assert (u.memory_bytes, u.processes) == (0, 0)  # fell back to the members' own figures: none listed
