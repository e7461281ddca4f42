"""The gateway contract of every hermes-agent release, as measured by running each one.

Every row below was measured by ``tests/releases/test_contract.py`` against that release installed
from the package index (``scripts/test-releases.sh``, which also prints the per-release results),
offline, with no platform configured, in the environment hermesd gives its children. Nothing here
comes from a changelog. Pure data and pure functions: no file, no process, no clock.

API (for the daemon, doctor and status; the version itself comes from
``supervisor.hermes_release.detect_version``, once per daemon start and again when the gateway
command changes)::

    contract_for(version: str) -> Contract | Unsupported
        Contract: how to run and read that release (``gateway_args``, which files and exit codes
        to expect). ``contract.exact`` is False for a release newer than any measured one: it gets
        the newest measured contract (see ``newer_than_known_note``). Unsupported: the release is
        older than OLDEST_SUPPORTED; ``message`` is the one line doctor and status show (hold every
        profile with it; never spawn, so never a crash loop).
    OLDEST_SUPPORTED, NEWEST_KNOWN: version strings.
    KNOWN: every measured release, oldest first, supported or not (for tables and tests).
    parse_version(text) -> Version | None; interpreter_from_script(head: bytes) -> list[str] | None.
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
the platform retrying), no respawn-storm breaker.
"""

from __future__ import annotations

import enum
import re
import shlex
from dataclasses import dataclass, replace

from profiles.upstream.bools import is_truthy_value

GATEWAY_RUN = ("gateway", "run")
EXTERNAL_SUPERVISOR_FLAG = "--external-supervisor"


class Multiplexing(enum.Enum):
    """How a release treats ``multiplex_profiles`` (one gateway serving several profiles)."""

    ABSENT = "absent"  # no such feature: a gateway serves its own profile only
    CONFIG_ONLY = "config_only"  # top-level ``multiplex_profiles: true`` turns it on; no environment override
    ENV_OVERRIDE = "env_override"  # GATEWAY_MULTIPLEX_PROFILES (hermesd sets "false") beats config.yaml


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
    exact: bool = True  # False: a newer release given the newest measured contract

    @property
    def gateway_args(self) -> tuple[str, ...]:
        """What follows ``hermes [-p NAME]`` in the child's command line."""
        return (*GATEWAY_RUN, EXTERNAL_SUPERVISOR_FLAG) if self.external_supervisor_flag else GATEWAY_RUN


# Shared by every measured release (each checked by the contract tests, listed here once):
# gateway.pid is one JSON line {pid, kind: "hermes-gateway", argv, start_time = /proc stat field 22};
# gateway.lock exists; gateway_state.json has the keys below; "running" is reached offline with no
# platform in under 1.5 s; SIGTERM after the planned-stop marker exits 0 with state "stopped";
# SIGTERM without it exits 1; ``-p NAME`` with HERMES_HOME=<root>/profiles/NAME (or <root>) runs
# <root>/profiles/NAME; ``-p default`` keeps the default child on the root whatever active_profile says.
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
        marker_polled=polled, heartbeat=heartbeat, heartbeat_interval_s=30.0 if heartbeat else None,
        s6_pins_default=s6, respawn_storm_breaker=storm, multiplexing=mux, lazy_installs_env=True,
    )


_OLD = {"supported": False, "unmarked": "stopped", "s6": False, "mux": Multiplexing.ABSENT}
_NO_SPLIT_MUX = {"supported": False, "mux": Multiplexing.CONFIG_ONLY}

KNOWN: tuple[Contract, ...] = (
    _release("0.13.0", **_OLD, polled=False, port=1),  # port in use: exit 1, state startup_failed
    _release("0.14.0", **_OLD, polled=False),
    _release("0.15.0", **_OLD),
    _release("0.15.1", **_OLD),
    _release("0.15.2", **_OLD),
    _release("0.16.0", **_OLD),
    _release("0.17.0", **_NO_SPLIT_MUX),
    _release("0.18.0", **_NO_SPLIT_MUX),
    _release("0.18.1", fatal=78),
    _release("0.18.2", fatal=78),
    _release("0.19.0", fatal=78, port=78, flag=True, heartbeat=True, storm=True),
)

OLDEST_SUPPORTED = "0.18.1"
NEWEST_KNOWN = KNOWN[-1].release

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


def contract_for(version: str) -> Contract | Unsupported:
    """The contract hermesd follows for this installed release (see the module docstring)."""
    parsed = parse_version(version)
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
    best = next(c for c in reversed(KNOWN) if _parse(c.release) <= parsed)
    if Version(parsed.release, _FINAL) > _parse(NEWEST_KNOWN):
        return replace(best, exact=False)  # 0.19.0.post1 or 0.19.0+local stay exact; 0.20.0rc1 does not
    return best


def _parse(version: str) -> Version:
    """A version string this module itself declares (always valid)."""
    parsed = parse_version(version)
    if parsed is None:  # pragma: no cover - a typo in the tables above
        raise ValueError(version)
    return parsed


def newer_than_known_note(version: str) -> str:
    """The warning for ``contract.exact is False`` (doctor: warning, not error; status: a footnote)."""
    return (f"hermes-agent {version} is newer than {NEWEST_KNOWN}, the newest release hermesd was checked "
            f"against; running it with {NEWEST_KNOWN}'s contract (check it with scripts/test-releases.sh {version})")


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
        "0.22", "named", "gateway.standalone", True,
        "from 0.22 a named profile's own gateway exits 78 ('does not get a gateway of its own') and the "
        "default profile's gateway serves it instead, unless its own config.yaml says gateway.standalone: true",
    ),
    NeededSetting(
        "0.22", "default", "gateway.auto_multiplex_migration", False,
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
