"""Doctor on the newer Hermes lines: hermes update's fold, a gateway's rewrite, a command upstream's guard cannot
see; and status's SERVES column. Pure pieces here; the same findings on a real 0.22.2 root are checked end to end
in tests/releases/test_fleet.py."""

from __future__ import annotations

from pathlib import Path

from profiles.snapshot import read_profile
from profiles.upstream.releases import KNOWN
from supervisor.doctor.gateway import duplicate_guard_problem
from supervisor.doctor.scan import ProfileEntry, Scan
from supervisor.doctor.upgrades import check_upgrades
from supervisor.ops.status import render

ROWS = {c.release: c for c in KNOWN}


def _scan(root: Path, release: str) -> Scan:
    scan = Scan(root, {}, [])
    scan.contract, scan.version = ROWS[release], release
    scan.profiles = [ProfileEntry("default", root, read_profile("default", root, b"s" * 16))]
    return scan


def test_hermes_update_would_fold_the_fleet_until_the_root_opts_out(tmp_path):
    (tmp_path / "config.yaml").write_text("model: {}\n")
    scan = _scan(tmp_path, "0.22.2")
    check_upgrades(scan)
    [f] = scan.findings
    assert f.code == "auto_multiplex_migration" and "hermes update" in f.message and "hermesd standalone" in f.fix
    for opted_out in ("gateway:\n  auto_multiplex_migration: false\n", "gateway: {auto_multiplex_migration: 'no'}\n"):
        (tmp_path / "config.yaml").write_text(opted_out)
        scan = _scan(tmp_path, "0.22.2")
        check_upgrades(scan)
        assert scan.findings == []
    (tmp_path / "config.yaml").write_text("model: {}\n")
    scan = _scan(tmp_path, "0.20.1")  # no auto-migration on the per-profile line
    check_upgrades(scan)
    assert scan.findings == []


def test_a_gateways_rewrite_of_config_yaml_is_named(tmp_path):
    (tmp_path / "config.yaml").write_text("gateway:\n  multiplex_profiles: true\n  auto_multiplex_migration: false\n")
    (tmp_path / ".multiplex_opt_out_rewritten").write_text("rewritten\n")
    scan = _scan(tmp_path, "0.22.2")
    check_upgrades(scan)
    [f] = scan.findings
    assert f.code == "config_rewritten_by_gateway" and "True" in f.message


def test_commands_upstreams_duplicate_guard_cannot_see():
    assert duplicate_guard_problem(["/venv/bin/hermes"]) is None
    assert duplicate_guard_problem(["/venv/bin/python3", "-m", "hermes_cli.main"]) is None
    problem = duplicate_guard_problem(["/venv/bin/hermesx"])
    assert problem and "hermesx" in problem and "second gateway" in problem
    assert duplicate_guard_problem(["/usr/local/bin/run-hermes.sh"])


def _doc(rows, **sup):
    base = {"state": "running", "pid": 10, "uptime_s": 5, "restarts": 0, "last_exit": None, "reason": None}
    return {"root": "/r", "supervisor": {"running": True, "pid": 1, **sup},
            "profiles": [{**base, **r} for r in rows]}


def test_status_shows_what_each_child_serves_only_where_it_is_reported():
    text = render(_doc([{"name": "default"}, {"name": "coder"}]), now=0)
    assert "SERVES" not in text  # releases that report nothing: no column
    text = render(_doc([
        {"name": "default", "serves": ["default"], "serves_agree": True},
        {"name": "coder", "serves": ["coder", "default"], "serves_agree": False},
        {"name": "writer", "state": "held", "pid": None, "reason": "held: standalone_required: run hermesd standalone"},
    ], release_note="hermes-agent 0.0.0 is no release hermesd was checked against"), now=0)
    lines = text.splitlines()
    assert lines[1].startswith("  note: hermes-agent 0.0.0")
    assert "SERVES" in lines[2]
    assert lines[3].rstrip().endswith("default") and lines[4].rstrip().endswith("coder,default!?")
    assert lines[5].rstrip().endswith("-")
    assert any("disagree" in ln for ln in lines)


def test_the_settings_in_force_read_profiles_by_the_platforms_the_release_ships():
    from profiles.upstream.lines import V022
    from supervisor.config import Config
    from supervisor.daemon.effective import Release, build
    from supervisor.hermes.requirements import Facts

    shipped = {**{p: () for p in V022.platforms - {"a2a"}}, "zulip": ("ZULIP_SITE",)}
    facts = Facts(("python",), version="0.22.2", modules={"gateway.host_attach": True}, platforms=shipped)
    in_force = build(Config(), command=("hermes",), release=Release(facts, ROWS["0.22.2"]))
    assert in_force.line.name == "0.22" and "a2a" not in in_force.line.platforms  # not shipped: never enabled
    assert in_force.unmodelled == {"zulip": ("ZULIP_", "ZULIP_SITE")}
    assert in_force.scrub == ("ZULIP_", "ZULIP_SITE")
    text = render(_doc([{"name": "default"}], platforms_note="hermes-agent 0.22.2 ships zulip, which hermesd …"), now=0)
    assert text.splitlines()[1].startswith("  note: hermes-agent 0.22.2 ships zulip")
