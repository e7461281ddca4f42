"""The gateway process as upstream defines it: command line, environment, exit codes, states, stops,
and the start time that, with the PID, names one process (as upstream records it in ``gateway.pid``).

Every fact was measured on hermes-agent 0.19.0 (see ``upstream-contract.md``). hermesd's daemon,
its exports, its doctor and its alias scripts all build on these declarations; none restates them.
What hermesd adds of its own (environment tags, scrubbing, the command it resolves) lives in
``supervisor.processes.childspec``.
"""

from __future__ import annotations

import contextlib
import enum
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from profiles.numbers import DRAIN
from profiles.upstream.bools import coerce_bool, multiplex_override
from profiles.upstream.lines import RuleLine

DEFAULT_PROFILE = "default"

# ``hermes [-p NAME] gateway run --external-supervisor``. The flag stops in-chat /restart and
# ``hermes update`` from launching detached restarters that escape the supervisor. Never
# ``--replace``: a supervisor that replaced on every start would take turns with any other starter.
GATEWAY_ARGS = ("gateway", "run", "--external-supervisor")


def profile_args(profile: str) -> list[str]:
    """How a command names its profile: nothing for the root, ``-p NAME`` otherwise.

    Upstream attributes a process to a profile by its command line; a named gateway started with
    ``HERMES_HOME`` alone is taken for the default profile's (and ``hermes gateway stop`` run
    there would kill it).
    """
    return [] if profile == DEFAULT_PROFILE else ["-p", profile]


# hermes_cli.main._apply_profile_override: the value flags it steps over while looking for -p.
_VALUE_FLAGS = frozenset({"-z", "--oneshot", "-m", "--model", "--provider", "-t", "--toolsets", "-r", "--resume",
                          "-s", "--skills", "--usage-file"})
_OPTIONAL_VALUE_FLAGS = frozenset({"-c", "--continue"})


def profile_in_argv(argv: list[str] | tuple[str, ...]) -> str | None:
    """The profile a ``hermes`` command line names with ``-p``/``--profile`` (upstream's pre-parse), or None.

    ``argv`` is the command after the program (``hermes`` or ``python -m hermes_cli.main``). A value
    that is not a profile id (``-p no:xdist``) names nothing, as upstream decides.
    """
    args = list(argv)
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            return None
        if arg in ("--profile", "-p") and i + 1 < len(args):
            name = args[i + 1]
            return name if upstream_profile_id(name) else None
        if arg.startswith("--profile="):
            return arg.split("=", 1)[1]
        takes_value = arg in _VALUE_FLAGS or (
            arg in _OPTIONAL_VALUE_FLAGS and i + 1 < len(args) and not args[i + 1].startswith("-"))
        i += 2 if takes_value and i + 1 < len(args) else 1
    return None


# hermes_cli.gateway.gateway_command: the verbs that run the gateway in the same process ("restart"
# stops the running one, then calls run_gateway() itself; a bare "hermes gateway" is "run").
GATEWAY_IN_PROCESS_VERBS = frozenset({"run", "restart"})


def runs_gateway(argv: list[str] | tuple[str, ...]) -> bool:
    """Whether a ``hermes`` command line runs a gateway in its own process (what ``gateway.pid`` records)."""
    args = list(argv)
    for i, arg in enumerate(args):
        if arg == "gateway":
            after = args[i + 1] if i + 1 < len(args) else None
            return after is None or after.startswith("-") or after in GATEWAY_IN_PROCESS_VERBS
    return False


def upstream_profile_id(name: str) -> bool:
    """Upstream's ``_PROFILE_ID_RE``: ``[a-z0-9][a-z0-9_-]{0,63}``."""
    return 0 < len(name) <= 64 and name[0] in _ID_FIRST and all(c in _ID_REST for c in name)


_ID_FIRST = frozenset("abcdefghijklmnopqrstuvwxyz0123456789")
_ID_REST = _ID_FIRST | {"_", "-"}


def hermes_command(profile: str) -> str:
    """The command a person types for ``profile`` (``hermes`` or ``hermes -p NAME``), for messages."""
    return " ".join(["hermes", *profile_args(profile)])


class Exit(enum.IntEnum):
    """Exit codes with a meaning beyond "it ended"."""

    RESTART = 75  # EX_TEMPFAIL: restart requested (/restart, hermes update, SIGUSR1): restart now
    CONFIG = 78  # EX_CONFIG: fatal configuration: do not restart until the configuration changes


class GatewayState(enum.StrEnum):
    """``gateway_state`` in ``gateway_state.json``."""

    STARTING = "starting"
    RUNNING = "running"
    DEGRADED = "degraded"  # transient
    DRAINING = "draining"
    STOPPED = "stopped"
    STARTUP_FAILED = "startup_failed"


# upstream's DEFAULT_HEARTBEAT_INTERVAL_S (gateway/shutdown_watchdog.py): how often a running gateway
# rewrites state/gateway.heartbeat, on every release that beats (``releases.Contract.heartbeat``).
HEARTBEAT_INTERVAL_S = 30.0


class PlatformState(enum.StrEnum):
    """A platform's ``state`` under ``platforms`` in ``gateway_state.json`` (``gateway/run.py`` and
    ``gateway/platforms/base.py`` write them)."""

    CONNECTING = "connecting"
    CONNECTED = "connected"
    RETRYING = "retrying"  # the reconnect watcher tries again, at its backoff cap forever
    FATAL = "fatal"  # not retryable: dropped from the reconnect queue until the operator acts
    PAUSED = "paused"  # ``/platform pause``: no retry until ``/platform resume``
    DISABLED = "disabled"
    DISCONNECTED = "disconnected"


# A platform whose exclusive credential another gateway holds stays ``retrying`` with the error code
# ``<lock scope>_lock`` (``telegram-bot-token_lock``), and the gateway still reports ``running``.
LOCK_ERROR_SUFFIX = "_lock"


def is_lock_error(error_code: object) -> bool:
    """Whether a platform's ``error_code`` says another gateway holds its credential's lock."""
    return isinstance(error_code, str) and error_code.endswith(LOCK_ERROR_SUFFIX)


def stop_timeout(drain_seconds: float) -> float:
    """Upstream's own service stop timeout: ``max(60, drain + 30)`` seconds."""
    return max(60.0, drain_seconds + 30.0)


def profile_drain_seconds(env: Mapping[str, str], config: Mapping[str, Any]) -> float:
    """The drain timeout a gateway with this environment and config.yaml uses.

    ``gateway/run.py`` exports ``agent.restart_drain_timeout`` into HERMES_RESTART_DRAIN_TIMEOUT at
    import whenever config.yaml has the key, over whatever ``.env`` said; without the key the
    variable (from ``.env``, ``.op.env`` or a top-level scalar of config.yaml) decides.
    """
    agent = config.get("agent")
    if isinstance(agent, Mapping) and "restart_drain_timeout" in agent:
        return drain_seconds(config)
    return drain_seconds({"agent": {"restart_drain_timeout": env.get("HERMES_RESTART_DRAIN_TIMEOUT", "").strip()}})


def drain_seconds(config: Mapping[str, Any]) -> float:
    """``agent.restart_drain_timeout`` from a parsed ``config.yaml``, as upstream reads it (absent, not
    a number or below 0: 0), within :data:`profiles.numbers.DRAIN` (upstream waits any time; hermesd
    waits at most the bound, so that a profile cannot make a stop last forever)."""
    return DRAIN.clamp(drain_as_written(config))


def drain_as_written(config: Mapping[str, Any]) -> float:
    """``agent.restart_drain_timeout`` as upstream's ``parse_restart_drain_timeout`` reads it: a number
    (or its text), 0 when absent or not one, never below 0; unbounded, NaN read as 0."""
    agent = config.get("agent")
    value = agent.get("restart_drain_timeout", 0) if isinstance(agent, Mapping) else 0
    if isinstance(value, bool):  # upstream parses its text, "True": not a number
        return 0.0
    try:
        seconds = float(value or 0)
    except OverflowError:  # an integer past float's range: upstream parses its digits as infinity
        seconds = math.inf if value > 0 else 0.0
    except (TypeError, ValueError):
        return 0.0
    return 0.0 if math.isnan(seconds) else max(0.0, seconds)


# The three variables that decide where upstream keeps its per-user credential locks: every
# gateway must agree on them, or the cross-profile lock protection silently stops working.
LOCK_VARIABLES = ("HOME", "XDG_STATE_HOME", "HERMES_GATEWAY_LOCK_DIR")


def lock_dir(env: Mapping[str, str], *, cwd: str = "/", relative_state_ignored: bool = False) -> str:
    """Where upstream keeps credential locks for a process with this environment, as an absolute path.

    ``gateway/status.py`` ``_get_lock_dir``: a non-empty HERMES_GATEWAY_LOCK_DIR, else
    XDG_STATE_HOME whenever it is set (empty or relative included: then relative to the gateway's
    working folder ``cwd``), else ``$HOME/.local/state``; then ``hermes/gateway-locks``. The
    multiplex-default line ignores an XDG_STATE_HOME that is not absolute, as the XDG specification
    says (``relative_state_ignored``, :attr:`profiles.upstream.lines.RuleLine.relative_state_home_ignored`).
    """
    if env.get("HERMES_GATEWAY_LOCK_DIR"):
        folder = Path(env["HERMES_GATEWAY_LOCK_DIR"])
    else:
        home = Path(env["HOME"]) if "HOME" in env else Path.home()
        state = env.get("XDG_STATE_HOME")
        if state is None or (relative_state_ignored and not Path(state).is_absolute()):
            state_folder = home / ".local" / "state"
        else:
            state_folder = Path(state)
        folder = state_folder / "hermes" / "gateway-locks"
    return os.path.normpath(Path(cwd) / folder)


# ----------------------------------------------------------------------------- fixed environment


@dataclass(frozen=True, slots=True)
class FixedVariable:
    """A variable every supervised gateway gets, with the behaviour upstream derives from it.

    ``effect(env, config, line)`` is upstream's own reading: ``env`` is the gateway's environment
    (a variable may be missing), ``config`` the profile's parsed config.yaml (for variables that fall
    back to it), ``line`` the release's rules. ``also``: other variables the same behaviour reads (a
    lazy-install target re-enables what HERMES_DISABLE_LAZY_INSTALLS turned off). Two environments
    mean the same to upstream exactly when the effects are equal, which is how a profile's files
    (``.env`` is loaded with override, so it beats hermesd) are judged.
    """

    name: str
    value: str
    effect: Callable[[Mapping[str, str], Mapping[str, Any], RuleLine], object]
    why: str
    also: tuple[str, ...] = ()


def config_multiplex(config: Mapping[str, Any]) -> bool:
    """``multiplex_profiles`` as upstream reads config.yaml: top-level key first, then ``gateway.``."""
    if "multiplex_profiles" in config:
        return coerce_bool(config["multiplex_profiles"], False)
    gateway = config.get("gateway")
    return coerce_bool(gateway.get("multiplex_profiles"), False) if isinstance(gateway, Mapping) else False


def _multiplex_effect(value: str | None, config: Mapping[str, Any]) -> bool:
    override = multiplex_override(value)
    return config_multiplex(config) if override is None else override


def _storm_breaker_on(value: str | None, config: Mapping[str, Any]) -> bool:
    # hermes_cli/gateway.py: int(os.getenv("HERMES_GATEWAY_MAX_STARTS")) overrides
    # gateway.respawn_storm.max_starts (default 5); unparseable values keep the config's.
    configured = 5
    gateway = config.get("gateway")
    storm = gateway.get("respawn_storm") if isinstance(gateway, Mapping) else None
    if isinstance(storm, Mapping) and isinstance(storm.get("max_starts"), int):
        configured = storm["max_starts"]
    if value is not None:
        with contextlib.suppress(ValueError):
            configured = int(value)
    return configured > 0


FIXED_VARIABLES: tuple[FixedVariable, ...] = (
    FixedVariable(
        "HERMES_S6_SUPERVISED_CHILD", "1",
        lambda env, _c, _l: bool(env.get("HERMES_S6_SUPERVISED_CHILD")),  # os.environ.get(...): any non-empty value
        "without it a sticky active_profile turns the default child into another profile's gateway, and "
        "/restart behaves as if no supervisor were there",
    ),
    FixedVariable(
        "HERMES_GATEWAY_MAX_STARTS", "0", lambda env, c, _l: _storm_breaker_on(env.get("HERMES_GATEWAY_MAX_STARTS"), c),
        "upstream's respawn-storm breaker would otherwise sleep up to 300 s before writing any PID file",
    ),
    FixedVariable(
        "GATEWAY_MULTIPLEX_PROFILES", "false",
        lambda env, c, _l: _multiplex_effect(env.get("GATEWAY_MULTIPLEX_PROFILES"), c),
        "a multiplexing child would serve every profile and poll their tokens a second time",
    ),
    FixedVariable(
        "HERMES_DISABLE_LAZY_INSTALLS", "1", lambda env, c, line: line.lazy_installs(env, c),
        "concurrent gateways would pip-install platform libraries into one shared environment",
        also=("HERMES_LAZY_INSTALL_TARGET",),
    ),
)
FIXED_ENV: dict[str, str] = {v.name: v.value for v in FIXED_VARIABLES}


@dataclass(frozen=True, slots=True)
class Override:
    """A fixed variable whose behaviour a profile's files change: which of their settings do, and where."""

    variable: FixedVariable
    names: tuple[str, ...]  # the profile's settings that change it
    source: str  # the file that sets them (the first one's)

    @property
    def name(self) -> str:
        return ", ".join(self.names)

    @property
    def why(self) -> str:
        return self.variable.why


def env_overrides(gateway: Mapping[str, str], sources: Mapping[str, str], config: Mapping[str, Any],
                  line: RuleLine) -> list[Override]:
    """The fixed variables whose behaviour a profile's files change.

    ``gateway``: the gateway's environment (hermesd's fixed values with the profile's files over
    them); ``sources``: for each variable the profile's files set, which file did. A variable counts
    when the behaviour differs from what hermesd's own values give (``HERMES_S6_SUPERVISED_CHILD=true``
    changes nothing and is not listed; ``HERMES_DISABLE_LAZY_INSTALLS=true`` is on releases that
    compare with ``"1"``, and a HERMES_LAZY_INSTALL_TARGET is where it re-enables installs).
    """
    out = []
    for v in FIXED_VARIABLES:
        names = tuple(n for n in (v.name, *v.also) if n in sources)
        if not names:
            continue
        intended = {k: val for k, val in gateway.items() if k not in names} | {v.name: v.value}
        if v.effect(gateway, config, line) != v.effect(intended, config, line):
            out.append(Override(v, names, sources[names[0]]))
    return out


def proc_start_time(pid: int) -> int | None:
    """Field 22 of ``/proc/<pid>/stat`` (clock ticks since boot), as upstream records it.

    ``None`` when the process does not exist or is a zombie.

    The command name (field 2) may contain spaces and parentheses, so fields are counted
    from the last ``)``.
    """
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    try:
        after = raw[raw.rindex(b")") + 2 :].split()
        # after[0] is field 3 (state); field 22 is after[19].
        if after[0] in (b"Z", b"X"):
            return None  # dead, merely not reaped yet: no longer the process anyone meant
        return int(after[19])
    except (ValueError, IndexError):
        return None
