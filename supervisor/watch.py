"""Live reaction to the profile tree: which file events matter, and the watcher task.

Only the root, ``profiles/`` and each profile folder are watched, each non-recursively: a
default root may hold a multi-gigabyte ``hermes-agent`` checkout and a venv, which a recursive
watch would spend inotify watches on. The set of watched folders follows the profiles, so the
task restarts whenever a profile appears or disappears.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from supervisor.layout import CONFIG_NAME

log = logging.getLogger("hermesd")

PROFILE_FILES = frozenset({".env", "config.yaml", "profile.yaml"})
DEBOUNCE_MS = 300
RETRY_S = 0.5


@dataclass(slots=True)
class FsEvents:
    """What a batch of file events asks the daemon to do."""

    rescan: bool = False
    config: bool = False
    profiles: set[str] = field(default_factory=set)

    def __bool__(self) -> bool:
        return self.rescan or self.config or bool(self.profiles)


def classify(root: Path, paths: Iterable[str]) -> FsEvents:
    """Pure: map changed paths to actions; everything else (state, logs, databases) is ignored."""
    out = FsEvents()
    profiles_dir = root / "profiles"
    for raw in paths:
        p = Path(raw)
        if p == profiles_dir or p.parent == profiles_dir:
            out.rescan = True
        elif p == root / CONFIG_NAME:
            out.config = True
        elif p.name in PROFILE_FILES:
            if p.parent == root:
                out.profiles.add("default")
            elif p.parent.parent == profiles_dir:
                out.profiles.add(p.parent.name)
    return out


def watched_dirs(root: Path, homes: Iterable[Path]) -> list[Path]:
    dirs = {root}
    if (root / "profiles").is_dir():
        dirs.add(root / "profiles")
    dirs.update(h for h in homes if h.is_dir())
    return sorted(dirs)


class Watcher:
    """Runs ``watchfiles.awatch`` over ``dirs`` and hands classified batches to ``on_events``."""

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
        from watchfiles import awatch

        try:
            async for changes in awatch(
                *dirs, watch_filter=None, debounce=DEBOUNCE_MS, step=50, stop_event=stop, recursive=False
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
