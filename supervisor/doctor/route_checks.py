"""Doctor checks of the root's multiplexing and ``profile_routes``, read exactly as upstream reads them."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from profiles.credentials import profile_ports
from profiles.errors import ProfileError
from profiles.routes import FORM_JSON, FORM_NESTED, FORM_TOP, load_profile_routes
from profiles.upstream.bools import multiplex_override
from profiles.upstream.process import config_multiplex
from supervisor.doctor.scan import DEFAULT, Scan
from supervisor.plan.verdict import ERROR, INFO, WARNING

if TYPE_CHECKING:
    from profiles.routes import ProfileRoute, RouteIssue


def check_multiplex_and_routes(scan: Scan) -> None:
    default = scan.by_name(DEFAULT)
    if default is None or default.config is None or default.env is None:
        return
    cfg = default.config

    from_config = config_multiplex(cfg)
    from_env = multiplex_override(default.env.get("GATEWAY_MULTIPLEX_PROFILES"))
    multiplex = from_env if from_env is not None else from_config
    _check_routes(scan, cfg, multiplex, forced_on=from_env is True)
    if from_config and from_env is None and not (scan.contract is not None and scan.contract.multiplex_default):
        scan.add(
            WARNING, "multiplex_profiles_on", DEFAULT,
            f"{scan.root / 'config.yaml'} turns on gateway.multiplex_profiles. hermesd turns it off for its "
            "children (GATEWAY_MULTIPLEX_PROFILES=false) and runs one gateway per profile instead, so "
            "profile_routes and the /p/<profile>/ URL prefixes do not apply under hermesd",
            "set gateway.multiplex_profiles: false (or remove it) so the file says what happens",
        )
    if multiplex:
        _check_secondary_ports(scan)

def _check_routes(scan: Scan, cfg: dict[str, Any], multiplex: bool, *, forced_on: bool) -> None:
    parsed = load_profile_routes(scan.root, cfg)
    for issue in parsed.issues:
        if issue.index is None:
            _list_issue(scan, issue, cfg)
    if parsed.source_form is None:
        return
    path = scan.root / ("gateway.json" if parsed.source_form == FORM_JSON else "config.yaml")
    key = {FORM_TOP: "profile_routes", FORM_NESTED: "gateway.profile_routes"}.get(parsed.source_form,
                                                                               "profile_routes")
    count = len(parsed.parsed) + sum(1 for i in parsed.issues if i.code in _DROPPED)
    if count:
        # Under hermesd multiplexing is always off for the children, so routes never apply;
        # when the file also has it off, Hermes alone would ignore them as well.
        if not multiplex:
            why = ("gateway.multiplex_profiles is off, so Hermes ignores every one of them (and hermesd, which "
                   "runs one gateway per profile, never applies routes either)")
        elif forced_on:
            why = ("hermesd runs one gateway per profile with multiplexing off, so once GATEWAY_MULTIPLEX_PROFILES "
                   "is out of the root's .env (see multiplex_env_override) they are ignored")
        else:
            why = ("hermesd turns multiplexing off for its children and runs one gateway per profile, so "
                   "they are ignored")
        scan.add(
            WARNING, "routes_without_multiplex", DEFAULT,
            f"{path} has {count} {key} rule(s), but {why}",
            "under hermesd give each profile its own bot token instead of routes; routes only work in "
            "upstream's single multiplexing gateway",
        )
    for issue in parsed.issues:
        if issue.index is not None:
            _entry_issue(scan, issue, f"{path}: {key}")
    _route_targets(scan, parsed.routes, key, path)
    _route_overlaps(scan, parsed.routes, key)


# Entries upstream's parser skips (they count as written rules, not as loaded ones).
_DROPPED = frozenset({"not_a_mapping", "missing_platform", "missing_profile", "invalid_profile"})


def _list_issue(scan: Scan, issue: RouteIssue, cfg: dict[str, Any]) -> None:
    """An issue with the route list as a whole (which list Hermes loads, or whether it loads at all)."""
    if issue.code == "both_forms":
        gateway = cfg.get("gateway")
        nested = gateway.get("profile_routes") if isinstance(gateway, dict) else None
        count = len(nested) if isinstance(nested, list) else 0
        scan.add(WARNING, "routes_both_forms", DEFAULT,
                 f"{scan.root / 'config.yaml'}: {issue.message}, so the {count} nested rule(s) are ignored",
                 "merge the rules into one list (hermes config set writes the nested gateway.profile_routes)")
    elif issue.code == "loader_error":
        scan.add(ERROR, "routes_break_loader", DEFAULT, issue.message,
                 f"fix or remove profile_routes in {scan.root / 'gateway.json'}")
    elif issue.code == "gateway_json":
        scan.add(INFO, "routes_gateway_json", DEFAULT, issue.message,
                 "keep the routes in config.yaml (profile_routes) and remove them from gateway.json")
    else:
        scan.add(WARNING, "route_entry_problem", DEFAULT, issue.message, "make profile_routes a list of rules")


def _entry_issue(scan: Scan, issue: RouteIssue, where: str) -> None:
    """One rule's issue, with upstream's consequence (dropped, never matching, or on despite its text)."""
    if issue.code == "invalid_profile":
        scan.add(
            WARNING, "route_invalid_name", DEFAULT, f"{where}: {issue.message}. Hermes drops this rule silently",
            "use an existing profile's name: lower-case letters, digits, '-' and '_', and none of "
            "the reserved names hermes, test, tmp, root, sudo",
        )
    elif issue.code == "disabled":
        scan.add(INFO, "route_disabled", DEFAULT, f"{where}: {issue.message}",
                 "nothing to do if you switched it off on purpose")
    else:
        scan.add(WARNING, "route_entry_problem", DEFAULT, f"{where}: {issue.message}",
                 "fix the rule; Hermes skips or never matches it")


def _route_targets(scan: Scan, routes: Sequence[ProfileRoute], key: str, path: Path) -> None:
    missing: dict[str, list[str]] = {}
    for route in routes:
        if route.profile != DEFAULT and not (scan.root / "profiles" / route.profile).is_dir():
            missing.setdefault(route.profile, []).append(_route_name(route))
    for target, names in sorted(missing.items()):
        scan.add(
            WARNING, "route_profile_missing", DEFAULT,
            f"{path}: {key} rule(s) {', '.join(names)} send messages to profile {target!r}, which has no folder "
            f"under {scan.root / 'profiles'}; Hermes falls back to the global home for them (shared memory)",
            f"create the profile ('hermesd profile create {target}') or fix the rule's profile name",
        )

def _route_overlaps(scan: Scan, routes: Sequence[ProfileRoute], key: str) -> None:
    for i, first in enumerate(routes):
        for second in routes[i + 1 :]:
            if first.profile == second.profile or not _overlap(first, second):
                continue
            sample = _sample_source(first, second)
            if first.specificity != second.specificity:
                scan.add(
                    INFO, "route_overlap", DEFAULT,
                    f"{key}: {_route_desc(first)} and {_route_desc(second)} both match a message from {sample}; "
                    f"{_route_name(first)} wins (specificity {first.specificity} > {second.specificity}), "
                    f"so it goes to profile {first.profile!r}",
                    "nothing to do if this override is what you meant; otherwise narrow one rule",
                )
            else:
                scan.add(
                    WARNING, "route_overlap_tie", DEFAULT,
                    f"{key}: {_route_desc(first)} and {_route_desc(second)} both match a message from {sample} "
                    f"with the same specificity ({first.specificity}); the one written first wins: "
                    f"{_route_name(first)} -> profile {first.profile!r}. Reordering the file changes routing",
                    "make one rule more specific (add chat_id or thread_id) or remove the duplicate",
                )

def _check_secondary_ports(scan: Scan) -> None:
    for prof in scan.profiles:
        if prof.name == DEFAULT or not prof.ok:
            continue
        try:
            platforms = sorted({b.platform for b in profile_ports(prof.home)})
        except (ProfileError, ValueError, OSError):
            continue
        if not platforms:
            continue
        scan.add(
            WARNING, "secondary_port_binding", prof.name,
            f"profile {prof.name!r} enables port-binding platform(s) {', '.join(platforms)} while the root "
            "turns on multiplexing: a multiplexing Hermes gateway skips this whole profile (the default "
            f"profile owns the one HTTP listener and serves it at /p/{prof.name}/). hermesd runs it in its own "
            "process, so it works here, but not if you go back to upstream multiplexing",
            f"configure {', '.join(platforms)} only on the default profile, or turn multiplexing off in the "
            "root's config.yaml",
        )


def _overlap(a: ProfileRoute, b: ProfileRoute) -> bool:
    """Whether one message can satisfy both rules: same platform, no discriminator in contradiction.

    Two different ``chat_id`` values are treated as disjoint, although a thread of one
    channel could carry the other as its parent; that would need knowledge of the platform.
    """
    if a.platform != b.platform:
        return False
    for key in ("guild_id", "chat_id", "thread_id"):
        va, vb = getattr(a, key), getattr(b, key)
        if va and vb and va != vb:
            return False
    return True


def _sample_source(a: ProfileRoute, b: ProfileRoute) -> str:
    parts = [str(a.platform)]
    for key, label in (("guild_id", "guild"), ("chat_id", "chat"), ("thread_id", "thread")):
        value = getattr(a, key) or getattr(b, key)
        if value:
            parts.append(f"{label} {value}")
    return " ".join(parts)


def _route_name(route: ProfileRoute) -> str:
    return repr(route.name) if route.name else "(unnamed rule)"


def _route_desc(route: ProfileRoute) -> str:
    keys = [f"{label} {getattr(route, key)}" for key, label in
            (("guild_id", "guild"), ("chat_id", "chat"), ("thread_id", "thread")) if getattr(route, key)]
    scope = " ".join([str(route.platform), *keys])
    return f"{_route_name(route)} ({scope} -> {route.profile})"
