"""hermesd standalone's pieces: the one-key YAML edit, and its plan, write, backup and byte-for-byte undo."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from profiles import standalone
from profiles.upstream import multiplex as mx
from profiles.yamledit import EditRefused, set_key


@pytest.mark.parametrize(("text", "want"), [
    ("", "gateway:\n  standalone: true\n"),
    ("model: x", "model: x\ngateway:\n  standalone: true\n"),
    ("# keep\nagent:\n  max_turns: 10\n", "# keep\nagent:\n  max_turns: 10\ngateway:\n  standalone: true\n"),
    ("gateway:\n  foo: 1  # mine\nz: 2\n", "gateway:\n  standalone: true\n  foo: 1  # mine\nz: 2\n"),
    ("gateway:\n    foo: 1\n", "gateway:\n    standalone: true\n    foo: 1\n"),
    ("gateway:\n", "gateway:\n  standalone: true\n"),
    ("gateway:\n  standalone: false  # was\n", "gateway:\n  standalone: true  # was\n"),
    ("gateway:\n  standalone: 'no'\n", "gateway:\n  standalone: true\n"),
    ("gateway:\r\n  foo: 1\r\n", "gateway:\r\n  standalone: true\r\n  foo: 1\r\n"),
    ("gateway:\n  standalone: true\n", "gateway:\n  standalone: true\n"),  # already so: unchanged
])
def test_set_key_changes_one_line_and_nothing_else(text, want):
    assert set_key(text, "gateway", "standalone", True) == want


@pytest.mark.parametrize("text", [
    "gateway: {foo: 1}\n", "gateway: 3\n", "x: &a {y: 1}\ngateway: *a\n", "gateway: # note\n", "- a\n- b\n",
    "gateway:\n  standalone: |\n    true\n",
])
def test_set_key_refuses_what_it_cannot_edit_exactly(text):
    with pytest.raises(EditRefused) as err:
        set_key(text, "gateway", "standalone", True)
    assert "standalone: true" in str(err.value)  # the line to add by hand


_keys = st.text("abcxyz_", min_size=1, max_size=6)
_scalars = st.one_of(st.integers(-5, 5), st.booleans(), st.text("abc ", max_size=5))


@settings(max_examples=150)
@given(st.dictionaries(_keys, st.one_of(_scalars, st.dictionaries(_keys, _scalars, max_size=3)), max_size=5),
       st.booleans())
def test_set_key_on_generated_documents_sets_exactly_the_key(doc, flow):
    text = yaml.safe_dump(doc, default_flow_style=flow, sort_keys=False) if doc else ""
    try:
        out = set_key(text, "gateway", "standalone", True)
    except EditRefused:
        return  # refusing is always allowed; a wrong edit never is
    got = yaml.safe_load(out) or {}
    want = dict(doc)
    old = doc.get("gateway")
    want["gateway"] = {**old, "standalone": True} if isinstance(old, dict) else {"standalone": True}
    assert got == want


def _root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    for name in ("coder", "writer"):
        (root / "profiles" / name).mkdir(parents=True)
    (root / "config.yaml").write_bytes(b"\xef\xbb\xbf# BOM and CRLF\r\nmodel: {}\r\n")
    (root / "profiles" / "coder" / "config.yaml").write_text("# coder\nagent:\n  max_turns: 10\n")
    (root / "profiles" / "coder" / "config.yaml").chmod(0o640)
    (root / "profiles" / "writer" / ".env").write_text("")  # a profile with no config.yaml yet
    (root / "profiles" / "not-a-profile").mkdir()  # no identity file: not a profile on that line
    return root


def _digest(paths: list[Path]) -> dict[Path, str | None]:
    return {p: hashlib.sha256(p.read_bytes()).hexdigest() if p.exists() else None for p in paths}


def test_plan_apply_undo_restores_every_byte(tmp_path):
    root = _root(tmp_path)
    files = [root / "config.yaml", *(root / "profiles" / n / "config.yaml" for n in ("coder", "writer"))]
    before = _digest(files)
    changes, refusals = standalone.plan(root)
    assert refusals == [] and sorted(c.profile for c in changes) == ["coder", "default", "writer"]
    assert all(c.diff().startswith("---") for c in changes)
    assert not (root / "profiles" / "not-a-profile" / "config.yaml").exists()
    record = standalone.apply(changes, _backups(tmp_path))
    assert mx.standalone(yaml.safe_load((root / "profiles" / "coder" / "config.yaml").read_text()))
    assert not mx.auto_migration_on(yaml.safe_load((root / "config.yaml").read_bytes().decode("utf-8-sig")))
    assert (root / "config.yaml").read_bytes().startswith(b"\xef\xbb\xbf# BOM and CRLF\r\n")
    assert (root / "profiles" / "coder" / "config.yaml").stat().st_mode & 0o777 == 0o640
    assert standalone.plan(root) == ([], [])  # nothing left to do, nothing re-applied
    assert standalone.latest(tmp_path / "backups") == record
    results = standalone.undo(record)
    assert all(r.restored for r in results) and len(results) == 3
    assert _digest(files) == before  # writer's config.yaml did not exist and does not again
    assert standalone.latest(tmp_path / "backups") is None


def test_undo_finds_a_record_kept_while_the_command_was_called_adopt(tmp_path):
    """Records of 'hermesd adopt' live in <root>/.hermesd/adopt/: --undo still finds the newest of both."""
    from supervisor.layout import Layout

    root = _root(tmp_path)
    layout = Layout(root)
    new_dir, old_dir = layout.standalone_dirs
    assert (new_dir.name, old_dir.name) == ("standalone", "adopt")
    layout.ensure()
    old_dir.mkdir(mode=0o700)
    record = standalone.apply(standalone.plan(root, ["coder"])[0], old_dir)
    record = record.rename(old_dir / "20260101T000000")  # written by an older hermesd, earlier
    assert standalone.latest(*layout.standalone_dirs) == record
    newer = standalone.apply(standalone.plan(root)[0], layout.ensure_standalone_dir())
    assert standalone.latest(*layout.standalone_dirs) == newer
    assert all(r.restored for r in standalone.undo(newer))
    assert standalone.latest(*layout.standalone_dirs) == record


def test_undo_leaves_a_file_edited_since_alone(tmp_path):
    root = _root(tmp_path)
    record = standalone.apply(standalone.plan(root)[0], _backups(tmp_path))
    edited = root / "profiles" / "coder" / "config.yaml"
    edited.write_text(edited.read_text() + "# my later edit\n")
    results = {r.path: r for r in standalone.undo(record)}
    assert not results[edited].restored and "changed since" in results[edited].note
    assert "# my later edit" in edited.read_text()
    assert results[root / "config.yaml"].restored


def test_a_symlinked_config_is_never_written_through(tmp_path):
    root = _root(tmp_path)
    target = tmp_path / "outside.yaml"
    target.write_text("precious: true\n")
    coder = root / "profiles" / "coder" / "config.yaml"
    coder.unlink()
    os.symlink(target, coder)
    changes, refusals = standalone.plan(root)
    assert [r.profile for r in refusals] == ["coder"] and "symlink" in refusals[0].reason
    standalone.apply(changes, _backups(tmp_path))
    assert target.read_text() == "precious: true\n" and coder.is_symlink()


def test_a_file_that_cannot_be_edited_exactly_is_refused_with_the_line_to_add(tmp_path):
    root = _root(tmp_path)
    (root / "profiles" / "coder" / "config.yaml").write_text("gateway: {foo: 1}\n")
    changes, refusals = standalone.plan(root, ["coder"])
    assert changes == [] and "standalone: true" in refusals[0].reason


def _backups(tmp_path: Path) -> Path:
    folder = tmp_path / "backups"
    folder.mkdir(mode=0o700, exist_ok=True)
    return folder


def test_the_command_proposes_nothing_on_a_release_that_ignores_the_keys(tmp_path):
    """On 0.19.0 (the test venv's release, per-profile line) 'hermesd standalone' proposes no edit and says
    why; --ahead writes them anyway, ahead of an upgrade. Consent keys restart no gateway either way."""
    import subprocess
    import sys

    root = tmp_path / "root"
    (root / "profiles" / "coder").mkdir(parents=True)
    (root / "profiles" / "coder" / "SOUL.md").write_text("You are coder.\n")
    (root / "hermesd.yaml").write_text(f"command: [{Path(sys.executable).parent / 'hermes'}]\n")
    env = {**os.environ, "HOME": str(tmp_path)}

    def standalone_cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "supervisor", "standalone", *args, "--root", str(root)],
                              capture_output=True, text=True, timeout=120, env=env,
                              cwd=str(Path(__file__).resolve().parents[2]))

    plain = standalone_cli()
    assert plain.returncode == 0 and "nothing to change" in plain.stdout and "0.19.0" in plain.stdout
    assert not (root / "profiles" / "coder" / "config.yaml").exists() and not (root / "config.yaml").exists()
    ahead = standalone_cli("--ahead", "--dry-run")
    assert ahead.returncode == 0 and "+  standalone: true" in ahead.stdout
    assert "auto_multiplex_migration" in ahead.stdout
    assert not (root / "profiles" / "coder" / "config.yaml").exists()
    repo = str(Path(__file__).resolve().parents[2])
    old = subprocess.run([sys.executable, "-m", "supervisor", "adopt", "--ahead", "--dry-run", "--root", str(root)],
                         capture_output=True, text=True, timeout=120, env=env, cwd=repo)
    assert (old.returncode, old.stdout) == (ahead.returncode, ahead.stdout)  # the old name: the same command
    assert old.stderr.strip() == ("hermesd: 'hermesd adopt' is now 'hermesd standalone' "
                                  "(the old name still works, for now)")
    listing = subprocess.run([sys.executable, "-m", "supervisor", "--help"], capture_output=True, text=True,
                             timeout=60, cwd=repo)
    assert " standalone " in listing.stdout and " adopt " not in listing.stdout  # hidden from the command list


def test_consent_keys_alone_do_not_change_what_restarts_a_gateway():
    base = {"model": {"default": "x"}}
    assert mx.without_consent({**base, "gateway": {"standalone": True}}) == base
    assert mx.without_consent({**base, "gateway": {"auto_multiplex_migration": False, "foo": 1}}) == \
        {**base, "gateway": {"foo": 1}}
    assert mx.without_consent(base) is base
