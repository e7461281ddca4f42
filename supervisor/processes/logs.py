"""Per-profile child logs: size-based copy-truncate rotation and a reader that follows it.

Children hold their log open with O_APPEND, so hermesd rotates by copying the file aside and
truncating it in place: the child keeps writing to the same descriptor and its next write lands
at the new end. A follower that sees the file shrink reads the rest of the rotated copy first,
so nothing written before the rotation is skipped.

The logs live in ``<root>/.hermesd/logs/``; every open, copy, rename and truncation goes through
:mod:`profiles.safeio` (from the root, no link followed), so a link planted there cannot turn a
rotation into a write elsewhere.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from profiles import safeio
from profiles.printable import printable
from profiles.safeio import Beneath

if TYPE_CHECKING:
    from supervisor.layout import Layout


def note(where: Beneath | Path, line: str) -> None:
    """Append hermesd's own line to a child's log (O_APPEND: never clobbers the child's)."""
    if Path(str(where)) == Path(os.devnull):
        return
    with contextlib.suppress(OSError):
        fd = safeio.open_append(where, 0o600)
        try:
            os.write(fd, f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {line}\n".encode())
        finally:
            os.close(fd)


class PrintableFilter(logging.Filter):
    """Every line of hermesd's own log is one line: a reason quoted from a profile's files or a
    gateway's state (``\n``, ``\r``, escape sequences) is shown escaped, never a forged log line."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        clean = printable(text)
        if clean != text:
            record.msg, record.args = clean, ()
        return True


class RepeatFilter(logging.Filter):
    """Let a message through at most ``burst`` times per ``window`` seconds, then count the rest.

    A condition that repeats (out of descriptors at accept, a file system that stays full) must
    not turn the log into a flood: after the burst the repeats are dropped and one line later says
    how many were.
    """

    def __init__(self, window: float = 10.0, burst: int = 20) -> None:
        super().__init__()
        self.window, self.burst = window, burst
        self._seen: dict[str, list[float]] = {}  # message -> [window start, count, dropped]

    def filter(self, record: logging.LogRecord) -> bool:
        key = f"{record.name}:{record.levelno}:{record.getMessage()}"
        now = time.monotonic()
        seen = self._seen.get(key)
        if seen is None or now - seen[0] > self.window:
            if seen is not None and seen[2]:
                record.msg = f"{record.getMessage()} (repeated {int(seen[2])} more times in the previous " \
                             f"{self.window:.0f}s)"
                record.args = ()
            if len(self._seen) > 1000:
                self._seen.clear()
            self._seen[key] = [now, 1, 0]
            return True
        seen[1] += 1
        if seen[1] <= self.burst:
            return True
        seen[2] += 1
        return False


def rotate_if_needed(where: Beneath | Path, max_bytes: int, backups: int) -> bool:
    """Rotate the log when it exceeds ``max_bytes``: .1 is the newest copy, .N the oldest."""
    spot = safeio.beneath(where)
    st = safeio.lstat(spot)
    if st is None or not stat.S_ISREG(st.st_mode) or st.st_size <= max_bytes:
        return False
    if backups <= 0:
        _truncate(spot)
        return True
    safeio.unlink(spot.sibling(f"{spot.name}.{backups}"))
    for n in range(backups - 1, 0, -1):
        src = spot.sibling(f"{spot.name}.{n}")
        if safeio.lstat(src) is not None:
            safeio.rename(src, f"{spot.name}.{n + 1}")
    try:
        safeio.replace_with_copy(spot.sibling(f"{spot.name}.1"), spot, 0o600)
    except OSError as exc:
        # No room for the copy (a full disk): keep the children able to write rather than
        # keep their old output. The partial copy goes, the log is emptied in place.
        _truncate(spot)
        raise RotationError(f"no room for a rotated copy ({exc.strerror}); {spot.name} truncated in place") from exc
    _truncate(spot)
    return True


def _truncate(where: Beneath) -> None:
    fd = safeio.open_beneath(where, os.O_WRONLY | os.O_NONBLOCK)
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            os.ftruncate(fd, 0)
    finally:
        os.close(fd)


class RotationError(OSError):
    """Rotation could not keep a copy; the log was truncated anyway."""


def free_bytes(folder: Path) -> int | None:
    try:
        st = os.statvfs(folder)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def tail_lines(where: Beneath | Path, n: int) -> list[bytes]:
    """The last ``n`` lines of the log (reading backwards, so huge logs cost little)."""
    if n <= 0:
        return []
    try:
        fd = safeio.open_beneath(safeio.beneath(where), os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        return []
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return []
        block, data = 8192, b""
        pos = st.st_size
        while pos > 0 and data.count(b"\n") <= n:
            step = min(block, pos)
            pos -= step
            data = os.pread(fd, step, pos) + data
    finally:
        os.close(fd)
    lines = data.splitlines(keepends=True)
    return lines[-n:]


def follow(
    where: Beneath | Path,
    out: TextIO = sys.stdout,
    *,
    interval: float = 0.2,
    keep_going: Callable[[], bool] = lambda: True,
    start_at_end: bool = True,
    show: Callable[[str], str] = lambda text: text,
) -> None:
    """Print what is appended to the log, across copy-truncate rotations, until stopped.

    ``show`` turns each chunk into what is printed (``hermesd logs`` escapes control characters for a
    terminal).
    """
    spot = safeio.beneath(where)
    first = safeio.lstat(spot)
    pos = first.st_size if start_at_end and first is not None else 0
    ino = first.st_ino if first is not None else None
    while keep_going():
        now = safeio.lstat(spot)
        size = now.st_size if now is not None else 0
        if (now.st_ino if now is not None else None) != ino or size < pos:
            # Rotated: the bytes between pos and the old end are now at the tail of .1.
            _copy_range(spot.sibling(f"{spot.name}.1"), pos, out, show)
            pos, ino = 0, (now.st_ino if now is not None else None)
        if size > pos:
            pos = _copy_range(spot, pos, out, show)
        else:
            time.sleep(interval)


def _copy_range(where: Beneath, start: int, out: TextIO, show: Callable[[str], str]) -> int:
    try:
        fd = safeio.open_beneath(where, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return start
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return start
        chunks: list[bytes] = []
        while chunk := os.pread(fd, 1 << 20, start + sum(len(c) for c in chunks)):
            chunks.append(chunk)
        data = b"".join(chunks)
    finally:
        os.close(fd)
    out.write(show(data.decode("utf-8", "replace")))
    out.flush()
    return start + len(data)


def housekeep(layout: Layout, names: list[str], max_bytes: int, backups: int, space_min: int) -> dict[str, str | None]:
    """Rotate every profile's log when due; per profile, the problem to show in status (a full log
    file system, a failed rotation), or None."""
    free = free_bytes(layout.logs)
    full = (f"log file system full ({free} bytes free in {layout.logs})"
            if free is not None and free < space_min else None)
    sizes = _sizes(layout)
    out: dict[str, str | None] = {}
    for name in names:
        out[name] = full
        if sizes is not None and sizes.get(f"{name}.log", 0) <= max_bytes:
            continue
        try:
            rotate_if_needed(layout.beneath(layout.child_log(name)), max_bytes, backups)
        except OSError as exc:
            out[name] = f"log rotation failed: {exc}"
    return out


def _sizes(layout: Layout) -> dict[str, int] | None:
    """The size of every regular file in the logs folder, from one read of the folder (every few
    seconds, for every profile: one open per log cost twice the daemon's idle CPU); None when it
    cannot be read, and each log is then looked at on its own."""
    try:
        fd = safeio.open_dir(layout.beneath(layout.logs), path_only=False)
    except OSError:
        return None
    try:
        with os.scandir(fd) as entries:
            return {e.name: st.st_size for e in entries
                    if stat.S_ISREG((st := e.stat(follow_symlinks=False)).st_mode)}
    except OSError:
        return None
    finally:
        os.close(fd)
