"""``kanban: {dispatcher: PROFILE | off}`` with real gateways: the choice holds whatever the start order.

The lock holder is read the way ``status`` reads it (``/proc/locks``) and checked against the
gateway PIDs the daemon reports; the "will not dispatch" decision is read from each gateway's
own log, so a test never concludes "nobody holds the lock" before every gateway has decided.
"""

from __future__ import annotations

import pytest

from supervisor.kanban.dispatch import holder
from tests.kanban.conftest import Board, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.real_gateway]


def test_chosen_dispatcher_holds_the_lock_after_any_start_order(need_hermes: None, boards: list[Board]) -> None:
    b = Board(("p2",), dispatcher="p1")
    boards.append(b)
    b.hermesd.start()
    b.hermesd.wait_running("default", "p2", timeout=90)
    # the others start first and decide first: none of them takes the lock
    wait_for(lambda: b.dispatch_decided("default") and b.dispatch_decided("p2"), 60, what="gateways decided")
    assert holder(b.root) is None
    b.add_profile("p1")  # the chosen one comes last
    p1 = b.hermesd.wait_running("p1", timeout=90)["p1"]
    h = wait_for(lambda: holder(b.root), 60, what="a dispatcher lock holder")
    assert (h.pid, h.profile, h.supervised) == (p1, "p1", True)
    # status reads the same lock (its /proc scan is cached for a quarter of a second)
    rows = wait_for(lambda: (r := b.rows())["p1"]["kanban"]["dispatcher"] and r, 5, what="status: p1 dispatches")
    assert rows["p1"]["kanban"]["dispatcher"] is True and rows["p1"]["kanban"]["dispatcher_pid"] == p1
    assert rows["default"]["kanban"]["dispatcher"] is False and rows["p2"]["kanban"]["dispatcher"] is False
    # restarting the dispatcher: while it is down nobody else takes the lock, then it has it again
    assert b.hermesd.request({"cmd": "restart", "profile": "p1"}, wait=30)["ok"]
    new = wait_for(lambda: (r := b.rows()["p1"])["state"] == "running" and r["pid"] != p1 and r["pid"], 90,
                   what="p1 running again")
    h = wait_for(lambda: (x := holder(b.root)) is not None and x.pid == new and x, 60, what="p1 holding again")
    assert h.profile == "p1"


def test_off_means_no_gateway_dispatches(need_hermes: None, boards: list[Board]) -> None:
    b = Board(("p1", "p2"), dispatcher="off")
    boards.append(b)
    b.hermesd.start()
    b.hermesd.wait_running("default", "p1", "p2", timeout=90)
    wait_for(lambda: all(b.dispatch_decided(n) for n in ("default", "p1", "p2")), 60, what="gateways decided")
    assert holder(b.root) is None
    assert not any(r["kanban"]["dispatcher"] for r in b.rows().values())


def test_default_profile_dispatches_under_confinement_by_default(need_hermes: None, boards: list[Board]) -> None:
    """hermesd.yaml's defaults (dispatcher: default, isolation: auto): the confined default gateway
    claims a task for p2 and hands the worker to hermesd, which runs it as p2."""
    b = Board(("p2",), dispatcher="default",
              chat='echo "worker-ran-as-$HERMES_PROFILE:$HERMES_HOME:$HERMESD_KANBAN_WORKER"; exit 0')
    boards.append(b)
    b.hermesd.start()
    pids = b.hermesd.wait_running("default", "p2", timeout=90)
    assert b.rows()["default"]["isolation"]["enforced"]
    wait_for(lambda: (h := holder(b.root)) is not None and h.pid == pids["default"], 60, what="default dispatching")
    task = b.create_task("p2")

    def ran() -> bool:
        return any(f"worker-ran-as-p2:{b.home('p2')}:p2" in p.read_text(errors="replace")
                   for p in (b.root / "kanban").rglob(f"{task}.log"))

    wait_for(ran, 60, what="p2's worker output in the task log")
