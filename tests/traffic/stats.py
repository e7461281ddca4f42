"""What the load generator's records say, as figures: pure functions, no clock, no I/O.

- :func:`summary`: for a set of profiles over a window, how many requests were answered right and
  how long the right answers took (p50, p99: nearest rank, so p99 of under 100 requests is the
  slowest one; a failed request counts in the success rate, never in the latencies).
- :func:`recovery`: for the victim, in seconds from a reference moment (the fault): when it first
  failed, when it answered again (``again``: the first right answer that ended after its first
  failed request began) and when it was back for good (``back``: the first right answer that ended
  after its last failed request began; a gateway swamped by the requests that queued while it was
  down can answer one and fail the next). ``None`` when that did not happen in the window;
  ``down`` False when it never failed at all (both are then 0).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from typing import Any

from tests.traffic.load import Record


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (``q`` in 0..100) of ``values``; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def in_window(records: Iterable[Record], profiles: Iterable[str], start: float, end: float) -> list[Record]:
    """The requests of ``profiles`` sent within [start, end)."""
    names = set(profiles)
    return [r for r in records if r.profile in names and start <= r.start < end]


def summary(records: list[Record]) -> dict[str, Any]:
    ok = [r.latency for r in records if r.outcome == "ok"]
    n = len(records)
    return {
        "requests": n,
        "ok": len(ok),
        "success": len(ok) / n if n else None,
        "p50_s": percentile(ok, 50),
        "p99_s": percentile(ok, 99),
        "outcomes": dict(Counter(r.outcome for r in records)),
    }


def recovery(records: list[Record], profile: str, since: float) -> dict[str, Any]:
    """The victim's outage after ``since`` (see the module docstring); times in seconds from ``since``."""
    mine = sorted((r for r in records if r.profile == profile and r.start >= since), key=lambda r: r.start)
    failed = [r for r in mine if r.outcome != "ok"]
    if not failed:
        answered = 0.0 if any(r.outcome == "ok" for r in mine) else None
        return {"down": False, "first_failure_s": None, "last_failure_s": None, "again_s": answered,
                "back_s": answered, "failed": 0, "answered": len(mine)}

    def first_end_after(t: float) -> float | None:
        ends = [r.start + r.latency for r in mine if r.outcome == "ok" and r.start + r.latency > t]
        return None if not ends else min(ends) - since

    return {
        "down": True,
        "first_failure_s": failed[0].start - since,
        "last_failure_s": failed[-1].start - since,
        "again_s": first_end_after(failed[0].start),
        "back_s": first_end_after(failed[-1].start),
        "failed": len(failed),
        "answered": len(mine) - len(failed),
    }


def ratio(value: float | None, reference: float | None) -> float | None:
    if value is None or reference is None or reference <= 0:
        return None
    return value / reference
