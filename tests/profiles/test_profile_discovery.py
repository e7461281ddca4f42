"""Which profiles are served, which are skipped and why, and which one is active."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from profile_helpers import env_for

from profiles.discovery import (
    active_profile,
    clear_active_profile,
    existing_profile_home,
    profile_exists,
    profiles_to_serve,
    read_active_profile,
    set_active_profile,
    unserved_profile_dirs,
)
from profiles.errors import InvalidNameError, ProfileConfigError, ProfileNotFoundError, UnsafePathError


def test_multiplex_serves_default_first_then_sorted_valid(empty_root: Path) -> None:
    for name in ("writer", "coder", "a1", "z_z-9"):
        (empty_root / "profiles" / name).mkdir()
    served = profiles_to_serve(True, root=empty_root)
    assert served == [
        ("default", empty_root),
        ("a1", empty_root / "profiles" / "a1"),
        ("coder", empty_root / "profiles" / "coder"),
        ("writer", empty_root / "profiles" / "writer"),
        ("z_z-9", empty_root / "profiles" / "z_z-9"),
    ]


def test_no_profiles_folder_serves_default_only(tmp_path: Path) -> None:
    assert profiles_to_serve(True, root=tmp_path) == [("default", tmp_path)]


def test_skipped_entries_are_reported_with_reasons(empty_root: Path, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (empty_root / "profiles" / "coder").mkdir()
    (empty_root / "profiles" / "Upper").mkdir()
    (empty_root / "profiles" / "test").mkdir()
    (empty_root / "profiles" / "default").mkdir()
    (empty_root / "profiles" / "notes.txt").write_text("x")
    (empty_root / "profiles" / "linked").symlink_to(outside, target_is_directory=True)
    (empty_root / "profiles" / "dangling").symlink_to(tmp_path / "missing")
    (empty_root / "profiles" / ".importing-x-123").mkdir()
    (empty_root / "profiles" / ".hidden-file").write_text("x")

    assert profiles_to_serve(True, root=empty_root) \
        == [("default", empty_root), ("coder", empty_root / "profiles" / "coder")]
    reasons = {name: reason for name, _path, reason in unserved_profile_dirs(empty_root)}
    assert reasons == {
        "Upper": "invalid name",
        "dangling": "symlink",
        "default": "reserved name",
        "linked": "symlink",
        "notes.txt": "not a directory",
        "test": "reserved name",
    }
    paths = {name: path for name, path, _reason in unserved_profile_dirs(empty_root)}
    assert paths["linked"] == empty_root / "profiles" / "linked"


@settings(max_examples=30)
@given(st.sets(st.from_regex(r"[a-z0-9][a-z0-9_-]{0,8}", fullmatch=True), max_size=8))
def test_served_plus_unserved_covers_every_entry(tmp_path_factory: pytest.TempPathFactory, names: set[str]) -> None:
    base = tmp_path_factory.mktemp("root")
    (base / "profiles").mkdir()
    for name in names:
        (base / "profiles" / name).mkdir()
    served = [n for n, _ in profiles_to_serve(True, root=base)][1:]
    unserved = [n for n, _, _ in unserved_profile_dirs(base)]
    assert served == sorted(served)
    assert sorted(served + unserved) == sorted(names)
    assert all(n not in {"hermes", "test", "tmp", "root", "sudo", "default"} for n in served)


def test_single_mode_serves_the_active_profile(empty_root: Path) -> None:
    (empty_root / "profiles" / "coder").mkdir()
    env = env_for(empty_root)
    assert profiles_to_serve(False, root=empty_root, env=env) == [("default", empty_root)]
    set_active_profile("coder", empty_root)
    assert profiles_to_serve(False, root=empty_root, env=env) == [("coder", empty_root / "profiles" / "coder")]


def test_hermes_home_pointing_at_a_profile_wins_over_sticky(empty_root: Path) -> None:
    for name in ("coder", "writer"):
        (empty_root / "profiles" / name).mkdir()
    set_active_profile("writer", empty_root)
    env = env_for(empty_root, HERMES_HOME=str(empty_root / "profiles" / "coder"))
    assert active_profile(empty_root, env) == "coder"
    assert active_profile(env=env) == "coder"


def test_supervised_child_ignores_sticky_profile(empty_root: Path) -> None:
    (empty_root / "profiles" / "coder").mkdir()
    set_active_profile("coder", empty_root)
    assert active_profile(empty_root, env_for(empty_root)) == "coder"
    assert active_profile(empty_root, env_for(empty_root, HERMES_S6_SUPERVISED_CHILD="1")) == "default"


def test_single_mode_with_missing_active_profile_is_an_error(empty_root: Path) -> None:
    (empty_root / "active_profile").write_text("ghost\n")
    with pytest.raises(ProfileNotFoundError, match="ghost"):
        profiles_to_serve(False, root=empty_root, env=env_for(empty_root))


def test_sticky_profile_read_set_clear(empty_root: Path) -> None:
    (empty_root / "profiles" / "coder").mkdir()
    assert read_active_profile(empty_root) == "default"
    assert set_active_profile(" Coder ", empty_root) == "coder"
    assert (empty_root / "active_profile").read_text() == "coder\n"
    assert read_active_profile(empty_root) == "coder"
    assert set_active_profile("default", empty_root) == "default"
    assert not (empty_root / "active_profile").exists()
    set_active_profile("coder", empty_root)
    clear_active_profile(empty_root)
    clear_active_profile(empty_root)
    assert read_active_profile(empty_root) == "default"
    assert not [p for p in empty_root.iterdir() if p.name.endswith(".tmp")]


def test_sticky_profile_must_exist_and_be_valid(empty_root: Path) -> None:
    with pytest.raises(ProfileNotFoundError, match="'ghost'"):
        set_active_profile("ghost", empty_root)
    with pytest.raises(InvalidNameError):
        set_active_profile("../x", empty_root)
    (empty_root / "active_profile").write_text("Not Valid!\n")
    with pytest.raises(ProfileConfigError) as exc:
        read_active_profile(empty_root)
    assert exc.value.path == empty_root / "active_profile"
    (empty_root / "active_profile").write_text("  \n")
    assert read_active_profile(empty_root) == "default"


def test_existing_profile_home_refuses_symlinks(empty_root: Path, tmp_path: Path) -> None:
    target = tmp_path / "outside"
    target.mkdir()
    (empty_root / "profiles" / "linked").symlink_to(target, target_is_directory=True)
    with pytest.raises(UnsafePathError, match="symlink"):
        existing_profile_home("linked", empty_root)
    assert not profile_exists("linked", empty_root)
    assert profile_exists("default", empty_root)
    (empty_root / "profiles" / "afile").write_text("")
    with pytest.raises(ProfileNotFoundError, match="not a directory"):
        existing_profile_home("afile", empty_root)
    with pytest.raises(ProfileNotFoundError):
        existing_profile_home("nobody", empty_root)
    assert existing_profile_home("default", empty_root) == empty_root
    assert os.path.samefile(existing_profile_home("default", empty_root), empty_root)


def test_identity_rule_of_the_multiplex_default_line(tmp_path: Path) -> None:
    """With the release's identity files, a folder holding none of them is no profile (and is reported)."""
    from profiles.discovery import REASON_NO_IDENTITY, unserved_profile_dirs
    from profiles.upstream.multiplex import IDENTITY_MARKERS

    root = tmp_path / "root"
    for name, marker in (("a", "config.yaml"), ("b", "SOUL.md"), ("c", None), ("d", "state.db")):
        (root / "profiles" / name).mkdir(parents=True)
        if marker:
            (root / "profiles" / name / marker).write_text("")
    os.symlink("/nonexistent", root / "profiles" / "c" / "auth.json.bak")  # not a marker name
    assert [n for n, _ in profiles_to_serve(True, root=root)] == ["default", "a", "b", "c", "d"]
    served = [n for n, _ in profiles_to_serve(True, root=root, identity=IDENTITY_MARKERS)]
    assert served == ["default", "a", "b", "d"]
    assert ("c", root / "profiles" / "c", REASON_NO_IDENTITY) in unserved_profile_dirs(root, identity=IDENTITY_MARKERS)
    os.symlink("/nonexistent", root / "profiles" / "c" / ".env")  # a dangling marker still claims identity
    assert "c" in [n for n, _ in profiles_to_serve(True, root=root, identity=IDENTITY_MARKERS)]


def test_a_tombstoned_profile_is_never_served_again(tmp_path: Path) -> None:
    """Upstream's newest delete leaves profiles/.deleted/NAME (profiles/registry.py, read, not run): a
    folder a stray write re-created under that name is no profile; the tombstone's removal revives it."""
    from profiles.discovery import REASON_DELETED, unserved_profile_dirs

    root = tmp_path / "root"
    for name in ("gone", "kept"):
        (root / "profiles" / name).mkdir(parents=True)
        (root / "profiles" / name / "config.yaml").write_text("")
    (root / "profiles" / ".deleted").mkdir()
    (root / "profiles" / ".deleted" / "gone").write_text("deleted\n")
    assert [n for n, _ in profiles_to_serve(True, root=root)] == ["default", "kept"]
    assert ("gone", root / "profiles" / "gone", REASON_DELETED) in unserved_profile_dirs(root)
    (root / "profiles" / ".deleted" / "gone").unlink()  # upstream's clear_named_profile_deleted (re-create)
    assert [n for n, _ in profiles_to_serve(True, root=root)] == ["default", "gone", "kept"]
