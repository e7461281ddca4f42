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

The root is the default profile's home, so everything there is the profile's to change, also
while hermesd (as root) moves it: the database is opened beneath the root without following a
link, checked through that descriptor (a regular file that SQLite could open), and only renamed,
never opened by path (SQLite would follow a link planted a moment later, and create its target);
the sidecars move with it instead of being checkpointed into it, which is what SQLite itself
expects of a database copied with its ``-wal``. Whatever the profile puts there is an error naming
the file (:class:`BoardNotMovedError`) that leaves the board where it is: the fleet starts anyway.
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


SQLITE_HEADER = b"SQLite format 3\x00"  # the first 16 bytes of every SQLite 3 database (an empty file is one too)


class BoardNotMovedError(RuntimeError):
    """The legacy board stays in the root, for the reason given (naming the file)."""


class KanbanBusyError(BoardNotMovedError):
    """The legacy board is open by some process; migrating it now could lose writes."""


def link_target(name: str) -> str:
    """The relative target of a root-level link (relative, so it works in every view of the root)."""
    return f"{BOARD_DIR}/{name}"


def layout(root: Path) -> str:
    """``linked`` (the design above), ``absent`` (no board yet), ``legacy`` (a plain kanban.db in
    the root) or ``foreign`` (``kanban.db`` is something else: a link elsewhere, a folder, or a name
    that changed between two looks at it)."""
    where = safeio.at(root, "kanban.db")
    st = safeio.lstat(where)
    if st is None:
        return "absent"
    if stat.S_ISLNK(st.st_mode):
        try:
            return "linked" if safeio.readlink(where) == link_target("kanban.db") else "foreign"
        except OSError:  # no longer a link (EINVAL) or gone: the profile is changing it right now
            return "foreign"
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


def open_by(files: set[tuple[int, int]]) -> list[int]:
    """PIDs (readable by us) with any of ``files`` (``(st_dev, st_ino)``) open, found through ``/proc/*/fd``."""
    if not files:
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
                if (st.st_dev, st.st_ino) in files:
                    found.append(int(entry.name))
                    break
    return found


def migrate(root: Path) -> str:
    """Move a legacy ``<root>/kanban.db`` into the board folder and link it; return the layout after.

    Refuses (:class:`KanbanBusyError`, naming the PIDs) while any process has the database or a
    sidecar open: stop the gateways and any ``hermes kanban`` first; and
    (:class:`BoardNotMovedError`, naming the file) a database that is not one, a sidecar that is not
    a regular file, or a name replaced while it moves. The sidecars move first and the database
    last, so a crash half-way leaves the old layout (to finish on the next call) or the new one
    without its links (which the next call adds).
    """
    state = layout(root)
    if state == "absent":
        ensure_links(root)
        return layout(root)
    if state in ("linked", "foreign"):
        if state == "linked":
            ensure_links(root)
        return state
    db = safeio.at(root, "kanban.db")
    fd = _open_database(db)
    try:
        st = os.fstat(fd)
        sidecars = {suffix: _sidecar(db.sibling(f"kanban.db{suffix}")) for suffix in _SIDECARS}
        busy = open_by({(st.st_dev, st.st_ino), *(i for i in sidecars.values() if i is not None)})
        if busy:
            raise KanbanBusyError(f"{db} is open by PID {', '.join(map(str, sorted(busy)))}: stop those first")
        board = safeio.at(root, BOARD_DIR)
        safeio.makedirs(board)
        target = board / "kanban.db"
        if safeio.lstat(target) is not None:
            raise BoardNotMovedError(f"{target.path} already exists beside a legacy {db}: move one of them by hand")
        for suffix, ident in sidecars.items():
            if ident is not None:
                _move_checked(db.sibling(f"kanban.db{suffix}"), board / f"kanban.db{suffix}", ident)
        _move_checked(db, target, (st.st_dev, st.st_ino))
    finally:
        os.close(fd)
    for name in LINKS[1:]:  # lock files and the sentinel carry no data: drop the root copies
        where = safeio.at(root, name)
        old = safeio.lstat(where)
        if old is not None and not stat.S_ISLNK(old.st_mode):
            if name == ".scratch_tip_shown":
                os.close(safeio.open_beneath(board / name, os.O_WRONLY | os.O_CREAT, 0o644))
            safeio.unlink(where)
    ensure_links(root)
    return layout(root)


def _open_database(db: safeio.Beneath) -> int:
    """``db`` opened beneath the root without a link, and shown by its first bytes to be a database
    SQLite can open (or an empty file, which SQLite takes for a new one)."""
    try:
        fd = safeio.open_beneath(db, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:  # a link (LinkRefusedError says so), or gone since layout() looked
        raise BoardNotMovedError(f"{db}: cannot open it to move it: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise BoardNotMovedError(f"{db} is not a regular file")
        head = os.pread(fd, len(SQLITE_HEADER), 0)
        if head and head != SQLITE_HEADER:
            raise BoardNotMovedError(f"{db} is not an SQLite database (it does not start with "
                                     f"'SQLite format 3'); left where it is: remove or restore it")
    except BaseException:
        os.close(fd)
        raise
    return fd


def _sidecar(where: safeio.Beneath) -> tuple[int, int] | None:
    """The identity of a database sidecar in the root, ``None`` when there is none; anything but a
    regular file there is refused (SQLite would follow a link by its name)."""
    st = safeio.lstat(where)
    if st is None:
        return None
    if not stat.S_ISREG(st.st_mode):
        raise BoardNotMovedError(f"{where} is not a regular file: remove it, then start hermesd again")
    return st.st_dev, st.st_ino


def _move_checked(source: safeio.Beneath, dest: safeio.Beneath, ident: tuple[int, int]) -> None:
    """Rename ``source`` (the file hermesd checked, ``ident``) to ``dest``, and make sure that is what
    arrived: the profile can swap the name between the check and the rename. A link that arrived
    instead is removed (never followed); anything else is left and named."""
    safeio.move(source, dest)
    st = safeio.lstat(dest)
    if st is not None and stat.S_ISREG(st.st_mode) and (st.st_dev, st.st_ino) == ident:
        return
    if st is not None and stat.S_ISLNK(st.st_mode):
        safeio.unlink(dest)
    raise BoardNotMovedError(f"{source} was replaced while hermesd moved it into {dest.path}; "
                             "start hermesd again once nothing changes it")
