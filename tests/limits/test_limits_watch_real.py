"""The watch mechanism on real processes: tree discovery (setsid escapees included), memory and
task measurement against psutil, breaches, killing a whole tree, and a bounded fork bomb."""

from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from supervisor.limits import procfs
from supervisor.limits.tree import check_tree, next_scan
from supervisor.limits.watcher import PSS_MAX_AGE_S, ProcRoot, PssCache, TreeWatcher, freeze_and_kill, tree_usage
from supervisor.settings import Limits
from tests.limits.helpers import FORK_BOMB, alive, wait_for

M = 1 << 20


def members(info):
    return {info["gateway"], info["plain"], info["orphan"], info["hog"]}


@pytest.mark.parametrize("subreaper", [True, False], ids=["under-subreaper", "orphans-to-init"])
def test_tree_includes_escaped_orphans(trees, subreaper):
    info = trees.gateway_tree(hog_mb=20, subreaper=subreaper)
    # the orphan's parent died: it now belongs to the subreaper (or init), only its tag says whose it is
    assert psutil.Process(info["orphan"]).ppid() == (info["reaper"] or psutil.Process(info["orphan"]).ppid())
    assert psutil.Process(info["orphan"]).ppid() not in members(info)
    w = TreeWatcher(trees.tag, salt=trees.salt, exclude=[info["reaper"]] if info["reaper"] else [])
    samples = w.scan({"a": ProcRoot(info["gateway"], info["start"])})
    s = samples["a"]
    assert s.pids[0] == info["gateway"] and set(s.pids) == members(info)
    gw = psutil.Process(info["gateway"])
    expected_tasks = sum(psutil.Process(p).num_threads() for p in members(info))
    assert s.tasks == expected_tasks and s.tasks >= gw.num_threads() >= 5
    assert info["reaper"] not in s.pids and os.getpid() not in s.pids


def test_memory_is_pss_not_double_counted_and_at_least_the_gateways_rss(trees):
    info = trees.gateway_tree(hog_mb=200)
    w = TreeWatcher(trees.tag, salt=trees.salt, exclude=[info["reaper"]])
    root = ProcRoot(info["gateway"], info["start"])
    cheap = w.scan({"a": root})["a"]  # no limits: no PSS read
    assert not cheap.exact and cheap.rss_sum >= 200 * M
    usage = tree_usage(cheap.pids)
    procs = [psutil.Process(p) for p in members(info)]
    pss = sum(p.memory_full_info().pss for p in procs)
    rss = [p.memory_info().rss for p in procs]
    assert usage.memory_bytes >= 200 * M
    assert usage.memory_bytes >= psutil.Process(info["gateway"]).memory_info().rss
    assert abs(usage.memory_bytes - max(pss, max(rss))) < 4 * M  # same figure as psutil's, within noise
    assert usage.memory_bytes < sum(rss)  # four Pythons share their interpreter pages: RSS double counts
    assert usage.tasks == sum(p.num_threads() for p in procs) and usage.processes == 4


def test_memory_breach_then_kill_the_whole_tree(trees):
    info = trees.gateway_tree(hog_mb=200)
    w = TreeWatcher(trees.tag, salt=trees.salt, exclude=[info["reaper"]])
    root = ProcRoot(info["gateway"], info["start"])
    limits = Limits(memory_max=150 * M)
    s = w.scan({"a": root}, {"a": limits})["a"]
    assert s.exact  # the cheap bound crossed 90 % of the limit, so PSS was measured
    b = check_tree(s, limits)
    assert b is not None and b.reason == "memory_limit" and b.value > 150 * M
    assert check_tree(w.scan({"a": root}, {"a": Limits(memory_max=2048 * M)})["a"], Limits(memory_max=2048 * M)) is None
    killed = w.kill("a", root)
    assert set(killed) == members(info)
    wait_for(lambda: not any(alive(p) for p in members(info)), timeout=5, what="the tree to die")
    assert alive(info["reaper"])  # hermesd's stand-in is never part of a tree


def test_tasks_breach(trees):
    info = trees.gateway_tree(hog_mb=1)
    w = TreeWatcher(trees.tag, salt=trees.salt, exclude=[info["reaper"]])
    s = w.scan({"a": ProcRoot(info["gateway"], info["start"])}, {"a": Limits(tasks_max=5)})["a"]
    assert not s.exact  # no memory limit: PSS never read
    assert check_tree(s, Limits(tasks_max=5)).reason == "tasks_limit"
    assert check_tree(s, Limits(tasks_max=s.tasks)) is None


def test_recycled_gateway_pid_gives_an_empty_tree(trees):
    """A root whose start time does not match the live process is a recycled PID: not our tree."""
    import subprocess
    import sys

    p = subprocess.Popen([sys.executable, "-c", "import signal,subprocess,time; signal.alarm(60); "
                          "subprocess.Popen(['sleep', '60']); time.sleep(60)"])  # untagged
    trees.popens.append(p)
    kid = wait_for(lambda: psutil.Process(p.pid).children(), what="the child")[0].pid
    start = procfs.read_stat(p.pid).start
    w = TreeWatcher(trees.tag, salt=trees.salt)
    assert set(w.scan({"a": ProcRoot(p.pid, start)})["a"].pids) == {p.pid, kid}
    assert w.scan({"a": ProcRoot(p.pid, start + 1)})["a"].pids == ()
    psutil.Process(kid).kill()


def test_fork_bomb_is_contained_by_watch(trees, tmp_path):
    """A tree forking towards 300 processes (half of the forks setsid) under tasks_max 100: the
    enforcer, paced as the daemon would be, sees the breach, freezes and kills every member."""
    pidfile = tmp_path / "bomb.pids"
    reaper, gw = trees.under_subreaper(FORK_BOMB, str(pidfile), "300", "0.5")
    start = wait_for(lambda: procfs.read_stat(gw) and procfs.read_stat(gw).start, what="the bomb to start")
    root = ProcRoot(gw, start)
    limits = {"a": Limits(tasks_max=100)}
    w = TreeWatcher(trees.tag, salt=trees.salt, exclude=[reaper.pid])
    previous: dict = {}
    hot_until = float("-inf")
    seen = []
    t0 = time.monotonic()
    breach = None
    while time.monotonic() - t0 < 20:
        samples = w.scan({"a": root}, limits)
        seen.append((round(time.monotonic() - t0, 2), samples["a"].tasks))
        breach = check_tree(samples["a"], limits["a"])
        if breach is not None:
            break
        delay, hot_until = next_scan(samples, previous, limits, now=time.monotonic(), hot_until=hot_until)
        previous = samples
        time.sleep(delay)  # the daemon's timer
    assert breach is not None and breach.reason == "tasks_limit", seen
    killed = w.kill("a", root)
    t_kill = time.monotonic() - t0
    created = [int(x) for x in pidfile.read_text().split()]
    assert len(created) < 300, f"the bomb ran to its budget before the enforcer acted: {seen}"
    wait_for(lambda: not any(alive(p) for p in created), timeout=5, what="every bomb process to die")
    assert not trees.tagged()  # nothing of the tree survived, escapees included
    assert len(killed) >= breach.value
    print(f"\nfork bomb: breach at {breach.value} tasks after {seen[-1][0]}s, killed {len(killed)} "
          f"in {t_kill - seen[-1][0]:.3f}s, {len(created)} created in all; scans {seen}")


def test_freeze_and_kill_catches_children_forked_during_the_kill(trees, tmp_path):
    """Between reading a tree and signalling it, a bomb forks; freeze_and_kill rescans until closed."""
    pidfile = tmp_path / "bomb.pids"
    reaper, gw = trees.under_subreaper(FORK_BOMB, str(pidfile), "200", "0.02")
    start = wait_for(lambda: procfs.read_stat(gw) and procfs.read_stat(gw).start, what="the bomb to start")
    w = TreeWatcher(trees.tag, salt=trees.salt, exclude=[reaper.pid])
    wait_for(lambda: len(pidfile.read_text().split()) >= 30 if pidfile.exists() else False, what="the bomb to grow")
    killed = freeze_and_kill(lambda: w.rescan_members("a", ProcRoot(gw, start)))
    created = [int(x) for x in pidfile.read_text().split()]
    wait_for(lambda: not any(alive(p) for p in created), timeout=5, what="every bomb process to die")
    assert not trees.tagged() and len(killed) >= 30


def test_status_usage_for_a_proc_root(trees):
    """status: memory_bytes >= the gateway's RSS and tasks >= its thread count (issue 12's done-when)."""
    from supervisor import limits as lim

    info = trees.gateway_tree(hog_mb=1)
    w = TreeWatcher(trees.tag, salt=trees.salt, exclude=[info["reaper"]])
    u = lim.usage("a", ProcRoot(info["gateway"], info["start"]), w)
    gw = psutil.Process(info["gateway"])
    assert u.memory_bytes >= gw.memory_info().rss and u.tasks >= gw.num_threads() and u.processes == 4


def _may_raise_priority() -> bool:
    """CAP_SYS_NICE in this process's effective set (bit 23): the right to lower a nice value."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> 23 & 1)
    return False


def test_apply_nice_to_every_thread(trees):
    """Every thread of the gateway gets the weight's nice value, at any niceness the test starts with
    (``nice -n 10`` included): up to 3 steps less favoured, or more favoured when it already runs at
    19, which only CAP_SYS_NICE allows; without it the call says so (False) and changes nothing."""
    from supervisor.limits.tree import nice_for_weight
    from supervisor.limits.watcher import apply_nice

    start = os.getpriority(os.PRIO_PROCESS, 0)
    weight_of = {nice_for_weight(w): w for w in range(10000, 0, -1)}  # the nice values a cpu.weight can ask for
    target = next(n for n in (start + 3, start + 2, start + 1, start - 3, start - 2, start - 1) if n in weight_of)
    weight = weight_of[target]
    allowed = target >= start or _may_raise_priority()
    info = trees.gateway_tree(hog_mb=1)
    gw = psutil.Process(info["gateway"])
    assert apply_nice([info["gateway"]], weight) is allowed
    assert all(os.getpriority(os.PRIO_PROCESS, t.id) == (target if allowed else start) for t in gw.threads())
    # the plain child predates the call: it keeps the niceness the tree started with
    assert psutil.Process(info["plain"]).nice() == start


def test_start_clock_matches_the_processes_own_monotonic(trees, tmp_path):
    """procfs.start_clock converts /proc's boot-time ticks to CLOCK_MONOTONIC: a heartbeat the process
    writes with its own time.monotonic() is accepted as its own, with a small age."""
    import json
    import subprocess
    import sys

    from supervisor.limits.hung import beat_age

    out = tmp_path / "beat.json"
    code = ("import json,os,signal,sys,time; signal.alarm(60); "
            "open(sys.argv[1],'w').write(json.dumps({'pid': os.getpid(), 'monotonic': time.monotonic()})); "
            "time.sleep(60)")
    p = subprocess.Popen([sys.executable, "-c", code, str(out)], env=trees.env("a"))
    trees.popens.append(p)
    beat = wait_for(lambda: out.exists() and out.read_text() and json.loads(out.read_text()), what="the beat")
    start_mono, start_wall, ticks = procfs.start_clock(p.pid)
    assert abs(start_wall - time.time()) < 30 and ticks == procfs.read_stat(p.pid).start
    assert start_mono <= beat["monotonic"] + 0.02  # started before it wrote
    age = beat_age(beat, pid=p.pid, start_mono=start_mono, now_mono=time.monotonic(), now_wall=time.time())
    assert age is not None and age < 5


def test_procfs_host_readers():
    assert procfs.host_memory_total() > 1 << 28
    assert isinstance(procfs.swap_in_use(), bool)
    assert procfs.vm_swap_bytes(os.getpid()) >= 0 and procfs.vm_swap_bytes(0x3FFFFF) == 0
    assert procfs.rollup_bytes(os.getpid()) > 0 and procfs.rollup_bytes(0x3FFFFF) is None
    me = procfs.read_stat(os.getpid())
    assert me.ppid == os.getppid() and me.threads >= 1 and me.rss > 0
    assert procfs.thread_ids(os.getpid())


def test_freeze_and_kill_never_leaves_a_tree_stopped(trees):
    """Even when a rescan fails half-way, every process already stopped is killed."""
    info = trees.gateway_tree(hog_mb=1)
    w = TreeWatcher(trees.tag, salt=trees.salt, exclude=[info["reaper"]])
    first = w.rescan_members("a", ProcRoot(info["gateway"], info["start"]))
    calls = []

    def rescan():
        calls.append(1)
        if len(calls) > 1:
            raise OSError("simulated /proc failure")
        return first

    with pytest.raises(OSError, match="simulated"):
        freeze_and_kill(rescan)
    wait_for(lambda: not any(alive(p) for p in members(info)), timeout=5, what="the tree to die")


def test_status_reuses_a_pss_reading_for_a_few_seconds_and_never_across_pid_reuse(tmp_path):
    """``smaps_rollup`` is a page-table walk: status reuses each process's reading for
    ``PSS_MAX_AGE_S`` (a folder stands in for ``/proc`` so the kernel's figure can be changed)."""
    now = [100.0]
    cache = PssCache(clock=lambda: now[0], proc=str(tmp_path))
    (tmp_path / "42").mkdir()

    def kernel_says(kib: int) -> None:
        (tmp_path / "42" / "smaps_rollup").write_bytes(f"Rss: 9000 kB\nPss: {kib} kB\nSwapPss: 1 kB\n".encode())

    st = procfs.ProcStat(pid=42, ppid=1, state="S", threads=1, start=7, rss=4096)
    kernel_says(100)
    assert cache.rollup_bytes(st) == 101 * 1024
    kernel_says(300)
    now[0] += PSS_MAX_AGE_S - 0.5
    assert cache.rollup_bytes(st) == 101 * 1024  # reused
    assert cache.rollup_bytes(replace(st, start=8)) == 301 * 1024  # same PID, another process: read
    now[0] += 1.0
    assert cache.rollup_bytes(st) == 301 * 1024  # too old: read again
    # tree_usage with the cache: the figure it shows, and still at least the largest fresh RSS
    (tmp_path / "42" / "stat").write_bytes(b"42 (x) S 1 42 42 0 -1 0 0 0 0 0 0 0 0 0 20 0 3 0 7 0 10 0")
    usage = tree_usage([42], str(tmp_path), pss=cache)
    assert usage.memory_bytes == max(301 * 1024, 10 * procfs.PAGE_SIZE) and usage.tasks == 3
