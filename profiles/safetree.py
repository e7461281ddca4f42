"""Whole trees under the file rule: walk, copy and remove a folder a profile can write, following no link.

:mod:`profiles.safeio` resolves one path. Some operations need every entry of a tree: ``hermesd
isolate-user`` gives a home to an account, a clone copies its source profile, an export reads
every file, a delete or a failed create removes a tree. Done by path (``os.walk``,
``shutil.copytree``, ``rmtree``'s chmod retry), each step resolves again a name the profile can
swap for a link between the listing and the use, and root then reads, copies, changes or removes
what the link names. Here the top is resolved by :mod:`profiles.safeio` (beneath its base, no
link), every folder below is entered relative to its parent's descriptor with ``O_NOFOLLOW |
O_DIRECTORY``, and every entry is pinned by a descriptor and judged by ``fstat`` of it, so a
name swapped meanwhile changes nothing: a link is an entry like any other, listed, never entered
or followed.

* :func:`walk`: every entry with an ``O_PATH`` descriptor pinning it; :func:`set_mode`,
  :func:`set_owner` and :func:`open_entry` act through that descriptor (its ``/proc/self/fd``
  entry names exactly that inode).
* :func:`copy_tree`: a copy that holds no link out of it. Every entry that is not a folder is
  hard-linked from its folder's descriptor (``linkat`` without ``AT_SYMLINK_FOLLOW`` links the
  entry itself) and judged by the kind of the copy's *own* entry, which the source can no longer
  change; across file systems a regular file is copied from a descriptor instead. A regular file
  stays (hard-linked: whoever reads the copy must only read it, and this module never changes a
  copied file: the modes it sets are those of folders it made). A link stays only when its
  target, read and never followed, is relative and has no ``..`` (:func:`link_stays_inside`):
  then it can only lead down from its own folder, into the copy; any other link is left out and
  its path returned. Anything else (FIFO, socket, device) is left out.
* :func:`remove_tree`: entries unlinked and folders removed by descriptor; a folder is made
  writable through its own descriptor where removal needs it, never a file (a hard-linked copy's
  inode is its source's).
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from collections.abc import Callable, Iterator
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from profiles import beneath as beneath_mod
from profiles import safeio
from profiles.safeio import Beneath, LinkRefusedError, UnsafeFileError

MAX_DEPTH = 512  # no profile needs more; a walk never holds more descriptors than this
COPY_MAX_DEPTH = 128
_LIST = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_PIN = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
_NO_LINK = (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.EACCES)

Skip = Callable[[tuple[str, ...]], bool]


class TooDeepError(UnsafeFileError):
    """A tree nested deeper than the walk or copy accepts (a profile's trap, or a loop of mounts)."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One entry of a walk. ``fd`` (``O_PATH``) pins it and is valid until the walk moves on."""

    parts: tuple[str, ...]  # below the top; () is the top itself
    st: os.stat_result  # of the entry itself: a link is a link
    fd: int

    @property
    def rel(self) -> str:
        return "/".join(self.parts)


# --------------------------------------------------------------------------- walk


def walk(top: Beneath | Path | str, *, enter: Callable[[Entry], bool] | None = None,
         on_error: Callable[[tuple[str, ...], OSError, bool], None] | None = None) -> Iterator[Entry]:
    """Every entry of the folder ``top``: the top first, each folder before what it holds, by name.

    A folder is entered once the caller has seen it, unless ``enter(entry)`` says no (another
    file system, a depth the caller bounds). ``on_error(parts, exc, listing)`` hears of a folder
    that cannot be listed (``listing``) or an entry that cannot be pinned, and the walk goes on;
    without it the error is raised. An entry gone meanwhile is skipped. ``top`` itself must be a
    folder reached without a link (else ``OSError``, :class:`~profiles.safeio.LinkRefusedError`
    for a link). Folders deeper than :data:`MAX_DEPTH` are reported as :class:`TooDeepError`.
    """
    where = safeio.beneath(top)
    top_fd = safeio.open_dir(where)
    stack: list[tuple[int, tuple[str, ...], Iterator[str]]] = []
    try:
        first = Entry((), os.fstat(top_fd), top_fd)
        yield first
        if enter is None or enter(first):
            stack.append((top_fd, (), iter(_names(top_fd, (), on_error))))
        while stack:
            dir_fd, parts, names = stack[-1]
            name = next(names, None)
            if name is None:
                stack.pop()
                if dir_fd != top_fd:
                    os.close(dir_fd)
                continue
            here = (*parts, name)
            try:
                fd = os.open(name, _PIN, dir_fd=dir_fd)
            except FileNotFoundError:
                continue
            except OSError as exc:
                _report(on_error, here, exc, False)
                continue
            keep = False
            try:
                entry = Entry(here, os.fstat(fd), fd)
                yield entry
                if stat.S_ISDIR(entry.st.st_mode) and (enter is None or enter(entry)):
                    if len(here) >= MAX_DEPTH:
                        _report(on_error, here, TooDeepError(where.path / entry.rel,
                                                             f"is nested more than {MAX_DEPTH} folders deep"), True)
                    else:
                        stack.append((fd, here, iter(_names(fd, here, on_error))))
                        keep = True
            finally:
                if not keep:
                    os.close(fd)
    finally:
        for dir_fd, _parts, _names_left in stack:
            if dir_fd != top_fd:
                os.close(dir_fd)
        os.close(top_fd)


def _names(pinned: int, parts: tuple[str, ...], on_error: Callable[[tuple[str, ...], OSError, bool], None] | None,
           ) -> list[str]:
    try:
        fd = os.open(".", _LIST, dir_fd=pinned)  # the very folder ``pinned`` holds, whatever its name is now
        try:
            with os.scandir(fd) as it:
                return sorted(e.name for e in it)
        finally:
            os.close(fd)
    except OSError as exc:
        _report(on_error, parts, exc, True)
        return []


def _report(on_error: Callable[[tuple[str, ...], OSError, bool], None] | None, parts: tuple[str, ...],
            exc: OSError, listing: bool) -> None:
    if on_error is None:
        raise exc
    on_error(parts, exc, listing)


def _proc(entry: Entry) -> str:
    if stat.S_ISLNK(entry.st.st_mode):
        raise LinkRefusedError(entry.rel or ".", "is a symbolic link; hermesd acts on no link's target")
    return f"/proc/self/fd/{entry.fd}"


def set_mode(entry: Entry, mode: int) -> None:
    """Set the permission bits of the pinned entry itself (a link is refused)."""
    os.chmod(_proc(entry), mode)


def set_owner(entry: Entry, uid: int, gid: int) -> None:
    """Give the pinned entry itself to ``uid:gid`` (a link is refused)."""
    os.chown(_proc(entry), uid, gid)


def open_entry(entry: Entry, flags: int = os.O_RDONLY) -> int:
    """A descriptor for the pinned regular file or folder itself (never a FIFO, device or link)."""
    if not (stat.S_ISREG(entry.st.st_mode) or stat.S_ISDIR(entry.st.st_mode)):
        raise UnsafeFileError(entry.rel or ".", "is not a regular file or a folder")
    return os.open(_proc(entry), flags | os.O_CLOEXEC | os.O_NOCTTY)


# --------------------------------------------------------------------------- copy


def link_stays_inside(target: str) -> bool:
    """A link whose target is relative and never climbs: it can only lead below its own folder."""
    return bool(target) and not target.startswith("/") and ".." not in target.split("/")


def copy_tree(source: Beneath | Path | str, dest: Beneath | Path | str, skip: Skip) -> list[str]:
    """Copy the folder ``source`` into the new folder ``dest`` (module docstring); the links left out.

    ``skip(parts)`` names entries (relative path parts) not to copy at all. Folders get the
    source's permission bits (owner rwx added) and times once filled. Raises
    :class:`TooDeepError` past :data:`COPY_MAX_DEPTH` folders, and
    :class:`~profiles.safeio.LinkRefusedError` when ``source`` is reached through a link.
    """
    dropped: list[str] = []
    src_where, dst_where = safeio.beneath(source), safeio.beneath(dest)
    src = safeio.open_dir(src_where, path_only=False)
    try:
        safeio.mkdir(dst_where, 0o700)
        out = safeio.open_dir(dst_where, path_only=False)
        try:
            _copy_folder(src, out, (), skip, dropped, src_where)
            _copy_folder_stat(src, out)
        finally:
            os.close(out)
    finally:
        os.close(src)
    return dropped


def _copy_folder(src_fd: int, dst_fd: int, rel: tuple[str, ...], skip: Skip, dropped: list[str],
                 top: Beneath) -> None:
    if len(rel) > COPY_MAX_DEPTH:
        raise TooDeepError(top.path / "/".join(rel), f"is nested more than {COPY_MAX_DEPTH} folders deep")
    with os.scandir(src_fd) as entries:
        listed = [(e.name, e.is_dir(follow_symlinks=False)) for e in entries]
    for name, is_dir in sorted(listed):
        here = (*rel, name)
        if skip(here):
            continue
        if is_dir:
            try:
                sub = os.open(name, _DIR, dir_fd=src_fd)
            except FileNotFoundError:
                continue
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
            else:  # a folder still: copy it by descriptor
                try:
                    os.mkdir(name, 0o700, dir_fd=dst_fd)
                    out = os.open(name, _DIR, dir_fd=dst_fd)
                    try:
                        _copy_folder(sub, out, here, skip, dropped, top)
                        _copy_folder_stat(sub, out)
                    finally:
                        os.close(out)
                finally:
                    os.close(sub)
                continue
        _copy_entry(src_fd, name, dst_fd, here, dropped)


def _copy_folder_stat(src_fd: int, dst_fd: int) -> None:
    st = os.fstat(src_fd)
    os.fchmod(dst_fd, stat.S_IMODE(st.st_mode) | stat.S_IRWXU)
    os.utime(dst_fd, ns=(st.st_atime_ns, st.st_mtime_ns))


def _judge_link(target: str, name: str, dst_fd: int, rel: tuple[str, ...], dropped: list[str], *,
                present: bool) -> None:
    """Keep a link that stays inside (``present``: the copy already holds it), else leave it out."""
    if link_stays_inside(target):
        if not present:
            os.symlink(target, name, dir_fd=dst_fd)
        return
    if present:
        os.unlink(name, dir_fd=dst_fd)
    dropped.append("/".join(rel))


def _copy_entry(src_fd: int, name: str, dst_fd: int, rel: tuple[str, ...], dropped: list[str]) -> None:
    """One entry that is not (or is no longer) a folder: link it, then judge the copy's own entry."""
    try:
        os.link(name, name, src_dir_fd=src_fd, dst_dir_fd=dst_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    except OSError as exc:
        if exc.errno not in _NO_LINK:
            raise
        _copy_across(src_fd, name, dst_fd, rel, dropped)
        return
    mode = os.stat(name, dir_fd=dst_fd, follow_symlinks=False).st_mode
    if stat.S_ISLNK(mode):
        _judge_link(os.readlink(name, dir_fd=dst_fd), name, dst_fd, rel, dropped, present=True)
    elif not stat.S_ISREG(mode):
        os.unlink(name, dir_fd=dst_fd)


def _copy_across(src_fd: int, name: str, dst_fd: int, rel: tuple[str, ...], dropped: list[str]) -> None:
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


# --------------------------------------------------------------------------- removal


def remove_tree(where: Beneath | Path | str) -> None:
    """Remove ``where`` and everything below it, following no link; nothing there is fine.

    A link (or file) at ``where`` itself is removed as an entry. Folders that removal cannot
    write are made owner-writable through their own descriptor first; files are never changed.
    """
    where = safeio.beneath(where)
    parts = beneath_mod.split(where.rel)
    if not parts:
        raise LinkRefusedError(where.path, "is the base folder itself, not an entry in it")
    parent = safeio.open_dir(Beneath(where.base, "/".join(parts[:-1])))
    try:
        _remove(parent, parts[-1], 0, where)
    finally:
        os.close(parent)


def _remove(dir_fd: int, name: str, depth: int, top: Beneath) -> None:
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        try:
            fd = os.open(name, _DIR, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENOTDIR):  # else it became a link or a file: unlink it
                raise
        else:
            try:
                if depth >= MAX_DEPTH:
                    raise TooDeepError(top.path, f"is nested more than {MAX_DEPTH} folders deep")
                if stat.S_IMODE(st.st_mode) & stat.S_IRWXU != stat.S_IRWXU:
                    with suppress(OSError):
                        os.fchmod(fd, stat.S_IMODE(st.st_mode) | stat.S_IRWXU)
                with os.scandir(fd) as it:
                    names = [e.name for e in it]
                for child in names:
                    _remove(fd, child, depth + 1, top)
            finally:
                os.close(fd)
            with suppress(FileNotFoundError):
                os.rmdir(name, dir_fd=dir_fd)
            return
    with suppress(FileNotFoundError):
        os.unlink(name, dir_fd=dir_fd)
