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

import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from profiles.errors import ProfileError
from profiles.names import normalize_name, validate_profile_name
from profiles.numbers import HOOK_AFTER_FAILURES, HOOK_TIMEOUT, METRICS_PORT
from profiles.printable import printable
from supervisor.observe.events import EVENT_TYPES
from supervisor.observe.journal import JournalSettings
from supervisor.observe.values import ObserveConfigError, integer, mapping, number, render_path
from supervisor.settings import SettingError, under

DEFAULT_TIMEOUT = 10.0
MAX_COMMAND = 8192
_HOOK_KEYS = {"name", "on", "command", "timeout", "after_failures", "profiles"}


@dataclass(frozen=True, slots=True)
class Hook:
    """One ``hooks:`` entry: a command run for the events named in ``on``."""

    name: str
    on: frozenset[str]  # event types; "*" for all
    argv: tuple[str, ...]
    timeout: float = DEFAULT_TIMEOUT
    after_failures: int | None = None
    profiles: frozenset[str] | None = None


@dataclass(frozen=True, slots=True)
class MetricsSettings:
    """``metrics: {listen: "127.0.0.1:9464" | "unix:/run/hermesd/metrics.sock", allow_public: false}``."""

    listen: str
    host: str | None = None
    port: int | None = None
    unix_path: str | None = None


@dataclass(frozen=True, slots=True)
class ObserveSettings:
    """Everything the observability pieces read from ``hermesd.yaml`` (all optional)."""

    journal: JournalSettings | None = None
    hooks: tuple[Hook, ...] = ()
    metrics: MetricsSettings | None = None  # None: no listener


def parse_sections(top: Mapping[str, Any]) -> ObserveSettings:
    """Validate the three sections present in ``top`` (other keys are ignored)."""
    journal = JournalSettings()
    if top.get("events") is not None:
        journal = parse_journal(top["events"])
    hooks = parse_hooks(top["hooks"]) if top.get("hooks") is not None else ()
    metrics = parse_metrics(top["metrics"]) if top.get("metrics") is not None else None
    return ObserveSettings(journal=journal, hooks=hooks, metrics=metrics)


def parse_journal(value: object) -> JournalSettings:
    """``events: {max_bytes: 1048576, backups: 9}``: size of one journal file, older files kept."""
    rows = under("events")
    raw = mapping(value, ("events",), set(rows))
    try:
        return JournalSettings(**{k: rows[k].read(v, f"events.{k}") for k, v in raw.items()})
    except SettingError as exc:
        raise ObserveConfigError(("events", exc.key.partition(".")[2]), exc.problem) from None


# --------------------------------------------------------------------------- hooks:


def parse_hooks(value: object, path: tuple[str | int, ...] = ("hooks",)) -> tuple[Hook, ...]:
    """Validate the ``hooks:`` list; raise :class:`ObserveConfigError` naming the key."""
    if not isinstance(value, list):
        raise ObserveConfigError(path, "expected a list of hooks (each a mapping with 'on' and 'command')")
    hooks = []
    names: set[str] = set()
    for i, item in enumerate(value):
        hook = parse_hook(item, (*path, i))
        if hook.name in names:
            raise ObserveConfigError((*path, i, "name"), f"duplicate hook name {hook.name!r}")
        names.add(hook.name)
        hooks.append(hook)
    return tuple(hooks)


def parse_hook(item: object, path: tuple[str | int, ...]) -> Hook:
    if isinstance(item, Mapping) and True in item and "on" not in item:
        # YAML 1.1 (PyYAML) reads a bare ``on:`` key as the boolean true; it is our "on".
        item = {("on" if k is True else k): v for k, v in item.items()}
    raw = mapping(item, path, _HOOK_KEYS)
    for required in ("on", "command"):
        if required not in raw:
            raise ObserveConfigError(path, f"missing '{required}'")
    on = _event_types(raw["on"], (*path, "on"))
    argv = _command(raw["command"], (*path, "command"))
    name = raw.get("name", render_path(path))
    if not isinstance(name, str) or not name.strip() or len(name) > 100 or "\n" in name:
        raise ObserveConfigError((*path, "name"), "expected a short one-line name")
    timeout = DEFAULT_TIMEOUT
    if "timeout" in raw:
        timeout = number(raw["timeout"], (*path, "timeout"), HOOK_TIMEOUT)
    after = None
    if raw.get("after_failures") is not None:
        after = integer(raw["after_failures"], (*path, "after_failures"), HOOK_AFTER_FAILURES)
        if "backoff" not in on and "*" not in on:
            raise ObserveConfigError((*path, "after_failures"), "applies to backoff events only: add backoff to 'on'")
    profiles = None
    if raw.get("profiles") is not None:
        profiles = _profiles(raw["profiles"], (*path, "profiles"))
    return Hook(name=name.strip(), on=on, argv=argv, timeout=timeout, after_failures=after, profiles=profiles)


def _event_types(value: object, path: tuple[str | int, ...]) -> frozenset[str]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items:
        raise ObserveConfigError(path, "expected an event type or a non-empty list of them")
    for j, t in enumerate(items):
        if t != "*" and t not in EVENT_TYPES:
            where = (*path, j) if isinstance(value, list) else path
            raise ObserveConfigError(where, f"unknown event type {t!r} (known: {', '.join(EVENT_TYPES)}, or '*')")
    return frozenset(items)


def _command(value: object, path: tuple[str | int, ...]) -> tuple[str, ...]:
    if isinstance(value, str):
        if not value.strip() or "\0" in value or len(value) > MAX_COMMAND:
            raise ObserveConfigError(path, "expected a non-empty shell command (no NUL, at most 8 KiB)")
        return ("/bin/sh", "-c", value)
    if isinstance(value, list) and value:
        for j, part in enumerate(value):
            if not isinstance(part, str) or "\0" in part or (j == 0 and not part.strip()):
                raise ObserveConfigError((*path, j), "expected a string (the argv of the command)")
        if sum(len(p) for p in value) > MAX_COMMAND:
            raise ObserveConfigError(path, "command longer than 8 KiB")
        return tuple(value)
    raise ObserveConfigError(path, "expected a command: a list of strings (argv) or one string (run by /bin/sh -c)")


def _profiles(value: object, path: tuple[str | int, ...]) -> frozenset[str]:
    if not isinstance(value, list) or not value:
        raise ObserveConfigError(path, "expected a non-empty list of profile names")
    out = set()
    for j, name in enumerate(value):
        try:
            out.add(validate_profile_name(normalize_name(name)))
        except ProfileError as exc:
            raise ObserveConfigError((*path, j), f"not a valid profile name: {exc}") from None
    return frozenset(out)


# --------------------------------------------------------------------------- metrics:


def parse_metrics(value: object, path: tuple[str | int, ...] = ("metrics",)) -> MetricsSettings | None:
    """Validate ``metrics:``; ``None`` (or no ``listen``) means no listener (``hermesd metrics`` still works)."""
    raw = mapping(value, path, set(under("metrics")))
    allow = raw.get("allow_public", False)
    if not isinstance(allow, bool):
        raise ObserveConfigError((*path, "allow_public"), f"expected true or false, got {allow!r}")
    listen = raw.get("listen")
    if listen is None:
        return None
    where = (*path, "listen")
    if isinstance(listen, int) and not isinstance(listen, bool):
        listen = f"127.0.0.1:{listen}"
    if not isinstance(listen, str) or not listen.strip():
        raise ObserveConfigError(where, "expected HOST:PORT (e.g. 127.0.0.1:9464) or unix:/absolute/path")
    listen = listen.strip()
    if listen.startswith(("unix:", "/")):
        sock = listen[5:] if listen.startswith("unix:") else listen
        if not sock.startswith("/") or "\0" in sock or len(os.fsencode(sock)) > 107:
            raise ObserveConfigError(where, "a unix socket needs an absolute path of at most 107 bytes")
        return MetricsSettings(listen=listen, unix_path=sock)
    host, sep, port_text = listen.rpartition(":")
    if not sep or not port_text.isdigit() or len(port_text) > 5 or not METRICS_PORT.holds(int(port_text)):
        raise ObserveConfigError(where, f"expected HOST:PORT with a port 1-65535, got {printable(repr(listen), 60)}")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if host in ("", "*"):
        host = "0.0.0.0"
    if host == "localhost":
        host = "127.0.0.1"
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        raise ObserveConfigError(where, f"{host!r} is not an IP address (use 127.0.0.1, ::1 or an address "
                                        "of this machine; names are not resolved)") from None
    if not ip.is_loopback and not allow:
        raise ObserveConfigError(where, f"{host} is not a loopback address: metrics would be readable from the "
                                        "network; set metrics.allow_public: true if that is intended")
    return MetricsSettings(listen=listen, host=str(ip), port=int(port_text))
