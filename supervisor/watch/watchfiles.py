"""File watching with watchfiles: the fallback for a C library without inotify.

hermesd runs on Linux, whose C libraries all have inotify, so :mod:`supervisor.watch.inotify` is
what it uses; this watcher runs its native watcher in a thread that polls for changes every
``step`` ms, so an idle hermesd would wake up regularly.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from pathlib import Path

from watchfiles import awatch

from supervisor.watch.classify import DEBOUNCE_S, RETRY_S, FsEvents, classify, watched_dirs

log = logging.getLogger("hermesd")
STEP_MS = 100


class WatchfilesWatcher:
    """Runs ``watchfiles.awatch`` over the folders and hands classified batches to ``on_events``."""

    def __init__(self, root: Path, on_events: Callable[[FsEvents], None]) -> None:
        self.root = root
        self.on_events = on_events
        self.dirs: list[Path] = []
        self._task: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None

    def follow(self, homes: Iterable[Path]) -> None:
        """(Re)start watching when the set of folders changed, or when the watcher ended."""
        dirs = watched_dirs(self.root, homes)
        if dirs == self.dirs and self._task is not None and not self._task.done():
            return
        self.close()
        self.dirs = dirs
        self._stop = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run(dirs, self._stop))

    def close(self) -> None:
        if self._stop is not None:
            self._stop.set()
        self._task = None

    async def _run(self, dirs: list[Path], stop: asyncio.Event) -> None:
        try:
            async for changes in awatch(
                *dirs, watch_filter=None, debounce=int(DEBOUNCE_S * 1000), step=STEP_MS, stop_event=stop,
                recursive=False,
            ):
                events = classify(self.root, (path for _change, path in changes))
                if events:
                    self.on_events(events)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # Typically a folder deleted between listing and watching it. Rescan (which re-follows
            # the folders that still exist) shortly, rather than lose every later event.
            if stop.is_set():
                return
            log.warning("file watcher restarting after: %s", exc)
            asyncio.get_running_loop().call_later(RETRY_S, self.on_events, FsEvents(rescan=True))
