"""hermesd's own settings: which changes the housekeeping check sees (pure), and that it puts back
what a process may restore for itself (real: this test process, its own threads)."""

from __future__ import annotations

import os
import resource
import threading

from supervisor.daemon.selfcheck import Snapshot, Thread, drift, restore, snapshot

INF = resource.RLIM_INFINITY


def test_drift_names_every_changed_setting_per_thread() -> None:
    main = Thread(nice=0, affinity=frozenset({0, 1}), policy=0, ioprio=0)
    base = Snapshot({"RLIMIT_NOFILE": (1024, 4096), "RLIMIT_CPU": (INF, INF)}, 0, {10: main, 11: main})
    assert drift(base, base) == []
    now = Snapshot({"RLIMIT_NOFILE": (4, 20000), "RLIMIT_CPU": (1, 1)}, 700,
                   {10: Thread(12, frozenset({0}), 0, 0), 11: Thread(0, frozenset({0, 1}), 5, 7 << 13),
                    12: Thread(3, frozenset({0, 1}), 0, 0)})
    found = {(c.what, c.tid): c.describe() for c in drift(base, now)}
    assert found == {
        ("RLIMIT_NOFILE", None): "RLIMIT_NOFILE changed from 1024:4096 to 4:20000",
        ("RLIMIT_CPU", None): "RLIMIT_CPU changed from unlimited:unlimited to 1:1",
        ("oom_score_adj", None): "oom_score_adj changed from 0 to 700",
        ("nice value", 10): "nice value of thread 10 changed from 0 to 12",
        ("CPU affinity", 10): "CPU affinity of thread 10 changed from 0,1 to 0",
        ("scheduling policy", 11): "scheduling policy of thread 11 changed from 0 to 5",
        ("I/O priority", 11): f"I/O priority of thread 11 changed from 0 to {7 << 13}",
        ("nice value", 12): "nice value of thread 12 changed from 0 to 3",  # a thread started later
    }


def test_restore_puts_back_what_this_process_may_change_itself() -> None:
    stop = threading.Event()
    worker = threading.Thread(target=stop.wait)
    worker.start()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        base = snapshot()
        tid = worker.native_id
        assert tid in base.threads
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, 64), hard))
        os.setpriority(os.PRIO_PROCESS, tid, min(19, (base.threads[tid].nice or 0) + 5))
        changes = drift(base, snapshot())
        assert {c.what for c in changes} == {"RLIMIT_NOFILE", "nice value"} or soft <= 64
        lines = restore(base, changes)
        assert all(line.endswith("restored") for line in lines), lines
        assert drift(base, snapshot()) == []
        assert resource.getrlimit(resource.RLIMIT_NOFILE) == (soft, hard)
    finally:
        stop.set()
        worker.join()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_the_fd_budget_refuses_a_spawn_only_near_the_limit_and_counts_exactly_there() -> None:
    from supervisor.daemon.selfcheck import FD_RESERVE, _fd_table_size, fd_budget_problem

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    used = len(os.listdir("/proc/self/fd"))
    table = _fd_table_size()
    assert table is not None and table >= used  # the bound that spares the count
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (used + 1 + FD_RESERVE, hard))
        problem = fd_budget_problem()
        assert problem is not None and problem.startswith(f"out of file descriptors: {used} open of a limit of")
        # room for exactly one spawn: unless the table is as small as the count, only the exact count says so
        resource.setrlimit(resource.RLIMIT_NOFILE, (used + 2 + FD_RESERVE, hard))
        assert fd_budget_problem() is None
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    if soft >= table + 2 + FD_RESERVE:
        assert fd_budget_problem() is None
