"""Reading a file that someone else controls, without ever blocking or swallowing the machine.

Every file hermesd reads from a profile (``.env``, ``config.yaml``, the gateway's JSON files) can be
anything its owner made it: a FIFO (an ``open`` that blocks forever), a symlink to ``/dev/zero``
(a read that never ends), a 50 MB file, a device. The daemon serves every profile from one event
loop, so one such file must cost one ``open``, one ``fstat`` and a clear error, never a stall.

The rule, in one function: open with ``O_NONBLOCK`` (a FIFO opens at once and is then refused),
``fstat`` the descriptor (not the path, so a swap between check and read changes nothing), accept
only a regular file no larger than the caller's limit, and read at most limit + 1 bytes (a file
that grows while being read is still refused). Standard library only: the health probe imports
this module and must stay cheap.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

_KINDS = {
    stat.S_IFDIR: "a directory",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
}


class UnsafeFileError(OSError):
    """A file that is not a regular file, or is larger than the reader accepts; names the file."""

    def __init__(self, path: Path | str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = Path(path)
        self.problem = problem


def describe_size(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} bytes"


def read_regular(path: Path | str, limit: int) -> bytes:
    """The bytes of ``path`` if it is a regular file of at most ``limit`` bytes.

    Raises ``FileNotFoundError`` (and the other ``OSError`` s of ``open``) as usual, and
    :class:`UnsafeFileError` for anything that is not a regular file or is too large. Symlinks are
    followed (a dotfile manager may link ``config.yaml``); what they point at must be regular.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = _KINDS.get(stat.S_IFMT(st.st_mode), "not a regular file")
            raise UnsafeFileError(path, f"is {kind}, not a regular file; hermesd reads only regular files")
        if st.st_size > limit:
            raise UnsafeFileError(path, f"is {describe_size(st.st_size)}, over the {describe_size(limit)} limit")
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
            raise UnsafeFileError(path, f"grew past the {describe_size(limit)} limit while being read")
        return data
    finally:
        os.close(fd)


def read_regular_or_none(path: Path | str, limit: int) -> bytes | None:
    """:func:`read_regular`, with every problem (missing, unreadable, unsafe) answered by ``None``.

    For files whose absence or junk is an ordinary state (a gateway's PID or state file).
    """
    try:
        return read_regular(path, limit)
    except OSError:
        return None
