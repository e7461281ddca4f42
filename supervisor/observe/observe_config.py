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

from supervisor.observe.values import ObserveConfigError, integer, line_of, mapping, render_path

__all__ = ["ObserveConfigError", "ObserveSettings", "line_of", "parse_journal", "parse_sections", "render_path"]

SECTIONS = ("events", "hooks", "metrics")


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
