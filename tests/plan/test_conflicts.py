"""Conflict resolution is pure: who keeps a contested token or port, who is held."""

from hypothesis import given
from hypothesis import strategies as st

from profiles.snapshot import Claim
from supervisor.plan.conflicts import all_conflicts, find_conflicts

TOKEN = Claim("credential", "telegram", "telegram-bot-token", "fp1")
OTHER = Claim("credential", "discord", "discord-bot-token", "fp2")
PORT = Claim("port", "api_server", "port", "8642")
PORT_WEBHOOK = Claim("port", "webhook", "port", "8642")


def test_first_in_order_wins_among_stopped():
    held = find_conflicts(["default", "a", "b"], {"a": [TOKEN], "b": [TOKEN], "default": [OTHER]}, running=set())
    assert set(held) == {"b"}
    assert held["b"].holder == "a"
    assert held["b"].reason == "credential_conflict"
    assert "fp1" in held["b"].message and "'a'" in held["b"].message


def test_running_holder_keeps_it_even_if_later_in_order():
    held = find_conflicts(["a", "b"], {"a": [TOKEN], "b": [TOKEN]}, running={"b"})
    assert set(held) == {"a"}
    assert held["a"].holder_state == "running"


def test_two_running_are_not_stopped():
    assert find_conflicts(["a", "b"], {"a": [TOKEN], "b": [TOKEN]}, running={"a", "b"}) == {}


def test_port_conflict_across_platforms():
    held = find_conflicts(["a", "b"], {"a": [PORT], "b": [PORT_WEBHOOK]}, running=set())
    assert held["b"].reason == "port_conflict"


def test_all_conflicts_lists_every_group_in_order():
    groups = all_conflicts(["default", "x", "y", "z"], {"z": [TOKEN], "x": [TOKEN, PORT], "y": [PORT], "default": []})
    assert [(c.kind, names) for c, names in groups] == [("credential", ["x", "z"]), ("port", ["x", "y"])]


names = st.lists(st.sampled_from(list("abcdefgh")), min_size=1, max_size=8, unique=True)


@given(names, st.data())
def test_no_two_unheld_profiles_share_a_claim_unless_both_run(order, data):
    pool = [TOKEN, OTHER, PORT]
    claims = {n: data.draw(st.lists(st.sampled_from(pool), max_size=3)) for n in order}
    running = set(data.draw(st.lists(st.sampled_from(order), max_size=len(order))))
    held = find_conflicts(order, claims, running)
    assert not (set(held) & running)
    free = [n for n in order if n not in held]
    for claim in pool:
        users = [n for n in free if claim in claims[n]]
        assert len(users) <= 1 or all(u in running for u in users)
