"""Every key of hermesd.yaml, declared once: where it may stand, what it accepts, its default, whether a
change restarts the gateways it applies to, and its line in docs/settings.md.

:data:`SETTINGS` is the one list. The config reader takes its known keys and its parsers from it,
the defaults of the settings types (:class:`Limits`, :class:`HungSettings`,
:class:`IsolationSettings`, the restart policy, the journal, :class:`~supervisor.config.Config`)
are read from it, the daemon's spec digest (which edits restart a gateway) covers the parts its
rows name, and ``scripts/docs_settings.py`` writes docs/settings.md from it (checked by
``tests/test_docs.py``). A number's range is its :class:`~profiles.numbers.Bound`, declared in
:mod:`profiles.numbers` with the bounds of the profiles' files.

The parsers take values YAML has already constructed plus the dotted key they came from, and raise
:class:`SettingError` naming that key; the config reader, which knows the YAML nodes, prefixes
``file:line``. YAML quirks handled on purpose: ``yes``/``on`` arrive as ``bool`` (an ``int``
subclass) and are refused as numbers; ``.nan``/``.inf`` are outside every range; ``1e9`` without a
dot arrives as a string; ``0x10`` and ``1_000`` arrive as ints and are fine.

Here, not in the limits or isolation packages, so that reading hermesd.yaml (``status`` and
``exec`` do) loads no mechanism: the limits package costs them 30-40 ms (measured).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import PurePosixPath
from typing import Any, NamedTuple

from profiles import numbers as n
from profiles.numbers import Bound
from profiles.printable import printable


class SettingError(ValueError):
    """A hermesd.yaml value is wrong. ``str()`` is ``"<key>: <problem>"``; ``.key`` may name a child
    of the key the parser was given (``profiles.coder.limits.memory_max`` for ``profiles.coder.limits``)."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"{key}: {problem}")
        self.key = key
        self.problem = problem


def _describe(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


# ----------------------------------------------------------------------------- parsers by type

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
# 512M, 512 M, 1.5G, 2GiB, 2Gi, 2GB, 512m, 4096 (bytes). Binary units, as systemd's MemoryMax=.
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*(?:([KMGT])(?:IB|I|B)?|B)?", re.IGNORECASE)
_SIZE_HINT = "expected a size like 512M, 2G or a number of bytes, or max; got "
MODES = ("auto", "off", "required")
_USER_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _whole(value: object) -> object:
    """``4.0`` as ``4``: YAML gives a float for a whole number written with a dot."""
    return int(value) if isinstance(value, float) and math.isfinite(value) and value == int(value) else value


def parse_number(value: object, key: str, bound: Bound) -> float:
    if not bound.holds(value):
        raise SettingError(key, bound.refusal(value))
    return float(value)  # type: ignore[arg-type]


def parse_count(value: object, key: str, bound: Bound) -> int:
    if not isinstance(value, int) or not bound.holds(value):
        raise SettingError(key, bound.refusal(value, whole=True))
    return value


def parse_seconds_or_off(value: object, key: str, bound: Bound) -> float | None:
    if value is None:
        return None
    if not bound.holds(value):
        raise SettingError(key, f"expected {bound.expected()}, or null to turn it off; got {_describe(value)}")
    return float(value)  # type: ignore[arg-type]


def parse_size(value: object, key: str, bound: Bound = n.MEMORY_MAX) -> int | None:
    """Bytes as an int, ``None`` for ``max``/``null``.

    A whole number of bytes, or ``<number><unit>`` with K, M, G or T (binary, 1024-based, as systemd
    and PM2 read them; ``Mi``/``MiB``/``MB`` and lower case are read the same). Anything below the
    bound's 1 MiB is refused with a hint (``memory_max: 512`` is 512 bytes: surely ``512M`` was meant).
    """
    if value is None or (isinstance(value, str) and value.strip().lower() == "max"):
        return None
    if isinstance(value, str):
        text = value.strip()
        m = _SIZE.fullmatch(text)
        if text.startswith("-"):
            raise SettingError(key, f"must not be negative, got {_describe(value)}")
        if m is None:
            raise SettingError(key, _SIZE_HINT + _describe(value))
        number, unit = m.group(1), (m.group(2) or "").upper()
        # Exact for "1.5G": integer arithmetic on the decimal digits, no float rounding.
        whole, _, frac = number.partition(".")
        if frac and not unit:
            raise SettingError(key, f"expected a whole number of bytes, got {_describe(value)}")
        scale = _UNITS[unit]
        size = int(whole) * scale + (int(frac) * scale) // (10 ** len(frac)) if frac else int(whole) * scale
    elif _is_number(value):
        if isinstance(value, float):
            if not math.isfinite(value):
                raise SettingError(key, f"expected a size, got {_describe(value)}")
            if value != int(value):
                raise SettingError(key, f"expected a whole number of bytes, got {_describe(value)}")
        size = int(value)  # type: ignore[call-overload]
    else:
        raise SettingError(key, _SIZE_HINT + _describe(value))
    if size < 0:
        raise SettingError(key, f"must not be negative, got {_describe(value)}")
    if size < bound.low:
        hint = f" (did you mean {value}M?)" if _is_number(value) and size > 0 else ""
        raise SettingError(key, f"{format_size(size)} is below the 1M minimum{hint}")
    if size > bound.high:
        raise SettingError(key, f"{_describe(value)} is over 1 EiB; write max for no limit")
    return size


def parse_tasks(value: object, key: str, bound: Bound = n.TASKS_MAX) -> int | None:
    """A whole number >= 1 (threads of the whole tree), ``None`` for ``max``/``null``."""
    if value is None or (isinstance(value, str) and value.strip().lower() == "max"):
        return None
    value = _whole(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise SettingError(key, f"expected a whole number of tasks (threads) or max, got {_describe(value)}")
    if value < 1:
        raise SettingError(key, f"expected a whole number >= 1, got {_describe(value)}")
    if not bound.holds(value):
        raise SettingError(key, f"{_describe(value)} is over the kernel's {bound.high} tasks; write max for no limit")
    return value


def parse_weight(value: object, key: str, bound: Bound = n.CPU_WEIGHT) -> int | None:
    """A whole number in ``bound`` (cgroup v2 ``cpu.weight``; 100 is the default share)."""
    if value is None:
        return None
    value = _whole(value)
    if not isinstance(value, int) or not bound.holds(value):
        raise SettingError(key, f"expected a whole number from {bound.low} to {bound.high} (default 100), "
                                f"got {_describe(value)}")
    return value


def parse_bool(value: object, key: str, bound: Bound | None = None) -> bool:
    if not isinstance(value, bool):
        raise SettingError(key, f"expected true or false, got {printable(repr(value), 40)}")
    return value


def parse_mode(value: object, key: str, bound: Bound | None = None) -> str:
    if value is False:  # YAML 1.1: a bare `off` is the boolean false
        return "off"
    if isinstance(value, str) and value.strip().lower() in MODES:
        return value.strip().lower()
    raise SettingError(key, f"expected one of {', '.join(MODES)}, got {printable(repr(value), 40)}")


def parse_paths(value: object, key: str, bound: Bound | None = None) -> tuple[str, ...]:
    """Absolute or ``~/`` paths (expanded later, against the gateway's HOME, never this process's)."""
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list):
        raise SettingError(key, "expected a path or a list of paths")
    for i, item in enumerate(items):
        if not isinstance(item, str) or not (item.startswith("/") or item.startswith("~/") or item == "~"):
            raise SettingError(f"{key}[{i}]", f"expected an absolute path or one starting with ~/, got {item!r}")
        if "\0" in item or any(part == ".." for part in PurePosixPath(item).parts):
            raise SettingError(f"{key}[{i}]", f"'..' and NUL are not allowed in {item!r}")
    return tuple(items)


def parse_user(value: object, key: str, bound: Bound = n.USER_ID) -> str | None:
    if value is None:
        return None
    if isinstance(value, int) and bound.holds(value):
        return str(value)
    if isinstance(value, str) and value and set(value) <= _USER_CHARS and not value.startswith("-"):
        return value
    raise SettingError(key, f"expected an account name or uid, got {printable(repr(value), 40)}")


# ----------------------------------------------------------------------------- the declaration

TOP = "top"
BOTH = "top, profiles.NAME"
LIMIT = "top, profiles.NAME, kanban.worker_limits"
OWN = "profiles.NAME"


class Setting(NamedTuple):
    """One key. ``parse`` is None where the config reader reads the key itself (a command, an
    environment, the hooks list: shapes, not values); ``restarts`` names the part of a profile's
    settings in force (:class:`supervisor.daemon.effective.Effective`) that carries a change to the
    gateway, which then restarts; empty: a change restarts no gateway."""

    key: str  # dotted, as written at the top level
    scope: str  # TOP, BOTH, LIMIT or OWN
    default: Any
    doc: str
    parse: Callable[[Any, str, Any], Any] | None = None  # (value, dotted key, bound) -> the setting
    bound: Bound | None = None
    restarts: str = ""
    accepts: str = ""  # what the docs say is accepted, before the bound's range (default: a number)

    def read(self, value: object, key: str) -> Any:
        assert self.parse is not None
        return self.parse(value, key, self.bound)


SETTINGS: tuple[Setting, ...] = (
    Setting("command", TOP, None, "the gateway command; null: `hermes` on PATH, then this Python's hermes_cli. A "
            "new command is new code: `hermesd upgrade` rolls it out, an edit restarts nothing",
            accepts="a string or a list of strings"),
    Setting("restart.initial_delay", TOP, 1.0, "seconds before the first restart after a crash; multiplied by "
            "`factor` per consecutive failure", parse_number, n.INITIAL_DELAY),
    Setting("restart.max_delay", TOP, 300.0, "the cap of that delay", parse_number, n.MAX_DELAY),
    Setting("restart.factor", TOP, 2.0, "the delay's growth per failure", parse_number, n.FACTOR),
    Setting("restart.jitter", TOP, 0.1, "± this share of each delay, at random", parse_number, n.JITTER),
    Setting("restart.healthy_after", TOP, 60.0, "a run this long resets the backoff", parse_number, n.HEALTHY_AFTER),
    Setting("stop_timeout", BOTH, None, "seconds from SIGTERM to SIGKILL; null (top level only): upstream's "
            "max(60, drain + 30) per profile", parse_number, n.STOP_TIMEOUT),
    Setting("logs.max_bytes", TOP, 10 << 20, "each gateway's output file is rotated (copy-truncate) at this size",
            parse_count, n.LOG_MAX_BYTES),
    Setting("logs.backups", TOP, 5, "rotated copies kept per profile", parse_count, n.LOG_BACKUPS),
    Setting("environment", BOTH, {}, "extra environment of the gateway (a profile's over the top level's); "
            "platform variables and hermesd's own are refused", restarts="environment",
            accepts="a mapping of names to strings"),
    Setting("max_starting", TOP, None, "gateways starting at once; null: the CPU cores", parse_count, n.MAX_STARTING),
    Setting("isolation.mode", BOTH, "auto", "confinement: the strongest this machine offers, none, or the "
            "strongest and never unconfined; `isolation: off` sets only this key", parse_mode,
            restarts="isolation", accepts=" \\| ".join(MODES)),
    Setting("isolation.kanban", BOTH, True, "keep the shared kanban board (<root>/kanban/, kanban.db)", parse_bool,
            restarts="isolation"),
    Setting("isolation.shared_auth", BOTH, True, "keep <root>/shared/ (Nous auth shared by every profile)",
            parse_bool, restarts="isolation"),
    Setting("isolation.root_auth", BOTH, False, "named profiles may read the root's auth.json (read-only)",
            parse_bool, restarts="isolation"),
    Setting("isolation.user", BOTH, None, "hermesd as root: run the profile as this account", parse_user, n.USER_ID,
            restarts="isolation", accepts="an account name, or a uid"),
    Setting("isolation.read_only", BOTH, (), "extra paths the profile may read but not change", parse_paths,
            restarts="isolation", accepts="absolute or ~/ paths"),
    Setting("isolation.hide", BOTH, (), "extra paths the profile may not see at all", parse_paths,
            restarts="isolation", accepts="absolute or ~/ paths"),
    Setting("isolation.writable", BOTH, (), "extra paths the profile may change (everything else is read-only)",
            parse_paths, restarts="isolation", accepts="absolute or ~/ paths"),
    Setting("limits.memory_max", LIMIT, None, "RAM and swap of the whole tree; max or null: no limit",
            parse_size, n.MEMORY_MAX, restarts="limits", accepts="max, or a size like 512M or 2G"),
    Setting("limits.tasks_max", LIMIT, None, "threads of the whole tree; max or null: no limit", parse_tasks,
            n.TASKS_MAX, restarts="limits", accepts="max, or a whole number"),
    Setting("limits.cpu_weight", LIMIT, None, "the tree's CPU share (100: the default); null: not set",
            parse_weight, n.CPU_WEIGHT, restarts="limits", accepts="a whole number"),
    # Four heartbeat periods: three missed beats plus the one in flight.
    Setting("hung_after", BOTH, 120.0, "seconds a running gateway's heartbeat may age before it is killed; "
            "null: no hung detection", parse_seconds_or_off, n.HUNG_AFTER, accepts="null, or a number"),
    # Upstream writes its first heartbeat only once ``running``, after connecting every platform in
    # turn, each for up to 30 s (``_PLATFORM_CONNECT_TIMEOUT_SECS_DEFAULT``); 300 s covers eight.
    Setting("startup_grace", BOTH, 300.0, "seconds a new gateway has to write its first heartbeat; null: "
            "unbounded", parse_seconds_or_off, n.STARTUP_GRACE, accepts="null, or a number"),
    Setting("events.max_bytes", TOP, 1 << 20, "size of one event journal file", parse_count, n.EVENTS_MAX_BYTES),
    Setting("events.backups", TOP, 9, "older journal files kept", parse_count, n.EVENTS_BACKUPS),
    Setting("hooks", TOP, (), "commands run on events (`on`, `command`, `timeout`, `after_failures`, "
            "`profiles`; see [Hooks](operations.md#hooks))", accepts="a list of mappings"),
    Setting("metrics.listen", TOP, None, "serve /metrics here; null: no listener", accepts="HOST:PORT, a port, "
            "or unix:/absolute/path"),
    Setting("metrics.allow_public", TOP, False, "allow a `listen` address that is not loopback", parse_bool),
    Setting("kanban.dispatcher", TOP, "default", "the profile whose gateway runs upstream's kanban dispatcher, "
            "or off (it is part of the gateways' environment)", restarts="environment",
            accepts="a profile name or off"),
    Setting("kanban.workers_per_profile", TOP, 4, "kanban workers one assignee runs at once", parse_count,
            n.KANBAN_WORKERS),
    Setting("kanban.requests_per_minute", TOP, 60, "hand-off requests one dispatcher may make a minute",
            parse_count, n.KANBAN_RATE),
    Setting("enabled", OWN, True, "false: hermesd does not run the profile", parse_bool),
)
"""In the order docs/settings.md lists them. ``kanban.worker_limits`` takes the ``limits.*`` keys."""

BY_KEY: Mapping[str, Setting] = {s.key: s for s in SETTINGS}
# The parts of a profile's settings in force whose change restarts its gateway (the spec digest).
RESTARTING: tuple[str, ...] = tuple(sorted({s.restarts for s in SETTINGS if s.restarts}))


def default(key: str) -> Any:
    return BY_KEY[key].default


def under(section: str) -> dict[str, Setting]:
    """The keys of one section (``limits``), by their name in it, in declaration order."""
    return {s.key[len(section) + 1:]: s for s in SETTINGS if s.key.startswith(section + ".")}


def top_keys() -> set[str]:
    return {s.key.partition(".")[0] for s in SETTINGS if s.scope != OWN} | {"profiles"}


def profile_keys() -> set[str]:
    return {s.key.partition(".")[0] for s in SETTINGS if s.scope != TOP}


def parse_section(section: str, value: Mapping[Any, Any], key: str) -> dict[str, Any]:
    """One mapping of ``section``'s keys (a ``limits:`` or ``isolation:`` mapping), each parsed."""
    rows = under(section)
    out: dict[str, Any] = {}
    for name, item in value.items():
        if name not in rows:
            raise SettingError(f"{key}.{name}", f"unknown key (known keys: {', '.join(rows)})")
        out[name] = rows[name].read(item, f"{key}.{name}")
    return out


# ----------------------------------------------------------------------------- limits

LIMIT_KEYS = tuple(under("limits"))


@dataclass(frozen=True, slots=True)
class Limits:
    """The limits in force for one profile; ``None`` means no limit of that kind."""

    memory_max: int | None = default("limits.memory_max")  # bytes, RAM and swap together, whole tree
    tasks_max: int | None = default("limits.tasks_max")  # threads, as cgroup v2 pids.max counts them, whole tree
    cpu_weight: int | None = default("limits.cpu_weight")  # 1..10000, cgroup v2 cpu.weight (100 = default share)

    @property
    def empty(self) -> bool:
        return all(v is None for v in self.as_dict().values())

    def as_dict(self) -> dict[str, int | None]:
        """For ``status --json`` (``limits`` in force)."""
        return {k: getattr(self, k) for k in LIMIT_KEYS}


@dataclass(frozen=True, slots=True)
class LimitsSpec:
    """One ``limits:`` mapping as written: ``values`` holds the keys present (a present key whose value
    is ``None`` means "explicitly no limit", which beats the top-level value)."""

    values: tuple[tuple[str, int | None], ...] = ()


def parse_limits(value: object, key: str = "limits") -> LimitsSpec:
    """One ``limits:`` mapping (top level, a profile's, or ``kanban.worker_limits``). ``None`` (an
    empty ``limits:``) sets nothing."""
    if value is None:
        return LimitsSpec()
    if not isinstance(value, Mapping):
        raise SettingError(key, f"expected a mapping with {', '.join(LIMIT_KEYS)}; got {_describe(value)}")
    return LimitsSpec(tuple(parse_section("limits", value, key).items()))


def merge_limits(*levels: LimitsSpec | None) -> Limits:
    """The limits in force: each level's keys over the ones before it."""
    return Limits(**{k: v for level in levels if level is not None for k, v in level.values})


def format_size(n: int | None) -> str:
    """``512M``, ``1.5G``, ``max``: for messages and status, the way the user writes sizes."""
    if n is None:
        return "max"
    for unit in ("T", "G", "M", "K"):
        scale = _UNITS[unit]
        if n >= scale:
            value = n / scale
            return f"{value:.0f}{unit}" if value == int(value) else f"{value:.1f}{unit}"
    return f"{n}B"


@dataclass(frozen=True, slots=True)
class HungSettings:
    """Hung detection for one profile. ``hung_after`` ``None``: off. ``startup_grace`` ``None``:
    a gateway may take forever to write its first heartbeat (only ``T`` state is then judged)."""

    hung_after: float | None = default("hung_after")
    startup_grace: float | None = default("startup_grace")


# ----------------------------------------------------------------------------- isolation


@dataclass(frozen=True, slots=True)
class IsolationSettings:
    """One profile's isolation settings in force (the defaults keep every upstream feature working
    except the root ``auth.json`` fallback, which the trust-domain guarantee closes)."""

    mode: str = default("isolation.mode")
    kanban: bool = default("isolation.kanban")
    shared_auth: bool = default("isolation.shared_auth")
    root_auth: bool = default("isolation.root_auth")
    user: str | None = default("isolation.user")
    read_only: tuple[str, ...] = default("isolation.read_only")
    hide: tuple[str, ...] = default("isolation.hide")
    writable: tuple[str, ...] = default("isolation.writable")  # beyond the home, the channels, the private /tmp


@dataclass(frozen=True, slots=True)
class IsolationPartial:
    """The keys one ``isolation`` value set, for key-by-key merging."""

    values: tuple[tuple[str, Any], ...]


def parse_isolation(value: object, key: str = "isolation") -> IsolationPartial:
    """One ``isolation`` value: a mode (``auto``, ``off``, ``required``; YAML's bare ``off`` is false)
    or a mapping of the ``isolation.*`` keys."""
    if value is None:
        return IsolationPartial(())
    if not isinstance(value, Mapping):
        return IsolationPartial((("mode", parse_mode(value, key)),))
    return IsolationPartial(tuple(parse_section("isolation", value, key).items()))


def merge_isolation(*levels: IsolationPartial | None) -> IsolationSettings:
    """The settings in force: the defaults, then each level's keys (a bare mode overrides only ``mode``)."""
    return replace(IsolationSettings(), **{k: v for level in levels if level is not None for k, v in level.values})
