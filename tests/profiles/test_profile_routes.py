"""profile_routes: parsing, specificity ordering and matching (also against hermes-agent's own code)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from profiles.routes import (
    FORM_NESTED,
    FORM_TOP,
    ProfileRoute,
    match_profile_route,
    parse_profile_routes,
)

GUILD, CHANNEL, THREAD = "1234567890", "9876543210", "5555"


def test_specificity_weights() -> None:
    assert ProfileRoute("discord", "p").specificity == 0
    assert ProfileRoute("discord", "p", guild_id="g").specificity == 2
    assert ProfileRoute("discord", "p", chat_id="c").specificity == 4
    assert ProfileRoute("discord", "p", thread_id="t").specificity == 8
    assert ProfileRoute("discord", "p", guild_id="g", chat_id="c", thread_id="t").specificity == 14


def test_matching_is_conjunctive() -> None:
    route = ProfileRoute("discord", "support", guild_id=GUILD, chat_id=CHANNEL)
    assert route.matches("discord", guild_id=GUILD, chat_id=CHANNEL)
    assert not route.matches("discord", guild_id="other", chat_id=CHANNEL)
    assert not route.matches("discord", chat_id=CHANNEL)
    assert not route.matches("telegram", guild_id=GUILD, chat_id=CHANNEL)


def test_chat_matches_its_threads_through_parent() -> None:
    channel = ProfileRoute("discord", "chan", chat_id=CHANNEL)
    assert channel.matches("discord", chat_id=THREAD, parent_chat_id=CHANNEL)
    assert not channel.matches("discord", chat_id=THREAD, parent_chat_id="elsewhere")


def test_thread_only_rule_is_not_hit_by_parent_channel() -> None:
    thread = ProfileRoute("discord", "thr", thread_id=THREAD)
    assert thread.matches("discord", chat_id=CHANNEL, thread_id=THREAD)
    assert not thread.matches("discord", chat_id=CHANNEL)
    assert not thread.matches("discord", chat_id=THREAD)


def test_disabled_route_never_matches() -> None:
    assert not ProfileRoute("discord", "p", enabled=False).matches("discord")


def test_most_specific_wins_after_parse() -> None:
    config = {
        "profile_routes": [
            {"name": "server", "platform": "discord", "guild_id": GUILD, "profile": "server-profile"},
            {"name": "support", "platform": "discord", "guild_id": GUILD, "chat_id": CHANNEL, "profile": "Support"},
            {"name": "thread", "platform": "discord", "chat_id": CHANNEL, "thread_id": THREAD, "profile": "thr"},
            {"name": "tg", "platform": "telegram", "chat_id": "-100123", "profile": "tg-profile"},
        ]
    }
    parsed = parse_profile_routes(config)
    assert [r.name for r in parsed.routes] == ["thread", "support", "tg", "server"]
    assert parsed.warnings == () and parsed.forms == {FORM_TOP} and parsed.source_form == FORM_TOP

    def pick(**source: Any) -> str | None:
        hit = match_profile_route(parsed.routes, **source)
        return hit.profile if hit else None

    assert pick(platform="discord", guild_id=GUILD, chat_id="other") == "server-profile"
    assert pick(platform="discord", guild_id=GUILD, chat_id=CHANNEL) == "support"
    assert pick(platform="discord", guild_id=GUILD, chat_id=CHANNEL, thread_id=THREAD) == "thr"
    assert pick(platform="discord", guild_id="x", chat_id="y") is None
    assert pick(platform="telegram", chat_id="-100123") == "tg-profile"


def test_sort_is_stable_for_equal_specificity() -> None:
    config = {
        "profile_routes": [
            {"name": "first", "platform": "discord", "chat_id": "1", "profile": "a"},
            {"name": "broad", "platform": "discord", "profile": "b"},
            {"name": "second", "platform": "discord", "chat_id": "1", "profile": "c"},
        ]
    }
    assert [r.name for r in parse_profile_routes(config).routes] == ["first", "second", "broad"]


def test_skipped_entries_are_named_in_warnings() -> None:
    config = {
        "gateway": {
            "profile_routes": [
                "not a mapping",
                {"name": "no-platform", "profile": "p"},
                {"name": "no-profile", "platform": "discord"},
                {"name": "bad-name", "platform": "discord", "profile": "../etc"},
                {"name": "reserved", "platform": "discord", "profile": "test"},
                {"name": "off", "platform": "discord", "profile": "p", "enabled": False},
                {"name": "weird", "platform": "discord", "profile": "p", "enabled": "maybe"},
                {"platform": "discord", "profile": "Default"},
            ]
        }
    }
    parsed = parse_profile_routes(config)
    # Upstream keeps the disabled rule (it never matches) and treats "maybe" as enabled.
    assert [(r.name, r.profile, r.enabled) for r in parsed.parsed] == [
        ("off", "p", False), ("weird", "p", "maybe"), ("", "default", True)
    ]
    assert [(r.name, r.profile) for r in parsed.routes] == [("weird", "p"), ("", "default")]
    assert parsed.forms == {FORM_NESTED} and parsed.source_form == FORM_NESTED
    codes = [(i.index, i.code) for i in parsed.issues]
    assert codes == [
        (0, "not_a_mapping"), (1, "missing_platform"), (2, "missing_profile"), (3, "invalid_profile"),
        (4, "invalid_profile"), (5, "disabled"), (6, "enabled_text"),
    ]
    w = parsed.warnings
    assert w[0].startswith("profile route #0 (nested)") and "not a mapping" in w[0]
    assert "#1 'no-platform' (nested)" in w[1] and "missing platform" in w[1]
    assert "#2 'no-profile'" in w[2] and "missing profile" in w[2]
    assert "#3 'bad-name'" in w[3] and "'../etc'" in w[3]
    assert "#4 'reserved'" in w[4] and "reserved" in w[4]
    assert "#5 'off'" in w[5] and "disabled" in w[5]
    assert "#6 'weird'" in w[6] and "ON" in w[6]


def test_top_level_wins_and_both_forms_are_flagged() -> None:
    config = {
        "profile_routes": [{"name": "top", "platform": "discord", "profile": "a"}],
        "gateway": {"profile_routes": [{"name": "nested", "platform": "discord", "profile": "b"}]},
    }
    parsed = parse_profile_routes(config)
    assert [r.name for r in parsed.routes] == ["top"]
    assert parsed.forms == {FORM_TOP, FORM_NESTED}
    assert any("only the top-level" in w for w in parsed.warnings)


def test_absent_and_malformed_route_lists() -> None:
    assert parse_profile_routes({}).routes == () and parse_profile_routes({}).forms == frozenset()
    parsed = parse_profile_routes({"profile_routes": {"not": "a list"}})
    assert parsed.routes == () and "must be a list" in parsed.warnings[0]
    assert parse_profile_routes({"gateway": "junk"}).routes == ()


def test_unquoted_ids_never_match_and_are_flagged() -> None:
    """Upstream keeps ``guild_id: 42`` as the int 42 and compares it with text ids: never a match."""
    entry = {"name": "n", "platform": "discord", "guild_id": 42, "profile": "p"}
    parsed = parse_profile_routes({"profile_routes": [entry]})
    assert parsed.routes[0].guild_id == 42 and parsed.routes[0].specificity == 2
    assert not parsed.routes[0].matches("discord", guild_id="42")
    assert "not a quoted string" in parsed.warnings[0] and parsed.issues[0].code == "id_not_text"


# --------------------------------------------------------------------------- properties

ids = st.sampled_from([None, "1", "2", "3"])
route_dicts = st.fixed_dictionaries(
    {"platform": st.sampled_from(["discord", "telegram"]), "profile": st.sampled_from(["a", "b", "c"])},
    optional={"name": st.sampled_from(["r1", "r2"]), "guild_id": ids, "chat_id": ids, "thread_id": ids},
)
sources = st.fixed_dictionaries(
    {
        "platform": st.sampled_from(["discord", "telegram"]),
        "guild_id": ids,
        "chat_id": ids,
        "thread_id": ids,
        "parent_chat_id": ids,
    }
)


@settings(max_examples=300)
@given(st.lists(route_dicts, max_size=8), sources)
def test_first_match_is_a_most_specific_match(routes: list[dict[str, Any]], source: dict[str, Any]) -> None:
    parsed = parse_profile_routes({"profile_routes": routes})
    hit = match_profile_route(parsed.routes, **source)
    matching = [r for r in parsed.routes if r.matches(**source)]
    if not matching:
        assert hit is None
        return
    assert hit is matching[0]
    assert hit.specificity == max(r.specificity for r in matching)
    # conjunctive: every declared discriminator holds
    if hit.guild_id:
        assert hit.guild_id == source["guild_id"]
    if hit.thread_id:
        assert hit.thread_id == source["thread_id"]
    if hit.chat_id:
        assert hit.chat_id in (source["chat_id"], source["parent_chat_id"])


@settings(max_examples=300)
@given(st.lists(route_dicts, max_size=8), sources)
def test_agrees_with_hermes_agent(routes: list[dict[str, Any]], source: dict[str, Any]) -> None:
    upstream = pytest.importorskip("gateway.profile_routing")
    theirs = upstream.match_profile_route(upstream.parse_profile_routes(routes), **source)
    mine = match_profile_route(parse_profile_routes({"profile_routes": routes}).routes, **source)

    def key(r: Any) -> tuple[Any, ...] | None:
        return None if r is None else (r.platform, r.profile, r.name, r.guild_id, r.chat_id, r.thread_id)

    assert key(mine) == key(theirs)
