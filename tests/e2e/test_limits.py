"""Issue 12 against real gateways: per-profile limits keep one profile's failure in that profile.

This machine offers cgroup v1 controllers only, so the ``watch`` mechanism (a ``/proc`` scan of each
profile's tree, about 1 s reaction time) is what enforces the limits here. One daemon, three
profiles, about seven real gateway starts:

* ``calm``: a neighbour with generous limits; ``status --json`` shows its tree's ``memory_bytes``
  (at least the gateway's RSS) and ``tasks`` (at least its thread count), and it keeps its PID
  throughout.
* ``hog``: ``memory_max`` below the gateway's own footprint: killed with ``memory_limit`` and backed
  off with a growing delay like any crash loop, then stopped by the operator.
* ``bomb``: its real gateway, armed through a ``sitecustomize`` on its ``PYTHONPATH``, starts a
  (bounded) fork bomb when told: the tree is killed for ``tasks_limit``, every member of the bomb
  is gone, and the profile comes back.
"""

from __future__ import annotations

import time

import pytest
import yaml

from tests.e2e.conftest import make_real_root
from tests.e2e.helpers import alive, events, rss_bytes, threads, wait_events
from tests.harness import wait_for
from tests.limits.helpers import FORK_BOMB

pytestmark = [pytest.mark.slow, pytest.mark.real_gateway]

MEMORY_MAX = "40M"  # a real gateway needs about 80 MiB
TASKS_MAX = 80  # the gateway's threads plus a margin; the bomb goes far past it
BOMB_BUDGET = 200  # processes at most, whatever happens (each also dies after 60 s)
WATCH_PERIOD = 1.5  # the watch scans every tree once a second (plus scheduling slack)

# Imported by every Python process of the bomb profile's tree (its gateway included). Only a
# process with E2E_FORK_BOMB in its environment arms; the bomb itself is started without it.
SITECUSTOMIZE = r'''
import os
_spec = os.environ.get("E2E_FORK_BOMB")
if _spec:
    import subprocess, sys, threading, time
    _trigger, _pidfile, _budget, _pause, _code = _spec.split("|", 4)

    def _arm():
        while True:
            time.sleep(0.1)
            try:
                os.unlink(_trigger)  # one process of the tree wins; the bomb runs once per trigger
            except FileNotFoundError:
                continue
            env = {k: v for k, v in os.environ.items() if k != "E2E_FORK_BOMB"}
            subprocess.Popen([sys.executable, "-c", open(_code).read(), _pidfile, _budget, _pause], env=env)
            return

    threading.Thread(target=_arm, daemon=True, name="e2e-fork-bomb").start()
'''


def test_limits_keep_a_profile_s_excess_in_that_profile(tmp_path, hermes, hermesd_factory, pidfiles):
    root = make_real_root(tmp_path, ("calm", "hog", "bomb"))
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    (site / "bomb.py").write_text(FORK_BOMB)
    # The tree removes the trigger and writes the pid list: in the bomb profile's home, where it may write.
    trigger = root / "profiles" / "bomb" / "bomb.trigger"
    bomb_pids = pidfiles.add(root / "profiles" / "bomb" / "bomb.pids")
    spec = "|".join([str(trigger), str(bomb_pids), str(BOMB_BUDGET), "0.5", str(site / "bomb.py")])
    (root / "hermesd.yaml").write_text(yaml.safe_dump({
        "command": [str(hermes)],
        "restart": {"initial_delay": 1.0, "factor": 2.0, "max_delay": 8.0, "healthy_after": 30.0, "jitter": 0.0},
        "stop_timeout": 30,
        "limits": {"memory_max": "2G", "tasks_max": 1000},
        "profiles": {
            "default": {"enabled": False},
            "hog": {"limits": {"memory_max": MEMORY_MAX}},
            "bomb": {"limits": {"tasks_max": TASKS_MAX},
                     "environment": {"PYTHONPATH": str(site), "E2E_FORK_BOMB": spec}},
        },
    }))
    d = hermesd_factory(root)
    pids = d.wait_running("calm", "bomb", timeout=90)

    # Status: the whole tree's memory and tasks, the limits in force and the mechanism.
    calm = pids["calm"]

    # The watch samples each tree once a second and a young gateway's RSS still moves: compare once
    # the gateway's RSS and thread count have been steady for longer than a sampling period.
    readings: list[tuple[float, int, int]] = []
    seen: list[tuple] = []

    def measured():
        now = time.monotonic()
        readings.append((now, rss_bytes(calm), threads(calm)))
        window = [x for x in readings if x[0] >= now - WATCH_PERIOD]
        if readings[0][0] > now - WATCH_PERIOD or len({x[1:] for x in window}) != 1:
            return None
        r = next(r for r in d.status()["profiles"] if r["name"] == "calm")
        _, rss, nthreads = readings[-1]
        if (rss_bytes(calm), threads(calm)) != (rss, nthreads):
            return None
        seen[:] = [(r["memory_bytes"], rss, r["tasks"], nthreads, r["mechanism"], r["limits"])]
        ok = (r["memory_bytes"] or 0) >= rss and (r["tasks"] or 0) >= nthreads
        return (r, rss, nthreads) if ok else None

    try:
        row, rss, nthreads = wait_for(measured, 30, 0.1, what="calm's tree memory >= RSS and tasks >= threads")
    except AssertionError:
        raise AssertionError(f"(memory_bytes, RSS, tasks, threads, mechanism, limits): {seen}") from None
    assert row["mechanism"] == "watch", row
    assert nthreads < TASKS_MAX, f"the real gateway runs {nthreads} threads: raise TASKS_MAX"
    print(f"calm: memory_bytes {row['memory_bytes']} >= RSS {rss}; tasks {row['tasks']} >= threads {nthreads}")

    # hog: over memory_max from its start: killed for memory_limit, restarted at once the first time
    # (as after any first crash), then backed off with a growing delay like any crash loop. (A start
    # may reach "ready" before the next scan: only these types are compared.)
    cycle = ["started", "limit_kill", "exited"]
    evs = wait_events(d, "hog", [*cycle, *cycle, "backoff", *cycle, "backoff"], 0, 60,
                      only={"started", "limit_kill", "exited", "backoff"})
    exits = [e for e in evs if e["type"] == "exited"]
    assert [e["kind"] for e in exits] == ["memory_limit"] * 3, exits
    assert [e["limit"] for e in evs if e["type"] == "limit_kill"] == ["memory_limit"] * 3
    delays = [e["delay_s"] for e in evs if e["type"] == "backoff"]
    assert 0 < delays[0] < delays[1], delays
    hog = d.row("hog")
    assert hog["last_exit"]["kind"] == "memory_limit" and hog["restarts"] >= 2, hog
    assert d.cli("stop", "hog").returncode == 0
    d.wait_state("hog", "stopped", timeout=30)

    # bomb: a fork bomb from inside the real gateway's tree is contained.
    seq = max(e["seq"] for e in events(d, "bomb"))
    trigger.write_text("go\n")
    t0 = time.monotonic()
    evs = wait_events(d, "bomb", ["limit_kill", "exited", "started", "ready"], seq, 60,
                      only={"limit_kill", "exited", "backoff", "started", "ready"})
    assert evs[0]["limit"] == "tasks_limit" and evs[0]["pid"] == pids["bomb"] and evs[1]["kind"] == "tasks_limit", evs
    members = pidfiles.pids(bomb_pids)
    assert members, "the fork bomb never ran"
    wait_for(lambda: not [p for p in members if alive(p)], 10, what="every member of the fork bomb gone")
    assert not alive(pids["bomb"])
    print(f"fork bomb: {len(members)} processes of {BOMB_BUDGET} started before containment; back in "
          f"{time.monotonic() - t0:.1f}s")
    assert len(members) < BOMB_BUDGET, "the bomb ran to its own budget: the limit did not stop it"
    new_bomb = d.wait_running("bomb", timeout=60)["bomb"]
    assert new_bomb != pids["bomb"]

    # The neighbour never noticed.
    assert d.row("calm")["pid"] == calm and alive(calm)
    assert not [e for e in events(d, "calm") if e["type"] in ("exited", "limit_kill", "hung_kill")]

    assert d.cli("stop", timeout=120).returncode == 0
    assert d.proc.wait(60) == 0
    assert d.close() == []
    assert not [p for p in pidfiles.pids(bomb_pids) if alive(p)]
