"""The kernel side of :mod:`profiles.safeio`'s rule: open a path below a directory, following no link.

Split from ``safeio`` so that the confinement shim (``python -E -s -S``, every spawn) can resolve
its mount sources with the same code without importing ``pathlib`` or ``dataclasses``: this module
imports only ``os``, ``errno`` and ``stat`` (and ``ctypes`` on first use, which the shim has
loaded already). Everyone else calls :mod:`profiles.safeio`.

``openat2(2)`` with ``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`` where the
kernel has it (Linux 5.6+; one system call, and the kernel refuses every link on the way,
``/proc`` magic links included); elsewhere, or under a seccomp filter that refuses it, a walk that
opens each component with ``O_PATH | O_DIRECTORY | O_NOFOLLOW`` relative to the previous one and
the last with ``O_NOFOLLOW``. Either way a link is ``ELOOP`` and ``..`` is refused before any call.
"""

from __future__ import annotations

import errno
import os
import stat

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the shim 2 ms
if TYPE_CHECKING:
    from collections.abc import Callable

# openat2(2): the number is the same on every architecture (allocated after the tables were unified).
SYS_OPENAT2 = 437
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
RESOLVE = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS
_DIR_STEP = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def split(rel: str) -> list[str] | None:
    """The components of ``rel``, or ``None`` when it could leave its folder (``..``, absolute, NUL)."""
    if rel.startswith("/") or "\0" in rel:
        return None
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    return None if ".." in parts else parts


_state: list[Callable[[int, bytes, int, int, int], int] | None] = []  # [] untried; [None] none; [fn]
AT_FDCWD = -100


def _openat2() -> Callable[[int, bytes, int, int, int], int] | None:
    """``syscall(openat2)`` through ctypes, or ``None`` where the kernel (or a seccomp filter) lacks it.

    ctypes is imported on first use: it costs 2-3 ms, which ``hermesd probe`` and ``status`` pay only
    once they open a profile's file.
    """
    if _state:
        return _state[0]
    fn = None
    try:
        import ctypes  # on first use: see above

        call = ctypes.CDLL(None, use_errno=True).syscall
        call.restype = ctypes.c_long
        call.argtypes = (ctypes.c_long, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t)
        get_errno = ctypes.get_errno

        class OpenHow(ctypes.Structure):
            _fields_ = (("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64))

        size = ctypes.sizeof(OpenHow)
        addressof = ctypes.addressof

        def openat2(dir_fd: int, path: bytes, flags: int, mode: int, resolve: int) -> int:
            how = OpenHow(flags, mode, resolve)
            while True:
                fd = call(SYS_OPENAT2, dir_fd, path, addressof(how), size)
                if fd >= 0:
                    return int(fd)
                err = get_errno()
                if err not in (errno.EINTR, errno.EAGAIN):  # EAGAIN: a rename raced the lookup; retry
                    raise OSError(err, os.strerror(err))

        root = os.open("/", _DIR_STEP)
        try:
            os.close(openat2(root, b".", os.O_PATH | os.O_CLOEXEC, 0, RESOLVE))
            fn = openat2
        except OSError:  # ENOSYS (before 5.6), EPERM (a seccomp filter): walk instead
            fn = None
        finally:
            os.close(root)
    except (OSError, AttributeError, ImportError):
        fn = None
    _state.append(fn)
    return fn


def _walk(dir_fd: int, parts: list[str], flags: int, mode: int) -> int:
    cur = dir_fd
    try:
        for part in parts[:-1]:
            nxt = os.open(part, _DIR_STEP, dir_fd=cur)
            if cur != dir_fd:
                os.close(cur)
            cur = nxt
        fd = os.open(parts[-1], flags | os.O_NOFOLLOW, mode, dir_fd=cur)
    except OSError as exc:
        if exc.errno == errno.ENOTDIR and first_link(dir_fd, parts) is not None:
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP)) from None  # O_DIRECTORY on a link: ENOTDIR
        raise
    finally:
        if cur != dir_fd:
            os.close(cur)
    if flags & os.O_PATH and stat.S_ISLNK(os.fstat(fd).st_mode):  # O_PATH|O_NOFOLLOW opens the link itself
        os.close(fd)
        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP))
    return fd


def open_at(dir_fd: int, rel: str, flags: int, mode: int = 0) -> int:
    """``rel`` below the directory ``dir_fd``, opened with ``flags``; any link on the way is ``ELOOP``.

    ``O_CLOEXEC`` is always added (and ``O_NOCTTY`` unless ``O_PATH``). ``rel`` empty or ``.`` opens
    ``dir_fd``'s directory itself.
    """
    parts = split(rel)
    if parts is None:
        raise OSError(errno.EXDEV, "names a path outside its folder")
    flags |= os.O_CLOEXEC if flags & os.O_PATH else os.O_CLOEXEC | os.O_NOCTTY  # openat2: O_PATH takes no others
    tmpfile = getattr(os, "O_TMPFILE", 0)
    if not flags & os.O_CREAT and (not tmpfile or flags & tmpfile != tmpfile):
        mode = 0  # openat2 refuses a mode without O_CREAT
    if not parts:
        return os.open(".", flags, mode, dir_fd=dir_fd)
    openat2 = _openat2()
    if openat2 is not None:
        try:
            return openat2(dir_fd, "/".join(parts).encode("utf-8", "surrogateescape"), flags, mode, RESOLVE)
        except OSError as exc:
            if exc.errno == errno.ENOTDIR and first_link(dir_fd, parts) is not None:
                raise OSError(errno.ELOOP, os.strerror(errno.ELOOP)) from None
            raise
    return _walk(dir_fd, parts, flags, mode)


def open_under(base: str, rel: str, flags: int, mode: int = 0) -> int:
    """``rel`` below the folder ``base`` (``base`` itself is trusted: links on the way to it are followed).

    Where openat2 exists, one call first resolves the whole path refusing every link: it succeeds
    for nearly every root (hermesd resolves the root's own path once), and its success proves the
    stricter thing. Only on ``ELOOP`` (a link somewhere, perhaps in the operator's part) is the base
    opened on its own and ``rel`` resolved beneath it.
    """
    parts = split(rel)
    if parts is None:
        raise OSError(errno.EXDEV, "names a path outside its folder")
    openat2 = _openat2()
    if openat2 is not None and parts:
        flags |= os.O_CLOEXEC if flags & os.O_PATH else os.O_CLOEXEC | os.O_NOCTTY
        if not flags & os.O_CREAT:
            mode = 0
        full = os.path.join(base, *parts).encode("utf-8", "surrogateescape")
        try:
            return openat2(AT_FDCWD, full, flags, mode, RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                raise
    dir_fd = os.open(base, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        return open_at(dir_fd, rel, flags, mode)
    finally:
        os.close(dir_fd)


def first_link(dir_fd: int, parts: list[str]) -> int | None:
    """The index in ``parts`` of the first component that is a symbolic link, or ``None``."""
    cur = os.dup(dir_fd)
    try:
        for i, part in enumerate(parts):
            try:
                st = os.stat(part, dir_fd=cur, follow_symlinks=False)
            except OSError:
                return None
            if stat.S_ISLNK(st.st_mode):
                return i
            if i == len(parts) - 1 or not stat.S_ISDIR(st.st_mode):
                return None
            nxt = os.open(part, _DIR_STEP, dir_fd=cur)
            os.close(cur)
            cur = nxt
        return None
    finally:
        os.close(cur)


def makedirs_under(base: str, rel: str, mode: int = 0o755) -> None:
    """``mkdir -p base/rel``, creating and entering each folder by descriptor, never through a link."""
    parts = split(rel)
    if parts is None:
        raise OSError(errno.EXDEV, "names a path outside its folder")
    cur = os.open(base, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts:
            try:  # noqa: SIM105 - contextlib is one more import for the shim
                os.mkdir(part, mode, dir_fd=cur)
            except FileExistsError:
                pass
            try:
                nxt = os.open(part, _DIR_STEP, dir_fd=cur)
            except OSError as exc:
                if exc.errno == errno.ENOTDIR and first_link(cur, [part]) is not None:
                    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP)) from None
                raise
            os.close(cur)
            cur = nxt
    finally:
        os.close(cur)
