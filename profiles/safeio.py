"""The one rule for every file hermesd touches in a folder that someone else can write.

hermesd runs as root and serves profiles whose agents may be prompt-injected. Anything under a
profile's home, the root's shared channels (``shared/``, ``kanban/``, ``kanban.db``), hermesd's
own ``.hermesd/`` and the alias folder can be replaced by the agent with a symlink, a FIFO, a
device or a huge file. Whenever hermesd opens, writes, renames, removes or mounts such a path, the
agent would choose the target: a planted ``..gateway-planned-stop.json.<pid>.tmp`` linking to
another profile's ``.env`` makes root overwrite it. So every such operation goes through here:

* **Beneath, no links.** A path is a trusted *base* (the root, or a folder the operator chose;
  links on the way to it are the operator's and are followed) plus a *relative* part that is
  resolved under it without following any link: ``openat2(2)`` with ``RESOLVE_BENEATH |
  RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`` where the kernel has it (Linux 5.6+), else a walk
  that opens one component at a time with ``O_NOFOLLOW`` relative to the previous one. A link
  anywhere in the relative part is :class:`LinkRefusedError`; ``..`` and absolute parts are refused
  before any system call. A profile home ``<root>/profiles/NAME`` is resolved from the root
  (:func:`home_file`), so even its folder cannot be swapped for a link.
* **Regular files only where a file is expected.** Reads open with ``O_NONBLOCK`` (a FIFO opens at
  once and is then refused), ``fstat`` the descriptor (not the path, so a swap between check and
  read changes nothing), accept only a regular file no larger than the caller's limit, and read at
  most limit + 1 bytes: one ``open``, one ``fstat`` and a clear error, never a stall of the loop
  that serves every profile.
* **Writes are atomic and never through a name someone else chose.** The temp file is created
  ``O_CREAT | O_EXCL | O_NOFOLLOW`` under an unguessable name in the destination's folder (opened
  by descriptor), then ``renameat`` between descriptors of that one folder.

* **Changes of kind, mode and owner act on the entry itself.** Folders are created one at a time
  by descriptor (:func:`mkdir`, :func:`makedirs`, :func:`temp_folder`); a mode is set through a
  descriptor that pins the entry just checked (:func:`chmod`), an owner with ``AT_SYMLINK_NOFOLLOW``
  (:func:`chown`); logs are appended to only when they are regular files (:func:`open_append`).

Callers get descriptors, bounded bytes or an atomic replace; they never hold a path string into
a profile's tree between a check and a use. Whole trees (walk, copy, removal) are
:mod:`profiles.safetree`'s, built on this module. Standard library only: the health probe and the
confinement shim import this module and must stay cheap.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from profiles import beneath as beneath_mod

_KINDS = {
    stat.S_IFDIR: "a directory",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFLNK: "a symbolic link",
}

PROFILES_DIRNAME = "profiles"  # profiles.paths has the same name; importing it here would cost the shim


class UnsafeFileError(OSError):
    """A file that is not a regular file, or is larger than the reader accepts; names the file."""

    def __init__(self, path: Path | str, problem: str, code: int = errno.EINVAL) -> None:
        super().__init__(code, f"{path}: {problem}")
        self.path = Path(path)
        self.problem = problem

    def __str__(self) -> str:
        return f"{self.path}: {self.problem}"


class LinkRefusedError(UnsafeFileError):
    """A symbolic link (or ``..``) where hermesd resolves a path beneath a folder it does not own."""

    def __init__(self, path: Path | str, problem: str) -> None:
        super().__init__(path, problem, errno.ELOOP)


@dataclass(frozen=True, slots=True)
class Beneath:
    """A path as a trusted base folder and a part below it that no link may redirect.

    ``path`` is for messages only: opening it directly would follow what the rule refuses.
    """

    base: Path
    rel: str

    @property
    def path(self) -> Path:
        return self.base / self.rel if self.rel else self.base

    @property
    def text(self) -> str:
        """``path`` as a string, cheaply (a cache key, a message)."""
        return os.path.join(self.base, self.rel) if self.rel else os.fspath(self.base)

    @property
    def name(self) -> str:
        return self.rel.rpartition("/")[2] if self.rel else self.base.name

    def __truediv__(self, name: str) -> Beneath:
        return Beneath(self.base, f"{self.rel}/{name}" if self.rel else name)

    def sibling(self, name: str) -> Beneath:
        """Another file in the same folder."""
        head = self.rel.rpartition("/")[0]
        return Beneath(self.base, f"{head}/{name}" if head else name)

    def __str__(self) -> str:
        return str(self.path)


def at(base: Path | str, *parts: str) -> Beneath:
    """``parts`` below the trusted folder ``base`` (``"a/b"`` and ``"a", "b"`` are the same)."""
    rel = "/".join(p.strip("/") for p in parts if p and p.strip("/"))
    return Beneath(base if isinstance(base, Path) else Path(base), rel)


def home_file(home: Path | str, *parts: str) -> Beneath:
    """A file of a profile home, resolved from the root when the home is ``<root>/profiles/NAME``.

    The root is the operator's folder; ``profiles/`` and the home itself are not (the default
    profile owns the root folder and, under Landlock alone, can replace them with links).
    """
    if not isinstance(home, Path):
        home = Path(home)
    parent = home.parent
    if parent.name == PROFILES_DIRNAME and home.name not in ("", ".", ".."):
        return Beneath(parent.parent, "/".join((PROFILES_DIRNAME, home.name, *(p for p in parts if p))))
    return Beneath(home, "/".join(p for p in parts if p))


def beneath(where: Beneath | Path | str) -> Beneath:
    """``where`` as the rule resolves it: a plain path names an entry directly in its folder, and that
    folder is resolved with :func:`home_file` (from the root when it is a profile home); a profile
    home itself is resolved from the root too. Either way the last component is never a link."""
    if isinstance(where, Beneath):
        return where
    path = Path(where)
    if path.parent.name == PROFILES_DIRNAME and path.name not in ("", ".", ".."):
        return home_file(path)
    return home_file(path.parent, path.name)


def under(base: Path | str, where: Beneath | Path | str) -> Beneath:
    """``where`` resolved from the trusted folder ``base`` when it lies below it (hermesd's files in
    ``<root>/.hermesd``: from the root, so not even ``.hermesd`` may be a link), else as
    :func:`beneath` resolves it. A :class:`Beneath` is returned as it is."""
    if isinstance(where, Beneath):
        return where
    base, path = Path(base), Path(where)
    try:
        rel = path.relative_to(base)
    except ValueError:
        return beneath(path)
    return Beneath(base, str(rel) if rel.parts else "")


def describe_size(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} bytes"


# --------------------------------------------------------------------------- resolution


def _parts(where: Beneath) -> list[str]:
    parts = beneath_mod.split(where.rel)
    if parts is None:
        raise LinkRefusedError(where.path, "names a path outside its folder; hermesd resolves these only beneath it")
    return parts


def _link_error(where: Beneath, dir_fd: int, parts: list[str]) -> LinkRefusedError:
    """The refusal, naming the link when it can be found again (it may have moved meanwhile)."""
    i = beneath_mod.first_link(dir_fd, parts)
    if i is None:
        problem = "is or lies under a symbolic link"
    elif i == len(parts) - 1:
        problem = "is a symbolic link"
    else:
        problem = f"lies under a symbolic link ({Beneath(where.base, '/'.join(parts[: i + 1])).path})"
    return LinkRefusedError(where.path, problem + "; hermesd does not follow links in folders a profile can write")


@contextmanager
def _base_fd(where: Beneath) -> Iterator[int]:
    fd = os.open(where.base, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield fd
    finally:
        os.close(fd)


def open_beneath(where: Beneath | Path | str, flags: int, mode: int = 0o600) -> int:
    """A descriptor for ``where`` opened with ``flags``, no link followed below its base.

    The caller owns (and closes) the descriptor. ``O_CLOEXEC`` and ``O_NOCTTY`` are always added.
    """
    where = beneath(where)
    parts = _parts(where)
    if not parts:
        return os.open(where.base, flags | os.O_CLOEXEC | os.O_NOCTTY, mode)
    try:
        return beneath_mod.open_under(os.fspath(where.base), "/".join(parts), flags, mode)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EXDEV) or (
                exc.errno == errno.ENOTDIR and flags & os.O_DIRECTORY and link_on_path(where) is not None):
            with _base_fd(where) as base:
                raise _link_error(where, base, parts) from None
        raise OSError(exc.errno, exc.strerror, where.text) from None


def open_dir(where: Beneath | Path | str, *, path_only: bool = True) -> int:
    """A directory descriptor for ``where`` (``O_PATH`` unless ``path_only`` is False, e.g. for scandir)."""
    where = beneath(where)
    return open_beneath(where, (os.O_PATH if path_only else os.O_RDONLY) | os.O_DIRECTORY)


@contextmanager
def _parent(where: Beneath) -> Iterator[tuple[int, str]]:
    """The folder holding ``where`` (as a descriptor) and the last name, for the ``*at`` calls."""
    parts = _parts(where)
    if not parts:
        raise LinkRefusedError(where.path, "is the base folder itself, not a file in it")
    fd = open_dir(Beneath(where.base, "/".join(parts[:-1])))
    try:
        yield fd, parts[-1]
    finally:
        os.close(fd)


# --------------------------------------------------------------------------- operations


def read_fd(fd: int, where: Beneath | Path | str, limit: int) -> bytes:
    """The bytes of the open regular file ``fd`` (at most ``limit``), for a caller that also needs its
    ``fstat``: one descriptor for both, so the status and the bytes are the same file's. ``where``
    names it in errors."""
    shown = where.path if isinstance(where, Beneath) else where
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        kind = _KINDS.get(stat.S_IFMT(st.st_mode), "not a regular file")
        raise UnsafeFileError(shown, f"is {kind}, not a regular file; hermesd reads only regular files")
    if st.st_size > limit:
        raise UnsafeFileError(shown, f"is {describe_size(st.st_size)}, over the {describe_size(limit)} limit")
    chunks: list[bytes] = []
    left = limit + 1
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    data = b"".join(chunks)
    if len(data) > limit:
        raise UnsafeFileError(shown, f"grew past the {describe_size(limit)} limit while being read")
    return data


def read_regular(where: Beneath | Path | str, limit: int) -> bytes:
    """The bytes of ``where`` if it is a regular file of at most ``limit`` bytes, reached without a link.

    Raises ``FileNotFoundError`` (and the other ``OSError`` s of ``open``) as usual,
    :class:`LinkRefusedError` for a link on the way, and :class:`UnsafeFileError` for anything that
    is not a regular file or is too large.
    """
    where = beneath(where)
    fd = open_beneath(where, os.O_RDONLY | os.O_NONBLOCK)
    try:
        return read_fd(fd, where, limit)
    finally:
        os.close(fd)


Stamp = tuple[int, int, int]  # (inode, size, mtime_ns): a parsed file is reused while it is unchanged


def read_if_changed(where: Beneath | Path | str, limit: int, stamp: Stamp | None) -> tuple[Stamp, bytes | None]:
    """``where``'s stamp, and its bytes unless the stamp equals ``stamp`` (the caller's cached copy).

    One open for both: the stamp comes from the descriptor that would be read, so a file swapped
    between a stat and a read cannot pair one file's stamp with another's content. The checks and
    errors are :func:`read_regular`'s.
    """
    where = beneath(where)
    fd = open_beneath(where, os.O_RDONLY | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        now = (st.st_ino, st.st_size, st.st_mtime_ns)
        if now == stamp and stat.S_ISREG(st.st_mode):
            return now, None
        return now, read_fd(fd, where, limit)
    finally:
        os.close(fd)


def read_regular_or_none(where: Beneath | Path | str, limit: int) -> bytes | None:
    """:func:`read_regular`, with every problem (missing, unreadable, unsafe) answered by ``None``.

    For files whose absence or junk is an ordinary state (a gateway's PID or state file).
    """
    try:
        return read_regular(where, limit)
    except OSError:
        return None


def read_operator_file(path: Path | str, limit: int) -> bytes:
    """A file the operator owns and may link from elsewhere (``hermesd.yaml``, a unit file), bounded.

    Links are followed here on purpose: no profile can replace these files (the namespace blanks
    ``hermesd.yaml`` for the default profile). The same regular-file and size checks apply.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    try:
        return read_fd(fd, path, limit)
    finally:
        os.close(fd)


def open_append(where: Beneath | Path | str, mode: int = 0o600) -> int:
    """A descriptor appending to the regular file ``where`` (created with ``mode`` if missing).

    For logs in folders someone else can write: opened ``O_NONBLOCK`` (a planted FIFO neither
    blocks the open nor is written to), refused unless the descriptor is a regular file, then made
    blocking again. The caller closes it.
    """
    where = beneath(where)
    fd = open_beneath(where, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK, mode)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = _KINDS.get(stat.S_IFMT(st.st_mode), "not a regular file")
            raise UnsafeFileError(where.path, f"is {kind}, not a regular file; hermesd appends only to regular files")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def replace_bytes(where: Beneath | Path | str, data: bytes, mode: int = 0o600, *, durable: bool = True,
                  exclusive: bool = False, exact_mode: bool = False, folder_owner: bool = False,
                  owner: tuple[int, int] | None = None) -> None:
    """Replace ``where`` with ``data`` so readers see the old file or the new one, never a torn one.

    The temp file is created ``O_EXCL | O_NOFOLLOW`` under a random name in the destination's folder
    and renamed between descriptors of that folder: a planted link, at the temp name or at the
    destination, is never written through (``rename`` replaces a link, it does not follow it).
    ``durable=False`` skips the fsync, for short-lived files that need not survive a power cut.
    ``exclusive=True`` never replaces: the file appears complete or ``FileExistsError`` is raised
    (``linkat`` of the temp file; the first of two racing writers wins). ``exact_mode=True`` sets
    ``mode`` whatever the umask (``fchmod`` of the temp file's descriptor). ``folder_owner=True`` gives
    the file to the owner of its folder (a profile run under its own account must be able to read
    what hermesd, as root, writes for it there). ``owner`` (uid, gid) is given to the temp file
    before it takes the name (root only; elsewhere a refusal is ignored).
    """
    where = beneath(where)
    def write(fd: int) -> None:
        if owner is not None:
            with suppress(PermissionError):
                os.fchown(fd, *owner)
        if exact_mode:
            os.fchmod(fd, mode)

        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]

    _replace(where, write, mode, durable=durable, exclusive=exclusive, folder_owner=folder_owner)


def replace_with_copy(where: Beneath | Path | str, source: Beneath | Path | str, mode: int = 0o600, *,
                      preserve: bool = False) -> None:
    """Replace ``where`` with a copy of the regular file ``source`` (both reached without a link).

    ``preserve=True`` gives the copy the source's permission bits (whatever the umask) and times,
    as ``shutil.copy2`` would; ``mode`` is then ignored.
    """
    where = beneath(where)
    source = beneath(source)
    src = open_beneath(source, os.O_RDONLY | os.O_NONBLOCK)
    try:
        st = os.fstat(src)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeFileError(source.path, "is not a regular file; hermesd copies only regular files")

        def write(fd: int) -> None:
            while os.sendfile(fd, src, None, 1 << 20):
                pass
            if preserve:
                os.fchmod(fd, stat.S_IMODE(st.st_mode))
                os.utime(fd, ns=(st.st_atime_ns, st.st_mtime_ns))

        _replace(where, write, mode, durable=False, exclusive=False)
    finally:
        os.close(src)


def _replace(where: Beneath, write: Callable[[int], None], mode: int, *, durable: bool, exclusive: bool,
             folder_owner: bool = False) -> None:
    with _parent(where) as (dir_fd, name):
        tmp = f".{name}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dir_fd)
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror, str(where.path)) from None
        try:
            try:
                if folder_owner and os.geteuid() == 0:
                    folder = os.fstat(dir_fd)
                    if (folder.st_uid, folder.st_gid) != (0, 0):
                        os.fchown(fd, folder.st_uid, folder.st_gid)
                write(fd)
                if durable:
                    os.fsync(fd)
            finally:
                os.close(fd)
            if exclusive:
                os.link(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
                os.unlink(tmp, dir_fd=dir_fd)
            else:
                os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            with suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
            raise


def rename(where: Beneath | Path | str, new_name: str) -> None:
    """Rename ``where`` to ``new_name`` in the same folder (by descriptor; a link is moved, not followed)."""
    where = beneath(where)
    if "/" in new_name or new_name in ("", ".", ".."):
        raise LinkRefusedError(where.sibling(new_name).path, "is not a name in the same folder")
    move(where, where.sibling(new_name))


def move(source: Beneath | Path | str, dest: Beneath | Path | str) -> None:
    """Rename ``source`` to ``dest`` (replacing it), each resolved beneath its base without a link."""
    source, dest = beneath(source), beneath(dest)
    with _parent(source) as (src_fd, src_name), _parent(dest) as (dst_fd, dst_name):
        os.replace(src_name, dst_name, src_dir_fd=src_fd, dst_dir_fd=dst_fd)


def symlink(where: Beneath | Path | str, target: str, *, replace: bool = False) -> None:
    """Create the link ``where`` -> ``target`` (the folder reached without a link; ``FileExistsError`` if taken).

    ``replace=True`` puts the link in place of whatever entry has the name (a file, a link): it is
    made under a random temp name and renamed over it, so the name is never missing meanwhile.
    """
    where = beneath(where)
    with _parent(where) as (dir_fd, name):
        if not replace:
            os.symlink(target, name, dir_fd=dir_fd)
            return
        tmp = f".{name}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
        os.symlink(target, tmp, dir_fd=dir_fd)
        try:
            os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            with suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
            raise


def readlink(where: Beneath | Path | str) -> str:
    """The target text of the link ``where`` (read, never followed; its folder reached without a link)."""
    where = beneath(where)
    with _parent(where) as (dir_fd, name):
        return os.readlink(name, dir_fd=dir_fd)


def unlink(where: Beneath | Path | str, *, missing_ok: bool = True) -> bool:
    """Remove the file (or link) ``where``; a link is removed, never followed. True if one was removed."""
    where = beneath(where)
    try:
        with _parent(where) as (dir_fd, name):
            os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        if missing_ok:
            return False
        raise
    return True


def lstat(where: Beneath | Path | str) -> os.stat_result | None:
    """``where``'s own status (a link is reported as a link), or ``None`` when it cannot be reached
    without following a link on the way, or does not exist."""
    where = beneath(where)
    try:
        fd = beneath_mod.open_under(os.fspath(where.base), where.rel, os.O_PATH | os.O_NOFOLLOW)
    except OSError as exc:
        if exc.errno != errno.ELOOP:  # the walk refuses a final link even for O_PATH: ask its folder
            return None
        try:
            with _parent(where) as (dir_fd, name):
                return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except OSError:
            return None
    try:
        return os.fstat(fd)
    finally:
        os.close(fd)


def makedirs(where: Beneath | Path | str, mode: int = 0o755) -> None:
    """``mkdir -p`` below the base, creating each folder by descriptor and entering none through a link."""
    where = beneath(where)
    parts = _parts(where)
    try:
        beneath_mod.makedirs_under(str(where.base), "/".join(parts), mode)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EXDEV):
            with _base_fd(where) as base:
                raise _link_error(where, base, parts) from None
        raise OSError(exc.errno, exc.strerror, str(where.path)) from None


def mkdir(where: Beneath | Path | str, mode: int = 0o700) -> None:
    """Create the one folder ``where`` in a folder reached without a link (``FileExistsError`` if taken)."""
    where = beneath(where)
    with _parent(where) as (dir_fd, name):
        os.mkdir(name, mode, dir_fd=dir_fd)


def temp_folder(folder: Beneath | Path | str, prefix: str) -> Beneath:
    """A new folder ``<prefix><random>``, mode 0700, in ``folder`` (reached without a link): a scratch
    space whose name nobody can guess or claim first (``mkdtemp``, by descriptor)."""
    folder = folder if isinstance(folder, Beneath) else at(folder)
    if "/" in prefix:
        raise ValueError(f"not a name prefix: {prefix!r}")
    for _ in range(100):
        where = folder / f"{prefix}{os.urandom(6).hex()}"
        try:
            mkdir(where, 0o700)
        except FileExistsError:
            continue
        return where
    raise FileExistsError(errno.EEXIST, "no unused temporary name", str(folder.path))


def chmod(where: Beneath | Path | str, mode: int) -> None:
    """Set the permission bits of ``where`` itself: never those of what a link names.

    The entry is pinned by an ``O_PATH`` descriptor reached without a link and changed through
    that descriptor's ``/proc/self/fd`` entry, so a name swapped after the check changes nothing
    else. A link, even as the last component, is :class:`LinkRefusedError`.
    """
    where = beneath(where)
    fd = open_beneath(where, os.O_PATH)
    try:
        if stat.S_ISLNK(os.fstat(fd).st_mode):
            raise LinkRefusedError(where.path, "is a symbolic link; hermesd changes the mode of no link")
        os.chmod(f"/proc/self/fd/{fd}", mode)
    finally:
        os.close(fd)


def chown(where: Beneath | Path | str, uid: int, gid: int) -> None:
    """Give ``where`` itself to ``uid:gid`` (a link is changed as a link, never followed)."""
    where = beneath(where)
    with _parent(where) as (dir_fd, name):
        os.chown(name, uid, gid, dir_fd=dir_fd, follow_symlinks=False)


def link_on_path(where: Beneath | Path | str) -> str | None:
    """Why ``where`` cannot be reached without a link (``doctor`` names it), or ``None``."""
    where = beneath(where)
    try:
        parts = _parts(where)
    except LinkRefusedError as exc:
        return exc.problem
    try:
        with _base_fd(where) as base:
            if beneath_mod.first_link(base, parts) is None:
                return None
            return _link_error(where, base, parts).problem
    except OSError:
        return None
