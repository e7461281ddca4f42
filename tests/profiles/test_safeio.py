"""The file rule's primitives on real files and links, through openat2 and through the O_NOFOLLOW walk."""

from __future__ import annotations

import errno
import os
import platform
import threading
from pathlib import Path

import pytest

from profiles import beneath, safeio
from profiles.safeio import LinkRefusedError, UnsafeFileError


@pytest.fixture(params=["openat2", "walk"])
def resolver(request, monkeypatch):
    """Each test runs with the kernel's openat2 and with the per-component walk used without it."""
    if request.param == "walk":
        monkeypatch.setattr(beneath, "_state", [None])
    else:
        monkeypatch.setattr(beneath, "_state", [])
        if beneath._openat2() is None:
            pytest.skip("this kernel has no openat2")
    return request.param


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "root"
    for name in ("alpha", "bravo"):
        (r / "profiles" / name).mkdir(parents=True)
    (r / "profiles" / "bravo" / ".env").write_text("TOKEN=secret-of-bravo\n")
    (tmp_path / "outside.txt").write_text("outside\n")
    return r


def test_openat2_is_used_where_the_kernel_has_it(monkeypatch):
    monkeypatch.setattr(beneath, "_state", [])
    major, minor = (int(x) for x in platform.release().split(".")[:2])
    if (major, minor) >= (5, 6):
        assert beneath._openat2() is not None


def test_reads_refuse_every_link_on_the_way(root, resolver):
    alpha = root / "profiles" / "alpha"
    os.symlink("../bravo/.env", alpha / ".env")
    os.symlink(str(root.parent / "outside.txt"), alpha / "config.yaml")
    os.symlink("../bravo", alpha / "state")
    for name, problem in ((".env", "is a symbolic link"), ("config.yaml", "is a symbolic link"),
                          ("state/.env", f"lies under a symbolic link ({alpha / 'state'})")):
        with pytest.raises(LinkRefusedError) as exc:
            safeio.read_regular(safeio.home_file(alpha, name), 1000)
        assert exc.value.errno == errno.ELOOP and problem in str(exc.value)
    assert safeio.read_regular_or_none(safeio.home_file(alpha, ".env"), 1000) is None


def test_the_home_itself_is_resolved_from_the_root(root, resolver):
    """A profile home (or ``profiles/``) swapped for a link is refused: the walk starts at the root."""
    os.rename(root / "profiles" / "alpha", root / "profiles" / "alpha.real")
    os.symlink("bravo", root / "profiles" / "alpha")
    with pytest.raises(LinkRefusedError):
        safeio.read_regular(safeio.home_file(root / "profiles" / "alpha", ".env"), 1000)
    assert safeio.home_file(root / "profiles" / "alpha", ".env") == safeio.Beneath(root, "profiles/alpha/.env")


def test_dotdot_and_absolute_parts_are_refused_before_any_call(root, resolver):
    for rel in ("../outside.txt", "profiles/../../outside.txt", "/etc/passwd"):
        with pytest.raises(LinkRefusedError):
            safeio.read_regular(safeio.Beneath(root, rel), 1000)


def test_non_regular_files_are_refused_without_blocking(root, resolver, tmp_path):
    alpha = root / "profiles" / "alpha"
    os.mkfifo(alpha / "fifo")
    (alpha / "big").write_bytes(b"x" * 2000)
    (alpha / "dir").mkdir()
    for name, problem in (("fifo", "a FIFO"), ("big", "over the"), ("dir", "a directory")):
        with pytest.raises(UnsafeFileError, match=problem):
            safeio.read_regular(safeio.home_file(alpha, name), 1000)


def test_replace_never_writes_through_a_link(root, resolver):
    """Links at the destination are replaced, not followed; the temp name is O_EXCL and unguessable."""
    alpha = root / "profiles" / "alpha"
    bravo_env = root / "profiles" / "bravo" / ".env"
    os.symlink(str(bravo_env), alpha / ".gateway-planned-stop.json")
    for pid in (os.getpid(), 1, 12345):  # the old, predictable temp names
        os.symlink(str(bravo_env), alpha / f"..gateway-planned-stop.json.{pid}.tmp")
    safeio.replace_bytes(safeio.home_file(alpha, ".gateway-planned-stop.json"), b"{}", durable=False)
    assert bravo_env.read_text() == "TOKEN=secret-of-bravo\n"
    assert not (alpha / ".gateway-planned-stop.json").is_symlink()
    assert (alpha / ".gateway-planned-stop.json").read_bytes() == b"{}"
    left = sorted(p.name for p in alpha.iterdir())
    assert left == sorted([".gateway-planned-stop.json",
                           *(f"..gateway-planned-stop.json.{p}.tmp" for p in (os.getpid(), 1, 12345))])


def test_replace_into_a_linked_folder_is_refused(root, resolver):
    os.symlink("profiles/bravo", root / "shared")
    with pytest.raises(LinkRefusedError):
        safeio.replace_bytes(safeio.at(root, "shared", "x.json"), b"{}")
    assert not (root / "profiles" / "bravo" / "x.json").exists()


def test_exclusive_replace_has_one_winner(root, resolver):
    where = safeio.at(root, "salt")
    results: list[str] = []

    def write(data: bytes) -> None:
        try:
            safeio.replace_bytes(where, data, exclusive=True)
            results.append("won")
        except FileExistsError:
            results.append("lost")

    threads = [threading.Thread(target=write, args=(bytes([i]) * 16,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results.count("won") == 1 and len((root / "salt").read_bytes()) == 16
    assert [p.name for p in root.iterdir() if p.name.startswith(".")] == []


def test_makedirs_unlink_move_symlink_and_lstat(root, resolver):
    os.symlink("profiles/bravo", root / "kanban")
    with pytest.raises(LinkRefusedError):
        safeio.makedirs(safeio.at(root, "kanban/default-board"))
    assert not (root / "profiles" / "bravo" / "default-board").exists()
    safeio.makedirs(safeio.at(root, "shared/sub/deeper"))
    assert (root / "shared" / "sub" / "deeper").is_dir()
    assert safeio.unlink(safeio.at(root, "kanban")) and (root / "profiles" / "bravo" / ".env").exists()
    safeio.symlink(safeio.at(root, "kanban.db"), "kanban/default-board/kanban.db")
    assert os.readlink(root / "kanban.db") == "kanban/default-board/kanban.db"
    (root / "a.txt").write_text("a")
    safeio.move(safeio.at(root, "a.txt"), safeio.at(root, "shared/sub/a.txt"))
    assert (root / "shared" / "sub" / "a.txt").read_text() == "a"
    assert safeio.lstat(safeio.at(root, "kanban.db")).st_mode & 0o170000 == 0o120000
    assert safeio.lstat(safeio.at(root, "missing")) is None
    assert safeio.link_on_path(safeio.at(root, "kanban.db")) is not None
    assert safeio.link_on_path(safeio.at(root, "shared/sub/a.txt")) is None


def test_copy_refuses_a_source_that_is_not_a_regular_file(root, resolver):
    os.mkfifo(root / "fifo")
    with pytest.raises(UnsafeFileError):
        safeio.replace_with_copy(safeio.at(root, "copy"), safeio.at(root, "fifo"))
    (root / "log").write_bytes(b"line\n" * 1000)
    safeio.replace_with_copy(safeio.at(root, "log.1"), safeio.at(root, "log"))
    assert (root / "log.1").read_bytes() == (root / "log").read_bytes()


def test_operator_files_may_be_links(tmp_path):
    """hermesd.yaml and unit files are the operator's: a dotfile manager's link is followed, bounded."""
    (tmp_path / "real.yaml").write_text("command: hermes\n")
    os.symlink("real.yaml", tmp_path / "hermesd.yaml")
    assert safeio.read_operator_file(tmp_path / "hermesd.yaml", 100) == b"command: hermes\n"
    os.mkfifo(tmp_path / "fifo.yaml")
    with pytest.raises(UnsafeFileError, match="FIFO"):
        safeio.read_operator_file(tmp_path / "fifo.yaml", 100)


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another account needs root")
def test_a_file_written_for_a_profile_belongs_to_its_folders_owner(root, resolver):
    """A gateway run under its own account must read and remove what hermesd (root) writes for it."""
    home = root / "profiles" / "alpha"
    os.chown(home, 65534, 65534)
    safeio.replace_bytes(safeio.home_file(home, "marker.json"), b"{}", folder_owner=True)
    st = os.lstat(home / "marker.json")
    assert (st.st_uid, st.st_gid) == (65534, 65534)
    safeio.replace_bytes(safeio.home_file(home, "plain.json"), b"{}")
    assert os.lstat(home / "plain.json").st_uid == 0


# --------------------------------------------------------------------------- folders, modes, owners, appends


def test_open_append_takes_only_a_regular_file_and_never_blocks(root, resolver, tmp_path):
    """A log in a folder someone else writes: a planted FIFO (with or without a reader) or link is refused
    at once, never written to; a regular file is appended to."""
    alpha = root / "profiles" / "alpha"
    fd = safeio.open_append(safeio.home_file(alpha, "gw.log"))
    try:
        os.write(fd, b"one\n")
    finally:
        os.close(fd)
    fd = safeio.open_append(safeio.home_file(alpha, "gw.log"))
    os.write(fd, b"two\n")
    os.close(fd)
    assert (alpha / "gw.log").read_bytes() == b"one\ntwo\n"
    os.mkfifo(alpha / "fifo")
    with pytest.raises(OSError) as no_reader:  # ENXIO: O_NONBLOCK, nobody reads
        safeio.open_append(safeio.home_file(alpha, "fifo"))
    assert no_reader.value.errno == errno.ENXIO
    reader = os.open(alpha / "fifo", os.O_RDONLY | os.O_NONBLOCK)
    try:
        with pytest.raises(UnsafeFileError, match="a FIFO"):
            safeio.open_append(safeio.home_file(alpha, "fifo"))
    finally:
        os.close(reader)
    os.symlink(str(root / "profiles" / "bravo" / ".env"), alpha / "linked.log")
    with pytest.raises(LinkRefusedError):
        safeio.open_append(safeio.home_file(alpha, "linked.log"))
    assert (root / "profiles" / "bravo" / ".env").read_text() == "TOKEN=secret-of-bravo\n"


def test_folders_are_made_beneath_and_never_through_a_link(root, resolver):
    os.symlink("profiles/bravo", root / "kanban")
    with pytest.raises(LinkRefusedError):
        safeio.mkdir(safeio.at(root, "kanban", "logs"))
    with pytest.raises(LinkRefusedError):
        safeio.temp_folder(safeio.at(root, "kanban"), ".scratch-")
    assert sorted(p.name for p in (root / "profiles" / "bravo").iterdir()) == [".env"]
    made = safeio.temp_folder(safeio.at(root, "profiles"), ".creating-x-")
    assert made.base == root and made.rel.startswith("profiles/.creating-x-") and len(made.name) > 20
    assert (made.path.stat().st_mode & 0o777) == 0o700
    with pytest.raises(FileExistsError):
        safeio.mkdir(made)


def test_chmod_changes_the_entry_itself_never_a_links_target(root, resolver):
    alpha = root / "profiles" / "alpha"
    bravo_env = root / "profiles" / "bravo" / ".env"
    os.chmod(bravo_env, 0o600)
    os.symlink(str(bravo_env), alpha / ".env")
    with pytest.raises(LinkRefusedError):
        safeio.chmod(safeio.home_file(alpha, ".env"), 0o666)
    assert bravo_env.stat().st_mode & 0o777 == 0o600
    (alpha / "own").mkdir(mode=0o700)
    safeio.chmod(safeio.home_file(alpha, "own"), 0o755)
    assert (alpha / "own").stat().st_mode & 0o777 == 0o755


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file away needs root")
def test_chown_changes_a_link_itself_never_its_target(root, resolver):
    alpha = root / "profiles" / "alpha"
    bravo_env = root / "profiles" / "bravo" / ".env"
    os.symlink(str(bravo_env), alpha / "worker.sock")
    safeio.chown(safeio.home_file(alpha, "worker.sock"), 65534, 65534)
    assert os.lstat(alpha / "worker.sock").st_uid == 65534
    assert bravo_env.stat().st_uid == 0


def test_replace_keeps_owner_and_copies_keep_mode_and_times(root, resolver):
    alpha = root / "profiles" / "alpha"
    (alpha / "src").write_bytes(b"data")
    os.chmod(alpha / "src", 0o751)
    os.utime(alpha / "src", ns=(1_000_000_000, 2_000_000_000))
    safeio.replace_with_copy(safeio.home_file(alpha, "copy"), safeio.home_file(alpha, "src"), preserve=True)
    st = (alpha / "copy").stat()
    assert (alpha / "copy").read_bytes() == b"data" and st.st_mode & 0o7777 == 0o751
    assert st.st_mtime_ns == 2_000_000_000
    if os.geteuid() == 0:
        safeio.replace_bytes(safeio.home_file(alpha, "owned"), b"x", 0o640, exact_mode=True, owner=(65534, 65534))
        assert ((alpha / "owned").stat().st_uid, (alpha / "owned").stat().st_mode & 0o777) == (65534, 0o640)


def test_symlink_replace_puts_a_link_over_whatever_is_there(root, resolver):
    alpha = root / "profiles" / "alpha"
    (alpha / "entry").write_text("file")
    safeio.symlink(safeio.home_file(alpha, "entry"), "target-one", replace=True)
    assert os.readlink(alpha / "entry") == "target-one"
    safeio.symlink(safeio.home_file(alpha, "entry"), "target-two", replace=True)
    assert safeio.readlink(safeio.home_file(alpha, "entry")) == "target-two"
    with pytest.raises(FileExistsError):
        safeio.symlink(safeio.home_file(alpha, "entry"), "x")
    assert sorted(p.name for p in alpha.iterdir()) == ["entry"]  # no temp link left behind


def test_a_home_given_as_a_path_and_paths_under_the_root(root, resolver, tmp_path):
    """``beneath(home)`` resolves a profile home from the root (so ``profiles/`` cannot be a link), and
    ``under(root, path)`` resolves hermesd's files from the root; a path outside stays as beneath gives it."""
    home = root / "profiles" / "alpha"
    assert safeio.beneath(home) == safeio.Beneath(root, "profiles/alpha")
    assert safeio.under(root, root / ".hermesd" / "logs" / "a.log") == safeio.Beneath(root, ".hermesd/logs/a.log")
    assert safeio.under(root, root) == safeio.Beneath(root, "")
    assert safeio.under(root, tmp_path / "x" / "y") == safeio.Beneath(tmp_path / "x", "y")
    os.rename(root / "profiles", root / "profiles.real")
    os.symlink("profiles.real", root / "profiles")
    with pytest.raises(LinkRefusedError):
        os.close(safeio.open_dir(home))
