"""Validating plain values of the observability sections, with the key path every error names.

Apart from :mod:`supervisor.observe.sections` so that the section parsers (hooks, metrics) and
the settings module that calls them share these without importing each other.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

from profiles.numbers import Bound


class ObserveConfigError(ValueError):
    """One key of ``events:``/``hooks:``/``metrics:`` is wrong; ``str()`` is ``key: problem``."""

    def __init__(self, path: tuple[str | int, ...], message: str) -> None:
        self.path = path
        self.key = render_path(path)
        self.problem = message
        super().__init__(f"{self.key}: {message}")


def render_path(path: tuple[str | int, ...]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def line_of(node: yaml.Node | None, path: tuple[str | int, ...]) -> int | None:
    """1-based line of the YAML node at ``path`` below ``node`` (the deepest one that exists)."""
    if node is None:
        return None
    for part in path:
        nxt = None
        if isinstance(node, yaml.MappingNode) and isinstance(part, str):
            nxt = next((v for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == part), None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
            nxt = node.value[part]
        if nxt is None:
            break
        node = nxt
    return node.start_mark.line + 1


def mapping(value: object, path: tuple[str | int, ...], allowed: set[str]) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ObserveConfigError(path, "expected a mapping")
    for key in value:
        if not isinstance(key, str) or key not in allowed:
            raise ObserveConfigError((*path, str(key)), f"unknown key (known keys: {', '.join(sorted(allowed))})")
    return value


def integer(value: object, path: tuple[str | int, ...], bound: Bound) -> int:
    if not isinstance(value, int) or not bound.holds(value):
        raise ObserveConfigError(path, bound.refusal(value, whole=True))
    return value


def number(value: object, path: tuple[str | int, ...], bound: Bound) -> float:
    if not bound.holds(value):
        raise ObserveConfigError(path, bound.refusal(value))
    return float(value)  # type: ignore[arg-type]
