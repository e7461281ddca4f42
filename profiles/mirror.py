"""A copy of a profile's folder that holds no link out of it: what upstream's clone reads instead of the source.

Upstream's ``create_profile --clone`` copies with ``shutil.copy2`` and ``copytree``, which follow a
symlinked ``.env`` (or ``config.yaml``, or ``skills``) wherever it points; run as root, that gives
the new profile whatever file the source chose, such as another profile's bot tokens. So
upstream never reads the source itself: :func:`mirror_tree` first copies it into a scratch
folder, and upstream clones from there.

The copy follows no link and is race-free against a source that changes under it. Each folder is
opened ``O_NOFOLLOW | O_DIRECTORY`` relative to its parent's descriptor; every other entry is
hard-linked from that descriptor (``linkat`` without ``AT_SYMLINK_FOLLOW`` links the entry
itself, never what it points at) and then judged by the kind of the mirror's *own* entry, which
the source can no longer change:

* a regular file stays (hard-linked: no data is copied; copied instead where the scratch is on
  another file system). Upstream only reads it, and hermesd never changes a mirrored file: the
  modes it sets are those of folders it made, and removal only unlinks;
* a symlink stays only when its target, read and never followed, is relative and has no ``..``:
  then it can only lead down from its own folder, into the mirror (a chain of such links too).
  Any other link is left out, and its name returned so the user hears of it;
* anything else (FIFO, socket, device) is left out: a copy would block on it or make no sense.

Folders get the source's permission bits and times once filled, as ``copytree`` would give them.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
from collections.abc import Callable
from pathlib import Path

from profiles.errors import ProfileError
from profiles.names import shown

MAX_DEPTH = 128
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NO_LINK = (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.EACCES)

Skip = Callable[[tuple[str, ...]], bool]


def link_stays_inside(target: str) -> bool:
    """A link whose target is relative and never climbs: it can only lead below its own folder."""
    return bool(target) and not target.startswith("/") and ".." not in target.split("/")


def _judge_link(target: str, name: str, dst_fd: int, rel: tuple[str, ...], dropped: list[str], *,
                present: bool) -> None:
    """Keep a link that stays inside (``present``: the mirror already holds it), else leave it out."""
    if link_stays_inside(target):
        if not present:
            os.symlink(target, name, dir_fd=dst_fd)
        return
    if present:
        os.unlink(name, dir_fd=dst_fd)
    dropped.append("/".join(rel))


def _copy_file(src_fd: int, name: str, dst_fd: int) -> None:
    """Copy one regular file between folder descriptors, with its mode and times."""
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=src_fd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return
        out = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                      dir_fd=dst_fd)
        with os.fdopen(fd, "rb", closefd=False) as src, os.fdopen(out, "wb") as dst:
            shutil.copyfileobj(src, dst)
            dst.flush()
            os.fchmod(dst.fileno(), stat.S_IMODE(st.st_mode))
            os.utime(dst.fileno(), ns=(st.st_atime_ns, st.st_mtime_ns))
    finally:
        os.close(fd)


def _copy_entry(src_fd: int, name: str, dst_fd: int, rel: tuple[str, ...], dropped: list[str]) -> None:
    """The hard link was refused (another file system): copy a regular file, recreate a kept link."""
    try:
        st = os.stat(name, dir_fd=src_fd, follow_symlinks=False)
        if stat.S_ISLNK(st.st_mode):
            _judge_link(os.readlink(name, dir_fd=src_fd), name, dst_fd, rel, dropped, present=False)
        elif stat.S_ISREG(st.st_mode):
            _copy_file(src_fd, name, dst_fd)
    except FileNotFoundError:
        return
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.EINVAL):  # else it changed kind under us: leave it out
            raise


def _entry(src_fd: int, name: str, dst_fd: int, rel: tuple[str, ...], dropped: list[str]) -> None:
    """Mirror one entry that is not (or is no longer) a folder: link it, then judge the mirror's own entry."""
    try:
        os.link(name, name, src_dir_fd=src_fd, dst_dir_fd=dst_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    except OSError as exc:
        if exc.errno not in _NO_LINK:
            raise
        _copy_entry(src_fd, name, dst_fd, rel, dropped)
        return
    mode = os.stat(name, dir_fd=dst_fd, follow_symlinks=False).st_mode
    if stat.S_ISLNK(mode):
        _judge_link(os.readlink(name, dir_fd=dst_fd), name, dst_fd, rel, dropped, present=True)
    elif not stat.S_ISREG(mode):
        os.unlink(name, dir_fd=dst_fd)


def _folder(src_fd: int, dst_fd: int, rel: tuple[str, ...], skip: Skip, dropped: list[str]) -> None:
    if len(rel) > MAX_DEPTH:
        raise ProfileError(f"cannot clone: {shown('/'.join(rel))} is nested more than {MAX_DEPTH} folders deep")
    with os.scandir(src_fd) as entries:
        listed = [(e.name, e.is_dir(follow_symlinks=False)) for e in entries]
    for name, is_dir in sorted(listed):
        here = (*rel, name)
        if skip(here):
            continue
        if is_dir:
            try:
                sub = os.open(name, _DIR_FLAGS, dir_fd=src_fd)
            except FileNotFoundError:
                continue
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
            else:  # a folder still: recurse into it by descriptor
                try:
                    os.mkdir(name, 0o700, dir_fd=dst_fd)
                    out = os.open(name, _DIR_FLAGS, dir_fd=dst_fd)
                    try:
                        _folder(sub, out, here, skip, dropped)
                        _copy_folder_stat(sub, out)
                    finally:
                        os.close(out)
                finally:
                    os.close(sub)
                continue
        _entry(src_fd, name, dst_fd, here, dropped)


def _copy_folder_stat(src_fd: int, dst_fd: int) -> None:
    st = os.fstat(src_fd)
    os.fchmod(dst_fd, stat.S_IMODE(st.st_mode) | stat.S_IRWXU)
    os.utime(dst_fd, ns=(st.st_atime_ns, st.st_mtime_ns))


def mirror_tree(source: Path, dest: Path, skip: Skip) -> list[str]:
    """Mirror the folder ``source`` into the new folder ``dest``; the links left out, as relative paths.

    ``skip(parts)`` names the entries (relative path parts) not to mirror at all. ``source``'s
    last component must be a real folder (a link there raises ``OSError`` ``ELOOP``).
    """
    dropped: list[str] = []
    src = os.open(source, _DIR_FLAGS)
    try:
        os.mkdir(dest, 0o700)
        out = os.open(dest, _DIR_FLAGS)
        try:
            _folder(src, out, (), skip, dropped)
            _copy_folder_stat(src, out)
        finally:
            os.close(out)
    finally:
        os.close(src)
    return dropped


def remove_tree(path: Path) -> None:
    """Remove a scratch tree that may hold mirrored (hard-linked) files.

    Folders are made writable first, so removal never has to change a file's mode: a mirrored
    file's inode is the source's, and ``rmtree``'s usual retry (``chmod`` what failed) would
    change the source profile's file.
    """
    if not os.path.lexists(path):
        return
    for folder, _subdirs, _files in os.walk(path):
        with contextlib.suppress(OSError):
            os.chmod(folder, stat.S_IRWXU)
    shutil.rmtree(path)
