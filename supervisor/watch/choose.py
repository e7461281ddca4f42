"""Which watcher this machine gets: inotify on the loop wherever the C library has it (every Linux),
watchfiles otherwise."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from supervisor.watch import inotify
from supervisor.watch.events import FsEvents, Watcher
from supervisor.watch.watchfiles import WatchfilesWatcher


def make_watcher(root: Path, on_events: Callable[[FsEvents], None]) -> Watcher:
    if inotify.available():
        return inotify.InotifyWatcher(root, on_events)

    return WatchfilesWatcher(root, on_events)
