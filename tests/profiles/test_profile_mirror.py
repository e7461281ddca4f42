"""The link-free copy upstream's clone reads: hard links on one file system, copies across two, no link out."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

import pytest

from profiles.mirror import link_stays_inside, mirror_tree, remove_tree


def source_tree(src: Path) -> None:
    (src / "sub" / "deep").mkdir(parents=True)
    (src / "a.txt").write_text("a")
    (src / "sub" / "deep" / "b.txt").write_text("b")
    os.chmod(src / "sub", 0o750)
    (src / "sub" / "down").symlink_to("deep/b.txt")
    (src / "up").symlink_to("../elsewhere")
    (src / "abs").symlink_to("/etc/passwd")
    (src / "sub" / "dirlink").symlink_to("deep")
    os.mkfifo(src / "fifo")
    (src / "skip-me").mkdir()
    (src / "skip-me" / "x").write_text("x")


def check(src: Path, dest: Path, dropped: list[str]) -> None:
    assert sorted(dropped) == ["abs", "up"]
    assert (dest / "a.txt").read_text() == "a" and (dest / "sub" / "deep" / "b.txt").read_text() == "b"
    assert os.readlink(dest / "sub" / "down") == "deep/b.txt"
    assert os.readlink(dest / "sub" / "dirlink") == "deep"
    assert not os.path.lexists(dest / "up") and not os.path.lexists(dest / "abs")
    assert not os.path.lexists(dest / "fifo") and not os.path.lexists(dest / "skip-me")
    assert stat.S_IMODE((dest / "sub").stat().st_mode) == 0o750


def test_same_file_system_hard_links(tmp_path: Path) -> None:
    src, dest = tmp_path / "src", tmp_path / "dest"
    src.mkdir()
    source_tree(src)
    dropped = mirror_tree(src, dest, lambda parts: parts == ("skip-me",))
    check(src, dest, dropped)
    assert (dest / "a.txt").stat().st_ino == (src / "a.txt").stat().st_ino
    os.chmod(dest / "sub", 0o500)
    remove_tree(dest)
    assert not dest.exists()
    assert (src / "a.txt").stat().st_nlink == 1 and stat.S_IMODE((src / "a.txt").stat().st_mode) == 0o644


def test_across_file_systems_copies(tmp_path: Path) -> None:
    if os.stat("/dev/shm").st_dev == tmp_path.stat().st_dev:
        pytest.skip("/dev/shm is on the same file system as the test folder")
    with tempfile.TemporaryDirectory(dir="/dev/shm") as shm:
        src, dest = Path(shm) / "src", tmp_path / "dest"
        src.mkdir()
        source_tree(src)
        os.chmod(src / "a.txt", 0o640)
        dropped = mirror_tree(src, dest, lambda parts: parts == ("skip-me",))
        check(src, dest, dropped)
        assert (dest / "a.txt").stat().st_ino != (src / "a.txt").stat().st_ino
        assert stat.S_IMODE((dest / "a.txt").stat().st_mode) == 0o640
        assert (dest / "a.txt").stat().st_mtime_ns == (src / "a.txt").stat().st_mtime_ns


def test_a_linked_source_is_refused(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(OSError):
        mirror_tree(tmp_path / "link", tmp_path / "dest", lambda parts: False)


@pytest.mark.parametrize(("target", "inside"), [
    ("SKILL.md", True), ("deep/x", True), ("./x", True), ("a/./b", True),
    ("../x", False), ("a/../../x", False), ("a/../b", False), ("..", False), ("/etc/passwd", False), ("", False),
])
def test_which_links_stay_inside(target: str, inside: bool) -> None:
    assert link_stays_inside(target) is inside
