"""The shared kanban board under confinement: one folder for the database, links where upstream looks.

Upstream keeps the default board's database directly in the root: ``<root>/kanban.db``, and
SQLite creates ``kanban.db-wal``/``-shm``/``-journal`` beside it while upstream's own Python code
creates ``kanban.db.init.lock``, ``kanban.db.dispatch.lock`` and ``.scratch_tip_shown`` there.
Every process that uses the board must be able to create and delete those names *in the folder
that holds the database*, and all of them must see the *same* files (the ``-shm`` file is the
WAL index in shared memory: two private copies corrupt the database). Neither mechanism can give
that for a file directly in the root without opening the whole root: a Landlock right on the
root folder covers every profile under it, and a per-file bind mount cannot cover files that do
not exist yet.

The design: the database lives in its own folder, ``<root>/kanban/default-board/``, and the root
keeps relative symbolic links with upstream's names pointing into it::

    <root>/kanban.db                 -> kanban/default-board/kanban.db
    <root>/kanban.db.init.lock       -> kanban/default-board/kanban.db.init.lock
    <root>/kanban.db.dispatch.lock   -> kanban/default-board/kanban.db.dispatch.lock
    <root>/.scratch_tip_shown        -> kanban/default-board/.scratch_tip_shown

SQLite resolves a symlinked database name before it derives the ``-wal``/``-shm``/``-journal``
names (unix VFS, since 3.10), and upstream opens its lock files with ``open("a+b")``, which
follows a link and creates its target. So every process, confined or not, with or without any
environment variable, ends up in ``<root>/kanban/`` — one folder that a bind mount or a Landlock
rule can grant whole. Named profiles get the same four links recreated inside their private view
of the root (the plan's ``links``), so they never need the real root folder.

Rejected alternative: ``HERMES_KANBAN_HOME`` (``hermes_cli/kanban_db.py``, ``kanban_home()``)
moves the *whole* board (``<K>/kanban.db`` and ``<K>/kanban/``). Set only for hermesd's children,
it splits the board: a plain ``hermes kanban list`` in a shell reads ``<root>/kanban.db`` and
sees nothing of what the gateways do. ``HERMES_KANBAN_DB`` pins one file for *every* board and
breaks multi-board setups. Both need every user shell to agree; the links need nobody.

Cost: a one-time move of an existing ``<root>/kanban.db`` (:func:`migrate`, only while no process
has it open) and four links in the root that a user sees in ``ls -a``. A root whose board is
still a plain file is ``legacy``: named profiles cannot reach it under confinement until it is
migrated (the plan says so; ``doctor`` should too).
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from profiles import safeio

KANBAN_DIR = "kanban"
BOARD_DIR = "kanban/default-board"
# Root-level names upstream uses for the default board, each linked into BOARD_DIR.
LINKS = ("kanban.db", "kanban.db.init.lock", "kanban.db.dispatch.lock", ".scratch_tip_shown")
_SIDECARS = ("-wal", "-shm", "-journal")


class KanbanBusyError(RuntimeError):
    """The legacy board is open by some process; migrating it now could lose writes."""


def link_target(name: str) -> str:
    """The relative target of a root-level link (relative, so it works in every view of the root)."""
    return f"{BOARD_DIR}/{name}"


def layout(root: Path) -> str:
    """``linked`` (the design above), ``absent`` (no board yet), ``legacy`` (a plain kanban.db in
    the root) or ``foreign`` (``kanban.db`` is something else: a link elsewhere, a folder)."""
    try:
        st = os.lstat(root / "kanban.db")
    except FileNotFoundError:
        return "absent"
    except OSError:
        return "foreign"
    if stat.S_ISLNK(st.st_mode):
        return "linked" if os.readlink(root / "kanban.db") == link_target("kanban.db") else "foreign"
    return "legacy" if stat.S_ISREG(st.st_mode) else "foreign"


def ensure_links(root: Path) -> None:
    """Create the board folder and any missing link (idempotent; never replaces a real file).

    The root is where every profile's agent may write (the default profile owns it): the folder is
    made beneath the root without following a link, so a ``kanban`` replaced by a link elsewhere is
    refused, never written through.
    """
    safeio.makedirs(safeio.at(root, BOARD_DIR))
    for name in LINKS:
        with contextlib.suppress(FileExistsError):
            safeio.symlink(safeio.at(root, name), link_target(name))


def open_by(paths: list[Path]) -> list[int]:
    """PIDs (readable by us) with any of ``paths`` open, found through ``/proc/*/fd``."""
    wanted = set()
    for p in paths:
        with contextlib.suppress(OSError):
            st = os.stat(p)
            wanted.add((st.st_dev, st.st_ino))
    if not wanted:
        return []
    me, found = os.getpid(), []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            fds = os.scandir(f"/proc/{entry.name}/fd")
        except OSError:
            continue
        with fds:
            for fd in fds:
                try:
                    st = os.stat(fd.path)
                except OSError:
                    continue
                if (st.st_dev, st.st_ino) in wanted:
                    found.append(int(entry.name))
                    break
    return found


def migrate(root: Path) -> str:
    """Move a legacy ``<root>/kanban.db`` into the board folder and link it; return the layout after.

    Refuses (:class:`KanbanBusyError`, naming the PIDs) while any process has the database or a
    sidecar open: stop the gateways and any ``hermes kanban`` first. The WAL is checkpointed
    into the database before the move, so only the main file moves; a crash half-way leaves
    either the old layout or the new one plus a missing link, both of which this function
    finishes on the next call.
    """
    state = layout(root)
    if state == "absent":
        ensure_links(root)
        return layout(root)
    if state in ("linked", "foreign"):
        if state == "linked":
            ensure_links(root)
        return state
    db = root / "kanban.db"
    busy = open_by([db, *(db.with_name(db.name + s) for s in _SIDECARS)])
    if busy:
        raise KanbanBusyError(f"{db} is open by PID {', '.join(map(str, sorted(busy)))}: stop those first")
    import sqlite3  # lazy: the planner imports this module for its constants only

    conn = sqlite3.connect(str(db), isolation_level=None)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    board = safeio.at(root, BOARD_DIR)
    safeio.makedirs(board)
    target = board / "kanban.db"
    if safeio.lstat(target) is not None:
        raise KanbanBusyError(f"{target} already exists beside a legacy {db}: move one of them by hand")
    safeio.move(safeio.at(root, "kanban.db"), target)
    for suffix in _SIDECARS:  # left empty or absent by the checkpoint; keep them with the db
        with contextlib.suppress(FileNotFoundError):
            safeio.move(safeio.at(root, f"kanban.db{suffix}"), board / f"kanban.db{suffix}")
    for name in LINKS[1:]:  # lock files and the sentinel carry no data: drop the root copies
        st = safeio.lstat(safeio.at(root, name))
        if st is not None and not stat.S_ISLNK(st.st_mode):
            if name == ".scratch_tip_shown":
                os.close(safeio.open_beneath(board / name, os.O_WRONLY | os.O_CREAT, 0o644))
            safeio.unlink(safeio.at(root, name))
    ensure_links(root)
    return layout(root)
