"""``hermesd upgrade`` end to end: a real daemon, real gateway processes (the fake gateway, run by the
``hermes`` script of real, tiny "hermes-agent" wheels), pip into a real virtual environment.

The same scenario with the real releases 0.18.2 → 0.19.0 from PyPI is ``tests/releases/test_upgrade.py``
(run by ``scripts/test-releases.sh --upgrade 0.18.2 0.19.0``: it installs packages, so it is not part of the suite).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness import make_root, pid_alive, write_config
from tests.upgrade import support
from tests.upgrade.support import NAMES, assert_one_at_a_time, events, files, rows, run

pytestmark = pytest.mark.slow

GATE = ("--settle", "0.2", "--canary-settle", "0.4", "--gate-timeout", "30")


def test_upgrade_rolls_canary_first_stops_at_a_broken_release_and_rolls_back_byte_for_byte(fleet):
    d, root, site = fleet["d"], fleet["root"], fleet["site"]
    before = rows(d)
    assert all(r["code"]["stale"] is False and r["code"]["how"] == "recorded" for r in before.values())
    tree_0182 = support.tree_digest(site)
    files_0 = files(root)

    # The user upgrades the interpreter by hand: every gateway now runs stale code, and says so.
    support.pip_install(fleet["python"], fleet["wheels"], "hermes-agent==0.19.0")
    stale = rows(d)
    assert {n: r["code"]["stale"] for n, r in stale.items()} == dict.fromkeys(NAMES, True)
    assert all(r["code"]["running"]["version"] == "0.18.2" and r["code"]["installed"]["version"] == "0.19.0"
               for r in stale.values())
    text = d.cli("status").stdout
    assert "4 gateways run older code than the installed hermes-agent 0.19.0" in text
    doctor = json.loads(d.cli("doctor", "--json").stdout)
    assert sorted(f["profile"] for f in doctor["findings"] if f["code"] == "stale_code") == sorted(NAMES)

    # hermesd upgrade rolls them onto it, canary first, one at a time.
    code, doc = run(d, "upgrade", *GATE)
    assert code == 0, doc
    order = doc["order"]
    assert sorted(order) == sorted(NAMES) and order[0] == doc["canary"] != "default"
    assert [s["result"] for s in doc["steps"]] == ["passed"] * 4
    assert_one_at_a_time(root, doc["id"], order)
    after = rows(d)
    assert all(r["state"] == "running" and r["code"]["stale"] is False for r in after.values())
    assert all(after[n]["pid"] != before[n]["pid"] and not pid_alive(before[n]["pid"]) for n in NAMES)
    assert "older code" not in d.cli("status").stdout
    assert (root / "profiles" / "beta" / "skills" / ".bundled_manifest").read_text() == "bundled by 0.19.0\n"
    first = doc["id"]
    # a migration of the kind 'hermes update' makes (a comment: hermesd restarts nothing for it)
    with open(root / "profiles" / "alpha" / "config.yaml", "ab") as fh:
        fh.write(b"# migrated\n")
    tree_0190, files_1 = support.tree_digest(site), files(root)

    # A release whose gateway cannot start: the canary fails its gate, nobody else is touched.
    pids = {n: r["pid"] for n, r in rows(d).items()}
    code, doc = run(d, "upgrade", "--to", str(fleet["broken"]), "--canary", "beta", *GATE)
    assert code == 1 and doc["ok"] is False and "stopped at its first failure" in doc["error"]
    rec = json.loads((root / ".hermesd" / "upgrades" / doc["error"].split()[1] / "record.json").read_text())
    assert [(s["profile"], s["result"]) for s in rec["steps"]] == [("beta", "failed")]
    assert "exit 1" in rec["steps"][0]["reason"]
    now = rows(d)
    for n in ("default", "alpha", "gamma"):
        assert now[n]["pid"] == pids[n] and now[n]["state"] == "running" and now[n]["code"]["stale"] is True
    assert now["beta"]["state"] != "running" or now["beta"]["pid"] != pids["beta"]

    # --rollback: the interpreter and the files are as before that upgrade, byte for byte; all run.
    code, doc = run(d, "upgrade", "--rollback", *GATE)
    assert code == 0, doc
    assert doc["result"] == "rolled_back" and doc["rollback"]["failed"] == []
    assert support.tree_digest(site) == tree_0190
    assert files(root) == files_1
    back = rows(d)
    assert all(r["state"] == "running" and r["code"]["stale"] is False for r in back.values())
    assert {n: back[n]["pid"] for n in ("default", "alpha", "gamma")} == {n: pids[n] for n in ("default", "alpha",
                                                                                               "gamma")}
    evs = [e for e in events(root) if e["type"].startswith("upgrade_") and e.get("operation") == "rollback"]
    assert evs[0]["type"] == "upgrade_started" and evs[-1]["type"] == "upgrade_finished"

    # Rolling back the first upgrade (the interpreter was upgraded by hand, so no copy was taken):
    # the recorded release is reinstalled with pip, the saved files come back, every gateway restarts.
    code, doc = run(d, "upgrade", "--rollback", first, *GATE)
    assert code == 0, doc
    assert files(root) == files_0
    final = rows(d)
    assert all(r["state"] == "running" and r["code"]["running"]["version"] == "0.18.2" and
               r["code"]["stale"] is False for r in final.values())
    installed = d.status()["supervisor"]["installed_code"]
    assert installed == before["default"]["code"]["installed"]  # the same build of 0.18.2 (RECORD digest)
    assert support.tree_digest(site) != tree_0182  # only hermes-agent was reinstalled: helper 2 stayed
    listing = d.cli("upgrade", "--list").stdout
    assert f"{first}" in listing and "rolled_back" in listing


def test_rolling_restart_gates_each_profile_and_stops_at_the_first_failure(tmp_path, hermesd_factory):
    root = make_root(tmp_path, NAMES[1:])
    write_config(root)  # the fake gateway, run directly
    d = hermesd_factory(root)
    d.wait_running(*NAMES, timeout=30)
    before = rows(d)
    code, doc = run(d, "restart", "--all", "--rolling", *GATE)
    assert code == 0, doc
    assert doc["operation"] == "rolling_restart" and len(doc["steps"]) == 4
    assert_one_at_a_time(root, doc["id"], doc["order"])
    assert all(r["pid"] != before[r["name"]]["pid"] for r in rows(d).values())
    # a profile whose files would not start: the restart is refused, and the roll stops there
    pids = {n: r["pid"] for n, r in rows(d).items()}
    (root / "profiles" / "beta" / "config.yaml").write_text("gateway: [unclosed\n")
    code, doc = run(d, "restart", "beta", "gamma", "--rolling", "--canary", "beta", *GATE)
    assert code == 1 and "first failure" in doc["error"]
    assert rows(d)["gamma"]["pid"] == pids["gamma"]
    assert rows(d)["beta"]["pid"] == pids["beta"]  # refused: the running gateway keeps its last good files


def test_upgrade_refuses_before_changing_anything(fleet, tmp_path):
    d = fleet["d"]
    site_before = support.tree_digest(fleet["site"])
    old = support.build_release(tmp_path / "old", "0.17.0")
    code, doc = run(d, "upgrade", "--to", str(old), *GATE)
    assert code == 1 and "older than 0.18.1" in doc["error"]
    code, doc = run(d, "upgrade", "--to", "0.19.0", "--dry-run", *GATE)
    assert code == 0 and doc["result"] == "dry_run" and doc["target"] == "0.19.0"
    assert {"name": "hermes-agent", "version": "0.19.0"} in doc["installs"]
    result = d.cli("upgrade", "--to", "0.19.0", "--canary", "nobody")
    assert result.returncode == 2 and "nobody" in result.stderr
    assert support.tree_digest(fleet["site"]) == site_before
    assert not (fleet["root"] / ".hermesd" / "upgrades").exists() or not any(
        (fleet["root"] / ".hermesd" / "upgrades").iterdir())


def test_upgrade_without_a_daemon_says_so(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    result = subprocess.run([sys.executable, "-m", "supervisor", "upgrade", "--root", str(root)], capture_output=True,
                            text=True, timeout=60, cwd=str(Path(__file__).resolve().parents[2]),
                            env={**os.environ, "HOME": str(tmp_path)})
    assert result.returncode == 3 and "not running" in result.stderr


def test_upgrade_to_another_distribution_with_consent_rolls_one_at_a_time_and_rolls_back_every_file(fleet):
    """0.18.2 (hermes-agent) → 0.22.2 as another distribution (as the newer releases ship), with
    ``--yes``: the consent edits restart nothing, the canary is the first gateway to restart and the
    first on the new code, no gate sees a false "code changed"; the rollback puts back the old
    distribution byte for byte, every saved file (the consent, SOUL.md the new release rewrote) and
    names what else the release created."""
    d, root, site = fleet["d"], fleet["root"], fleet["site"]
    support.build_release(fleet["wheels"], "0.22.2", helper=2, sync_skills=True, soul=True, dist="hermes-agent-fork")
    for name in ("beta", "gamma"):  # a profile on the 0.22 line has an identity file
        (root / "profiles" / name / "SOUL.md").write_text(f"You are {name}.\n")
    before = rows(d)
    files_0, tree_0 = files(root), support.tree_digest(site)

    code, doc = run(d, "upgrade", "--to", "hermes-agent-fork==0.22.2", "--yes", *GATE)
    assert code == 0, doc
    rid, order = doc["id"], doc["order"]
    assert [s["result"] for s in doc["steps"]] == ["passed"] * 4, doc["steps"]
    assert doc["python"]["switch"] == {"from": "hermes-agent", "to": "hermes-agent-fork"}
    assert_one_at_a_time(root, rid, order)
    evs = events(root)
    started = next(e["seq"] for e in evs if e["type"] == "upgrade_started" and e.get("id") == rid)
    canary_at = next(e["seq"] for e in evs if e["type"] == "upgrade_restarting" and e.get("id") == rid)
    assert [e for e in evs if started < e["seq"] < canary_at and e["type"] in ("exited", "started")] == []
    # consent written (and kept in an adoption record), the code switched, each on it
    assert "standalone: true" in (root / "profiles" / "alpha" / "config.yaml").read_text()
    assert "auto_multiplex_migration: false" in (root / "config.yaml").read_text()
    now = rows(d)
    for n, r in now.items():
        assert r["state"] == "running" and r["pid"] != before[n]["pid"] and r["code"]["stale"] is False
        assert r["code"]["running"]["source"] == {"dist": "hermes-agent-fork", "version": "0.22.2"}
    assert (root / "SOUL.md").read_text() == "persona template of 0.22.2\n"

    code, doc = run(d, "upgrade", "--rollback", *GATE)
    assert code == 0, doc
    assert files(root) == files_0  # consent, SOUL.md, manifests: as before, byte for byte
    assert support.tree_digest(site) == tree_0
    # 0.18.2 keeps no skills manifest: the file the new release wrote is removed, its folder named
    assert doc["rollback"]["left"] == {n: ["cache/", "skills/"] for n in NAMES}
    back = rows(d)
    assert all(r["state"] == "running" and r["code"]["running"]["version"] == "0.18.2"
               and r["code"]["running"]["source"]["dist"] == "hermes-agent" for r in back.values())
    records = list((root / ".hermesd" / "standalone").iterdir())
    assert len(records) == 1
    manifest = json.loads((records[0] / "manifest.json").read_text())
    assert manifest["undone_at"] is not None and rid in manifest["undone_by"]


def test_a_switch_by_hand_is_flagged_by_status_and_doctor_alike_and_rolled_back_to_the_old_distribution(fleet):
    """pip uninstall hermes-agent; pip install hermes-agent-fork: status and doctor both flag every
    gateway as running older code; 'hermesd upgrade' rolls them; '--rollback' (no copy was taken)
    reinstalls hermes-agent 0.18.2 (the distribution, release and source they ran), not the new name."""
    d = fleet["d"]
    support.build_release(fleet["wheels"], "0.19.0", helper=2, dist="hermes-agent-fork", name="fork")
    python, wheels = fleet["python"], fleet["wheels"]
    subprocess.run([str(python), "-m", "pip", "uninstall", "-q", "-y", "hermes-agent"], check=True, timeout=120)
    support.pip_install(python, wheels / "fork", "hermes-agent-fork==0.19.0", "--find-links", str(wheels))
    stale = rows(d)
    assert all(r["code"]["stale"] is True and r["code"]["installed"]["source"]["dist"] == "hermes-agent-fork"
               for r in stale.values())
    assert "4 gateways run older code" in d.cli("status").stdout
    doctor = json.loads(d.cli("doctor", "--json").stdout)
    assert sorted(f["profile"] for f in doctor["findings"] if f["code"] == "stale_code") == sorted(NAMES)
    code, doc = run(d, "upgrade", *GATE)
    assert code == 0 and [s["result"] for s in doc["steps"]] == ["passed"] * 4, doc
    assert doc["from"]["source"] == {"dist": "hermes-agent", "version": "0.18.2"}
    code, doc = run(d, "upgrade", "--rollback", *GATE)
    assert code == 0, doc
    back = rows(d)
    assert all(r["code"]["running"]["version"] == "0.18.2" and r["code"]["stale"] is False
               and r["code"]["running"]["source"]["dist"] == "hermes-agent" for r in back.values())
    listed = subprocess.run([str(python), "-m", "pip", "list", "--format=json"], capture_output=True, text=True,
                            check=True, timeout=120).stdout
    names = {x["name"] for x in json.loads(listed)}
    assert "hermes-agent" in names and "hermes-agent-fork" not in names
