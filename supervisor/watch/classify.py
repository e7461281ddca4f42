"""Live reaction to the profile tree: which file events matter, and which watcher to use.

Only the root, ``profiles/`` and each profile folder are watched, each non-recursively: a
default root may hold a multi-gigabyte ``hermes-agent`` checkout and a venv, which a recursive
watch would spend inotify watches on. The set of watched folders follows the profiles.

Two strategies, one small module each: ``inotify`` (read on the event loop itself, so an idle
hermesd never wakes up; what every Linux C library offers) and ``watchfiles`` (watchfiles' native
backends, at the price of a polling thread: the fallback for a C library without inotify, which
no system hermesd runs on lacks); ``choose`` picks one.

Besides the profiles' own files, a gateway's ``gateway_state.json`` and ``gateway.pid`` in the
watched folders are reported (``states``): that is how the daemon learns, without polling, that a
gateway reached ``running`` (a start-up slot frees up) or that a gateway it did not start appeared.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from profiles.discovery import TOMBSTONES
from profiles.upstream.files import PID_FILE, STATE_FILE
from profiles.upstream.multiplex import IDENTITY_MARKERS, PARKED_MARKER, REWRITTEN_MARKER
from supervisor.layout import CONFIG_NAME

# A profile's own files, plus the parking marker ``hermes -p X gateway stop`` leaves on the
# multiplex-default line (it changes the verdict, not the gateway's configuration).
PROFILE_FILES = frozenset({".env", "config.yaml", "profile.yaml", PARKED_MARKER})
GATEWAY_FILES = frozenset({STATE_FILE, PID_FILE})
# On the multiplex-default line a folder under profiles/ becomes a profile when one of these appears
# in it (state.db is left out: SQLite rewrites it all the time; ``hermesd reload`` covers that case).
IDENTITY_FILES = frozenset(IDENTITY_MARKERS) - {"state.db"}
DEBOUNCE_S = 0.3  # a burst of writes (an editor's save) becomes one batch
# A gateway renames whole files into place, so its writes are reported at once (a start-up slot
# frees the moment a gateway runs), from a budget per folder: a burst of STATE_BURST batches, then
# one per STATE_THROTTLE_S, so a gateway rewriting its files in a loop cannot busy the daemon.
STATE_BURST = 5
STATE_THROTTLE_S = 0.3
RETRY_S = 0.5  # after a watcher error (a folder vanished mid-update), rescan this soon


@dataclass(slots=True)
class FsEvents:
    """What a batch of file events asks the daemon to do."""

    rescan: bool = False
    config: bool = False
    profiles: set[str] = field(default_factory=set)  # their .env / config.yaml / profile.yaml changed
    states: set[str] = field(default_factory=set)  # their gateway wrote its state or PID file
    rewritten: bool = False  # a gateway left upstream's "I rewrote config.yaml" marker in the root

    def __bool__(self) -> bool:
        return self.rescan or self.config or bool(self.profiles) or bool(self.states) or self.rewritten


def classify(root: Path, paths: Iterable[str]) -> FsEvents:
    """Pure: map changed paths to actions; everything else (state, logs, databases) is ignored."""
    out = FsEvents()
    profiles_dir = root / "profiles"
    tombstones = profiles_dir / TOMBSTONES
    for raw in paths:
        p = Path(raw)
        if p == profiles_dir or p.parent == profiles_dir or p.parent == tombstones:
            out.rescan = True  # a folder, or upstream's tombstone of a deleted profile, came or went
        elif p == root / CONFIG_NAME:
            out.config = True
        elif p == root / REWRITTEN_MARKER:
            out.rewritten = True
        elif p.name in PROFILE_FILES or p.name in GATEWAY_FILES or p.name in IDENTITY_FILES:
            if p.name in IDENTITY_FILES and p.parent.parent == profiles_dir:
                out.rescan = True  # a folder may just have become a profile (or stopped being one)
            if p.name not in PROFILE_FILES and p.name not in GATEWAY_FILES:
                continue
            target = out.profiles if p.name in PROFILE_FILES else out.states
            if p.parent == root:
                target.add("default")
            elif p.parent.parent == profiles_dir:
                target.add(p.parent.name)
    return out


def watched_dirs(root: Path, homes: Iterable[Path]) -> list[Path]:
    """The root, ``profiles/``, upstream's tombstone folder ``profiles/.deleted/`` (a profile deleted while
    hermesd runs is stopped at once, not at the next reload; never a link) and each profile's home."""
    dirs = {root}
    if (root / "profiles").is_dir():
        dirs.add(root / "profiles")
        tombstones = root / "profiles" / TOMBSTONES
        if tombstones.is_dir() and not tombstones.is_symlink():
            dirs.add(tombstones)
    dirs.update(h for h in homes if h.is_dir())
    return sorted(dirs)


class Watcher(Protocol):
    """What the daemon needs from a watcher: follow a set of folders, report batches, close."""

    def follow(self, homes: Iterable[Path]) -> None: ...

    def close(self) -> None: ...
