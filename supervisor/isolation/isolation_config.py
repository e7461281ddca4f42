"""``isolation`` in hermesd.yaml (top level and per profile): YAML values in, validated settings out.

Like ``supervisor.limits``, these functions take values YAML has already constructed plus the
dotted key they came from, and raise :class:`IsolationConfigError` (a ``ValueError``) whose
message starts with that key; the config reader prefixes ``file:line``.

Forms::

    isolation: auto                 # the default: the strongest mechanism this machine offers
    isolation: off                  # no confinement (YAML's bare `off` arrives as False: accepted)
    isolation: required             # like auto, but never run the profile unconfined
    isolation:
      mode: auto
      kanban: true                  # keep the shared kanban board (<root>/kanban/, kanban.db)
      shared_auth: true             # keep <root>/shared/ (Nous auth shared by every profile)
      root_auth: false              # named profiles may read the root's auth.json (read-only)
      user: hermes-coder            # hermesd as root: run this profile as that account
      read_only: [~/.local/bin]     # extra paths the profile may read but not change
      hide: [~/work/secret]         # extra paths the profile may not see at all
      writable: [~/projects/x]      # extra paths the profile may change (everything else is read-only)

A profile's ``isolation`` overrides the top-level one key by key (a bare mode string overrides
only ``mode``). Paths must be absolute or start with ``~/`` (expanded against the HOME the
caller passes to :func:`resolve_paths`, never this process's).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import PurePosixPath
from typing import Any

from profiles.numbers import USER_ID
from profiles.printable import printable

MODES = ("auto", "off", "required")
_KEYS = ("mode", "kanban", "shared_auth", "root_auth", "user", "read_only", "hide", "writable")
_USER_RE_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")


class IsolationConfigError(ValueError):
    """A bad ``isolation`` value; ``.key`` is the dotted key it is about."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key


@dataclass(frozen=True, slots=True)
class IsolationSettings:
    """One profile's effective isolation settings (defaults keep every upstream feature working
    except the root ``auth.json`` fallback, which the trust-domain guarantee closes)."""

    mode: str = "auto"
    kanban: bool = True
    shared_auth: bool = True
    root_auth: bool = False
    user: str | None = None
    read_only: tuple[str, ...] = ()
    hide: tuple[str, ...] = ()
    writable: tuple[str, ...] = ()  # outside the home, the channels and the private /tmp: nothing else


@dataclass(frozen=True, slots=True)
class IsolationPartial:
    """The keys a mapping actually set (None: not given), for key-by-key merging."""

    values: tuple[tuple[str, Any], ...]


def _mode(value: object, key: str) -> str:
    if value is False:  # YAML 1.1: a bare `off` is the boolean false
        return "off"
    if isinstance(value, str) and value.strip().lower() in MODES:
        return value.strip().lower()
    raise IsolationConfigError(key, f"expected one of {', '.join(MODES)}, got {printable(repr(value), 40)}")


def _bool(value: object, key: str) -> bool:
    if not isinstance(value, bool):
        raise IsolationConfigError(key, f"expected true or false, got {printable(repr(value), 40)}")
    return value


def _paths(value: object, key: str) -> tuple[str, ...]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list):
        raise IsolationConfigError(key, "expected a path or a list of paths")
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, str) or not (item.startswith("/") or item.startswith("~/") or item == "~"):
            raise IsolationConfigError(f"{key}[{i}]",
                                       f"expected an absolute path or one starting with ~/, got {item!r}")
        if "\0" in item or any(part == ".." for part in PurePosixPath(item).parts):
            raise IsolationConfigError(f"{key}[{i}]", f"'..' and NUL are not allowed in {item!r}")
        out.append(item)
    return tuple(out)


def _user(value: object, key: str) -> str | None:
    if value is None:
        return None
    if isinstance(value, int) and USER_ID.holds(value):
        return str(value)
    if isinstance(value, str) and value and set(value) <= _USER_RE_CHARS and not value.startswith("-"):
        return value
    raise IsolationConfigError(key, f"expected an account name or uid, got {printable(repr(value), 40)}")


def parse_isolation(value: object, key: str = "isolation") -> IsolationPartial:
    """Validate one ``isolation`` value (string, bool or mapping) into the keys it sets."""
    if value is None:
        return IsolationPartial(())
    if not isinstance(value, Mapping):
        return IsolationPartial((("mode", _mode(value, key)),))
    out: list[tuple[str, Any]] = []
    for name, item in value.items():
        sub = f"{key}.{name}"
        if name not in _KEYS:
            raise IsolationConfigError(sub, f"unknown key (known keys: {', '.join(_KEYS)})")
        if name == "mode":
            out.append((name, _mode(item, sub)))
        elif name in ("kanban", "shared_auth", "root_auth"):
            out.append((name, _bool(item, sub)))
        elif name == "user":
            out.append((name, _user(item, sub)))
        else:
            out.append((name, _paths(item, sub)))
    return IsolationPartial(tuple(out))


def merge_isolation(top: IsolationPartial | None, profile: IsolationPartial | None) -> IsolationSettings:
    """The effective settings: defaults, then the top-level keys, then the profile's."""
    settings = IsolationSettings()
    for part in (top, profile):
        if part is not None and part.values:
            settings = replace(settings, **dict(part.values))
    return settings
