"""Which watcher this machine gets: inotify on the loop wherever the C library has it (every Linux),
watchfiles otherwise."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from supervisor.watch import inotify
from supervisor.watch.classify import FsEvents, Watcher


def make_watcher(root: Path, on_events: Callable[[FsEvents], None]) -> Watcher:
    if inotify.available():
        return inotify.InotifyWatcher(root, on_events)
    from supervisor.watch.watchfiles import WatchfilesWatcher  # only here: watchfiles costs the daemon 4.9 MiB RSS

    return WatchfilesWatcher(root, on_events)
