"""Saving and restoring the files a new release may migrate in a profile's folder, byte for byte.

Which files: :data:`profiles.upstream.files.MIGRATED_FILES` (config.yaml, .env, the skills manifest,
the multiplex marker). An upgrade saves each profile's copies under its record before anything is
installed or restarted; a rollback puts them back while that profile's gateway is stopped, so no
gateway writes one of them meanwhile.

A profile's folder is written by an agent that may be hostile, and hermesd runs as root, so every
path goes through :mod:`profiles.safeio`: resolved from the root without following any link (a
link planted in place of ``profiles/``, the profile folder or ``skills/`` is refused, never
followed), and files are opened relative to their folder's descriptor. A file that is itself a
symlink (a dotfile manager's link) is saved as the link (its target text, never what it points at)
and restored as the same link. A FIFO, a device or a file over :data:`MAX_FILE` is not copied
(``refused``, named in the record). A restore writes a temporary file next to the original with
``O_EXCL|O_NOFOLLOW`` and renames it over the entry, so whatever is there now (a planted link
included) is replaced, never written through; the mode and owner come back too. What a restore
replaces is kept in the record's ``replaced/`` folder. The record's folders (in ``.hermesd``) are
written the same way.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import stat
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from profiles import safeio
from profiles.safeio import Beneath, LinkRefusedError
from profiles.upstream.files import MIGRATED_FILES, RUN_WRITES

MAX_FILE = 16 << 20


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
        return Saved(**{f.name: raw.get(f.name) for f in fields(Saved)})  # type: ignore[arg-type]


class UnsafePath(OSError):
    """A folder on the way to a profile's file is a link or not a folder: nothing is read or written there."""


@contextlib.contextmanager
def _no_link(where: Beneath) -> Iterator[None]:
    """Report a link (or a file) where a folder of the profile was expected as :class:`UnsafePath`."""
    try:
        yield
    except (LinkRefusedError, NotADirectoryError) as exc:
        why = exc.problem if isinstance(exc, LinkRefusedError) else "a folder on the way is not a folder"
        raise UnsafePath(errno.ELOOP, f"{where.path}: {why}; hermesd does not follow links in a profile") from None


def _split(rel: str) -> tuple[Path, str]:
    parts = Path(rel).parts
    if not parts or any(p in ("", ".", "..") for p in parts) or Path(rel).is_absolute():
        raise ValueError(f"not a path inside a profile: {rel!r}")
    return Path(*parts[:-1]), parts[-1]


def _file(root: Path, home: Path, rel: str) -> Beneath:
    """``rel`` of the profile in ``home``, resolved from the root (no component below it may be a link)."""
    _split(rel)
    return safeio.under(root, home / rel)


def _folder_of(where: Beneath) -> Beneath:
    return Beneath(where.base, where.rel.rpartition("/")[0])


def _read_entry(dir_fd: int, where: Beneath, rel: str) -> tuple[Saved, bytes | None]:
    """What ``where`` (in the folder ``dir_fd``) is, and its bytes when it is a regular file."""
    name = where.name
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return Saved(rel, "absent"), None
    if stat.S_ISLNK(st.st_mode):
        return Saved(rel, "link", target=os.readlink(name, dir_fd=dir_fd)), None
    if not stat.S_ISREG(st.st_mode):
        return Saved(rel, "refused", problem="not a regular file"), None
    if st.st_size > MAX_FILE:
        return Saved(rel, "refused", problem=f"{st.st_size} bytes, over the {MAX_FILE} limit"), None
    try:
        fd = safeio.open_beneath(where, os.O_RDONLY | os.O_NONBLOCK)
    except (FileNotFoundError, LinkRefusedError):
        return Saved(rel, "refused", problem="changed while being read"), None
    try:
        fst = os.fstat(fd)
        if not stat.S_ISREG(fst.st_mode) or fst.st_size > MAX_FILE:
            return Saved(rel, "refused", problem="changed while being read"), None
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    return Saved(rel, "file", hashlib.sha256(data).hexdigest(), len(data), stat.S_IMODE(fst.st_mode),
                 fst.st_uid, fst.st_gid), data


def read(root: Path, home: Path, rel: str) -> tuple[Saved, bytes | None]:
    """One of a profile's files as it is now (see the module docstring for links and junk)."""
    where = _file(root, home, rel)
    try:
        with _no_link(where):
            fd = safeio.open_dir(_folder_of(where))
    except FileNotFoundError:
        return Saved(rel, "absent"), None
    except UnsafePath as exc:
        return Saved(rel, "refused", problem=str(exc)), None
    try:
        return _read_entry(fd, where, rel)
    finally:
        os.close(fd)


def save(root: Path, home: Path, store: Beneath | Path, names: Sequence[str] = MIGRATED_FILES) -> list[Saved]:
    """Copy each of ``names`` of the profile in ``home`` into ``store`` (a private folder of hermesd's)."""
    store = safeio.under(root, store)
    out = []
    for rel in names:
        entry, data = read(root, home, rel)
        if data is not None:
            target = store / rel
            safeio.makedirs(_folder_of(target), 0o700)
            safeio.replace_bytes(target, data, 0o600, exclusive=True)
        out.append(entry)
    return out


def _make_folders(folder: Beneath, owner: tuple[int, int]) -> None:
    """The missing folders down to ``folder``, each created by descriptor and given to ``owner``."""
    parts = [p for p in folder.rel.split("/") if p]
    for i in range(1, len(parts) + 1):
        step = Beneath(folder.base, "/".join(parts[:i]))
        try:
            safeio.mkdir(step, 0o700)
        except FileExistsError:
            continue
        with contextlib.suppress(PermissionError):
            safeio.chown(step, *owner)


def same(now: Saved, then: Saved) -> bool:
    """Whether a file is as it was saved (bytes, mode and owner; a link's target; absence)."""
    if now.kind != then.kind:
        return False
    if then.kind == "file":
        return (now.sha256, now.mode, now.uid, now.gid) == (then.sha256, then.mode, then.uid, then.gid)
    return now.target == then.target


def restore(root: Path, home: Path, store: Beneath | Path, saved: Sequence[Saved],
            replaced: Beneath | Path) -> list[str]:
    """Put every saved file of the profile in ``home`` back as it was; the paths that changed.

    What is there now and differs is copied to ``replaced`` first (regular files only). Entries that
    were ``refused`` are left alone. Raises ``OSError`` (an :class:`UnsafePath` among them) when a
    file cannot be put back; what was restored before it stays restored.
    """
    store, replaced = safeio.under(root, store), safeio.under(root, replaced)
    changed = []
    home_where = safeio.under(root, home)
    owner = safeio.lstat(home_where)
    if owner is None or not stat.S_ISDIR(owner.st_mode):
        raise UnsafePath(errno.ENOENT, f"{home}: missing, not a folder, or reached through a link")
    for then in saved:
        if then.kind == "refused":
            continue
        now, current = read(root, home, then.path)
        if same(now, then):
            continue
        if current is not None:
            keep = replaced / then.path
            safeio.makedirs(_folder_of(keep), 0o700)
            safeio.replace_bytes(keep, current, 0o600)
        where = _file(root, home, then.path)
        if then.kind == "absent":
            if now.kind in ("file", "link"):
                with _no_link(where):
                    safeio.unlink(where)
                changed.append(then.path)
            continue
        with _no_link(where):
            _make_folders(_folder_of(where), (owner.st_uid, owner.st_gid))
            if then.kind == "link":
                safeio.symlink(where, then.target or "", replace=True)
            else:
                data = safeio.read_regular(store / then.path, MAX_FILE)
                if hashlib.sha256(data).hexdigest() != then.sha256:
                    raise OSError(errno.EIO, f"the saved copy of {then.path} in {store} was changed; not restoring it")
                safeio.replace_bytes(where, data, then.mode if then.mode is not None else 0o600, exact_mode=True,
                                     owner=(then.uid, then.gid) if then.uid is not None and then.gid is not None
                                     else None)
        changed.append(then.path)
    return changed


def differences(root: Path, home: Path, saved: Sequence[Saved]) -> list[str]:
    """The saved files of ``home`` that are not as they were saved (empty: restored byte for byte)."""
    return [then.path for then in saved if then.kind != "refused" and not same(read(root, home, then.path)[0], then)]


def inventory(root: Path, home: Path) -> dict[str, str]:
    """The entries directly in a profile's folder: name -> kind, size and modification time (nothing is
    read: the folder is the profile's, its files can be large); empty when it cannot be listed safely."""
    try:
        fd = safeio.open_dir(safeio.under(root, home), path_only=False)
    except (OSError, LinkRefusedError):
        return {}
    out = {}
    try:
        for name in os.listdir(fd):
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except OSError:
                continue
            kind = "dir" if stat.S_ISDIR(st.st_mode) else "file" if stat.S_ISREG(st.st_mode) else "other"
            out[name] = kind if kind == "dir" else f"{kind}:{st.st_size}:{st.st_mtime_ns}"
    finally:
        os.close(fd)
    return out


def left_changed(before: dict[str, str], after: dict[str, str], saved: Sequence[str] = MIGRATED_FILES) -> list[str]:
    """Top-level entries created, changed or removed since ``before`` that a rollback does not put back:
    not a saved file, not what every gateway run writes (folders count as created or removed only)."""
    skip = {p.split("/", 1)[0] for p in saved if "/" not in p} | RUN_WRITES
    names = sorted(n for n in set(before) | set(after) if n not in skip and before.get(n) != after.get(n)
                   and not (before.get(n) == after.get(n) == "dir"))
    return [n + ("/" if (after.get(n) or before.get(n)) == "dir" else "") for n in names]
