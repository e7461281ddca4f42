"""Running kanban workers and the dispatcher, as ``status`` shows them per profile.

Why a ``/proc`` scan: upstream's dispatcher starts workers itself (``_default_spawn``) and tells
no one but its database; hermesd learns of them from the environment upstream gives every
worker: ``HERMES_KANBAN_TASK`` (the task id), ``HERMES_PROFILE`` (the assignee) and
``HERMES_KANBAN_DB`` (which board, hence which root). Whose tree it lives in: ``hermesd`` for a
worker the daemon runs (its keeper carries ``HERMESD_KANBAN_WORKER``; the normal case, through the
dispatcher's hand-off), else the profile of the hermesd tag it inherited (``HERMESD_PROFILE``: a
dispatcher whose hand-off is not served, or a gateway outside hermesd), whose restart ends it.

One scan serves every row of one status document: its maker passes the same ``seen`` mapping to
each row's :func:`kanban_fields` (a cache by age, 0.25 s, expired in the middle of a slow document
and rescanned: ~12 scans of every ``/proc/PID/cmdline`` per document at 100 profiles, measured).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from profiles.printable import printable
from supervisor.kanban import dispatch
from supervisor.kanban.workers import WORKER_TAG
from supervisor.limits.procfs import read_stat
from supervisor.processes.identity import proc_environ
from supervisor.processes.tags import TAG_PROFILE, TAG_ROOT


@dataclass(frozen=True, slots=True)
class Worker:
    """One running worker: its top process (children of a worker are not listed again)."""
    pid: int
    task: str
    assignee: str
    board: str | None
    tree: str | None  # whose tree it runs in: a profile (its HERMESD_PROFILE tag) or "hermesd" (the daemon's)

    def to_json(self) -> dict[str, Any]:
        return {"pid": self.pid, "task": self.task, "board": self.board, "tree": self.tree}


@dataclass(frozen=True, slots=True)
class Snapshot:
    holder: Any  # dispatch.Holder | None
    workers: tuple[Worker, ...] = field(default_factory=tuple)


def root_of_home(name: str, home: Path) -> Path:
    """The root a profile's home belongs to (the default profile *is* the root)."""
    return home if name == "default" else home.parent.parent


def scan_workers(root: Path, proc: str = "/proc") -> list[Worker]:
    """Every readable process of ``root``'s board carrying upstream's worker environment."""
    board_base = str(root / "kanban")
    root_db = str(root / "kanban.db")
    found: dict[int, tuple[str, Worker]] = {}
    me = os.getpid()
    try:
        entries = os.listdir(proc)
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit() or int(entry) == me:
            continue
        pid = int(entry)
        try:  # cheap filter first: every worker, keeper and messenger runs upstream's `… chat -q …`
            with open(f"{proc}/{entry}/cmdline", "rb") as fh:
                cmdline = fh.read()
        except OSError:
            continue
        if b"\0chat\0" not in cmdline or b"supervisor.kanban.worker" in cmdline:
            continue  # not a worker; or HERMES_BIN's messenger (the worker it asked for is the daemon's)
        env = proc_environ(pid)
        task = env.get("HERMES_KANBAN_TASK")
        assignee = env.get("HERMES_PROFILE")
        if not task or not assignee:
            continue
        db = env.get("HERMES_KANBAN_DB", "")
        if not (db == root_db or db.startswith(board_base + os.sep)) and env.get(TAG_ROOT) != str(root):
            continue
        tree = env.get(TAG_PROFILE) if env.get(TAG_ROOT) == str(root) else None
        if tree is None and env.get(WORKER_TAG):
            tree = "hermesd"  # run by the daemon (supervisor.kanban.workers), in the assignee's domain
        # Any process can carry these variables: what status prints of them is escaped.
        board = env.get("HERMES_KANBAN_BOARD")
        found[pid] = (task, Worker(pid, printable(task, 80), printable(assignee, 80),
                                   printable(board, 64) if board is not None else None, tree))
    # keep only the top process of each worker: its parent is not part of the same task
    return sorted((w for pid, (task, w) in found.items()
                   if (st := read_stat(pid)) is None or found.get(st.ppid, ("",))[0] != task),
                  key=lambda w: w.pid)


def snapshot(root: Path) -> Snapshot:
    """The dispatcher lock's holder and the running workers of ``root``, now."""
    return Snapshot(dispatch.holder(root), tuple(scan_workers(root)))


def kanban_fields(name: str, home: Path, seen: dict[Path, Snapshot] | None = None) -> dict[str, Any]:
    """The ``kanban`` field of ``name``'s status row.

    ``dispatcher``: this profile's gateway (by its hermesd tag or its ``HERMES_HOME``) holds the
    dispatcher lock; ``dispatcher_pid``/``dispatcher_supervised`` then say which process and
    whether it is this daemon's child. ``workers``: running workers assigned to this profile,
    each with ``tree``, the profile whose process tree it lives in. ``seen``: the snapshots this
    document already took, by root (one is added when this profile's root has none yet).
    """
    root = root_of_home(name, home)
    snap = seen.get(root) if seen is not None else None
    if snap is None:
        snap = snapshot(root)
        if seen is not None:
            seen[root] = snap
    h = snap.holder
    mine = h is not None and h.profile == name
    return {"kanban": {
        "dispatcher": mine,
        "dispatcher_pid": h.pid if mine else None,
        "dispatcher_supervised": h.supervised if mine else None,
        "workers": [w.to_json() for w in snap.workers if w.assignee == name],
    }}
