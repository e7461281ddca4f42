"""One run: a side started fresh, every profile warmed, steady load, one fault in the victim (or none),
and the figures of the run.

The run, on its own clock (``time.monotonic()``):

1. start the side and wait until every profile has answered once (``cold_start_s`` per profile,
   from the side's start);
2. load every profile (:class:`tests.traffic.load.Load`) for ``settle`` seconds;
3. inject the fault (a tool-run fault takes effect when the stub hands the victim's agent the
   command: that moment is the fault's time); a repaired fault is repaired ``hold`` seconds later;
4. keep the load going until the victim has answered again and ``tail`` seconds more, every request
   it was sent since the fault (but the last ``tail`` seconds') has its outcome (at least
   ``min_window``, at most ``max_window`` after the fault);
5. stop the load, undo what is left of the fault, close the side (everything killed by PID).

Without a fault the window is ``min_window`` long and, on a side that can restart one profile
(hermesd), the victim is then restarted on purpose under the same load: its own cold start
(``restart_cold_s``: from the new gateway's spawn to its first right answer).

Figures: ``others``, the untouched profiles' requests sent during the window
(:func:`tests.traffic.stats.summary`); ``victim``, its outage (:func:`tests.traffic.stats.recovery`);
``phases`` after a fault that replaced the victim's gateway (:mod:`tests.traffic.phases`).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tests.traffic.faults import Context, Fault, clean_up
from tests.traffic.llm import LLMStub
from tests.traffic.load import Load, Record, ask
from tests.traffic.phases import Watcher, breakdown
from tests.traffic.sides import Side
from tests.traffic.stats import in_window, recovery, summary


@dataclass(frozen=True)
class Plan:
    victim: str
    period: float = 2.0  # seconds between two requests to one profile
    timeout: float = 30.0  # a request not answered by then is a timeout
    settle: float = 8.0  # load before the fault
    hold: float = 40.0  # how long a repaired fault lasts: longer than a request waits
    min_window: float = 30.0
    max_window: float = 120.0
    tail: float = 6.0  # load after the victim answered again
    warm_timeout: float = 240.0


def _wait(seconds: float) -> None:
    threading.Event().wait(max(0.0, seconds))


def warm(side: Side, since: float, timeout: float, period: float = 0.5) -> dict[str, float]:
    """Ask every profile (in parallel) until it answers right; seconds from ``since`` per profile."""
    out: dict[str, float] = {}
    errors: dict[str, str] = {}

    def one(ep: Any) -> None:
        deadline = since + timeout
        last = ""
        while time.monotonic() < deadline:
            outcome, detail = ask(ep, f"warm {ep.profile}", min(60.0, max(1.0, deadline - time.monotonic())))
            if outcome == "ok":
                out[ep.profile] = time.monotonic() - since
                return
            last = f"{outcome} {detail}".strip()
            _wait(period)
        errors[ep.profile] = last

    threads = [threading.Thread(target=one, args=(ep,), daemon=True) for ep in side.endpoints]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError(f"{side.name}: never answered within {timeout:g}s: {errors}")
    return out


def tool_time(stub: LLMStub, victim: str, since: float) -> float | None:
    """When the stub handed the victim's agent the armed command."""
    return next((c.at for c in stub.calls(victim, since) if c.kind == "tool_call"), None)


def watch_window(load: Load, victim: str, since: Callable[[], float | None], start: float, plan: Plan,
                 repair: Callable[[], None] | None = None) -> tuple[float, float | None]:
    """Keep the load going until the victim is back (see the module docstring); (end, repair time)."""
    repaired: float | None = None
    while True:
        _wait(0.25)
        now = time.monotonic()
        if repair is not None and repaired is None and now >= start + plan.hold:
            repair()
            repaired = time.monotonic()
        if now >= start + plan.max_window:
            return now, repaired
        if now < start + plan.min_window or (repair is not None and repaired is None):
            continue
        ref = since()
        if ref is None:
            continue  # the fault has not happened yet (a tool nobody has been asked to run)
        # Back: a right answer after the last failure, ``tail`` ago, and every request sent since the
        # fault until then has its outcome (a hung request is a failure still to come).
        back = recovery(load.records(), victim, ref)["back_s"]
        if back is not None and now >= ref + back + plan.tail and \
                not [at for at in load.pending(victim) if ref <= at <= now - plan.tail]:
            return now, repaired


def run(side: Side, fault: Fault | None, stub: LLMStub, plan: Plan, scripts: Path,
        log: Callable[[str], None] = print) -> dict[str, Any]:
    """One run (see the module docstring); returns its figures. ``side`` is closed at the end."""
    others = [e.profile for e in side.endpoints if e.profile != plan.victim]
    result: dict[str, Any] = {"side": side.name, "fault": fault.name if fault else None, "setup": side.describe(),
                              "victim": plan.victim, "others": others, "load_before": os.getloadavg()}
    ctx = Context(side, plan.victim, stub, scripts)
    load: Load | None = None
    watcher: Watcher | None = None
    try:
        t0 = time.monotonic()
        side.start()
        result["cold_start_s"] = warm(side, t0, plan.warm_timeout)
        log(f"  {side.name}: every profile answered ({_fmt(result['cold_start_s'])})")
        load = Load(side.endpoints, plan.period, plan.timeout).start()
        _wait(plan.settle)
        port = next(e.port for e in side.endpoints if e.profile == plan.victim)
        old_pid = side.gateway_pid(plan.victim)
        t_fault = time.monotonic()
        if fault is None:
            end = t_fault + plan.min_window
            _wait(end - time.monotonic())
            load.settle(end)
            records = load.records()
            result["window"] = _window(records, others, plan.victim, t_fault, end, t_fault)
            result["records"] = _rows(records, t_fault)
            result["restart_cold_s"] = _restart_cold(side, load, plan, port)
            return result
        watcher = Watcher(lambda: side.gateway_pid(plan.victim), side.gateway_home(plan.victim), port, old_pid).start()
        fault.inject(ctx)
        effective: Callable[[], float | None] = (
            (lambda: tool_time(stub, plan.victim, t_fault)) if fault.via_tool else (lambda: t_fault))
        repair = (lambda: fault.repair(ctx)) if fault.repair is not None else None  # type: ignore[misc]
        end, repaired = watch_window(load, plan.victim, effective, t_fault, plan, repair)
        load.stop()
        marks = watcher.stop()
        start = effective()
        records = load.records()
        result["window"] = _window(records, others, plan.victim, t_fault, end, start)
        result["records"] = _rows(records, t_fault)
        result["fault_at_s"] = None if start is None else start - t_fault
        result["repaired_at_s"] = None if repaired is None else repaired - t_fault
        if start is not None:
            result["phases"] = _phases(marks, stub, plan.victim, records, start)
            result["replaced"] = "spawned" in marks
        return result
    finally:
        if load is not None:
            load.stop(wait=False)
        if watcher is not None:
            watcher.stop()
        clean_up(ctx)
        result["leftovers_killed"] = side.close()
        result["load_after"] = os.getloadavg()


def _window(records: list[Record], others: list[str], victim: str, start: float, end: float,
            fault: float | None) -> dict[str, Any]:
    win = in_window(records, others, start, end)
    out: dict[str, Any] = {"seconds": end - start, "others": summary(win),
                           "victim_requests": summary(in_window(records, [victim], start, end))}
    if fault is not None:
        out["victim"] = recovery([r for r in records if r.start < end], victim, fault)
    return out


def _rows(records: list[Record], t0: float) -> list[list[Any]]:
    """Every request, for the JSON: profile, sent (s after the fault), latency, outcome, detail."""
    return [[r.profile, round(r.start - t0, 3), round(r.latency, 3), r.outcome, r.detail] for r in records]


def _phases(marks: dict[str, float], stub: LLMStub, victim: str, records: list[Record], fault: float) -> dict[str, Any]:
    full: dict[str, float | None] = {"fault": fault, **marks}
    spawned = marks.get("spawned")
    if spawned is not None:
        full.update(stub.contacts(victim, spawned))
    again = recovery(records, victim, fault)["again_s"]
    full["first_answer"] = None if again is None else fault + again
    return breakdown(full)


def _restart_cold(side: Side, load: Load, plan: Plan, port: int) -> float | None:
    """Restart the victim on purpose, under load: from its new gateway's spawn to its first right answer
    (None on a side that cannot restart one profile)."""
    old = side.gateway_pid(plan.victim)
    watcher = Watcher(lambda: side.gateway_pid(plan.victim), side.gateway_home(plan.victim), port, old).start()
    if not side.restart(plan.victim):
        watcher.stop()
        return None
    deadline = time.monotonic() + plan.max_window
    spawned: float | None = None
    while time.monotonic() < deadline:
        _wait(0.25)
        spawned = watcher.seen.get("spawned")
        if spawned is None:
            continue
        done = [r.start + r.latency for r in load.records(spawned) if r.profile == plan.victim and r.outcome == "ok"]
        if done:
            watcher.stop()
            return min(done) - spawned
    watcher.stop()
    return None


def cold_start(side: Side, stub: LLMStub, profile: str, timeout: float = 240.0) -> dict[str, Any]:
    """One profile started alone, no load: ONE request sent the moment its port opens, and where the
    time from the start to its answer went (``fault`` in the breakdown is the start). ``side`` is
    closed at the end."""
    ep = next(e for e in side.endpoints if e.profile == profile)
    t0 = time.monotonic()
    watcher = Watcher(lambda: side.gateway_pid(profile), side.gateway_home(profile), ep.port, None).start()
    try:
        side.start()
        deadline = t0 + timeout
        while "port_open" not in watcher.seen and time.monotonic() < deadline:
            _wait(0.02)
        outcome, detail = ask(ep, "cold start", max(1.0, deadline - time.monotonic()))
        done = time.monotonic()
        marks: dict[str, float | None] = {"fault": t0, **watcher.stop()}
        spawned = marks.get("spawned")
        if spawned is not None:
            marks.update(stub.contacts(profile, spawned))
        marks["first_answer"] = done if outcome == "ok" else None
        return {"side": side.name, "outcome": outcome, "detail": detail, **breakdown(marks)}
    finally:
        watcher.stop()
        side.close()


def _fmt(cold: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.1f}s" for k, v in sorted(cold.items()))


def plan_dict(plan: Plan) -> dict[str, Any]:
    return asdict(plan)
