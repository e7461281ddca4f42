"""Issue 14 (and the hung half of issue 12) against real gateways: what happened, who is told, what
is scraped.

One daemon, four real profiles (``alpha``, ``beta``, ``delta``, then ``gamma``), nine real gateway
starts in all. Configured: an ``exited`` hook for alpha that records the event it gets, a second one that
hangs (killed at its 2 s timeout), ``hung_after`` just above the gateway's 30 s heartbeat period,
and ``/metrics`` on a unix socket. In order:

1. SIGKILL alpha's gateway: respawned at once (well before the hanging hook's timeout), the events
   ``exited(crash) started ready``; each hook ran once, the hanging one was killed at its timeout.
2. SIGSTOP alpha's new gateway right after its heartbeat (the worst case: its beat is as fresh as
   it gets); delta's event loop was blocked before step 1 (its heartbeat stops advancing, the
   process runs on): each is killed as hung and restarted within ``hung_after`` + 1 s,
   ``hung_kill exited(hung) started ready``; beta keeps its PID. Meanwhile a profile appears held
   for a broken ``.env`` and is released by fixing it: ``held released started ready``.
3. ``hermesd stop beta``: ``stopped(operator) exited(planned)``.
4. ``/metrics`` parses with prometheus_client's parser; its counters match the events.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

import pytest
import yaml

from tests.e2e.conftest import make_real_root
from tests.e2e.helpers import (
    alive,
    events,
    heartbeat_age,
    last_seq,
    samples,
    scrape_unix,
    wait_events,
)
from tests.faults.helpers import respawn_after_kill
from tests.harness import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.real_gateway]

HUNG_AFTER = 34.0  # above upstream's fixed 30 s heartbeat period, so healthy gateways are never judged hung
HOOK_TIMEOUT = 2.0

RECORD = "import sys; open(sys.argv[1], 'a').write(sys.stdin.read().strip() + '\\n')"
HANG = "import os, sys, time; open(sys.argv[1], 'a').write(f'{os.getpid()}\\n'); time.sleep(600)"

# Imported by every Python process of the frozen profile (PYTHONPATH in its environment): in the
# gateway process (``... gateway run``), a thread waits for the trigger file, then blocks the
# gateway's running asyncio loop with a 600 s sleep: the process lives on, its heartbeat stops.
FREEZE_SITECUSTOMIZE = r'''
import os
_trigger = os.environ.get("E2E_FREEZE_LOOP")
if _trigger:
    import threading, time

    def _arm():
        import sys
        if "gateway" not in sys.argv or "run" not in sys.argv:
            return
        while True:
            time.sleep(0.1)
            try:
                os.unlink(_trigger)
            except FileNotFoundError:
                continue
            import asyncio, gc
            for loop in [o for o in gc.get_objects() if isinstance(o, asyncio.AbstractEventLoop)]:
                if loop.is_running():
                    loop.call_soon_threadsafe(time.sleep, 600)
            return

    threading.Thread(target=_arm, daemon=True, name="e2e-freeze").start()
'''


def test_events_hooks_metrics_and_hung_gateway(tmp_path, hermes, hermesd_factory, pidfiles):
    root = make_real_root(tmp_path, ("alpha", "beta", "delta"))
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(FREEZE_SITECUSTOMIZE)
    freeze = root / "profiles" / "delta" / "freeze.trigger"  # the gateway removes it: in its home, where it may write
    recorded = tmp_path / "recorded.jsonl"
    hangers = pidfiles.add(tmp_path / "hanging-hook.pids")
    metrics_sock = tmp_path / "metrics.sock"
    (root / "hermesd.yaml").write_text(yaml.safe_dump({
        "command": [str(hermes)],
        "restart": {"initial_delay": 0.5, "max_delay": 4.0, "healthy_after": 3.0, "jitter": 0.0},
        "stop_timeout": 30,
        "hung_after": HUNG_AFTER,
        "profiles": {"default": {"enabled": False},
                     "delta": {"environment": {"PYTHONPATH": str(site), "E2E_FREEZE_LOOP": str(freeze)}}},
        "hooks": [
            {"name": "record", "on": ["exited"], "profiles": ["alpha"], "timeout": 10,
             "command": [sys.executable, "-c", RECORD, str(recorded)]},
            {"name": "hang", "on": ["exited"], "profiles": ["alpha"], "timeout": HOOK_TIMEOUT,
             "command": [sys.executable, "-c", HANG, str(hangers)]},
        ],
        "metrics": {"listen": f"unix:{metrics_sock}"},
    }))
    d = hermesd_factory(root)
    pids = d.wait_running("alpha", "beta", "delta", timeout=90)
    homes = {n: root / "profiles" / n for n in ("alpha", "beta", "gamma", "delta")}

    # 0. delta's event loop is blocked (the process runs on): its heartbeat stops advancing. It is
    # judged in section 2; everything in between runs meanwhile.
    delta_seq = last_seq(d)
    wait_for(lambda: heartbeat_age(homes["delta"], pids["delta"]) is not None, 30, what="delta's first heartbeat")
    freeze.write_text("now\n")
    wait_for(lambda: not freeze.exists(), 5, what="delta's gateway taking the freeze trigger")
    frozen_at, frozen_age = time.time(), heartbeat_age(homes["delta"], pids["delta"])

    # 1. A kill: respawned at once although a hook that hangs runs for that very exit.
    wait_for(lambda: (d.row("alpha")["uptime_s"] or 0) > 3.5, 10, what="alpha past healthy_after")
    seq = last_seq(d)
    got = respawn_after_kill(d.proc.pid, pids["alpha"])
    assert got is not None, "alpha's gateway was not respawned"
    assert got[1] < 1.0, f"respawn took {got[1]:.2f}s with a hanging hook configured"
    killed_at = time.time() - got[1]  # the hooks were queued by that exit, right after the respawn
    hook_pid = wait_for(lambda: hangers.exists() and (p := hangers.read_text().split()) and int(p[0]), 10,
                        what="the hanging hook running")
    wait_for(lambda: not alive(hook_pid), HOOK_TIMEOUT + 3, 0.02, what="the hanging hook killed at its timeout")
    hook_lived = time.time() - killed_at
    assert HOOK_TIMEOUT - 0.3 <= hook_lived <= HOOK_TIMEOUT + 1.5, f"hanging hook ended {hook_lived:.2f}s after exit"
    evs = wait_events(d, "alpha", ["exited", "started", "ready"], seq, 60)
    assert evs[0]["kind"] == "crash" and evs[0]["signal"] in ("SIGKILL", 9) and evs[0]["pid"] == pids["alpha"]
    assert evs[1]["pid"] == evs[2]["pid"] == got[0]
    pids["alpha"] = got[0]
    wait_for(lambda: recorded.exists() and len(recorded.read_text().splitlines()) >= 1, 10, what="record hook ran")

    # 2. A SIGSTOPped gateway, stopped just after a heartbeat: killed as hung and restarted within
    # hung_after + 1 s. Meanwhile, a hold and its release on a third profile.
    wait_for(lambda: (age := heartbeat_age(homes["alpha"], pids["alpha"])) is not None and age < 1.0, 40, 0.05,
             what="a fresh heartbeat of alpha")
    seq = last_seq(d)
    os.kill(pids["alpha"], signal.SIGSTOP)
    stopped_at = time.monotonic()

    scratch = root / "profiles" / ".gamma-scratch"
    scratch.mkdir()
    (scratch / ".env").write_text("this line is not an assignment\n")
    os.chmod(scratch / ".env", 0o600)
    gamma_seq = seq
    scratch.rename(homes["gamma"])  # appears whole: never seen without its broken .env
    held = d.wait_state("gamma", "held", timeout=15)
    assert held["hold"]["kind"] == "config_error" and str(homes["gamma"] / ".env") in held["reason"], held
    (homes["gamma"] / ".env").write_text("# fixed\n")
    gamma = wait_events(d, "gamma", ["held", "released", "started", "ready"], gamma_seq, 90)
    assert gamma[0]["kind"] == gamma[1]["kind"] == "config_error"

    def restarted():
        r = d.row("alpha")
        return r if r["pid"] not in (None, pids["alpha"]) else None

    row = wait_for(restarted, HUNG_AFTER + 5, 0.05, what="alpha restarted after SIGSTOP")
    took_alpha = time.monotonic() - stopped_at
    assert took_alpha <= HUNG_AFTER + 1.0, f"restarted {took_alpha:.1f}s after SIGSTOP (hung_after {HUNG_AFTER})"
    # (A stopped gateway may be caught at any earlier evaluation: state T is hung on sight.)
    evs = wait_events(d, "alpha", ["hung_kill", "exited", "started", "ready"], seq, 60)
    assert evs[0]["pid"] == pids["alpha"] and evs[1]["kind"] == "hung" and evs[2]["pid"] == row["pid"]
    assert not alive(pids["alpha"])
    assert d.row("beta")["pid"] == pids["beta"], "beta's gateway was touched"
    pids["alpha"] = row["pid"]
    # delta: killed when its last heartbeat turned hung_after old, not before; restarted at once
    # (timed from the journal: the test was busy with alpha meanwhile).
    def delta_restarted():
        r = d.row("delta")
        return r if r["pid"] not in (None, pids["delta"]) else None

    row = wait_for(delta_restarted, HUNG_AFTER + 5, 0.05, what="delta restarted after its loop froze")
    evs = wait_events(d, "delta", ["hung_kill", "exited", "started", "ready"], delta_seq, 60)
    assert evs[0]["pid"] == pids["delta"] and evs[0].get("age_s", 0) >= HUNG_AFTER and evs[1]["kind"] == "hung", evs
    assert evs[2]["pid"] == row["pid"]
    took = evs[2]["ts"] - frozen_at
    due = HUNG_AFTER - frozen_age
    assert took <= HUNG_AFTER + 1.0 and due - 1.0 <= took <= due + 1.0, \
        f"delta restarted {took:.1f}s after its loop froze (heartbeat then {frozen_age:.1f}s old; due at {due:.1f}s)"
    assert not alive(pids["delta"])
    assert d.row("beta")["pid"] == pids["beta"], "beta's gateway was touched"
    pids["delta"] = row["pid"]
    print(f"SIGSTOPped alpha restarted after {took_alpha:.1f}s; frozen delta after {took:.1f}s "
          f"(heartbeat {frozen_age:.1f}s old at the freeze, hung_after {HUNG_AFTER:g}s)")
    wait_for(lambda: len(hangers.read_text().split()) >= 2, 10, what="the hanging hook's second run")
    second_hook = int(hangers.read_text().split()[1])
    wait_for(lambda: not alive(second_hook), HOOK_TIMEOUT + 2, what="the second hanging hook killed")

    # 3. An operator stop.
    seq = last_seq(d)
    out = d.cli("stop", "beta")
    assert out.returncode == 0, out
    evs = wait_events(d, "beta", ["stopped", "exited"], seq, 40)
    assert evs[0]["by"] == "operator" and evs[1]["kind"] == "planned" and evs[1]["pid"] == pids["beta"]
    d.wait_state("beta", "stopped", timeout=5)

    # Hooks: the recorder got exactly alpha's two exits, each once, as the journal has them.
    journal = [e for e in events(d) if e.get("daemon") == d.proc.pid]
    alpha_exits = [e for e in journal if e["profile"] == "alpha" and e["type"] == "exited"]
    wait_for(lambda: len(recorded.read_text().splitlines()) >= 2, 10, what="two recorded exits")
    got_hooks = [json.loads(x) for x in recorded.read_text().splitlines()]
    assert [(e["seq"], e["kind"]) for e in got_hooks] == [(e["seq"], e["kind"]) for e in alpha_exits]
    assert [e["kind"] for e in alpha_exits] == ["crash", "hung"]

    # 4. /metrics, parsed by the official parser, agrees with the events.
    code, ctype, body = scrape_unix(str(metrics_sock))
    assert code == 200 and ctype.startswith("text/plain"), (code, ctype)
    s = samples(body)
    journal = [e for e in events(d) if e.get("daemon") == d.proc.pid]

    def count(profile, type_, **match):
        return sum(1 for e in journal if e["profile"] == profile and e["type"] == type_
                   and all(e.get(k) == v for k, v in match.items()))

    def val(name, **labels):
        return s.get((name, tuple(sorted(labels.items()))))

    assert val("hermesd_profile_restarts_total", profile="alpha") == 2 == count("alpha", "exited") \
        == d.row("alpha")["restarts"]
    assert val("hermesd_profile_restarts_total", profile="beta") == 0
    assert val("hermesd_profile_restarts_total", profile="delta") == 1 == count("delta", "exited", kind="hung")
    assert val("hermesd_profile_hung_kills_total", profile="delta") == 1 == count("delta", "hung_kill")
    for kind in ("crash", "hung", "planned"):
        for profile in ("alpha", "beta", "delta"):
            assert val("hermesd_profile_exits_total", profile=profile, kind=kind) == count(profile, "exited", kind=kind)
    assert val("hermesd_profile_starts_total", profile="alpha") == 3 == count("alpha", "started")
    assert val("hermesd_profile_starts_total", profile="gamma") == 1 == count("gamma", "started")
    assert val("hermesd_profile_hung_kills_total", profile="alpha") == 1 == count("alpha", "hung_kill")
    assert val("hermesd_profile_holds_total", profile="gamma", kind="config_error") == 1 == count("gamma", "held")
    for t in ("exited", "started", "hung_kill", "held", "released", "stopped"):
        assert val("hermesd_events_total", type=t) == sum(1 for e in journal if e["type"] == t), t
    assert val("hermesd_hook_runs_total", outcome="timeout") == 2
    assert val("hermesd_hook_runs_total", outcome="ok") == 2
    assert val("hermesd_profile_up", profile="alpha") == 1 and val("hermesd_profile_up", profile="beta") == 0

    # Everything stops; nothing of ours is left.
    assert d.cli("stop", timeout=120).returncode == 0
    assert d.proc.wait(60) == 0
    assert d.close() == []
    assert not [p for p in pidfiles.pids(hangers) if alive(p)]
