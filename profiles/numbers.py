"""Every number hermesd reads from a file it does not own, and the range it accepts there.

A number is hostile input like any other field: ``agent.restart_drain_timeout: 1e12`` in a
profile's config.yaml made hermesd wait 10¹² s before it killed a gateway that ignored SIGTERM,
so ``hermesd stop`` never returned, and the exports wrote a 301-digit ``TimeoutStopSec`` (issue
33). Each bound is declared once here, by name; the code that reads the number applies it, the
daemon and the exports read through that same code, and the table in docs/guide.md is checked
against :data:`BOUNDS` (``tests/profiles/test_numbers.py``).

What happens outside the range depends on whose file it is:

* a profile's file (an upstream key, which upstream itself accepts at any value, or a file a
  gateway writes): the number is *clamped* into the range, or *ignored* (read as absent) where
  no nearby value means anything (a port of 70000, a PID of 0). The profile still runs; ``doctor``
  names a clamped value.
* hermesd.yaml (the operator's): the value is *refused*, naming file, line and key, like any
  other mistake there; a running daemon keeps its last good settings.

NaN fails every comparison, so it is below every range here; infinity is above every one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Bound:
    """One number's accepted range, where it is read and why its ends are where they are."""

    key: str  # as the table in docs/guide.md shows it
    file: str
    low: float
    high: float
    unit: str  # "s", "bytes" or "" (a count)
    outside: str  # "refused" (hermesd.yaml), "clamped" or "ignored" (a profile's or a gateway's file)
    why: str  # why the upper end is where it is

    def holds(self, value: object) -> bool:
        """Whether ``value`` is a number (not a bool) in the range; NaN is not."""
        return (isinstance(value, int | float) and not isinstance(value, bool)
                and self.low <= value <= self.high)

    def clamp(self, value: float) -> float:
        """``value`` moved into the range: NaN and anything below to ``low``, anything above
        (infinity too) to ``high``."""
        if math.isnan(value) or value < self.low:
            return float(self.low)
        return float(min(value, self.high))

    def expected(self, whole: bool = False) -> str:
        """What a refusal says was expected."""
        return f"{'a whole number' if whole else 'a number'} from {self.span()}"

    def refusal(self, value: object, whole: bool = False) -> str:
        """Why ``value`` is refused, showing at most 40 characters of it (never 301 digits)."""
        text = repr(value)
        return f"expected {self.expected(whole)}, got {text if len(text) <= 40 else text[:37] + '...'}"

    def row(self) -> str:
        """This bound's row of the table in docs/guide.md."""
        return f"| {self.key} | {self.file} | {self.span().replace(' to ', ' – ')} | {self.outside} | {self.why} |"

    def span(self) -> str:
        """``1 MiB to 1 EiB``, ``0 to 3,600 s``: the range as the docs and messages show it."""
        low, high = _number(self.low, self.unit), _number(self.high, self.unit)
        return f"{low} to {high}{' s' if self.unit == 's' else ''}"


def _number(value: float, unit: str) -> str:
    if value != int(value):
        return f"{value:g}"
    n = int(value)
    if unit == "bytes":
        for size, suffix in ((1 << 60, " EiB"), (1 << 30, " GiB"), (1 << 20, " MiB")):
            if n >= size and n % size == 0:
                return f"{n // size:,}{suffix}"
        return f"{n:,} bytes"
    return f"{n:,}"


# --------------------------------------------------------------------------- a profile's files

DRAIN = Bound(
    "`agent.restart_drain_timeout`", "config.yaml", 0, 1800, "s",
    "clamped", "upstream's own default limit of one agent turn (`agent.gateway_timeout`): a longer drain waits "
    "for no turn, while every stop, restart and export of the profile would wait it out",
)
PORT = Bound(
    "a platform's port (`port`, `webhook_port`, `*_PORT`)", "config.yaml, .env", 0, 65535, "",
    "ignored", "a TCP port; 0 asks for any free one, which nobody claims; outside it upstream cannot listen, so "
    "the profile claims no port",
)
PID = Bound(
    "`pid`", "gateway.pid, gateway_state.json, state/gateway.heartbeat", 1, (1 << 22) - 1, "",
    "ignored", "the kernel's `PID_MAX_LIMIT`: no process has a larger PID",
)
START_TIME = Bound(
    "`start_time`", "gateway.pid, gateway_state.json", 0, (1 << 63) - 1, "",
    "ignored", "clock ticks since boot, as `/proc/PID/stat` field 22 holds them (a signed 64-bit count)",
)

# --------------------------------------------------------------------------- hermesd.yaml

STOP_TIMEOUT = Bound(
    "`stop_timeout`", "hermesd.yaml (top level, `profiles.NAME.`)", 0.1, 3600, "s", "refused",
    "an hour: longer than any stop a profile's own drain can ask for (1,830 s)",
)
INITIAL_DELAY = Bound("`restart.initial_delay`", "hermesd.yaml", 0, 3600, "s", "refused",
                      "an hour before the first restart after a crash")
MAX_DELAY = Bound("`restart.max_delay`", "hermesd.yaml", 0, 86400, "s", "refused",
                  "a day between two restarts of a crash loop")
FACTOR = Bound("`restart.factor`", "hermesd.yaml", 1, 100, "", "refused",
               "the cap is reached within a few failures at any factor")
JITTER = Bound("`restart.jitter`", "hermesd.yaml", 0, 0.99, "", "refused",
               "a fraction of the delay (0.1 = ±10 %); 1 would allow no delay at all")
HEALTHY_AFTER = Bound("`restart.healthy_after`", "hermesd.yaml", 0, 86400, "s", "refused",
                      "a day up before a crash counts as a fresh one")
LOG_MAX_BYTES = Bound("`logs.max_bytes`", "hermesd.yaml", 4096, 1 << 30, "bytes", "refused",
                      "a gateway log is rotated by copying it: 1 GiB per copy")
LOG_BACKUPS = Bound("`logs.backups`", "hermesd.yaml", 0, 1000, "", "refused", "rotated copies kept per profile")
MAX_STARTING = Bound("`max_starting`", "hermesd.yaml", 1, 1000, "", "refused", "gateways starting at once")
KANBAN_WORKERS = Bound("`kanban.workers_per_profile`", "hermesd.yaml", 1, 1000, "", "refused",
                       "kanban workers of one assignee at once")
KANBAN_RATE = Bound("`kanban.requests_per_minute`", "hermesd.yaml", 1, 60000, "", "refused",
                    "hand-off requests a minute from the dispatcher (1,000 a second)")
HUNG_AFTER = Bound("`hung_after`", "hermesd.yaml (top level, `profiles.NAME.`)", 0.1, 86400, "s", "refused",
                   "a day without a heartbeat; `null` turns hung detection off")
STARTUP_GRACE = Bound("`startup_grace`", "hermesd.yaml (top level, `profiles.NAME.`)", 0.1, 86400, "s", "refused",
                      "a day to write the first heartbeat; `null` waits forever")
MEMORY_MAX = Bound("`limits.memory_max`", "hermesd.yaml (also `kanban.worker_limits.`)", 1 << 20, 1 << 60, "bytes",
                   "refused", "below 1 MiB nothing runs (`512` surely meant `512M`); above 1 EiB is a typo: "
                   "`max` says no limit")
TASKS_MAX = Bound("`limits.tasks_max`", "hermesd.yaml (also `kanban.worker_limits.`)", 1, 1 << 22, "",
                  "refused", "the kernel's `PID_MAX_LIMIT`: more tasks cannot exist; `max` says no limit")
CPU_WEIGHT = Bound("`limits.cpu_weight`", "hermesd.yaml (also `kanban.worker_limits.`)", 1, 10000, "", "refused",
                   "cgroup v2's `cpu.weight` range (100 is the default share)")
EVENTS_MAX_BYTES = Bound("`events.max_bytes`", "hermesd.yaml", 4096, 1 << 30, "bytes", "refused",
                         "one event journal file")
EVENTS_BACKUPS = Bound("`events.backups`", "hermesd.yaml", 0, 1000, "", "refused", "older journal files kept")
HOOK_TIMEOUT = Bound("`hooks[].timeout`", "hermesd.yaml", 0.001, 3600, "s", "refused",
                     "an hour for one hook command before it is killed")
HOOK_AFTER_FAILURES = Bound("`hooks[].after_failures`", "hermesd.yaml", 1, 1_000_000, "", "refused",
                            "consecutive failures before a backoff hook fires")
METRICS_PORT = Bound("`metrics.listen` (its port)", "hermesd.yaml", 1, 65535, "", "refused", "a TCP port")
USER_ID = Bound("`isolation.user` (a uid)", "hermesd.yaml", 1, (1 << 32) - 2, "", "refused",
                "the largest uid the kernel gives out (2³² − 1 means none)")

BOUNDS: tuple[Bound, ...] = (
    DRAIN, PORT, PID, START_TIME,
    STOP_TIMEOUT, INITIAL_DELAY, MAX_DELAY, FACTOR, JITTER, HEALTHY_AFTER, LOG_MAX_BYTES, LOG_BACKUPS,
    MAX_STARTING, KANBAN_WORKERS, KANBAN_RATE, HUNG_AFTER, STARTUP_GRACE, MEMORY_MAX, TASKS_MAX, CPU_WEIGHT,
    EVENTS_MAX_BYTES, EVENTS_BACKUPS, HOOK_TIMEOUT, HOOK_AFTER_FAILURES, METRICS_PORT, USER_ID,
)


def table() -> str:
    """The table of docs/guide.md, from :data:`BOUNDS`."""
    head = "| number | read from | accepted | outside it | why the upper end |\n|---|---|---|---|---|"
    return "\n".join([head, *(b.row() for b in BOUNDS)])
