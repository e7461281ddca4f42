"""``profile_routes``: which profile a message belongs to, decided from where it came from.

Semantics follow upstream ``gateway/profile_routing.py`` (hermes-agent 0.19.0):

* A rule declares a ``platform``, a target ``profile`` and optional ``guild_id``,
  ``chat_id``, ``thread_id``. Every declared discriminator must hold (conjunctive): a rule
  with both ``guild_id`` and ``chat_id`` does not match on the channel alone.
* ``chat_id`` matches the message's chat or its direct parent (``parent_chat_id``), so a
  channel rule also covers that channel's threads and forum posts. A ``thread_id``-only
  rule is not hit by the parent channel's own messages.
* Specificity is the weighted sum thread 8 + chat 4 + guild 2; routes are sorted by it,
  descending and stable, *at parse time*, and :func:`match_profile_route` returns the
  first match. The ordering guarantee lives in the parser: a hand-built list passed to
  the matcher is taken in the order given.
* Config: the top-level ``profile_routes`` wins when present; ``gateway.profile_routes`` is
  read only when the top-level key is absent, exactly as upstream. ``RouteParse.forms``
  says which forms were present so ``hermesd doctor`` can flag a config that has both
  (the nested list is then silently ignored by Hermes).

Where we are stricter or clearer than upstream, on purpose:

* ids are compared as strings: an unquoted YAML id (``guild_id: 123``) is normalised to
  ``"123"`` *and* reported in the warnings, because upstream compares it as an int
  against string ids from the platform and never matches it;
* every skipped entry (not a mapping, missing platform/profile, invalid or reserved
  profile name, disabled) produces a warning naming its index, its ``name`` and its form.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from profiles.errors import InvalidNameError
from profiles.names import parse_profile_name

FORM_TOP = "top-level"
FORM_NESTED = "nested"

THREAD_WEIGHT = 8
CHAT_WEIGHT = 4
GUILD_WEIGHT = 2

_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off"})


def _as_id(value: object) -> str | None:
    """A discriminator as upstream would see it: unset or empty means "not declared"."""
    if value is None or isinstance(value, bool):
        return None
    text = str(value).strip()
    return text or None


@dataclass(frozen=True)
class ProfileRoute:
    """One routing rule: messages from this platform scope go to ``profile``."""

    platform: str
    profile: str
    name: str = ""
    guild_id: str | None = None
    chat_id: str | None = None
    thread_id: str | None = None
    enabled: bool = True

    @property
    def specificity(self) -> int:
        """Weighted sum of the declared discriminators; higher wins."""
        return (
            (GUILD_WEIGHT if self.guild_id else 0)
            + (CHAT_WEIGHT if self.chat_id else 0)
            + (THREAD_WEIGHT if self.thread_id else 0)
        )

    def matches(
        self,
        platform: str,
        guild_id: object = None,
        chat_id: object = None,
        thread_id: object = None,
        parent_chat_id: object = None,
    ) -> bool:
        """Whether a message with these source fields satisfies every declared discriminator."""
        if not self.enabled or self.platform != platform:
            return False
        if self.thread_id and self.thread_id != _as_id(thread_id):
            return False
        if self.chat_id and self.chat_id not in (_as_id(chat_id), _as_id(parent_chat_id)):
            return False
        return not (self.guild_id and self.guild_id != _as_id(guild_id))


@dataclass(frozen=True)
class RouteParse:
    """The routes in effect (most specific first), what was skipped and why, and which forms exist."""

    routes: tuple[ProfileRoute, ...] = ()
    warnings: tuple[str, ...] = ()
    forms: frozenset[str] = field(default_factory=frozenset)
    source_form: str | None = None

    @property
    def both_forms(self) -> bool:
        """True when top-level and nested lists both exist (Hermes ignores the nested one)."""
        return self.forms == {FORM_TOP, FORM_NESTED}


def _enabled(value: object) -> bool | None:
    if value is None:
        return True
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        low = value.strip().lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
        return None
    return bool(value)


def _parse_entries(entries: Iterable[Any], form: str, warnings: list[str]) -> list[ProfileRoute]:
    routes: list[ProfileRoute] = []
    for index, entry in enumerate(entries):
        if not isinstance(entry, Mapping):
            warnings.append(f"profile route #{index} ({form}): skipped, not a mapping")
            continue
        name = _as_id(entry.get("name")) or ""
        label = f"profile route #{index} {name!r} ({form})" if name else f"profile route #{index} ({form})"
        platform = _as_id(entry.get("platform"))
        raw_profile = entry.get("profile")
        if not platform or _as_id(raw_profile) is None:
            missing = "platform" if not platform else "profile"
            warnings.append(f"{label}: skipped, missing {missing}")
            continue
        try:
            profile = parse_profile_name(raw_profile)
        except InvalidNameError as exc:
            warnings.append(f"{label}: skipped, {exc}")
            continue
        enabled = _enabled(entry.get("enabled"))
        if enabled is None:
            warnings.append(f"{label}: skipped, enabled must be true or false, got {entry.get('enabled')!r}")
            continue
        if not enabled:
            warnings.append(f"{label}: skipped, disabled")
            continue
        for key in ("guild_id", "chat_id", "thread_id"):
            value = entry.get(key)
            if value is not None and not isinstance(value, str):
                warnings.append(
                    f"{label}: {key} {value!r} is not a quoted string; hermesd compares it as "
                    f"{str(value)!r}, but Hermes never matches an unquoted id - quote it"
                )
        routes.append(
            ProfileRoute(
                platform=platform,
                profile=profile,
                name=name,
                guild_id=_as_id(entry.get("guild_id")),
                chat_id=_as_id(entry.get("chat_id")),
                thread_id=_as_id(entry.get("thread_id")),
            )
        )
    return routes


def parse_profile_routes(config: Mapping[str, Any]) -> RouteParse:
    """Read ``profile_routes`` (or ``gateway.profile_routes``) from a parsed ``config.yaml``."""
    warnings: list[str] = []
    forms: set[str] = set()
    top = config.get("profile_routes")
    gateway = config.get("gateway")
    nested = gateway.get("profile_routes") if isinstance(gateway, Mapping) else None
    if top is not None:
        forms.add(FORM_TOP)
    if nested is not None:
        forms.add(FORM_NESTED)
    if top is not None:
        chosen, form = top, FORM_TOP
        if nested is not None:
            warnings.append(
                "both profile_routes and gateway.profile_routes are set; Hermes uses only the top-level one"
            )
    else:
        chosen, form = nested, FORM_NESTED
    if chosen is None:
        return RouteParse(forms=frozenset(forms))
    if not isinstance(chosen, list):
        key = "profile_routes" if form == FORM_TOP else "gateway.profile_routes"
        warnings.append(f"{key} must be a list, got {type(chosen).__name__}; no routes loaded")
        return RouteParse(warnings=tuple(warnings), forms=frozenset(forms), source_form=form)
    routes = _parse_entries(chosen, form, warnings)
    routes.sort(key=lambda r: r.specificity, reverse=True)  # list.sort is stable
    return RouteParse(tuple(routes), tuple(warnings), frozenset(forms), form)


def match_profile_route(
    routes: Iterable[ProfileRoute],
    platform: str,
    guild_id: object = None,
    chat_id: object = None,
    thread_id: object = None,
    parent_chat_id: object = None,
) -> ProfileRoute | None:
    """The first route (in the given order) that matches, or ``None``."""
    for route in routes:
        if route.matches(platform, guild_id, chat_id, thread_id, parent_chat_id):
            return route
    return None
