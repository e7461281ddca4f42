"""Whole trees under the file rule: the link-free copy upstream's clone reads (hard links on one file system,
copies across two, no link out), a walk that pins every entry, and a removal that follows no link."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

import pytest

from profiles import safeio, safetree
from profiles.safeio import LinkRefusedError, UnsafeFileError
from profiles.safetree import copy_tree as mirror_tree
from profiles.safetree import link_stays_inside, remove_tree


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


def test_a_linked_profiles_folder_is_refused_as_a_source(tmp_path: Path) -> None:
    """A clone's source is resolved from the root: ``profiles/`` swapped for a link copies nothing."""
    other = tmp_path / "other" / "profiles" / "bravo"
    other.mkdir(parents=True)
    (other / ".env").write_text("TOKEN=bravo\n")
    root = tmp_path / "root"
    root.mkdir()
    (root / "profiles").symlink_to(tmp_path / "other" / "profiles")
    with pytest.raises(LinkRefusedError):
        mirror_tree(safeio.home_file(root / "profiles" / "bravo"), tmp_path / "dest", lambda parts: False)
    assert not (tmp_path / "dest").exists()


def walk_tree(top: Path) -> None:
    (top / "d" / "e").mkdir(parents=True)
    (top / "d" / "e" / "f.txt").write_text("f")
    (top / "a.txt").write_text("a")
    (top / "outside").mkdir()
    (top / "outside" / "secret").write_text("s")
    os.chmod(top / "outside" / "secret", 0o600)


def test_walk_lists_links_without_entering_them(tmp_path: Path) -> None:
    top = tmp_path / "home"
    top.mkdir()
    walk_tree(top)
    (top / "d" / "to-outside").symlink_to(top / "outside")
    os.mkfifo(top / "pipe")
    seen = {e.rel: stat.S_IFMT(e.st.st_mode) for e in safetree.walk(top)}
    assert seen == {"": stat.S_IFDIR, "a.txt": stat.S_IFREG, "d": stat.S_IFDIR, "d/e": stat.S_IFDIR,
                    "d/e/f.txt": stat.S_IFREG, "d/to-outside": stat.S_IFLNK, "outside": stat.S_IFDIR,
                    "outside/secret": stat.S_IFREG, "pipe": stat.S_IFIFO}
    order = [e.rel for e in safetree.walk(top, enter=lambda e: e.rel != "outside")]
    assert order == ["", "a.txt", "d", "d/e", "d/e/f.txt", "d/to-outside", "outside", "pipe"]
    for entry in safetree.walk(top):
        if entry.rel == "pipe":
            with pytest.raises(UnsafeFileError):
                safetree.open_entry(entry)  # a FIFO is never opened (it could block)
        if entry.rel == "d/to-outside":
            with pytest.raises(LinkRefusedError):
                safetree.set_mode(entry, 0o777)
    assert stat.S_IMODE((top / "outside").stat().st_mode) != 0o777
    with pytest.raises(LinkRefusedError):
        list(safetree.walk(top / "d" / "to-outside"))


def test_a_name_swapped_for_a_link_after_the_listing_changes_nothing_else(tmp_path: Path) -> None:
    """The entry is pinned when it is listed: swapped for a link to another file right after, a mode
    change and a read still act on the file that was listed, never on the link's target."""
    top = tmp_path / "home"
    top.mkdir()
    walk_tree(top)
    for entry in safetree.walk(top):
        if entry.rel == "a.txt":
            os.rename(top / "a.txt", top / "a.moved")
            (top / "a.txt").symlink_to(top / "outside" / "secret")
            safetree.set_mode(entry, 0o640)
            fd = safetree.open_entry(entry)
            try:
                assert os.read(fd, 10) == b"a"
            finally:
                os.close(fd)
    assert stat.S_IMODE((top / "outside" / "secret").stat().st_mode) == 0o600
    assert stat.S_IMODE((top / "a.moved").stat().st_mode) == 0o640


def test_walk_reports_a_tree_deeper_than_it_goes(tmp_path: Path) -> None:
    deep = tmp_path / "home"
    os.makedirs(deep / "/".join(["d"] * (safetree.MAX_DEPTH + 2)))
    errors: list[tuple[tuple[str, ...], OSError, bool]] = []
    n = sum(1 for _ in safetree.walk(deep, on_error=lambda *e: errors.append(e)))
    assert n == safetree.MAX_DEPTH + 1  # the top and MAX_DEPTH folders; the one at MAX_DEPTH not entered
    [(parts, exc, listing)] = errors
    assert len(parts) == safetree.MAX_DEPTH and isinstance(exc, safetree.TooDeepError) and listing
    with pytest.raises(safetree.TooDeepError):
        list(safetree.walk(deep))


def test_remove_tree_follows_no_link_and_needs_no_file_mode_change(tmp_path: Path) -> None:
    top = tmp_path / "home"
    top.mkdir()
    walk_tree(top)
    outside = tmp_path / "keep"
    (outside / "inner").mkdir(parents=True)
    (outside / "inner" / "x").write_text("x")
    os.chmod(outside / "inner", 0o500)
    (top / "d" / "link-out").symlink_to(outside)
    (top / "d" / "link-inner").symlink_to(outside / "inner")
    os.chmod(top / "d" / "e", 0o500)  # a folder removal cannot write until it is made writable
    os.chmod(top / "d" / "e" / "f.txt", 0o400)
    remove_tree(top)
    assert not os.path.lexists(top)
    assert (outside / "inner" / "x").read_text() == "x"
    assert stat.S_IMODE((outside / "inner").stat().st_mode) == 0o500
    os.chmod(outside / "inner", 0o700)
    remove_tree(top)  # nothing there: fine


def test_remove_tree_of_a_link_removes_the_link_only(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.mkdir()
    (target / "x").write_text("x")
    (tmp_path / "scratch").symlink_to(target)
    remove_tree(tmp_path / "scratch")
    assert not os.path.lexists(tmp_path / "scratch") and (target / "x").read_text() == "x"
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "profiles").symlink_to(target)
    (target / ".creating-x").mkdir()
    with pytest.raises(LinkRefusedError):
        remove_tree(safeio.at(tmp_path / "root", "profiles", ".creating-x"))
    assert (target / ".creating-x").is_dir()
