"""Saving and restoring the files a new release may migrate in a profile's folder, byte for byte.

Which files: :data:`profiles.upstream.files.MIGRATED_FILES` (config.yaml, .env, the skills manifest,
the multiplex marker). An upgrade saves each profile's copies under its record before anything is
installed or restarted; a rollback puts them back while that profile's gateway is stopped, so no
gateway writes one of them meanwhile.

A profile's folder is written by an agent that may be hostile, and hermesd runs as root, so every
path is walked from the root one component at a time with ``O_NOFOLLOW`` (a link planted in place
of ``profiles/``, the profile folder or ``skills/`` is refused, never followed), and files are opened
relative to their folder's descriptor. A file that is itself a symlink (a dotfile manager's link) is
saved as the link (its target text, never what it points at) and restored as the same link. A FIFO,
a device or a file over :data:`MAX_FILE` is not copied (``refused``, named in the record). A restore
writes a temporary file next to the original with ``O_EXCL|O_NOFOLLOW`` and renames it over the
entry, so whatever is there now (a planted link included) is replaced, never written through; the
mode and owner come back too. What a restore replaces is kept in the record's ``replaced/`` folder.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import stat
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from profiles.upstream.files import MIGRATED_FILES

MAX_FILE = 16 << 20
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True, slots=True)
class Saved:
    """One file of one profile as it was: ``kind`` is file, link, absent or refused."""

    path: str  # relative to the profile's folder
    kind: str
    sha256: str | None = None
    size: int | None = None
    mode: int | None = None
    uid: int | None = None
    gid: int | None = None
    target: str | None = None  # a link's target text
    problem: str | None = None  # why it was refused

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @staticmethod
    def from_json(raw: dict[str, Any]) -> Saved:
        return Saved(**{f.name: raw.get(f.name) for f in fields(Saved)})


class UnsafePath(OSError):
    """A folder on the way to a profile's file is a link or not a folder: nothing is read or written there."""


def _walk(root: Path, folder: Path, *, create: bool = False, owner: tuple[int, int] | None = None) -> int:
    """A descriptor of ``folder`` (the root or beneath it), reached without following any link."""
    fd = os.open(root, _DIR_FLAGS)
    try:
        for part in folder.relative_to(root).parts:
            try:
                nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                os.mkdir(part, 0o700, dir_fd=fd)
                nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
                if owner is not None:
                    with contextlib.suppress(PermissionError):
                        os.fchown(nfd, *owner)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise UnsafePath(exc.errno, f"{folder}: {part} is a link or not a folder; hermesd does not "
                                                "follow links in a profile") from None
                raise
            os.close(fd)
            fd = nfd
        return fd
    except BaseException:
        os.close(fd)
        raise


def _read_entry(dir_fd: int, name: str) -> tuple[Saved, bytes | None]:
    """What ``name`` in the folder ``dir_fd`` is, and its bytes when it is a regular file."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return Saved(name, "absent"), None
    if stat.S_ISLNK(st.st_mode):
        return Saved(name, "link", target=os.readlink(name, dir_fd=dir_fd)), None
    if not stat.S_ISREG(st.st_mode):
        return Saved(name, "refused", problem="not a regular file"), None
    if st.st_size > MAX_FILE:
        return Saved(name, "refused", problem=f"{st.st_size} bytes, over the {MAX_FILE} limit"), None
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        fst = os.fstat(fd)
        if not stat.S_ISREG(fst.st_mode) or fst.st_size > MAX_FILE:
            return Saved(name, "refused", problem="changed while being read"), None
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    return Saved(name, "file", hashlib.sha256(data).hexdigest(), len(data), stat.S_IMODE(fst.st_mode),
                 fst.st_uid, fst.st_gid), data


def _split(rel: str) -> tuple[Path, str]:
    parts = Path(rel).parts
    if not parts or any(p in ("", ".", "..") for p in parts) or Path(rel).is_absolute():
        raise ValueError(f"not a path inside a profile: {rel!r}")
    return Path(*parts[:-1]), parts[-1]


def read(root: Path, home: Path, rel: str) -> tuple[Saved, bytes | None]:
    """One of a profile's files as it is now (see the module docstring for links and junk)."""
    sub, name = _split(rel)
    try:
        fd = _walk(root, home / sub)
    except FileNotFoundError:
        return Saved(rel, "absent"), None
    except UnsafePath as exc:
        return Saved(rel, "refused", problem=str(exc)), None
    try:
        entry, data = _read_entry(fd, name)
    finally:
        os.close(fd)
    return Saved(rel, entry.kind, entry.sha256, entry.size, entry.mode, entry.uid, entry.gid, entry.target,
                 entry.problem), data


def save(root: Path, home: Path, store: Path, names: Sequence[str] = MIGRATED_FILES) -> list[Saved]:
    """Copy each of ``names`` of the profile in ``home`` into ``store`` (a private folder of hermesd's)."""
    out = []
    for rel in names:
        entry, data = read(root, home, rel)
        if data is not None:
            target = store / rel
            target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
        out.append(entry)
    return out


def _write(dir_fd: int, name: str, data: bytes, entry: Saved) -> None:
    tmp = f".{name}.hermesd-restore.{os.getpid()}"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp, dir_fd=dir_fd)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if entry.uid is not None and entry.gid is not None:
                with contextlib.suppress(PermissionError):
                    os.fchown(fd, entry.uid, entry.gid)
            os.fchmod(fd, entry.mode if entry.mode is not None else 0o600)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise


def _link(dir_fd: int, name: str, target: str) -> None:
    tmp = f".{name}.hermesd-restore.{os.getpid()}"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp, dir_fd=dir_fd)
    os.symlink(target, tmp, dir_fd=dir_fd)
    os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


def same(now: Saved, then: Saved) -> bool:
    """Whether a file is as it was saved (bytes, mode and owner; a link's target; absence)."""
    if now.kind != then.kind:
        return False
    if then.kind == "file":
        return (now.sha256, now.mode, now.uid, now.gid) == (then.sha256, then.mode, then.uid, then.gid)
    return now.target == then.target


def restore(root: Path, home: Path, store: Path, saved: Sequence[Saved], replaced: Path) -> list[str]:
    """Put every saved file of the profile in ``home`` back as it was; the paths that changed.

    What is there now and differs is copied to ``replaced`` first (regular files only). Entries that
    were ``refused`` are left alone. Raises ``OSError`` (an :class:`UnsafePath` among them) when a
    file cannot be put back; what was restored before it stays restored.
    """
    changed = []
    owner = os.stat(home, follow_symlinks=False)
    for then in saved:
        if then.kind == "refused":
            continue
        now, current = read(root, home, then.path)
        if same(now, then):
            continue
        if current is not None:
            keep = replaced / then.path
            keep.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            keep.write_bytes(current)
        sub, name = _split(then.path)
        if then.kind == "absent":
            if now.kind in ("file", "link"):
                fd = _walk(root, home / sub)
                try:
                    os.unlink(name, dir_fd=fd)
                finally:
                    os.close(fd)
                changed.append(then.path)
            continue
        fd = _walk(root, home / sub, create=True, owner=(owner.st_uid, owner.st_gid))
        try:
            if then.kind == "link":
                _link(fd, name, then.target or "")
            else:
                data = (store / then.path).read_bytes()
                if hashlib.sha256(data).hexdigest() != then.sha256:
                    raise OSError(errno.EIO, f"the saved copy of {then.path} in {store} was changed; not restoring it")
                _write(fd, name, data, then)
        finally:
            os.close(fd)
        changed.append(then.path)
    return changed


def differences(root: Path, home: Path, saved: Sequence[Saved]) -> list[str]:
    """The saved files of ``home`` that are not as they were saved (empty: restored byte for byte)."""
    return [then.path for then in saved if then.kind != "refused" and not same(read(root, home, then.path)[0], then)]
