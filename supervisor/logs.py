"""Per-profile child logs: size-based copy-truncate rotation and a reader that follows it.

Children hold their log open with O_APPEND, so hermesd rotates by copying the file aside and
truncating it in place: the child keeps writing to the same descriptor and its next write lands
at the new end. A follower that sees the file shrink reads the rest of the rotated copy first,
so nothing written before the rotation is skipped.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO


def note(path: Path, line: str) -> None:
    """Append hermesd's own line to a child's log (O_APPEND: never clobbers the child's)."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {line}\n".encode())
        finally:
            os.close(fd)


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


def rotated(path: Path, n: int) -> Path:
    return path.with_name(f"{path.name}.{n}")


def rotate_if_needed(path: Path, max_bytes: int, backups: int) -> bool:
    """Rotate ``path`` when it exceeds ``max_bytes``: .1 is the newest copy, .N the oldest."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return False
    if size <= max_bytes:
        return False
    if backups <= 0:
        os.truncate(path, 0)
        return True
    rotated(path, backups).unlink(missing_ok=True)
    for n in range(backups - 1, 0, -1):
        src = rotated(path, n)
        if src.exists():
            os.replace(src, rotated(path, n + 1))
    tmp = path.with_name(f".{path.name}.rotating")
    try:
        shutil.copyfile(path, tmp)
        os.chmod(tmp, 0o600)
        os.replace(tmp, rotated(path, 1))
    except OSError as exc:
        # No room for the copy (a full disk): keep the children able to write rather than
        # keep their old output. The partial copy goes, the log is emptied in place.
        tmp.unlink(missing_ok=True)
        os.truncate(path, 0)
        raise RotationError(f"no room for a rotated copy ({exc.strerror}); {path.name} truncated in place") from exc
    os.truncate(path, 0)
    return True


class RotationError(OSError):
    """Rotation could not keep a copy; the log was truncated anyway."""


def free_bytes(folder: Path) -> int | None:
    try:
        st = os.statvfs(folder)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def tail_lines(path: Path, n: int) -> list[bytes]:
    """The last ``n`` lines of ``path`` (reading backwards, so huge logs cost little)."""
    if n <= 0:
        return []
    try:
        fh = path.open("rb")
    except FileNotFoundError:
        return []
    with fh:
        fh.seek(0, os.SEEK_END)
        end = fh.tell()
        block, data = 8192, b""
        pos = end
        while pos > 0 and data.count(b"\n") <= n:
            step = min(block, pos)
            pos -= step
            fh.seek(pos)
            data = fh.read(step) + data
    lines = data.splitlines(keepends=True)
    return lines[-n:]


def follow(
    path: Path,
    out: TextIO = sys.stdout,
    *,
    interval: float = 0.2,
    keep_going: Callable[[], bool] = lambda: True,
    start_at_end: bool = True,
) -> None:
    """Print what is appended to ``path``, across copy-truncate rotations, until stopped."""
    pos = path.stat().st_size if start_at_end and path.exists() else 0
    ino = _inode(path)
    while keep_going():
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            size = 0
        if _inode(path) != ino or size < pos:
            # Rotated: the bytes between pos and the old end are now at the tail of .1.
            _copy_range(rotated(path, 1), pos, out)
            pos, ino = 0, _inode(path)
        if size > pos:
            pos = _copy_range(path, pos, out)
        else:
            time.sleep(interval)


def _inode(path: Path) -> int | None:
    try:
        return path.stat().st_ino
    except FileNotFoundError:
        return None


def _copy_range(path: Path, start: int, out: TextIO) -> int:
    try:
        with path.open("rb") as fh:
            fh.seek(start)
            data = fh.read()
    except FileNotFoundError:
        return start
    out.write(data.decode("utf-8", "replace"))
    out.flush()
    return start + len(data)


def housekeep(layout: Any, names: list[str], max_bytes: int, backups: int, space_min: int) -> dict[str, str | None]:
    """Rotate every profile's log when due; per profile, the problem to show in status (a full log
    file system, a failed rotation), or None."""
    free = free_bytes(layout.logs)
    full = (f"log file system full ({free} bytes free in {layout.logs})"
            if free is not None and free < space_min else None)
    out: dict[str, str | None] = {}
    for name in names:
        out[name] = full
        try:
            rotate_if_needed(layout.child_log(name), max_bytes, backups)
        except OSError as exc:
            out[name] = f"log rotation failed: {exc}"
    return out
