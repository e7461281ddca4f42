"""A gateway rewrites the root's config.yaml (upstream's multiplex-default line leaves a marker when it does):
the running daemon sees the marker appear and says so in status and as an event. Fake gateways; the marker
is written the way upstream writes it."""

from __future__ import annotations

import json

from tests.harness import wait_for


def test_a_rewrite_of_config_yaml_is_seen_when_it_happens(fake_root, hermesd_factory):
    (fake_root / "config.yaml").write_text("gateway:\n  multiplex_profiles: false\n")
    d = hermesd_factory(fake_root)
    d.wait_running("default", "coder", "writer")
    assert d.status()["supervisor"]["rewrite_note"] is None
    (fake_root / ".multiplex_opt_out_rewritten").write_text("gateway.multiplex_profiles: false is retired and was "
                                                       "rewritten to true\n")
    note = wait_for(lambda: d.status()["supervisor"]["rewrite_note"], 10, what="the rewrite in status")
    assert str(fake_root / "config.yaml") in note and ".multiplex_opt_out_rewritten" in note
    assert "! a gateway rewrote" in d.cli("status").stdout
    events = [json.loads(line) for line in d.cli("events", "--json").stdout.splitlines() if line]
    rewrites = [e for e in events if e["type"] == "config_rewritten"]
    assert len(rewrites) == 1 and rewrites[0]["file"] == str(fake_root / "config.yaml")
    # the same marker again (rewritten in place, same time) is one incident, not a second event
    d.request({"cmd": "reload"})
    events = [json.loads(line) for line in d.cli("events", "--json").stdout.splitlines() if line]
    assert len([e for e in events if e["type"] == "config_rewritten"]) == 1


def test_the_key_turning_true_without_a_marker_is_a_rewrite_too(fake_root, hermesd_factory):
    """Upstream's default gateway writes multiplex_profiles: true when it folds profiles in and the key was
    unset; it leaves a marker only when it overwrote an explicit false."""
    (fake_root / "config.yaml").write_text("model: {}\n")
    d = hermesd_factory(fake_root)
    d.wait_running("default")
    (fake_root / "config.yaml").write_text("model: {}\ngateway:\n  multiplex_profiles: true\n")
    note = wait_for(lambda: d.status()["supervisor"]["rewrite_note"], 10, what="the rewrite in status")
    assert "now says gateway.multiplex_profiles: true" in note
    events = [json.loads(line) for line in d.cli("events", "--json").stdout.splitlines() if line]
    assert [e["marker"] for e in events if e["type"] == "config_rewritten"] == [None]
