"""The upgrade's pre-flight: the settings a target release needs that the root lacks."""

from __future__ import annotations

from pathlib import Path

import pytest

from supervisor.upgrade import needs


@pytest.fixture
def served(tmp_path: Path) -> list[tuple[str, Path]]:
    root = tmp_path / "root"
    out = [("default", root)]
    for name in ("coder", "writer"):
        (root / "profiles" / name).mkdir(parents=True)
        out.append((name, root / "profiles" / name))
    return out


@pytest.mark.parametrize("release", ["0.18.1", "0.18.2", "0.19.0", "0.20.1", "0.21.3"])
def test_the_releases_before_the_one_gateway_per_host_line_need_nothing(served, release):
    (served[1][1] / "config.yaml").write_text("{{{ not yaml")
    assert needs.missing_for(release, served) == []


def test_from_022_every_named_profile_needs_standalone_and_the_default_the_migration_opt_out(served):
    root, coder, writer = (h for _, h in served)
    (coder / "config.yaml").write_text("gateway:\n  standalone: true\n")
    (writer / "config.yaml").write_text("gateway:\n  standalone: 'no'\n")
    missing = needs.missing_for("0.22.2.post1", served)
    assert [(n.profile, n.setting.key, n.found) for n in missing] == [
        ("default", "gateway.auto_multiplex_migration", "absent"),
        ("writer", "gateway.standalone", "'no'"),
    ]
    assert "exits 78" in missing[1].describe() and str(writer / "config.yaml") in missing[1].describe()
    (root / "config.yaml").write_text("gateway:\n  auto_multiplex_migration: false\n")
    (writer / "config.yaml").write_text("gateway: {standalone: yes}\n")
    assert needs.missing_for("0.22.0", served) == []


def test_an_unreadable_config_counts_as_missing(served):
    (served[1][1] / "config.yaml").write_text("gateway: [unclosed\n")
    missing = needs.missing_for("0.22.2", served)
    coder = [n for n in missing if n.profile == "coder"]
    assert len(coder) == 1 and coder[0].found.startswith("cannot read")
    assert coder[0].setting.key == "gateway.standalone"


def test_consent_writes_them_as_standalone_would_with_a_record_to_undo(served):
    """``--yes`` is the consent: every missing setting is written (diff said, original kept), nothing
    is left missing, and ``hermesd standalone --undo``'s code puts the files back byte for byte."""
    from profiles import standalone
    from supervisor.layout import Layout

    root, coder, writer = (h for _, h in served)
    (coder / "config.yaml").write_text("# mine\nmodel: x\n")
    (writer / "SOUL.md").write_text("soul")
    missing = needs.missing_for("0.22.2", served)
    assert len(missing) == 3
    said: list[str] = []
    needs.settle(missing, root, said.append)
    assert needs.missing_for("0.22.2", served) == []
    assert "# mine\nmodel: x\n" in (coder / "config.yaml").read_text()
    assert any("+  standalone: true" in s for s in said) and "hermesd standalone --undo" in said[-1]
    record = standalone.latest(*Layout(root).standalone_dirs)
    assert record is not None and all(r.restored for r in standalone.undo(record))
    assert (coder / "config.yaml").read_text() == "# mine\nmodel: x\n"
    assert not (writer / "config.yaml").exists()
