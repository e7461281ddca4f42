"""What the watch mechanism costs at N = 20 profiles x 5 processes, measured (printed with -s).

Marked slow: it starts 100 Python processes. The asserted budgets are loose (a shared 2-core
machine); the printed figures are what the README proposal quotes.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time

import pytest

from supervisor.limits import hung, procfs
from supervisor.limits.watcher import ProcRoot, TreeWatcher, tree_usage
from supervisor.settings import HungSettings, Limits
from tests.limits.helpers import wait_for

N = 20
GATEWAY = r"""
import asyncio, email.parser, http.client, json, signal, sqlite3, ssl, subprocess, sys, threading, time, decimal
signal.alarm(120)
for _ in range(6):
    threading.Thread(target=time.sleep, args=(600,), daemon=True).start()
kids = [subprocess.Popen([sys.executable, "-c", "import signal,time; signal.alarm(120); time.sleep(600)"])
        for _ in range(4)]
print("ready", flush=True)
time.sleep(600)
"""


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


@pytest.mark.slow
def test_scan_cost_at_n20(trees, tmp_path):
    gws = [subprocess.Popen([sys.executable, "-c", GATEWAY], env=trees.env(f"p{i}"), stdout=subprocess.PIPE)
           for i in range(N)]
    trees.popens.extend(gws)
    for g in gws:
        assert g.stdout.readline() == b"ready\n"
    roots = {f"p{i}": ProcRoot(g.pid, procfs.read_stat(g.pid).start) for i, g in enumerate(gws)}
    w = TreeWatcher(trees.tag, salt=trees.salt)
    wait_for(lambda: all(len(s.pids) == 5 for s in w.scan(roots).values()), what="every tree complete")
    host = len(procfs.scan())

    def per_call(fn, rounds):
        c0, t0 = cpu(), time.perf_counter()
        for _ in range(rounds):
            fn()
        return (cpu() - c0) / rounds * 1000, (time.perf_counter() - t0) / rounds * 1000

    calm = {n: Limits(memory_max=1 << 30, tasks_max=500) for n in roots}  # far from the limits: no PSS
    scan_cpu, scan_wall = per_call(lambda: w.scan(roots, calm), 30)
    tight = {n: Limits(memory_max=1 << 20) for n in roots}  # every tree needs PSS
    exact_cpu, exact_wall = per_call(lambda: w.scan(roots, tight), 10)
    one = list(w.scan(roots)["p0"].pids)
    usage_cpu, _ = per_call(lambda: tree_usage(one), 30)
    home = tmp_path / "home"
    (home / "state").mkdir(parents=True)
    beat = {"pid": gws[0].pid, "monotonic": time.monotonic()}
    (home / "state" / "gateway.heartbeat").write_text(json.dumps(beat))
    settings = HungSettings()

    def hung_once():
        state, beat, gstate = hung.observe(home, gws[0].pid)
        hung.check_hung(pid=gws[0].pid, start_mono=0.0, proc_state=state, beat=beat, settings=settings,
                        now_mono=time.monotonic(), now_wall=time.time(), gateway_state=gstate)

    hung_cpu, _ = per_call(hung_once, 200)
    samples = w.scan(roots, tight)
    mem = sum(s.memory_bytes for s in samples.values())
    print(
        f"\nN={N} trees x 5 processes, {host} processes on the host\n"
        f"  scan (no PSS needed):     {scan_cpu:.2f} ms CPU, {scan_wall:.2f} ms wall"
        f"  -> {scan_cpu / 10:.2f} % of one core at the 1 s pace, {scan_cpu:.1f} % at the 0.1 s pace\n"
        f"  scan with PSS everywhere: {exact_cpu:.2f} ms CPU, {exact_wall:.2f} ms wall\n"
        f"  per tree: {scan_cpu / N:.3f} ms (scan share), status tree_usage {usage_cpu:.2f} ms\n"
        f"  hung check (observe + decide): {hung_cpu * 1000:.0f} us per profile\n"
        f"  tag cache entries: {len(w._tags)}; trees hold {mem / (1 << 20):.0f} MiB (PSS) in all"
    )
    assert scan_cpu < 50 and exact_cpu < 250 and hung_cpu < 2
    assert os.getpid() not in {p for s in samples.values() for p in s.pids}
