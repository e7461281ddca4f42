"""``profile_routes``: which profile a message belongs to, predicted exactly as upstream decides it.

hermesd runs one gateway per profile, so routes never apply under it; ``hermesd doctor`` still
explains what upstream's multiplexing gateway would do with them, and that prediction is only
worth anything if it is upstream's answer for every input, messy ones included. The rule behind
upstream 0.19.0 (``gateway/profile_routing.py`` and ``gateway/config.py:load_gateway_config``)
is one sentence: **values are kept as written and tested with plain Python truthiness and
``!=``** — no ``str()``, no ``strip()``, no boolean words. From it:

* ``enabled`` is whatever the entry says (default ``True``); a rule matches only when it is
  truthy, so ``enabled: null`` / ``0`` / ``""`` / ``[]`` switch it off and ``"false"``, ``"no"``,
  ``"off"``, ``"maybe"`` (non-empty text) leave it on. A disabled rule is still parsed and kept.
* A discriminator (``guild_id``, ``chat_id``, ``thread_id``) is *declared* when truthy and then
  compared with ``!=`` against the platform's text id: ``thread_id: 0`` is undeclared (a
  wildcard, and adds no specificity); ``chat_id: true`` or ``chat_id: 6`` is declared and never
  equal to a text id; ``guild_id: " 1 "`` never equals ``"1"``.
* ``platform`` must be truthy and is compared with ``!=`` against the platform's value
  (``"discord"``), so ``" discord "`` or ``"Discord"`` never match. ``profile`` must be truthy;
  it is the one field normalised (``str()``, ``strip()``, lower-case, ``Default`` -> ``default``)
  and validated; an invalid one drops the rule.
* Specificity is thread 8 + chat 4 + guild 2 (truthy fields), sorted descending and stable at
  parse time; the first match wins. ``chat_id`` also matches the message's parent chat.
* Where the list comes from: config.yaml's top-level ``profile_routes`` when it is not ``None``
  (absent or ``null``), else ``gateway.profile_routes``; either is used only if it is a list. If
  config.yaml gives no list (absent, ``null``, not a list, not a mapping at the top, or the file
  does not parse), the legacy ``gateway.json``'s top-level ``profile_routes`` is used. A
  ``gateway.json`` that is not an object (after ``or {}``) means no routes at all; a
  ``gateway.json`` list value that is a number or ``true`` makes upstream's loader raise.

API: :func:`parse_profile_routes` (a parsed config.yaml, optionally the parsed gateway.json),
:func:`load_profile_routes` (read both files of a home, bounded), :func:`match_profile_route`.
Each :class:`RouteParse` carries upstream's list (``parsed``), the rules that can match
(``routes``), and :class:`RouteIssue` s with stable codes for the doctor.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from profiles.errors import InvalidNameError, ProfileConfigError
from profiles.fileio import parse_yaml, read_text
from profiles.names import parse_profile_name, shown
from profiles.safeio import read_regular

FORM_TOP = "top-level"
FORM_NESTED = "nested"
FORM_JSON = "gateway.json"

THREAD_WEIGHT = 8
CHAT_WEIGHT = 4
GUILD_WEIGHT = 2

ID_KEYS = ("guild_id", "chat_id", "thread_id")
_FALSE_WORDS = frozenset({"false", "0", "no", "off", "disabled"})
_MAX_GATEWAY_JSON = 1 << 20


class _Marker:
    def __init__(self, label: str) -> None:
        self.label = label

    def __repr__(self) -> str:
        return self.label


MISSING: Final = _Marker("MISSING")  # the file does not exist
BROKEN: Final = _Marker("BROKEN")  # the file exists but upstream could not load it (parse error)


@dataclass(frozen=True)
class ProfileRoute:
    """One routing rule, with its fields exactly as upstream keeps them (raw values, not strings)."""

    platform: object
    profile: str
    name: object = ""
    guild_id: object = None
    chat_id: object = None
    thread_id: object = None
    enabled: object = True

    @property
    def specificity(self) -> int:
        """Weighted sum of the declared (truthy) discriminators; higher wins."""
        return (
            (GUILD_WEIGHT if self.guild_id else 0)
            + (CHAT_WEIGHT if self.chat_id else 0)
            + (THREAD_WEIGHT if self.thread_id else 0)
        )

    @property
    def active(self) -> bool:
        """Whether the rule can match at all (``enabled`` is truthy)."""
        return bool(self.enabled)

    def matches(
        self,
        platform: object,
        guild_id: object = None,
        chat_id: object = None,
        thread_id: object = None,
        parent_chat_id: object = None,
    ) -> bool:
        """Upstream's test, verbatim: every declared discriminator must hold (conjunctive)."""
        if not self.enabled:
            return False
        if self.platform != platform:
            return False
        if self.thread_id and self.thread_id != thread_id:
            return False
        if self.chat_id and self.chat_id != chat_id and self.chat_id != parent_chat_id:
            return False
        return not (self.guild_id and self.guild_id != guild_id)


@dataclass(frozen=True)
class RouteIssue:
    """Something about the route list a person should know; ``index`` is the entry's position.

    Codes: ``not_a_list``, ``both_forms``, ``not_a_mapping``, ``missing_platform``,
    ``missing_profile``, ``invalid_profile`` (rule dropped), ``disabled`` (kept, never matches),
    ``enabled_text`` (text in ``enabled``: on, whatever it says), ``id_not_text`` and
    ``platform_not_text`` / ``padded`` (declared but never matches a real message), ``id_unset``
    (a zero/empty id that reads as a wildcard), ``gateway_json`` (the legacy file's role),
    ``loader_error`` (upstream's loader raises: the gateway does not start).
    """

    code: str
    message: str
    index: int | None = None
    form: str | None = None


@dataclass(frozen=True)
class RouteParse:
    """Upstream's parsed rules (``parsed``, most specific first), the ones that can match, and issues."""

    parsed: tuple[ProfileRoute, ...] = ()
    issues: tuple[RouteIssue, ...] = ()
    forms: frozenset[str] = field(default_factory=frozenset)
    source_form: str | None = None

    @property
    def routes(self) -> tuple[ProfileRoute, ...]:
        """The rules that can match (``enabled`` truthy), in upstream's order."""
        return tuple(r for r in self.parsed if r.active)

    @property
    def warnings(self) -> tuple[str, ...]:
        """Every issue as one line (``profile route #N 'name' (form): …`` for per-rule issues)."""
        return tuple(i.message for i in self.issues)


# --------------------------------------------------------------------------- where the list comes from


@dataclass(frozen=True)
class RouteSource:
    """What upstream hands ``parse_profile_routes`` (``data.get('profile_routes') or []``), and from where."""

    entries: object
    form: str | None
    forms: frozenset[str]
    issues: tuple[RouteIssue, ...]


def route_source(config: object = MISSING, gateway_json: object = MISSING) -> RouteSource:
    """Emulate ``load_gateway_config``'s choice of route list.

    ``config`` is the parsed config.yaml document (any YAML value), :data:`MISSING` or
    :data:`BROKEN`; ``gateway_json`` the parsed ``gateway.json`` value, :data:`MISSING` or
    :data:`BROKEN`.
    """
    issues: list[RouteIssue] = []
    forms: set[str] = set()
    gw_data: object = {}
    if gateway_json is not MISSING and gateway_json is not BROKEN:
        gw_data = gateway_json or {}
    yaml_routes: object = None
    yaml_form: str | None = None
    if config is not MISSING and config is not BROKEN:
        doc = config or {}
        if isinstance(doc, Mapping):
            top = doc.get("profile_routes")
            section = doc.get("gateway")
            nested = section.get("profile_routes") if isinstance(section, Mapping) else None
            if nested is not None:
                forms.add(FORM_NESTED)
            if top is not None:
                forms.add(FORM_TOP)
                chosen, yaml_form, key = top, FORM_TOP, "profile_routes"
                if nested is not None:
                    issues.append(RouteIssue(
                        "both_forms",
                        "both profile_routes and gateway.profile_routes are set; Hermes uses only the top-level one",
                    ))
            else:
                chosen, yaml_form, key = nested, FORM_NESTED, "gateway.profile_routes"
            if isinstance(chosen, list):
                yaml_routes = chosen
            else:
                if chosen is not None:
                    issues.append(RouteIssue(
                        "not_a_list",
                        f"{key} must be a list, got {type(chosen).__name__}; Hermes loads no routes from config.yaml",
                        form=yaml_form,
                    ))
                yaml_form = None
    if isinstance(gateway_json, Mapping) and gateway_json.get("profile_routes") is not None:
        forms.add(FORM_JSON)
    if not isinstance(gw_data, dict):
        # Upstream assigns into gw_data (TypeError, swallowed) and coerces it to {}: no routes at all.
        if yaml_routes is not None or FORM_JSON in forms:
            issues.append(RouteIssue(
                "gateway_json",
                f"gateway.json holds a {type(gw_data).__name__}, not an object, so Hermes loads no routes at all "
                "(not even config.yaml's)",
            ))
        return RouteSource([], None, frozenset(forms), tuple(issues))
    if yaml_routes is not None:
        if FORM_JSON in forms:
            issues.append(RouteIssue(
                "gateway_json", "gateway.json also has profile_routes; config.yaml's list wins, so they are ignored"
            ))
        return RouteSource(yaml_routes or [], yaml_form, frozenset(forms), tuple(issues))
    entries = gw_data.get("profile_routes") or []
    form = FORM_JSON if entries else None
    if form:
        issues.append(RouteIssue(
            "gateway_json",
            "the routes come from the legacy gateway.json (config.yaml gives no list); move them to config.yaml",
        ))
    return RouteSource(entries, form, frozenset(forms), tuple(issues))


# --------------------------------------------------------------------------- the rules


def _label(index: int, name: object, form: str | None) -> str:
    where = f" ({form})" if form else ""
    return f"profile route #{index} {shown(name)}{where}" if name else f"profile route #{index}{where}"


def _field_issues(entry: Mapping[str, Any], label: str, index: int, form: str | None) -> list[RouteIssue]:
    issues: list[RouteIssue] = []
    enabled = entry.get("enabled", True)
    if not enabled:
        why = "an empty value (enabled: null)" if enabled is None else f"enabled: {enabled!r}"
        issues.append(RouteIssue("disabled", f"{label}: disabled by {why}; it never matches", index, form))
    elif isinstance(enabled, str):
        off = enabled.strip().lower() in _FALSE_WORDS
        issues.append(RouteIssue(
            "enabled_text",
            f"{label}: enabled is the text {shown(enabled)}; Hermes only tests it for truth, so the rule is ON"
            + (" - write enabled: false without quotes to switch it off" if off else ""),
            index, form,
        ))
    platform = entry.get("platform", "")
    if not isinstance(platform, str):
        issues.append(RouteIssue(
            "platform_not_text",
            f"{label}: platform {shown(platform)} is not text; Hermes compares it with the platform's name and it "
            "never matches",
            index, form,
        ))
    elif platform != platform.strip().lower():
        issues.append(RouteIssue(
            "padded",
            f"{label}: platform {shown(platform)} has spaces or capitals; Hermes compares it as written with "
            f"{platform.strip().lower()!r} and it never matches",
            index, form,
        ))
    for key in ID_KEYS:
        value = entry.get(key)
        if value is None:
            continue
        if not value:
            issues.append(RouteIssue(
                "id_unset",
                f"{label}: {key} {shown(value)} is empty or zero, so Hermes treats it as not set (any {key[:-3]})",
                index, form,
            ))
        elif not isinstance(value, str):
            issues.append(RouteIssue(
                "id_not_text",
                f"{label}: {key} {shown(value)} is not a quoted string; Hermes compares it with the platform's text "
                "id and never matches it - quote it",
                index, form,
            ))
        elif value != value.strip():
            issues.append(RouteIssue(
                "padded",
                f"{label}: {key} {shown(value)} has spaces around it; Hermes compares it as written and never "
                "matches it",
                index, form,
            ))
    return issues


def parse_route_entries(raw: object, form: str | None = None) -> tuple[list[ProfileRoute], list[RouteIssue]]:
    """Upstream's ``parse_profile_routes(raw)``, plus what a person should know about each entry.

    A value upstream cannot iterate (a number, ``true``) makes its loader raise: reported as a
    ``loader_error`` issue with no routes.
    """
    issues: list[RouteIssue] = []
    if not raw:
        return [], issues
    if not isinstance(raw, Iterable):
        return [], [RouteIssue(
            "loader_error",
            f"profile_routes in gateway.json is a {type(raw).__name__}; Hermes' config loader raises on it and the "
            "gateway does not start",
            form=form,
        )]
    routes: list[ProfileRoute] = []
    for index, entry in enumerate(raw):
        if not isinstance(entry, dict):
            issues.append(RouteIssue("not_a_mapping", f"{_label(index, None, form)}: skipped, not a mapping",
                                     index, form))
            continue
        name = entry.get("name", "")
        label = _label(index, name, form)
        platform = entry.get("platform", "")
        profile = entry.get("profile", "")
        if not platform or not profile:
            code, what = ("missing_platform", "platform") if not platform else ("missing_profile", "profile")
            issues.append(RouteIssue(code, f"{label}: skipped, missing {what}", index, form))
            continue
        try:
            canon = parse_profile_name(profile)
        except InvalidNameError as exc:
            issues.append(RouteIssue("invalid_profile", f"{label}: skipped, {exc}", index, form))
            continue
        issues.extend(_field_issues(entry, label, index, form))
        routes.append(
            ProfileRoute(
                platform=platform,
                profile=canon,
                name=name,
                guild_id=entry.get("guild_id"),
                chat_id=entry.get("chat_id"),
                thread_id=entry.get("thread_id"),
                enabled=entry.get("enabled", True),
            )
        )
    routes.sort(key=lambda r: r.specificity, reverse=True)  # list.sort is stable, as upstream's
    return routes, issues


def parse_profile_routes(config: object = MISSING, gateway_json: object = MISSING) -> RouteParse:
    """The routes upstream would load from a parsed config.yaml (and, if given, gateway.json)."""
    source = route_source(config, gateway_json)
    routes, issues = parse_route_entries(source.entries, source.form)
    return RouteParse(tuple(routes), (*source.issues, *issues), source.forms, source.form)


def _read_json(path: Path) -> object:
    """``gateway.json`` as upstream reads it: missing -> MISSING, unparseable -> BROKEN (upstream warns)."""
    try:
        data = read_regular(path, _MAX_GATEWAY_JSON)
    except (FileNotFoundError, NotADirectoryError):
        return MISSING
    except OSError:
        return BROKEN
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return BROKEN


def load_profile_routes(home: Path, config: object = None) -> RouteParse:
    """Read ``home``'s config.yaml (or take the parsed ``config``) and ``gateway.json``; parse as upstream.

    A config.yaml hermesd cannot read counts as upstream's parse failure (its routes are not
    loaded, gateway.json's are).
    """
    home = Path(home)
    if config is None:
        path = home / "config.yaml"
        try:
            config = parse_yaml(read_text(path), path)
        except (FileNotFoundError, NotADirectoryError):
            config = MISSING
        except (ProfileConfigError, OSError):
            config = BROKEN
    return parse_profile_routes(config, _read_json(home / "gateway.json"))


def match_profile_route(
    routes: Iterable[ProfileRoute],
    platform: object,
    guild_id: object = None,
    chat_id: object = None,
    thread_id: object = None,
    parent_chat_id: object = None,
) -> ProfileRoute | None:
    """The first route (in the given order) that matches, or ``None`` (upstream's function)."""
    for route in routes:
        if route.matches(platform, guild_id, chat_id, thread_id, parent_chat_id):
            return route
    return None
