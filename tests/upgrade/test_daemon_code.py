"""The daemon's side: the code each child started with survives a hermesd crash (state.json, adoption)
and shows with the daemon down; fleet steps are journaled only through the ``record`` request."""

from __future__ import annotations

import json

import pytest

from supervisor.control.client import ControlError
from supervisor.observe.events import CLIENT_EVENTS, summary, validate
from supervisor.observe.journal import default_folder
from supervisor.observe.reader import iter_events
from tests.harness import pid_alive
from tests.upgrade.support import rows


def test_the_recorded_code_survives_a_hermesd_crash_and_shows_offline(fleet, hermesd_factory):
    d, root = fleet["d"], fleet["root"]
    pids = {n: r["pid"] for n, r in rows(d).items()}
    doc = d.status()
    installed = doc["supervisor"]["installed_code"]
    assert installed is not None and installed["version"]
    for r in doc["profiles"]:
        assert r["code"]["how"] == "recorded" and r["code"]["running"] == installed and r["code"]["stale"] is False
    saved = json.loads(d.layout.state.read_text())
    assert saved["profiles"]["alpha"]["code"] == installed and saved["dist_info"]

    d.kill9()
    assert all(pid_alive(p) for p in pids.values())
    offline = json.loads(d.cli("status", "--json").stdout)
    assert offline["supervisor"]["running"] is False
    assert {r["name"]: (r["code"] or {}).get("how") for r in offline["profiles"]} == dict.fromkeys(pids, "recorded")
    assert "older code" not in d.cli("status").stdout

    d2 = hermesd_factory(root, env=d.env)
    assert d2.wait_running(*pids) == pids  # adopted, not restarted
    for r in d2.status()["profiles"]:
        assert (r["adopted"], r["code"]["how"], r["code"]["running"]) == (True, "recorded", installed)


def test_only_fleet_steps_may_be_recorded_and_they_are_well_formed(fake_root, hermesd_factory):
    d = hermesd_factory(fake_root)
    d.wait_running("coder")
    d.request({"cmd": "record", "event": "upgrade_started", "fields": {"id": "x1", "operation": "upgrade",
                                                                        "target": "0.19.0"}})
    d.request({"cmd": "record", "event": "upgrade_gate", "profile": "coder",
               "fields": {"id": "x1", "operation": "upgrade", "passed": True, "reason": "running", "took_s": 1.5}})
    for bad, why in (({"event": "exited", "profile": "coder"}, "not an event a command may record"),
                     ({"event": "upgrade_gate"}, "needs a profile"),
                     ({"event": "upgrade_finished", "profile": "coder"}, "takes no profile"),
                     ({"event": "upgrade_gate", "profile": "nobody"}, "nobody")):
        with pytest.raises(ControlError, match=why):
            d.request({"cmd": "record", **bad})
    mine = [e for e in iter_events(default_folder(fake_root)) if e["type"] in CLIENT_EVENTS]
    assert [e["type"] for e in mine] == ["upgrade_started", "upgrade_gate"]
    assert all(validate(e) == [] for e in mine)
    assert summary(mine[1]) == "upgrade x1: health gate passed after 1.5s: running"
    assert d.cli("events", "coder").stdout.count("health gate passed") == 1


def test_every_fleet_event_renders():
    base = {"id": "20261201-1", "operation": "rollback"}
    lines = {
        "upgrade_started": summary({"type": "upgrade_started", **base, "target": "0.18.2"}),
        "upgrade_installed": summary({"type": "upgrade_installed", **base, "release": "0.18.2", "code": "abc"}),
        "upgrade_restarting": summary({"type": "upgrade_restarting", **base, "canary": True}),
        "upgrade_gate": summary({"type": "upgrade_gate", **base, "passed": False, "reason": "held", "took_s": 3}),
        "upgrade_restored": summary({"type": "upgrade_restored", **base, "files": ["config.yaml"]}),
        "upgrade_finished": summary({"type": "upgrade_finished", **base, "result": "rolled_back", "reason": ""}),
    }
    assert set(lines) == set(CLIENT_EVENTS)
    assert lines["upgrade_started"] == "rollback 20261201-1 started: to 0.18.2"
    assert lines["upgrade_restarting"] == "rollback 20261201-1: restarting (canary)"
    assert lines["upgrade_gate"] == "rollback 20261201-1: health gate FAILED after 3.0s: held"
    assert lines["upgrade_restored"] == "rollback 20261201-1: files restored: config.yaml"
    assert lines["upgrade_finished"] == "rollback 20261201-1 rolled_back"
