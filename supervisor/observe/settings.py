"""The ``events:``, ``hooks:`` and ``metrics:`` sections of ``hermesd.yaml``, validated.

The config reader parses YAML into nodes so that every complaint names file and line. These
validators take the *plain* value of one section (what ``yaml.safe_load`` would give for it) and
raise :class:`ObserveConfigError`, a ``ValueError`` whose ``path`` (``("hooks", 0, "on", 1)``)
names the offending key; :func:`line_of` walks the section's YAML node along that path so the
reader can say ``hermesd.yaml:12: hooks[0].on[1]: unknown event type 'helds'``.

API (the config reader)::

    try:
        obs = parse_sections({"hooks": value_of_hooks, "metrics": ..., "events": ...})
    except ObserveConfigError as exc:
        line = line_of(top_node_for(exc.path[0]), exc.path[1:])   # 1-based, or None
        raise ConfigError(f"{path}:{line}: {exc}")
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

SECTIONS = ("events", "hooks", "metrics")


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


def line_of(node: Any, path: tuple[str | int, ...]) -> int | None:
    """1-based line of the YAML node at ``path`` below ``node`` (the deepest one that exists)."""
    import yaml

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


@dataclass(frozen=True, slots=True)
class ObserveSettings:
    """Everything the observability pieces read from ``hermesd.yaml`` (all optional)."""

    journal: Any = None  # journal.JournalSettings
    hooks: tuple[Any, ...] = ()  # hooks.Hook
    metrics: Any = None  # metrics.MetricsSettings, or None: no listener


def parse_sections(top: Mapping[str, Any]) -> ObserveSettings:
    """Validate the three sections present in ``top`` (other keys are ignored)."""
    from supervisor.observe.hooks import parse_hooks
    from supervisor.observe.journal import JournalSettings
    from supervisor.observe.metrics import parse_metrics

    journal = JournalSettings()
    if top.get("events") is not None:
        journal = parse_journal(top["events"])
    hooks = parse_hooks(top["hooks"]) if top.get("hooks") is not None else ()
    metrics = parse_metrics(top["metrics"]) if top.get("metrics") is not None else None
    return ObserveSettings(journal=journal, hooks=hooks, metrics=metrics)


def mapping(value: Any, path: tuple[str | int, ...], allowed: set[str]) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ObserveConfigError(path, "expected a mapping")
    for key in value:
        if not isinstance(key, str) or key not in allowed:
            raise ObserveConfigError((*path, str(key)), f"unknown key (known keys: {', '.join(sorted(allowed))})")
    return value


def integer(value: Any, path: tuple[str | int, ...], *, minimum: int, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum or (maximum and value > maximum):
        top = f" and <= {maximum}" if maximum else ""
        raise ObserveConfigError(path, f"expected a whole number >= {minimum}{top}, got {value!r}")
    return value


def number(value: Any, path: tuple[str | int, ...], *, minimum: float, maximum: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not minimum < value <= maximum:
        raise ObserveConfigError(path, f"expected a number > {minimum:g} and <= {maximum:g}, got {value!r}")
    return float(value)


def parse_journal(value: Any) -> Any:
    """``events: {max_bytes: 1048576, backups: 9}``: size of one journal file, older files kept."""
    from supervisor.observe.journal import JournalSettings

    raw = mapping(value, ("events",), {"max_bytes", "backups"})
    kwargs = {}
    if "max_bytes" in raw:
        kwargs["max_bytes"] = integer(raw["max_bytes"], ("events", "max_bytes"), minimum=4096)
    if "backups" in raw:
        kwargs["backups"] = integer(raw["backups"], ("events", "backups"), minimum=0, maximum=1000)
    return JournalSettings(**kwargs)
