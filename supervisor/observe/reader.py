"""Reading the event journal: in order across segments, filtered, and followed like ``tail -F``.

Readers only read files, so they work the same whether the daemon is up, down or was SIGKILLed
mid-write. A line that is not an event (cut short by a crash, NUL padding left by a power cut,
junk written by hand) is skipped and counted in :class:`ReadStats`, never fatal. Files are opened
relative to the folder with ``O_NOFOLLOW|O_NONBLOCK`` and must be regular: a FIFO or a symlink
planted in the folder costs one refused ``open``.

API::

    for ev in iter_events(folder, profiles={"coder"}, since=parse_since("2h", time.time())): ...
    for ev in follow(folder, profiles=None, history=10, keep_going=lambda: True): ...  # never ends
    last_run(folder)   # events of the newest daemon run (for replaying counters)
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from collections import deque
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from supervisor.observe.events import is_event
from supervisor.observe.journal import list_segments, open_segment, segment_name

CHUNK = 256 * 1024
TAIL_PEEK = 8192


@dataclass(slots=True)
class ReadStats:
    """What a read skipped: ``malformed`` complete lines, ``torn`` lines cut short without a newline."""

    malformed: int = 0
    torn: int = 0
    files: int = 0
    missed_files: int = 0  # a follower fell so far behind that rotation deleted files it had not read
    refused: list[str] = field(default_factory=list)  # segments that are not regular files

    @property
    def skipped(self) -> int:
        return self.malformed + self.torn


def parse_line(raw: bytes) -> dict[str, Any] | None:
    """One line's event, or ``None`` when it is not one."""
    try:
        obj = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    return obj if is_event(obj) else None


@dataclass(slots=True)
class Filter:
    """Which events a reader keeps. Profile filtering drops daemon-wide events unless asked."""

    profiles: frozenset[str] | None = None
    since: float | None = None
    until: float | None = None
    daemon_wide: bool = False
    _needles: tuple[bytes, ...] = ()

    def __post_init__(self) -> None:
        if self.profiles is not None:
            # A cheap byte test before json.loads: our writer's compact separators, plus the spaced
            # form for lines written by anything else. It may pass a line; it never drops a match.
            self._needles = tuple(
                n for p in self.profiles for n in (f'"profile":"{p}"'.encode(), f'"profile": "{p}"'.encode())
            )
            if self.daemon_wide:
                self._needles += (b'"profile":null', b'"profile": null')

    def maybe(self, raw: bytes) -> bool:
        return not self._needles or any(n in raw for n in self._needles)

    def keep(self, ev: dict[str, Any]) -> bool:
        p = ev.get("profile")
        if self.profiles is not None and p not in self.profiles and not (p is None and self.daemon_wide):
            return False
        ts = ev["ts"]
        return (self.since is None or ts >= self.since) and (self.until is None or ts <= self.until)


def _open_dir(folder: Path) -> int | None:
    """The events folder, never through a symlink; ``None`` when there is none (yet)."""
    try:
        return os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except (NotADirectoryError, OSError) as exc:
        if isinstance(exc, PermissionError):
            raise
        try:
            is_link = folder.is_symlink()
        except OSError:
            is_link = False
        what = "is a symlink; hermesd does not follow it" if is_link else "is not a directory"
        raise OSError(exc.errno, f"{folder} {what}") from None


def _lines(fd: int, flt: Filter, stats: ReadStats) -> Iterator[dict[str, Any]]:
    """Events of one open segment.

    A trailing fragment without a newline is counted as torn: callers that read a file a writer
    may still be appending to (followers) use :class:`Cursor` instead.
    """
    rest, pos = b"", 0
    while chunk := os.pread(fd, CHUNK, pos):
        pos += len(chunk)
        *lines, rest = (rest + chunk).split(b"\n")
        for line in lines:
            ev = _take(line, flt, stats)
            if ev is not None:
                yield ev
    if rest.strip(b"\0 \t\r"):
        stats.torn += 1


def _take(line: bytes, flt: Filter, stats: ReadStats) -> dict[str, Any] | None:
    line = line.strip()
    if not line:
        return None  # the newline a writer adds after a crash; not an event, not junk either
    if not flt.maybe(line):
        return None
    ev = parse_line(line)
    if ev is None:
        stats.malformed += 1
        return None
    if not flt.keep(ev):
        return None
    return ev


def _last_ts(fd: int) -> float | None:
    """``ts`` of a segment's last complete line, from its tail (to skip files older than --since)."""
    size = os.fstat(fd).st_size
    tail = os.pread(fd, TAIL_PEEK, max(0, size - TAIL_PEEK))
    for line in reversed(tail.split(b"\n")[1 if size > TAIL_PEEK else 0 :]):
        ev = parse_line(line.strip()) if line.strip() else None
        if ev is not None:
            return float(ev["ts"])
    return None


def iter_events(
    folder: Path,
    *,
    profiles: Collection[str] | None = None,
    since: float | None = None,
    until: float | None = None,
    daemon_wide: bool = False,
    stats: ReadStats | None = None,
) -> Iterator[dict[str, Any]]:
    """Every event in the journal, oldest first, that passes the filter. Missing folder: none."""
    stats = stats if stats is not None else ReadStats()
    flt = Filter(frozenset(profiles) if profiles is not None else None, since, until, daemon_wide)
    dir_fd = _open_dir(folder)
    if dir_fd is None:
        return
    try:
        numbers = list_segments(dir_fd)
        for i, n in enumerate(numbers):
            try:
                fd = open_segment(dir_fd, n, os.O_RDONLY)
            except FileNotFoundError:
                continue  # rotated away between listing and opening
            except OSError as exc:
                stats.refused.append(f"{segment_name(n)}: {exc.strerror or exc}")
                continue
            try:
                if since is not None and i < len(numbers) - 1:
                    last = _last_ts(fd)
                    if last is not None and last < since:
                        continue  # everything in this finished file is older than --since
                stats.files += 1
                yield from _lines(fd, flt, stats)
            finally:
                os.close(fd)
    finally:
        os.close(dir_fd)


def last_run(folder: Path, daemon: int | None = None) -> list[dict[str, Any]]:
    """The events of one daemon run (the newest, or the one whose PID is ``daemon``), in order.

    A run starts at its ``daemon_started`` event; events are grouped by the ``daemon`` field, so
    the counters of a running daemon can be rebuilt exactly from the journal.
    """
    run: list[dict[str, Any]] = []
    current: int | None = None
    for ev in iter_events(folder, daemon_wide=True):
        pid = ev.get("daemon")
        if ev["type"] == "daemon_started" or pid != current:
            if daemon is None or pid == daemon:
                run = []
            current = pid
        if daemon is None or pid == daemon:
            run.append(ev)
    return run


# --------------------------------------------------------------------------- following


@dataclass(slots=True)
class Cursor:
    """A position in the journal that keeps up with appends and rotations.

    A segment is finished once a higher-numbered one exists (the single writer only appends to the
    newest), so the cursor drains a file after seeing its successor and only then moves on; a
    fragment without a newline is kept until it completes, and counted as torn only once its
    file is finished. If the journal is wiped and restarts at a lower number, the cursor starts
    over at the oldest file.
    """

    folder: Path
    flt: Filter
    stats: ReadStats
    number: int = 0  # the open segment
    want: int = 0  # the lowest segment number to open next
    pos: int = 0
    partial: bytes = b""
    _fd: int | None = None
    _ino: int | None = None

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None

    def poll(self) -> list[dict[str, Any]]:
        """Events appended since the last poll (empty when nothing new)."""
        out: list[dict[str, Any]] = []
        dir_fd = _open_dir(self.folder)
        if dir_fd is None:
            return out
        try:
            while True:
                numbers = list_segments(dir_fd)
                if self._fd is None and not self._open_next(dir_fd, numbers):
                    return out
                newer = [n for n in numbers if n > self.number]
                if self.number not in numbers and not newer and numbers:
                    self._restart()  # wiped and recreated with lower numbers
                    continue
                if self.number in numbers and not newer and not self._same_file(dir_fd):
                    self._restart()  # replaced under the same name
                    continue
                self._read(out)
                if not newer:
                    return out
                if self.partial.strip(b"\0 \t\r"):
                    self.stats.torn += 1
                self.close()
                self.want, self.partial = self.number + 1, b""
        finally:
            os.close(dir_fd)

    def _restart(self) -> None:
        self.close()
        self.number, self.want, self.pos, self.partial = 0, 0, 0, b""

    def _open_next(self, dir_fd: int, numbers: list[int]) -> bool:
        for n in numbers:
            if n < self.want:
                continue
            try:
                fd = open_segment(dir_fd, n, os.O_RDONLY)
            except FileNotFoundError:
                continue
            except OSError as exc:
                self.stats.refused.append(f"{segment_name(n)}: {exc.strerror or exc}")
                continue
            if self.want and n > self.want:
                self.stats.missed_files += n - self.want
            self.number, self.pos, self.partial = n, 0, b""
            self._fd, self._ino = fd, os.fstat(fd).st_ino
            self.stats.files += 1
            return True
        return False

    def _same_file(self, dir_fd: int) -> bool:
        try:
            st = os.stat(segment_name(self.number), dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return True  # deleted by rotation: our descriptor still reads it
        return st.st_ino == self._ino

    def _read(self, out: list[dict[str, Any]]) -> None:
        assert self._fd is not None
        if os.fstat(self._fd).st_size < self.pos:
            self.pos, self.partial = 0, b""  # truncated by hand: read it again from the start
        while True:
            chunk = os.pread(self._fd, CHUNK, self.pos)
            if not chunk:
                return
            self.pos += len(chunk)
            data = self.partial + chunk
            lines = data.split(b"\n")
            self.partial = lines.pop()
            for line in lines:
                ev = _take(line, self.flt, self.stats)
                if ev is not None:
                    out.append(ev)


def follow(
    folder: Path,
    *,
    profiles: Collection[str] | None = None,
    since: float | None = None,
    history: int | None = None,
    daemon_wide: bool = False,
    stats: ReadStats | None = None,
    interval: float = 0.2,
    keep_going: Callable[[], bool] = lambda: True,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[dict[str, Any]]:
    """Existing events (all that pass ``since``, or the last ``history``), then new ones as written.

    Survives rotation, a daemon restart (the new writer appends to the same newest file), the folder
    not existing yet, and a wiped journal. Polls every ``interval`` seconds while idle.
    """
    stats = stats if stats is not None else ReadStats()
    flt = Filter(frozenset(profiles) if profiles is not None else None, since, None, daemon_wide)
    cur = Cursor(folder, flt, stats)
    try:
        first = cur.poll()
        yield from (deque(first, maxlen=history) if history is not None else first)
        while keep_going():
            new = cur.poll()
            if new:
                yield from new
            else:
                sleep(interval)
    finally:
        cur.close()


# --------------------------------------------------------------------------- --since


_REL = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|sec|m|min|h|d|w)\s*(?:ago)?\s*$", re.IGNORECASE)
_UNITS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_since(text: str, now: float) -> float:
    """A ``--since`` value as Unix time: ``10m``, ``2h``, ``1d``, ``today``, an ISO time, ``@UNIX``.

    ISO times without a zone are local time (``2026-05-01T14:00``, ``2026-05-01 14:00:05``,
    ``2026-05-01``); a bare ``14:00`` is today at that local time. ``now`` is wall-clock Unix time.
    """
    t = text.strip()
    m = _REL.match(t)
    if m:
        return now - float(m.group(1)) * _UNITS[m.group(2).lower()]
    if t.startswith("@"):
        try:
            return float(t[1:])
        except ValueError:
            pass
    local_now = datetime.fromtimestamp(now).astimezone()
    if t.lower() in ("today", "yesterday"):
        day = local_now.replace(hour=0, minute=0, second=0, microsecond=0)
        return (day - timedelta(days=1 if t.lower() == "yesterday" else 0)).timestamp()
    if re.fullmatch(r"\d{1,2}:\d{2}(:\d{2})?", t):
        parts = [int(p) for p in t.split(":")] + [0]
        if parts[0] < 24 and parts[1] < 60 and parts[2] < 60:
            return local_now.replace(hour=parts[0], minute=parts[1], second=parts[2], microsecond=0).timestamp()
    try:
        when = datetime.fromisoformat(t.replace("z", "Z"))
    except ValueError:
        raise ValueError(
            f"cannot read time {text!r}: use a duration (30s, 10m, 2h, 1d, 1w), today, yesterday,"
            " an ISO time (2026-05-01T14:00, local unless it has a zone) or @UNIXTIME"
        ) from None
    return (when if when.tzinfo else when.astimezone()).timestamp()
