"""Which watcher this machine gets: inotify on the loop where Linux has it, watchfiles elsewhere."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from supervisor.watch.events import FsEvents, Watcher


def make_watcher(root: Path, on_events: Callable[[FsEvents], None]) -> Watcher:
    from supervisor.watch import inotify

    if inotify.available():
        return inotify.InotifyWatcher(root, on_events)
    from supervisor.watch.watchfiles import WatchfilesWatcher

    return WatchfilesWatcher(root, on_events)
