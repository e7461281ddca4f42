"""Saving and restoring a profile's migrated files: byte for byte, never through a link."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from supervisor.upgrade import backup


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, Path, Path]:
    root = tmp_path / "root"
    home = root / "profiles" / "coder"
    (home / "skills").mkdir(parents=True)
    (home / "config.yaml").write_bytes(b"model: x\n# comment \xe2\x9c\x93\n")
    (home / ".env").write_bytes(b"TELEGRAM_BOT_TOKEN=secret\n")
    os.chmod(home / ".env", 0o600)
    (home / "skills" / ".bundled_manifest").write_text("a:1\n")
    (home / "SOUL.md").write_text("You are coder.\n")
    store = tmp_path / "store"
    return root, home, store


def test_save_then_restore_is_byte_for_byte_and_removes_what_was_absent(tree, tmp_path):
    root, home, store = tree
    saved = backup.save(root, home, store)
    kinds = {s.path: s.kind for s in saved}
    assert kinds == {"config.yaml": "file", ".env": "file", "skills/.bundled_manifest": "file",
                     ".multiplex_opt_out_rewritten": "absent", "SOUL.md": "file"}
    # what a new release does: rewrite, re-mode, add a marker, drop a file (0.22 rewrites SOUL.md)
    (home / "config.yaml").write_text("model: x\n_config_version: 34\n")
    (home / "SOUL.md").write_text("# Hermes persona, new template\n")
    os.chmod(home / ".env", 0o644)
    (home / ".multiplex_opt_out_rewritten").write_text("1")
    (home / "skills" / ".bundled_manifest").unlink()
    assert sorted(backup.differences(root, home, saved)) == sorted(kinds)
    changed = backup.restore(root, home, store, saved, tmp_path / "replaced")
    assert sorted(changed) == sorted(kinds)
    assert backup.differences(root, home, saved) == []
    assert (home / "config.yaml").read_bytes() == b"model: x\n# comment \xe2\x9c\x93\n"
    assert os.stat(home / ".env").st_mode & 0o777 == 0o600
    assert (home / "SOUL.md").read_text() == "You are coder.\n"
    assert not (home / ".multiplex_opt_out_rewritten").exists()
    # what the restore replaced is kept
    assert (tmp_path / "replaced" / "config.yaml").read_text().endswith("_config_version: 34\n")
    # a second restore has nothing to do
    assert backup.restore(root, home, store, saved, tmp_path / "replaced") == []


def test_a_restore_replaces_a_planted_link_instead_of_writing_through_it(tree, tmp_path):
    root, home, store = tree
    saved = backup.save(root, home, store)
    victim = tmp_path / "victim"
    victim.write_text("do not touch\n")
    (home / "config.yaml").unlink()
    os.symlink(victim, home / "config.yaml")
    backup.restore(root, home, store, saved, tmp_path / "replaced")
    assert victim.read_text() == "do not touch\n"
    assert not (home / "config.yaml").is_symlink()
    assert (home / "config.yaml").read_bytes().startswith(b"model: x")


def test_a_linked_file_is_saved_as_the_link_and_never_read_through(tree, tmp_path):
    root, home, store = tree
    secret = tmp_path / "secret"
    secret.write_text("root-only\n")
    (home / ".env").unlink()
    os.symlink(secret, home / ".env")
    saved = {s.path: s for s in backup.save(root, home, store)}
    assert saved[".env"].kind == "link" and saved[".env"].target == str(secret)
    assert not (store / ".env").exists()
    (home / ".env").unlink()
    (home / ".env").write_text("replaced by the release\n")
    backup.restore(root, home, store, list(saved.values()), tmp_path / "replaced")
    assert os.readlink(home / ".env") == str(secret)


def test_a_linked_folder_on_the_way_is_refused_for_save_and_restore(tree, tmp_path):
    root, home, store = tree
    outside = tmp_path / "outside"
    (outside).mkdir()
    (outside / ".bundled_manifest").write_text("outside\n")
    saved = backup.save(root, home, store)
    (home / "skills" / ".bundled_manifest").unlink()
    (home / "skills").rmdir()
    os.symlink(outside, home / "skills")
    now = backup.read(root, home, "skills/.bundled_manifest")[0]
    assert now.kind == "refused" and "link" in (now.problem or "")
    with pytest.raises(backup.UnsafePath):
        backup.restore(root, home, store, saved, tmp_path / "replaced")
    assert (outside / ".bundled_manifest").read_text() == "outside\n"
    # the same for the profile folder itself, and for profiles/
    os.rename(home, tmp_path / "moved")
    os.symlink(tmp_path / "moved", home)
    assert backup.read(root, home, "config.yaml")[0].kind == "refused"


def test_fifos_and_huge_files_are_not_copied(tree, tmp_path, monkeypatch):
    root, home, store = tree
    (home / "config.yaml").unlink()
    os.mkfifo(home / "config.yaml")
    monkeypatch.setattr(backup, "MAX_FILE", 10)
    saved = {s.path: s for s in backup.save(root, home, store)}
    assert saved["config.yaml"].kind == "refused" and "regular" in (saved["config.yaml"].problem or "")
    assert saved[".env"].kind == "refused" and "limit" in (saved[".env"].problem or "")
    # a refused entry is left alone by a restore; the others are restored
    (home / ".env").write_text("rewritten\n")
    (home / "skills" / ".bundled_manifest").write_text("b:2\n")
    assert backup.restore(root, home, store, list(saved.values()), tmp_path / "replaced") == \
        ["skills/.bundled_manifest"]
    assert (home / ".env").read_text() == "rewritten\n"


def test_a_tampered_saved_copy_is_not_restored(tree, tmp_path):
    root, home, store = tree
    saved = backup.save(root, home, store)
    (home / "config.yaml").write_text("changed\n")
    (store / "config.yaml").write_text("tampered\n")
    with pytest.raises(OSError, match="was changed"):
        backup.restore(root, home, store, saved, tmp_path / "replaced")
    assert (home / "config.yaml").read_text() == "changed\n"


def test_saved_entries_round_trip_through_json(tree):
    root, home, store = tree
    for s in backup.save(root, home, store):
        assert backup.Saved.from_json(s.to_json()) == s


def test_paths_outside_the_profile_are_refused(tree):
    root, home, _store = tree
    for bad in ("../x", "/etc/passwd", "a/../../x", ""):
        with pytest.raises(ValueError):
            backup.read(root, home, bad)


def test_what_a_release_created_beside_the_saved_files_is_named_not_hidden(tree):
    """0.22's first start (measured) adds cache/, backups/, auth.lock and rewrites runtime files:
    a rollback names the first kind and is silent about what every gateway run writes."""
    root, home, _store = tree
    (home / "logs").mkdir()
    (home / "old.txt").write_text("kept\n")
    before = backup.inventory(root, home)
    assert before["config.yaml"].startswith("file:") and before["skills"] == "dir"
    (home / "cache").mkdir()
    (home / "auth.lock").write_text("")
    (home / "gateway_state.json").write_text("{}")  # every run writes it
    (home / "state.db").write_bytes(b"x")
    (home / "logs" / "gateway.log").write_text("x")
    (home / "config.yaml").write_text("changed, but restored from its saved copy\n")
    (home / "old.txt").unlink()
    after = backup.inventory(root, home)
    assert backup.left_changed(before, after) == ["auth.lock", "cache/", "old.txt"]
    # a folder reached through a link is not listed (hermesd follows no link in a profile)
    os.rename(home, home.with_name("real"))
    os.symlink(home.with_name("real"), home)
    assert backup.inventory(root, home) == {}
