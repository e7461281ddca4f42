"""profile_routes: hermesd's prediction against upstream's own functions, on the same input.

Three layers: upstream's own tests (``tests/gateway/test_profile_routing.py``) ported to run on
both implementations; the six issue-10 cases, each checked against upstream; and property tests
over generated (messy) route configs asserting that parsing, matching and loading (config.yaml
forms and the legacy gateway.json) agree with upstream for every input.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from upstream_routes_oracle import load, match, parse, route_key, routing, typed

from profiles.routes import FORM_JSON, ProfileRoute, load_profile_routes, match_profile_route, parse_profile_routes


@dataclass(frozen=True)
class Impl:
    """One implementation of the route model, behind the same three calls."""

    label: str

    def route(self, **kw: Any) -> Any:
        return routing.ProfileRoute(**kw) if self.label == "upstream" else ProfileRoute(**kw)

    def parse(self, raw: Any) -> list[Any]:
        if self.label == "upstream":
            return parse(raw)
        return list(parse_profile_routes({"profile_routes": raw}).parsed)

    def match(self, routes: list[Any], platform: Any, **kw: Any) -> Any:
        fn = routing.match_profile_route if self.label == "upstream" else match_profile_route
        return fn(routes, platform, **kw)


@pytest.fixture(params=["upstream", "hermesd"])
def impl(request: pytest.FixtureRequest) -> Impl:
    return Impl(request.param)


# --------------------------------------------------------------------------- upstream's tests, on both


def test_specificity(impl: Impl) -> None:
    full = impl.route(name="t", platform="discord", profile="p", guild_id="g", chat_id="c", thread_id="t")
    assert full.specificity == 14
    assert impl.route(name="c", platform="discord", profile="p", guild_id="g", chat_id="c").specificity == 6
    assert impl.route(name="g", platform="discord", profile="p", guild_id="g").specificity == 2
    assert impl.route(name="m", platform="telegram", profile="p").specificity == 0


def test_frozen(impl: Impl) -> None:
    r = impl.route(name="x", platform="discord", profile="p")
    with pytest.raises(AttributeError):
        r.name = "y"


def test_exact_thread_match(impl: Impl) -> None:
    r = impl.route(name="t", platform="discord", profile="trader", guild_id="111", chat_id="222", thread_id="333")
    assert r.matches("discord", guild_id="111", chat_id="222", thread_id="333")
    assert not r.matches("discord", guild_id="111", chat_id="222", thread_id="444")


def test_channel_and_guild_match(impl: Impl) -> None:
    r = impl.route(name="c", platform="discord", profile="helper", chat_id="222")
    assert r.matches("discord", chat_id="222")
    assert not r.matches("discord", chat_id="333")
    assert not r.matches("telegram", chat_id="222")
    g = impl.route(name="g", platform="discord", profile="server", guild_id="111")
    assert g.matches("discord", guild_id="111")
    assert not g.matches("discord", guild_id="222")
    assert g.matches("discord", guild_id="111", chat_id="222")
    assert g.matches("discord", guild_id="111", chat_id="222", thread_id="333")
    assert g.matches("discord", guild_id="111", chat_id="any")


def test_disabled_route_no_match(impl: Impl) -> None:
    r = impl.route(name="d", platform="discord", profile="off", guild_id="111", enabled=False)
    assert not r.matches("discord", guild_id="111")


def test_guild_and_chat_are_conjunctive(impl: Impl) -> None:
    r = impl.route(name="gc", platform="discord", profile="scoped", guild_id="111", chat_id="222")
    assert r.matches("discord", guild_id="111", chat_id="222")
    assert r.matches("discord", guild_id="111", chat_id="333", parent_chat_id="222")
    assert not r.matches("discord", guild_id="999", chat_id="222")
    assert not r.matches("discord", guild_id="111", chat_id="333")


def test_parse_empty_sorted_skips_enabled(impl: Impl) -> None:
    assert impl.parse(None) == [] and impl.parse([]) == []
    raw = [
        {"name": "guild", "platform": "discord", "profile": "p", "guild_id": "1"},
        {"name": "thread", "platform": "discord", "profile": "p", "guild_id": "1", "chat_id": "2", "thread_id": "3"},
        {"name": "channel", "platform": "discord", "profile": "p", "chat_id": "2"},
    ]
    assert [r.name for r in impl.parse(raw)] == ["thread", "channel", "guild"]
    skips = [{"platform": "discord"}, {"profile": "p"}, "not a dict",
             {"name": "ok", "platform": "telegram", "profile": "p"}]
    assert [r.name for r in impl.parse(skips)] == ["ok"]
    flags = [
        {"name": "off", "platform": "discord", "profile": "p", "guild_id": "1", "enabled": False},
        {"name": "on", "platform": "discord", "profile": "p", "guild_id": "1"},
    ]
    routes = impl.parse(flags)
    assert not routes[0].enabled and routes[1].enabled


def test_match_first_fall_through_and_none(impl: Impl) -> None:
    assert impl.match([], "discord") is None
    routes = [
        impl.route(name="thread", platform="discord", profile="trader", guild_id="1", chat_id="2", thread_id="3"),
        impl.route(name="channel", platform="discord", profile="helper", chat_id="2"),
    ]
    assert impl.match(routes, "discord", guild_id="1", chat_id="2", thread_id="3").profile == "trader"
    assert impl.match(routes, "discord", guild_id="1", chat_id="2").profile == "helper"
    assert impl.match([impl.route(name="r", platform="telegram", profile="p")], "discord") is None


def test_parent_chat_id_and_forum_posts(impl: Impl) -> None:
    ch = impl.route(name="ch", platform="discord", profile="trader", chat_id="222")
    assert ch.matches("discord", chat_id="333", parent_chat_id="222")
    assert not ch.matches("discord", chat_id="333", parent_chat_id="444")
    assert ch.matches("discord", chat_id="222")
    assert impl.match([ch], "discord", chat_id="333", parent_chat_id="222").profile == "trader"
    th = impl.route(name="th", platform="discord", profile="helper", thread_id="555")
    assert th.matches("discord", thread_id="555") and not th.matches("discord", parent_chat_id="555")
    g = impl.route(name="g", platform="discord", profile="server", guild_id="111")
    assert g.matches("discord", guild_id="111", chat_id="333", parent_chat_id="444")
    routes = [
        impl.route(name="forum", platform="discord", profile="forum_profile", chat_id="forum_channel_123"),
        impl.route(name="post", platform="discord", profile="post_profile", thread_id="post_thread_456"),
    ]
    hit = impl.match(routes, "discord", chat_id="post_thread_456", parent_chat_id="forum_channel_123")
    assert hit.profile == "forum_profile"


# --------------------------------------------------------------------------- the issue-10 cases


def both(entries: list[Any]) -> tuple[list[Any], list[Any]]:
    return parse(entries), list(parse_profile_routes({"profile_routes": entries}).parsed)


@pytest.mark.parametrize(
    ("extra", "source", "upstream_matches"),
    [
        ({"enabled": None}, {"chat_id": "5"}, False),  # an empty YAML value disables the rule
        ({"enabled": "false"}, {"chat_id": "5"}, True),  # quoted words are non-empty text: enabled
        ({"enabled": "no"}, {"chat_id": "5"}, True),
        ({"enabled": "off"}, {"chat_id": "5"}, True),
        ({"enabled": "maybe"}, {"chat_id": "5"}, True),
        ({"chat_id": True}, {"chat_id": "5"}, False),  # declared, never equal to a text id
        ({"thread_id": 0}, {"chat_id": "5"}, True),  # falsy: a wildcard
        ({"guild_id": " 1 "}, {"guild_id": "1"}, False),  # compared as written
        ({"platform": " discord "}, {"chat_id": "5"}, False),
    ],
)
def test_issue_10_cases_agree_with_upstream(
    extra: dict[str, Any], source: dict[str, Any], upstream_matches: bool
) -> None:
    entry = {"name": "r", "platform": "discord", "profile": "p", **extra}
    theirs, mine = both([entry])
    assert [route_key(r) for r in mine] == [route_key(r) for r in theirs]
    up = match(theirs, platform="discord", **source)
    assert (up is not None) == upstream_matches  # the case is what the issue says upstream does
    ours = match_profile_route(mine, "discord", **source)
    assert route_key(ours) == route_key(up)


def test_legacy_gateway_json_routes_are_loaded(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "gateway.json").write_text(json.dumps({"profile_routes": [
        {"name": "legacy", "platform": "telegram", "chat_id": "-1", "profile": "coder"}]}))
    theirs = load(home)
    mine = load_profile_routes(home)
    assert [r.name for r in theirs] == ["legacy"]  # type: ignore[union-attr]
    assert [route_key(r) for r in mine.parsed] == [route_key(r) for r in theirs]  # type: ignore[union-attr]
    assert mine.source_form == FORM_JSON and any(i.code == "gateway_json" for i in mine.issues)
    # config.yaml's `profile_routes: {}` is not a list: the json routes survive upstream, and here.
    (home / "config.yaml").write_text("profile_routes: {}\n")
    assert [route_key(r) for r in load_profile_routes(home).parsed] == [
        route_key(r) for r in load(home)  # type: ignore[union-attr]
    ]
    assert load_profile_routes(home).parsed
    (home / "config.yaml").write_text("gateway:\n  profile_routes:\n    - {platform: discord, profile: writer}\n")
    theirs_now = [r.profile for r in load(home)]  # type: ignore[union-attr]
    assert [r.profile for r in load_profile_routes(home).parsed] == ["writer"] == theirs_now


# --------------------------------------------------------------------------- properties: parse + match

MESSY = [
    None, True, False, 0, 1, 2.5, 0.0, "", " ", "1", " 1 ", "2", "discord", " discord ", "Discord", "telegram",
    "false", "no", "off", "maybe", "true", "a", "B", " c ", "Default", "default", "test", "../x", "ok\n", "x y",
    "é", "\u212a", [], [1], {}, {"a": 1},
]
messy = st.sampled_from(MESSY)
ids = st.sampled_from([None, "1", "2", " 1 ", 1, 0, True, "", "0"])
entry = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={"name": st.sampled_from(["r1", "r2", "", None, 3]), "platform": messy, "profile": messy,
                  "guild_id": ids, "chat_id": ids, "thread_id": ids, "enabled": messy},
    ),
    messy,
)
source = st.fixed_dictionaries(
    {
        "platform": st.sampled_from(["discord", "telegram", " discord ", "Discord"]),
        "guild_id": st.sampled_from([None, "1", "2", " 1 "]),
        "chat_id": st.sampled_from([None, "1", "2"]),
        "thread_id": st.sampled_from([None, "1", "0", "2"]),
        "parent_chat_id": st.sampled_from([None, "1", "2"]),
    }
)


@settings(max_examples=600)
@given(st.lists(entry, max_size=8), source)
def test_parse_and_match_agree_with_upstream(entries: list[Any], src: dict[str, Any]) -> None:
    theirs, mine = both(entries)
    assert [route_key(r) for r in mine] == [route_key(r) for r in theirs]
    assert [r.specificity for r in mine] == [r.specificity for r in theirs]
    up = match(theirs, **src)
    ours = match_profile_route(mine, **src)
    assert route_key(ours) == route_key(up)
    if up is not None:
        assert theirs.index(up) == mine.index(ours)


@settings(max_examples=300)
@given(st.one_of(messy, st.lists(entry, max_size=4)))
def test_any_route_list_value_parses_like_upstream(raw: Any) -> None:
    """Whatever the list slot holds (a number raises upstream: the loader error is predicted)."""
    try:
        theirs: list[Any] | BaseException = parse(raw)
    except TypeError as exc:
        theirs = exc
    found, issues = __import__("profiles.routes", fromlist=["parse_route_entries"]).parse_route_entries(raw)
    if isinstance(theirs, BaseException):
        assert found == [] and [i.code for i in issues] == ["loader_error"]
    else:
        assert [route_key(r) for r in found] == [route_key(r) for r in theirs]


# --------------------------------------------------------------------------- properties: where the list comes from

_route_list = st.lists(
    st.fixed_dictionaries({"name": st.sampled_from(["y1", "y2"]), "platform": st.just("discord"),
                           "profile": st.sampled_from(["a", "b"])}),
    max_size=2,
)
_slot = st.one_of(st.none(), _route_list, st.sampled_from([{}, {"x": 1}, "junk", 3, []]))
_config = st.one_of(
    st.just("MISSING"),
    st.just("BROKEN"),
    st.sampled_from([[], [1], "text", 0, None]),
    st.fixed_dictionaries({}, optional={
        "profile_routes": _slot,
        "gateway": st.one_of(st.fixed_dictionaries({}, optional={"profile_routes": _slot}),
                             st.sampled_from(["junk", None])),
    }),
)
_json_routes = st.lists(
    st.fixed_dictionaries({"name": st.just("j"), "platform": st.just("telegram"), "profile": st.just("c")}), max_size=2
)
_gateway_json = st.one_of(
    st.just("MISSING"),
    st.just("BROKEN"),
    st.sampled_from([[], [1], "text", 0, None, {}]),
    st.fixed_dictionaries({}, optional={
        "profile_routes": st.one_of(_json_routes, st.sampled_from(["s", {}, 5, 2.5, True, None])),
    }),
)


def _write(home: Path, config: Any, gateway_json: Any) -> None:
    for name in ("config.yaml", "gateway.json"):
        (home / name).unlink(missing_ok=True)
    if config == "BROKEN":
        (home / "config.yaml").write_text("profile_routes: [unclosed\n")
    elif config != "MISSING":
        (home / "config.yaml").write_text(yaml.safe_dump(config))
    if gateway_json == "BROKEN":
        (home / "gateway.json").write_text("{not json")
    elif gateway_json != "MISSING":
        (home / "gateway.json").write_text(json.dumps(gateway_json))


@settings(max_examples=250, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_config, _gateway_json)
def test_loading_agrees_with_upstreams_loader(tmp_path: Path, config: Any, gateway_json: Any) -> None:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    _write(home, config, gateway_json)
    theirs = load(home)
    mine = load_profile_routes(home)
    loader_error = any(i.code == "loader_error" for i in mine.issues)  # what the doctor reports
    if isinstance(theirs, BaseException):
        assert loader_error and mine.parsed == ()
    else:
        assert not loader_error
        assert [route_key(r) for r in mine.parsed] == [route_key(r) for r in theirs]


def test_typed_keys_keep_types_apart() -> None:
    assert typed(1) != typed(True) != typed(1.0)
