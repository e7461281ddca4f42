"""The event journal: append-only JSON lines under ``<root>/.hermesd/events/``, bounded by size.

Why it is shaped this way:

- **One write per event.** Each event is serialised to one complete line and handed to the kernel
  in a single ``write(2)`` on an ``O_APPEND`` descriptor kept open for the daemon's life. Killing
  hermesd (SIGKILL, OOM) can therefore lose the event being written but not corrupt an earlier
  one; a line cut short (a short write on a full disk, a power cut) is left without its newline.
  The next writer to open the journal appends a newline first when the last byte is not one, so
  its first event starts on a fresh line and readers skip and count exactly one bad line.
- **Numbered segments, never renamed.** ``events-00000001.jsonl``, ``-00000002``, …: the writer
  appends to the highest number and, when that file would pass ``max_bytes``, starts the next one
  and deletes the oldest beyond ``backups``. Readers list the folder and read in number order; a
  follower that reaches the end of a file knows it is finished as soon as a higher number exists.
  Nothing is ever renamed or truncated, so a reader never sees a file change identity under it.
- **Cheap.** No fsync (an event lost to a power cut is acceptable; a loop stalled on a slow disk is
  not): appending costs a ``json.dumps`` and one ``write`` (about 10 µs, see the tests). Errors
  (full disk, I/O error) are counted and logged once per streak, never raised into the loop.
- **Private and never through a symlink.** The folder is created 0700 and opened with
  ``O_NOFOLLOW|O_DIRECTORY``; every file is opened relative to that descriptor with ``O_NOFOLLOW``,
  created 0600, and must be a regular file. A symlink planted in place of a segment is refused.

API (the daemon's loop)::

    j = Journal(Layout(root).dir / "events", JournalSettings(max_bytes=..., backups=...))
    j.open()                 # once, before the first event (raises OSError if the folder is unusable)
    j.append(event_dict)     # per event; returns False (and counts) when it could not be written
    j.reopen_if_moved()      # optional, from housekeeping: the folder was deleted or replaced
    j.close()
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from supervisor.layout import Layout
from supervisor.observe.events import BASE_KEYS, MAX_LINE
from supervisor.settings import default

log = logging.getLogger("hermesd")

SEGMENT_RE = re.compile(r"^events-(\d{8})\.jsonl$")
EVENTS_DIRNAME = "events"


def segment_name(number: int) -> str:
    return f"events-{number:08d}.jsonl"


def default_folder(root: Path) -> Path:
    """``<root>/.hermesd/events``: beside hermesd's other files, skipped by exports and the watcher."""
    return Layout(root).dir / EVENTS_DIRNAME


@dataclass(frozen=True, slots=True)
class JournalSettings:
    """Size bounds: at most ``(backups + 1) * max_bytes`` on disk (default 10 × 1 MiB).

    An event is 150–400 bytes, so the default keeps roughly 30,000–60,000 events: weeks of a
    profile crash-looping at the backoff cap, years of a quiet root.
    """

    max_bytes: int = default("events.max_bytes")
    backups: int = default("events.backups")

    def __post_init__(self) -> None:
        if self.max_bytes < 4096 or self.backups < 0:
            raise ValueError("events.max_bytes must be >= 4096 and events.backups >= 0")


@dataclass(slots=True)
class JournalStats:
    failed: int = 0  # events that could not be written (counted for metrics)
    rotations: int = 0


def open_folder(folder: Path, *, create: bool) -> int:
    """A descriptor for the events folder, never through a symlink; created 0700 when asked.

    The folder must be a directory owned by this user; a group- or world-accessible one that is
    ours is tightened to 0700 (someone created it by hand), anything else is refused.
    """
    if create:
        with contextlib.suppress(FileExistsError):
            os.mkdir(folder, 0o700)
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if st.st_uid != os.getuid():
            raise PermissionError(errno.EPERM, f"{folder} is owned by uid {st.st_uid}, not {os.getuid()}")
        if create and stat.S_IMODE(st.st_mode) & 0o077:
            os.fchmod(fd, 0o700)
    except BaseException:
        os.close(fd)
        raise
    return fd


def list_segments(dir_fd: int) -> list[int]:
    """Segment numbers present in the folder, ascending (names that do not match are ignored)."""
    numbers = []
    for name in os.listdir(dir_fd):
        m = SEGMENT_RE.match(name)
        if m:
            numbers.append(int(m.group(1)))
    return sorted(numbers)


def open_segment(dir_fd: int, number: int, flags: int, mode: int = 0o600) -> int:
    """Open one segment relative to the folder, refusing symlinks and anything but a regular file."""
    fd = os.open(segment_name(number), flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, mode, dir_fd=dir_fd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, f"{segment_name(number)} is not a regular file")
    except BaseException:
        os.close(fd)
        raise
    return fd


@dataclass(slots=True)
class Journal:
    """The single writer of one root's event journal (the daemon holds the root lock)."""

    folder: Path
    settings: JournalSettings = field(default_factory=JournalSettings)
    stats: JournalStats = field(default_factory=JournalStats)
    _dir_fd: int | None = None
    _fd: int | None = None
    _number: int = 0
    _size: int = 0
    _need_newline: bool = False
    _failing: bool = False

    @property
    def current_path(self) -> Path:
        return self.folder / segment_name(self._number)

    def open(self) -> None:
        """Open (or create) the newest segment; after a crash, make sure we start on a fresh line."""
        self.close()
        self._dir_fd = open_folder(self.folder, create=True)
        numbers = list_segments(self._dir_fd)
        self._number = numbers[-1] if numbers else 1
        self._open_current(create=not numbers)
        if self._size > 0 and os.pread(self._fd, 1, self._size - 1) != b"\n":  # type: ignore[arg-type]
            self._need_newline = True  # a line torn by a crash: ours goes on the next line
        self._prune(numbers)

    def _open_current(self, *, create: bool) -> None:
        assert self._dir_fd is not None
        flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | (os.O_EXCL if create else 0)  # RDWR: to check the last byte
        try:
            fd = open_segment(self._dir_fd, self._number, flags)
        except FileExistsError:
            fd = open_segment(self._dir_fd, self._number, os.O_RDWR | os.O_APPEND)
        st = os.fstat(fd)
        if stat.S_IMODE(st.st_mode) & 0o077:
            os.fchmod(fd, 0o600)
        self._fd, self._size = fd, st.st_size

    def close(self) -> None:
        for attr in ("_fd", "_dir_fd"):
            fd = getattr(self, attr)
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
                setattr(self, attr, None)

    def append(self, event: Mapping[str, Any]) -> bool:
        """Write ``event`` as one line in one ``write(2)``; False when it could not be written."""
        line = encode(event)
        if self._fd is None:
            self._fail("journal is not open")
            return False
        try:
            if self._size > 0 and self._size + len(line) > self.settings.max_bytes:
                self._rotate()
            data = b"\n" + line if self._need_newline else line
            n = os.write(self._fd, data)
        except OSError as exc:
            self._need_newline = True  # whatever part of a line got out, the next starts fresh
            self._fail(f"{self.current_path}: {exc.strerror or exc}")
            return False
        self._size += n
        if n != len(data):  # a short write (disk full): the tail is lost, the line is torn
            self._need_newline = True
            self._fail(f"{self.current_path}: short write ({n} of {len(data)} bytes; disk full?)")
            return False
        self._need_newline = False
        if self._failing:
            self._failing = False
            log.warning("event journal writable again (%d event(s) lost)", self.stats.failed)
        return True

    def _fail(self, message: str) -> None:
        self.stats.failed += 1
        if not self._failing:  # one warning per streak of failures, not one per event
            self._failing = True
            log.warning("cannot write to the event journal: %s", message)

    def _rotate(self) -> None:
        assert self._dir_fd is not None and self._fd is not None
        old = self._fd
        self._number += 1
        self._open_current(create=True)
        self._need_newline = False
        os.close(old)
        self.stats.rotations += 1
        self._prune(list_segments(self._dir_fd))

    def _prune(self, numbers: list[int]) -> None:
        """Delete the oldest segments beyond ``backups`` (never the current one)."""
        keep_from = self._number - self.settings.backups
        for n in numbers:
            if n < keep_from:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(segment_name(n), dir_fd=self._dir_fd)

    def reopen_if_moved(self) -> bool:
        """Re-open when the folder was deleted or replaced behind our back (housekeeping)."""
        if self._dir_fd is None:
            return False
        try:
            now = os.stat(self.folder, follow_symlinks=False)
            mine = os.fstat(self._dir_fd)
            if (now.st_dev, now.st_ino) == (mine.st_dev, mine.st_ino):
                return False
        except FileNotFoundError:
            pass
        except OSError:
            return False
        try:
            self.open()
        except OSError as exc:
            self._fail(f"{self.folder}: {exc.strerror or exc}")
            return False
        return True


def encode(event: Mapping[str, Any]) -> bytes:
    """The event as one compact ASCII JSON line (base keys first, so lines read alike)."""
    ordered = {k: event[k] for k in BASE_KEYS if k in event}
    ordered.update((k, v) for k, v in event.items() if k not in ordered)
    try:
        line = json.dumps(ordered, separators=(",", ":"), allow_nan=False, default=str).encode("ascii")
    except ValueError:  # NaN or a cycle: keep the fact that something happened
        line = json.dumps({k: ordered.get(k) for k in BASE_KEYS} | {"unencodable": True}, default=str).encode()
    if len(line) >= MAX_LINE:
        line = json.dumps({k: ordered.get(k) for k in BASE_KEYS} | {"truncated": True}, default=str).encode()
    return line + b"\n"
