"""How upstream reads a value as true or false: each of its readers, declared once.

Upstream has several bool readers with different word sets and different answers for blanks and
unknown words; predicting what a gateway will do means using the same reader it uses for that
setting. Each function names its upstream original (hermes-agent 0.19.0).
"""

from __future__ import annotations

from typing import TypeVar

TRUTHY = frozenset({"1", "true", "yes", "on"})  # utils.TRUTHY_STRINGS; gateway/config.py _coerce_bool
FALSY = frozenset({"0", "false", "no", "off"})  # gateway/config.py _coerce_bool and the multiplex override
D = TypeVar("D", bool, None)


def is_truthy_value(value: object, default: bool = False) -> bool:
    """``utils.is_truthy_value``: a string is true only when it is a truthy word."""
    if value is None:
        return default
    if isinstance(value, str):
        return value.strip().lower() in TRUTHY
    return bool(value)


def coerce_bool(value: object, default: D) -> bool | D:
    """``gateway/config.py _coerce_bool``: truthy and falsy words, anything else keeps ``default``."""
    if value is None:
        return default
    if isinstance(value, str):
        low = value.strip().lower()
        if low in TRUTHY:
            return True
        return False if low in FALSY else default
    return bool(value)


def multiplex_override(raw: str | None) -> bool | None:
    """``gateway/config.py _env_multiplex_profiles_override``: ``_coerce_bool`` whose default is None (fall
    back to config.yaml) when unset, blank or not a recognised word."""
    return coerce_bool(raw, None)
