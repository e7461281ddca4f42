"""Issue 34 with real gateways: while one profile's gateway is killed, then hung, the other profile's
users are answered every time, and the victim answers again on its own.

hermesd supervises two real 0.19.0 gateways (``calm`` and ``victim``), each serving upstream's
API-server platform on a port of its own with its model at the LLM stub; the load generator asks
both every 2 s. The victim's gateway is SIGKILLed, and once it answers again, SIGSTOPped: hermesd's
hung detection (``hung_after`` 35 s, the shortest upstream's 30 s heartbeat allows) finds it stopped at
its next check, kills it and starts it again. Every request ``calm`` was sent meanwhile must be answered
right; the victim must answer again within generous deadlines (the benchmark,
``tests/benchmarks/serving.py``, measures how long it really takes).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from tests.harness import wait_for
from tests.traffic.llm import LLMStub
from tests.traffic.load import Load, first_ok
from tests.traffic.scenario import warm
from tests.traffic.sides import HERMESD_SETTINGS, HermesdSide

pytestmark = [pytest.mark.slow, pytest.mark.real_gateway]

HERMES = Path(os.environ.get("HERMESD_TEST_HERMES") or Path(sys.executable).parent / "hermes")
HUNG_AFTER = 35
BACK_AFTER_KILL_S = 90  # generous: a cold start here is ~10 s alone, 20-30 s on a loaded machine
BACK_AFTER_HANG_S = HUNG_AFTER + 90


def test_the_other_profile_answers_through_a_kill_and_a_hang(tmp_path):
    stub = LLMStub(("calm", "victim"))
    side = HermesdSide(tmp_path / "side", ("calm", "victim"), stub.url, HERMES,
                       settings={**HERMESD_SETTINGS, "hung_after": HUNG_AFTER})
    load: Load | None = None
    stopped: list[int] = []
    try:
        t0 = time.monotonic()
        side.start()
        warm(side, t0, 180)
        load = Load(side.endpoints, period=2.0, timeout=30).start()

        # 1. SIGKILL: hermesd starts it again at once; the first answer waits for upstream's start-up.
        killed = side.gateway_pid("victim")
        assert killed is not None
        t_kill = time.monotonic()
        os.kill(killed, signal.SIGKILL)
        back = wait_for(lambda: first_ok(load.records(), "victim", t_kill), BACK_AFTER_KILL_S,
                        interval=0.2, what="the victim answering after its SIGKILL")
        after_kill = back.start + back.latency - t_kill

        # 2. SIGSTOP: hung; found at hermesd's next check, killed and started again.
        frozen = side.gateway_pid("victim")
        assert frozen is not None and frozen != killed
        t_stop = time.monotonic()
        os.kill(frozen, signal.SIGSTOP)
        stopped.append(frozen)
        back = wait_for(lambda: first_ok(load.records(), "victim", t_stop), BACK_AFTER_HANG_S,
                        interval=0.2, what="the victim answering after its SIGSTOP")
        after_hang = back.start + back.latency - t_stop
        records = load.stop()
        load = None

        calm = [r for r in records if r.profile == "calm" and r.start >= t_kill]
        assert len(calm) >= 10, calm
        assert [r for r in calm if r.outcome != "ok"] == [], "calm failed while the victim was down"
        victim_down = [r for r in records if r.profile == "victim" and r.start >= t_kill and r.outcome != "ok"]
        assert victim_down, "the victim never failed: the faults did not happen"
        row = side.daemon.row("victim")
        assert row["last_exit"]["kind"] == "hung" and row["pid"] not in (killed, frozen), row
        assert side.gateway_pid("victim") == row["pid"]
        print(f"calm: {len(calm)} of {len(calm)} answered; victim back {after_kill:.1f}s after the SIGKILL, "
              f"{after_hang:.1f}s after the SIGSTOP; the whole test {time.monotonic() - t0:.0f}s")
    finally:
        if load is not None:
            load.stop(wait=False)
        for pid in stopped:  # hermesd killed it; if not, it must not stay stopped
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        leftovers = side.close()
        stub.close()
    assert leftovers == []
