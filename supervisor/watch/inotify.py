"""File watching with Linux inotify, read directly on the asyncio loop.

No thread and no polling: the inotify descriptor is registered with the loop, so hermesd wakes
only when something in a watched folder changes. Only events that change a folder's entries or a
file's content are requested (never opens or reads), so hermesd reading a gateway's state file
does not wake its own watcher.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import errno
import logging
import os
import struct
from collections.abc import Callable, Iterable
from pathlib import Path

from supervisor.watch.classify import (
    DEBOUNCE_S,
    GATEWAY_FILES,
    PROFILE_FILES,
    RETRY_S,
    STATE_BURST,
    STATE_THROTTLE_S,
    FsEvents,
    classify,
    watched_dirs,
)

log = logging.getLogger("hermesd")

IN_MODIFY = 0x002
IN_ATTRIB = 0x004
IN_CLOSE_WRITE = 0x008
IN_MOVED_FROM = 0x040
IN_MOVED_TO = 0x080
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_Q_OVERFLOW = 0x4000
IN_IGNORED = 0x8000
IN_ONLYDIR = 0x01000000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC
MASK = (
    IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE
    | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR
)
_HEADER = struct.Struct("iIII")  # wd, mask, cookie, len

_libc: ctypes.CDLL | None = None


def _lib() -> ctypes.CDLL | None:
    global _libc
    if _libc is None:
        try:
            lib = ctypes.CDLL(None, use_errno=True)  # libc is already in the process: no ldconfig run
            lib.inotify_init1  # noqa: B018 - probe for the symbol
        except (OSError, AttributeError):
            return None
        _libc = lib
    return _libc


def available() -> bool:
    return _lib() is not None


def parse_events(buf: bytes) -> list[tuple[int, int, str]]:
    """Split a read from an inotify descriptor into (watch descriptor, mask, name) triples."""
    out = []
    pos = 0
    while pos + _HEADER.size <= len(buf):
        wd, mask, _cookie, length = _HEADER.unpack_from(buf, pos)
        pos += _HEADER.size
        name = buf[pos : pos + length].split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
        pos += length
        out.append((wd, mask, name))
    return out


class InotifyWatcher:
    """Watches folders with one inotify descriptor and reports debounced, classified batches."""

    def __init__(self, root: Path, on_events: Callable[[FsEvents], None]) -> None:
        self.root = root
        self.on_events = on_events
        self._fd: int | None = None
        self._wd_dir: dict[int, Path] = {}
        self._dir_wd: dict[Path, int] = {}
        self._pending: set[str] = set()
        self._flush: asyncio.TimerHandle | None = None
        # Gateway files, per folder: throttled, not debounced (see STATE_THROTTLE_S). Per folder, so
        # one gateway rewriting its file in a loop never delays another gateway's news.
        self._states: dict[str, set[str]] = {}
        self._states_flush: dict[str, asyncio.TimerHandle] = {}
        self._budget: dict[str, tuple[float, float]] = {}  # folder -> (batches left, when counted)

    def follow(self, homes: Iterable[Path]) -> None:
        """Watch exactly the folders that matter now: add new ones, drop vanished ones."""
        lib = _lib()
        assert lib is not None
        loop = asyncio.get_running_loop()
        if self._fd is None:
            fd = lib.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
            if fd < 0:
                err = ctypes.get_errno()
                raise OSError(err, f"inotify_init1: {os.strerror(err)}")
            self._fd = fd
            loop.add_reader(fd, self._readable)
        want = set(watched_dirs(self.root, homes))
        for gone in set(self._dir_wd) - want:
            self._budget.pop(str(gone), None)
            wd = self._dir_wd.pop(gone)
            self._wd_dir.pop(wd, None)
            lib.inotify_rm_watch(self._fd, wd)
        failed = False
        for new in sorted(want - set(self._dir_wd)):
            wd = lib.inotify_add_watch(self._fd, os.fsencode(new), MASK)
            if wd < 0:
                err = ctypes.get_errno()
                if err not in (errno.ENOENT, errno.ENOTDIR):  # vanished meanwhile: the next rescan drops it
                    log.warning("cannot watch %s: %s", new, os.strerror(err))
                failed = True
                continue
            self._wd_dir[wd] = new
            self._dir_wd[new] = wd
        if failed:
            loop.call_later(RETRY_S, self.on_events, FsEvents(rescan=True))

    def close(self) -> None:
        for handle in (self._flush, *self._states_flush.values()):
            if handle is not None:
                handle.cancel()
        self._flush = None
        self._states_flush.clear()
        self._states.clear()
        if self._fd is not None:
            with contextlib.suppress(RuntimeError):
                asyncio.get_running_loop().remove_reader(self._fd)
            os.close(self._fd)
            self._fd = None
        self._wd_dir.clear()
        self._dir_wd.clear()

    def _readable(self) -> None:
        assert self._fd is not None
        try:
            buf = os.read(self._fd, 64 * 1024)
        except BlockingIOError:
            return
        rescan = False
        for wd, mask, name in parse_events(buf):
            if mask & IN_Q_OVERFLOW:
                rescan = True  # events were lost: look at everything again
                continue
            folder = self._wd_dir.get(wd)
            if folder is None:
                continue
            if mask & IN_IGNORED:  # the folder itself went away; the kernel dropped the watch
                self._wd_dir.pop(wd, None)
                self._dir_wd.pop(folder, None)
                self._pending.add(str(folder))
                continue
            self._pending.add(str(folder / name) if name else str(folder))
        if rescan:  # look again at every folder and every profile's files
            self._pending.add(str(self.root / "profiles"))
            self._pending.update(str(d / f) for d in self._dir_wd for f in PROFILE_FILES | GATEWAY_FILES)

        loop = asyncio.get_running_loop()
        for path in [p for p in self._pending if os.path.basename(p) in GATEWAY_FILES]:
            self._pending.discard(path)
            holder = os.path.dirname(path)
            self._states.setdefault(holder, set()).add(path)
            if holder not in self._states_flush:
                delay = self._spend(holder, loop.time())
                self._states_flush[holder] = loop.call_later(delay, self._deliver_states, holder)
        if self._pending and self._flush is None:
            self._flush = loop.call_later(DEBOUNCE_S, self._deliver)

    def _spend(self, folder: str, now: float) -> float:
        """Take one batch from ``folder``'s budget; the delay before it may be delivered."""
        left, counted = self._budget.get(folder, (float(STATE_BURST), now))
        left = min(float(STATE_BURST), left + (now - counted) / STATE_THROTTLE_S) - 1.0
        self._budget[folder] = (left, now)
        return max(0.0, -left * STATE_THROTTLE_S)

    def _deliver_states(self, folder: str) -> None:
        self._states_flush.pop(folder, None)
        events = classify(self.root, self._states.pop(folder, ()))
        if events:
            self.on_events(events)

    def _deliver(self) -> None:
        self._flush = None
        paths, self._pending = self._pending, set()
        events = classify(self.root, paths)
        if events:
            self.on_events(events)
