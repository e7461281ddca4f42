"""The planner's vocabulary: what it knows about each profile, and the actions it asks the loop for.

Plain data. The planner (:mod:`supervisor.plan.planner`) owns instances of :class:`Profile` and
returns lists of actions; the loop (:mod:`supervisor.daemon.loop`) performs them and reports back.
Actions name processes only by :class:`Ident` of a child the planner holds, so the loop can refuse
to signal anything it has not verified and pinned.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from profiles.snapshot import Claim, ProfileFacts
    from supervisor.hermes.codeid import CodeId
    from supervisor.plan.policy import ExitKind
    from supervisor.plan.verdict import Hold


@dataclass(frozen=True, slots=True)
class Ident:
    """A process as hermesd knows it: the pair that survives PID reuse (start time in clock ticks)."""

    pid: int
    start_time: int


@dataclass(slots=True)
class Child:
    """The gateway process currently serving a profile."""

    ident: Ident
    own: bool  # our child (its exit status can be waited for) or adopted after a hermesd restart
    started: float  # monotonic
    started_wall: float
    spec: str  # digest of what it was started with: files, settings (not the command: see daemon/effective.py)
    claims: tuple[Claim, ...] = ()  # the credentials and ports it was started with
    stop_requested: bool = False
    then_restart: bool = False
    stop_reason: str = ""  # why hermesd stopped it (operator, a config change, a removed folder…), for its exit event
    ready: bool = False  # the gateway has reported "running" (or its start-up slot timed out)
    killed_for: ExitKind | None = None  # hermesd killed it on purpose (hung, over a limit)
    kill_detail: str = ""
    output_discarded: bool = False  # started while the log file system was full
    # The hermes-agent code installed when it was started (None: not known, e.g. adopted from an
    # older hermesd); never part of ``spec``: new code on disk must not restart anything by itself.
    code: CodeId | None = None


@dataclass(slots=True)
class Profile:
    """Desired and actual state of one profile."""

    name: str
    home: Path
    present: bool = True
    facts: ProfileFacts | None = None  # None until the files have been read once
    down: str | None = None  # sticky: the operator (or an outside stop) put it down
    runtime_hold: Hold | None = None  # seen at run time: startup_failed, foreign gateway
    hold: Hold | None = None  # the hold in force (runtime, root-wide or judged from files)
    child: Child | None = None
    spawning: bool = False  # a Spawn action is out and not answered yet
    failures: int = 0
    restarts: int = 0
    last_exit: dict[str, Any] | None = None
    retry_at: float | None = None  # monotonic
    retry_at_wall: float | None = None
    queued: bool = False  # wants to start, waiting for a start-up slot
    foreign_pid: int | None = None
    last_start_problem: str | None = None  # why the last spawn failed, for status
    # What its gateway holds (the claims it was started with) while it runs or is between two runs;
    # None once it stops for good, when a held profile may take them.
    kept: tuple[Claim, ...] | None = None
    pending: Hold | None = None  # its files changed, but a restart into them would be held
    # Each platform's (state, error code, error message) as its gateway last reported them: an event per change.
    platform_states: dict[str, tuple[Any, ...]] = field(default_factory=dict)


# ----------------------------------------------------------------------------- actions


@dataclass(frozen=True, slots=True)
class Spawn:
    """Start the profile's gateway; the loop answers with spawned(), spawn_failed() or foreign()."""

    name: str
    spec: str


@dataclass(frozen=True, slots=True)
class Signal:
    """Send ``signal`` to the child ``ident``; ``planned`` writes upstream's planned-stop marker first."""

    name: str
    ident: Ident
    signal: int
    planned: bool = False


@dataclass(frozen=True, slots=True)
class KillTree:
    """SIGKILL the child ``ident`` and everything of the profile (its group, escaped descendants)."""

    name: str
    ident: Ident


@dataclass(frozen=True, slots=True)
class Release:
    """Stop waiting for the child ``ident``: SIGKILLed ``KILL_WAIT`` seconds ago, it has not ended
    (uninterruptible sleep, a frozen cgroup). Its pin is dropped; its pending SIGKILL ends it the
    moment it wakes, before it runs another instruction of its own."""

    name: str
    ident: Ident


@dataclass(frozen=True, slots=True)
class Sweep:
    """Kill what is left of a profile's previous gateway (processes tagged with it, except the child)."""

    name: str


@dataclass(frozen=True, slots=True)
class Schedule:
    """Call the planner's ``timer(name, timer)`` after ``delay`` seconds, replacing a pending one."""

    name: str
    timer: str  # "retry" | "kill" | "release" | "start_slot"
    delay: float


@dataclass(frozen=True, slots=True)
class Cancel:
    name: str
    timer: str


@dataclass(frozen=True, slots=True)
class WatchForeign:
    """Tell the planner (``foreign_gone``) when the foreign gateway ``pid`` exits."""

    name: str
    pid: int


@dataclass(frozen=True, slots=True)
class Save:
    """Persist the planner's memory (restart counts, operator stops, child identities)."""


@dataclass(frozen=True, slots=True)
class Emit:
    """An event for the journal, hooks and metrics (see docs/operations.md, event history)."""

    event: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Finish:
    """Shutdown is complete: every child is gone (or is to be left running)."""


Action = Spawn | Signal | KillTree | Release | Sweep | Schedule | Cancel | WatchForeign | Save | Emit | Finish
