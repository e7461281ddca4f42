"""``limits``, ``hung_after`` and ``startup_grace`` in hermesd.yaml: values in, validated settings out.

These functions take values that YAML has already constructed (``int``, ``float``, ``str``,
``None``, ``bool``, ``dict``) plus the dotted key they came from, and raise
:class:`LimitsConfigError` (a ``ValueError``) whose message starts with that key. The config
reader, which knows YAML nodes and line numbers, catches it and prefixes ``file:line``; ``.key``
says which node the message is about (it may be a child of the key passed in, e.g.
``profiles.coder.limits.memory_max`` when the caller passed ``profiles.coder.limits``).

YAML quirks handled on purpose: ``yes``/``on`` arrive as ``bool`` (an ``int`` subclass) and are
refused; ``.nan``/``.inf`` arrive as floats and are refused; ``1e9`` without a dot arrives as a
string and is refused with the expected form; ``0x10`` and ``1_000`` arrive as ints and are fine.

Merging: a profile's ``limits`` mapping overrides the top-level one key by key; an explicit
``max`` (or ``null``) in a profile removes a top-level limit for that profile. ``hung_after`` and
``startup_grace`` override the same way; ``null`` turns them off.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from profiles.numbers import CPU_WEIGHT, HUNG_AFTER, MEMORY_MAX, STARTUP_GRACE, TASKS_MAX, Bound

DEFAULT_HUNG_AFTER = 120.0  # four heartbeat periods: three missed beats plus the one in flight
# Upstream writes its first heartbeat only once ``running``, after connecting every platform in
# turn, each for up to 30 s (``_PLATFORM_CONNECT_TIMEOUT_SECS_DEFAULT``); 300 s covers eight.
DEFAULT_STARTUP_GRACE = 300.0

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
# 512M, 512 M, 1.5G, 2GiB, 2Gi, 2GB, 512m, 4096 (bytes). Binary units, as systemd's MemoryMax=.
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*(?:([KMGT])(?:IB|I|B)?|B)?", re.IGNORECASE)
_NONE_WORDS = ("max",)
_SIZE_HINT = "expected a size like 512M, 2G or a number of bytes, or max; got "


class LimitsConfigError(ValueError):
    """A limits or hung-detection setting is wrong. ``str()`` is ``"<key>: <problem>"``."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"{key}: {problem}")
        self.key = key
        self.problem = problem


@dataclass(frozen=True, slots=True)
class Limits:
    """The limits in force for one profile; ``None`` means no limit of that kind."""

    memory_max: int | None = None  # bytes, RAM and swap together, whole tree
    tasks_max: int | None = None  # threads, as cgroup v2 pids.max counts them, whole tree
    cpu_weight: int | None = None  # 1..10000, cgroup v2 cpu.weight (100 = default share)

    @property
    def empty(self) -> bool:
        return self.memory_max is None and self.tasks_max is None and self.cpu_weight is None

    def as_dict(self) -> dict[str, int | None]:
        """For ``status --json`` (``limits`` in force)."""
        return {"memory_max": self.memory_max, "tasks_max": self.tasks_max, "cpu_weight": self.cpu_weight}


@dataclass(frozen=True, slots=True)
class LimitsSpec:
    """One ``limits:`` mapping as written: ``given`` names the keys present (a present key whose
    value is ``None`` means "explicitly no limit", which beats the top-level value)."""

    memory_max: int | None = None
    tasks_max: int | None = None
    cpu_weight: int | None = None
    given: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class HungSettings:
    """Hung detection for one profile. ``hung_after`` ``None``: off. ``startup_grace`` ``None``:
    a gateway may take forever to write its first heartbeat (only ``T`` state is then judged)."""

    hung_after: float | None = DEFAULT_HUNG_AFTER
    startup_grace: float | None = DEFAULT_STARTUP_GRACE


# ----------------------------------------------------------------------------- scalar parsers


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _describe(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def parse_size(value: object, key: str) -> int | None:
    """``memory_max``: bytes as an int, ``None`` for ``max``/``null``.

    Accepts a whole number of bytes, or a string ``<number><unit>`` with K, M, G or T (binary,
    1024-based, as systemd and PM2 read them; ``Mi``/``MiB``/``MB`` and lower case are read the
    same). Refuses negatives, NaN, infinities, booleans, fractions of a byte, and anything below
    1 MiB (``memory_max: 512`` is 512 bytes: surely ``512M`` was meant).
    """
    if value is None:
        return None
    if isinstance(value, str):
        text = value.strip()
        if text.lower() in _NONE_WORDS:
            return None
        m = _SIZE.fullmatch(text)
        if text.startswith("-"):
            raise LimitsConfigError(key, f"must not be negative, got {_describe(value)}")
        if m is None:
            raise LimitsConfigError(key, _SIZE_HINT + _describe(value))
        number, unit = m.group(1), (m.group(2) or "").upper()
        # Exact for "1.5G": integer arithmetic on the decimal digits, no float rounding.
        whole, _, frac = number.partition(".")
        if frac and not unit:
            raise LimitsConfigError(key, f"expected a whole number of bytes, got {_describe(value)}")
        scale = _UNITS[unit]
        size = int(whole) * scale + (int(frac) * scale) // (10 ** len(frac)) if frac else int(whole) * scale
    elif _is_number(value):
        if isinstance(value, float):
            if not math.isfinite(value):
                raise LimitsConfigError(key, f"expected a size, got {_describe(value)}")
            if value != int(value):
                raise LimitsConfigError(key, f"expected a whole number of bytes, got {_describe(value)}")
        size = int(value)  # type: ignore[call-overload]
    else:
        raise LimitsConfigError(key, _SIZE_HINT + _describe(value))
    if size < 0:
        raise LimitsConfigError(key, f"must not be negative, got {_describe(value)}")
    if size < MEMORY_MAX.low:
        hint = f" (did you mean {value}M?)" if _is_number(value) and size > 0 else ""
        raise LimitsConfigError(key, f"{format_size(size)} is below the 1M minimum{hint}")
    if size > MEMORY_MAX.high:
        raise LimitsConfigError(key, f"{_describe(value)} is over 1 EiB; write max for no limit")
    return size


def parse_tasks_max(value: object, key: str) -> int | None:
    """``tasks_max``: a whole number >= 1 (threads of the whole tree), ``None`` for ``max``/``null``."""
    if value is None or (isinstance(value, str) and value.strip().lower() in _NONE_WORDS):
        return None
    if isinstance(value, float) and math.isfinite(value) and value == int(value):
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise LimitsConfigError(key, f"expected a whole number of tasks (threads) or max, got {_describe(value)}")
    if value < 1:
        raise LimitsConfigError(key, f"expected a whole number >= 1, got {_describe(value)}")
    if not TASKS_MAX.holds(value):
        raise LimitsConfigError(key, f"{_describe(value)} is over the kernel's {TASKS_MAX.high} tasks; "
                                     "write max for no limit")
    return value


def parse_cpu_weight(value: object, key: str) -> int | None:
    """``cpu_weight``: a whole number 1..10000 (cgroup v2 ``cpu.weight``; 100 is the default share)."""
    if value is None:
        return None
    if isinstance(value, float) and math.isfinite(value) and value == int(value):
        value = int(value)
    if not isinstance(value, int) or not CPU_WEIGHT.holds(value):
        raise LimitsConfigError(key, f"expected a whole number from {CPU_WEIGHT.low} to {CPU_WEIGHT.high} "
                                     f"(default 100), got {_describe(value)}")
    return value


def _seconds(value: object, key: str, bound: Bound) -> float | None:
    if value is None:
        return None
    if not bound.holds(value):
        raise LimitsConfigError(key, f"expected {bound.expected()}, or null to turn it off; got {_describe(value)}")
    return float(value)  # type: ignore[arg-type]


def parse_hung_after(value: object, key: str) -> float | None:
    """``hung_after``: seconds a running gateway's heartbeat may age before it is killed; ``None``: off."""
    return _seconds(value, key, HUNG_AFTER)


def parse_startup_grace(value: object, key: str) -> float | None:
    """``startup_grace``: seconds a new gateway has to write its first heartbeat; ``None``: unbounded."""
    return _seconds(value, key, STARTUP_GRACE)


def hung_after_warning(hung_after: float | None, heartbeat_period: float) -> str | None:
    """For doctor: a ``hung_after`` that healthy gateways cannot meet.

    Not an error, because test gateways beat faster than upstream's fixed 30 s; against the real
    gateway anything under one period plus a margin kills healthy gateways between two beats.
    """
    if hung_after is None or hung_after >= heartbeat_period + 5:
        return None
    return (
        f"hung_after {hung_after:g}s is shorter than the gateway's {heartbeat_period:g}s heartbeat period "
        f"plus a margin: healthy gateways would be killed between two beats (use at least "
        f"{heartbeat_period * 2:g}, default {DEFAULT_HUNG_AFTER:g})"
    )


# ----------------------------------------------------------------------------- mappings

_LIMIT_KEYS = ("memory_max", "tasks_max", "cpu_weight")
_PARSERS = {"memory_max": parse_size, "tasks_max": parse_tasks_max, "cpu_weight": parse_cpu_weight}


def parse_limits(value: object, key: str = "limits") -> LimitsSpec:
    """One ``limits:`` mapping (top level or a profile's). ``None`` (an empty ``limits:``) sets nothing."""
    if value is None:
        return LimitsSpec()
    if not isinstance(value, Mapping):
        keys = ", ".join(_LIMIT_KEYS)
        raise LimitsConfigError(key, f"expected a mapping with {keys}; got {_describe(value)}")
    out: dict[str, int | None] = {}
    for name, item in value.items():
        if name not in _PARSERS:
            raise LimitsConfigError(f"{key}.{name}", f"unknown key (known keys: {', '.join(_LIMIT_KEYS)})")
        out[name] = _PARSERS[name](item, f"{key}.{name}")
    return LimitsSpec(**out, given=frozenset(out))


def merge_limits(top: LimitsSpec, own: LimitsSpec | None = None) -> Limits:
    """The limits in force for a profile: its own keys over the top-level ones."""
    own = own or LimitsSpec()
    picked = {k: getattr(own, k) if k in own.given else getattr(top, k) for k in _LIMIT_KEYS}
    return Limits(**picked)


_UNSET = object()


def merge_hung(
    top_hung_after: object = _UNSET,
    top_grace: object = _UNSET,
    own_hung_after: object = _UNSET,
    own_grace: object = _UNSET,
) -> HungSettings:
    """Hung settings for a profile from already-parsed values; leave an argument out when the key
    is absent from the file (``None`` is an explicit "off")."""
    after = DEFAULT_HUNG_AFTER
    grace = DEFAULT_STARTUP_GRACE
    for value in (top_hung_after, own_hung_after):
        if value is not _UNSET:
            after = value  # type: ignore[assignment]
    for value in (top_grace, own_grace):
        if value is not _UNSET:
            grace = value  # type: ignore[assignment]
    return HungSettings(hung_after=after, startup_grace=grace)


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
