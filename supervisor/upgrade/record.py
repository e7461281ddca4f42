"""The record of one fleet operation: ``<root>/.hermesd/upgrades/<id>/``, private to hermesd.

``record.json`` holds what a rollback needs and what happened, written again after every step (so an
operation killed half way still says how far it got)::

    {"id", "operation": "upgrade" | "rollback" | "rolling_restart", "created_at", "finished_at",
     "result": "running" | "done" | "failed" | "refused" | "rolled_back" | "rollback_failed", "reason",
     "interpreter": {"python", "prefix", "dist_name"}, "requirement",
     "from": CodeId | null, "to": CodeId | null,
     "python": {"saved": [SavedDist], "installed": [names], "before": {name: version}} | null,
     "files": {profile: [Saved]}, "homes": {profile: path},
     "order": [names], "canary", "baselines": {profile: Baseline}, "steps": [{profile, result, reason, took_s}],
     "rollback_of": id}

Beside it: ``files/<profile>/`` (the saved profile files), ``python/`` (the saved distributions,
mirroring the environment's prefix), ``replaced/<profile>/`` (what a rollback overwrote), and
``pip.log``. One operation at a time per root: :func:`lock`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from profiles import safeio, safetree
from profiles.safeio import Beneath
from profiles.upstream.files import read_json, write_json_atomic
from supervisor.layout import Layout, check_private
from supervisor.processes import lockfile

RECORD = "record.json"
KEEP_PYTHON_COPIES = 3  # the saved distributions of older upgrades are removed (tens of MB each)


class Busy(RuntimeError):
    """Another fleet operation holds the root."""


@contextlib.contextmanager
def lock(layout: Layout) -> Iterator[None]:
    """Hold ``<root>/.hermesd/upgrade.lock`` for the whole operation; :class:`Busy` when another has it."""
    try:
        fd = lockfile.take(layout, layout.upgrade_lock)
    except lockfile.Held as held:
        raise Busy(f"another fleet operation (hermesd upgrade or restart --rolling, PID {held}) is running "
                   f"on {layout.root}; wait for it to finish") from None
    try:
        yield
    finally:
        os.close(fd)


@dataclass(slots=True)
class Record:
    """One operation's record. Its files are resolved from the root (:mod:`profiles.safeio`): no link
    in ``.hermesd`` (which the default profile can write under Landlock alone) redirects them."""

    folder: Path
    data: dict[str, Any]
    root: Path

    @property
    def id(self) -> str:
        return str(self.data["id"])

    def _at(self, *parts: str) -> Beneath:
        return safeio.under(self.root, self.folder.joinpath(*parts))

    def files_dir(self, profile: str) -> Beneath:
        return self._at("files", profile)

    def replaced_dir(self, profile: str) -> Beneath:
        return self._at("replaced", profile)

    @property
    def python_dir(self) -> Beneath:
        return self._at("python")

    @property
    def log(self) -> Beneath:
        return self._at("pip.log")

    def save(self) -> None:
        write_json_atomic(self._at(RECORD), self.data)


def _folder(layout: Layout) -> Path:
    layout.ensure()
    with contextlib.suppress(FileExistsError):
        safeio.mkdir(layout.beneath(layout.upgrades), 0o700)
    check_private(layout.upgrades)
    return layout.upgrades


def create(layout: Layout, operation: str, now: float) -> Record:
    """A new, empty record (its id is the local time, made unique)."""
    base = _folder(layout)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    for n in range(1, 1000):
        rid = stamp if n == 1 else f"{stamp}-{n}"
        try:
            safeio.mkdir(layout.beneath(base / rid), 0o700)
        except FileExistsError:
            continue
        rec = Record(base / rid, {"id": rid, "operation": operation, "created_at": now, "result": "running",
                                  "steps": []}, layout.root)
        rec.save()
        return rec
    raise OSError(errno.EEXIST, f"cannot create a record under {base}")


def load(layout: Layout, rid: str) -> Record | None:
    """The record ``rid``, or None when there is none (or it is not hermesd's)."""
    if not rid or "/" in rid or rid.startswith("."):
        return None
    folder = layout.upgrades / rid
    data = read_json(layout.beneath(folder / RECORD))
    if data is None or data.get("id") != rid:
        return None
    return Record(folder, data, layout.root)


def every(layout: Layout) -> list[Record]:
    """Every readable record, oldest first."""
    try:
        names = sorted(os.listdir(layout.upgrades))
    except OSError:
        return []
    return [r for n in names if (r := load(layout, n)) is not None]


def latest_upgrade(layout: Layout) -> Record | None:
    """The newest upgrade: what ``--rollback`` undoes when no id is given."""
    upgrades = [r for r in every(layout) if r.data.get("operation") == "upgrade"]
    return upgrades[-1] if upgrades else None


def _is_folder(where: Beneath) -> bool:
    st = safeio.lstat(where)
    return st is not None and stat.S_ISDIR(st.st_mode)


def prune_python_copies(layout: Layout) -> list[str]:
    """Remove the saved distributions of all but the newest :data:`KEEP_PYTHON_COPIES` upgrades."""
    with_copies = [r for r in every(layout) if _is_folder(r.python_dir)]
    dropped = []
    for rec in with_copies[:-KEEP_PYTHON_COPIES]:
        with contextlib.suppress(OSError):
            safetree.remove_tree(rec.python_dir)
        rec.data["python_pruned"] = True
        rec.save()
        dropped.append(rec.id)
    return dropped
