"""The default profile makes ``<root>/kanban.db`` hostile before hermesd starts (issue 33, hole 2).

hermesd moves a legacy board into ``<root>/kanban/default-board/`` at start-up, as root. A junk file
there made the daemon exit with ``sqlite3.DatabaseError`` (no fleet); a link flipped in and out of
place during the start made root create a file in another profile's home. Now each is a line of
hermesd's log naming the file, every profile starts, and nothing appears where the link points.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness import make_root, write_config

PROFILES = ("default", "coder", "writer")


def plant(kind: str, root: Path) -> None:
    db = root / "kanban.db"
    if kind == "junk":
        db.write_bytes(b"\x7fELF not a database at all\n" * 100)
    elif kind == "link":
        db.symlink_to("profiles/writer/kanban.db")
    elif kind == "fifo":
        os.mkfifo(db)
    elif kind == "link_as_wal":
        sqlite3.connect(db).close()
        (root / "kanban.db-wal").symlink_to("profiles/writer/state.db")


# kind -> what hermesd's log or the profiles' plans say about the file
SAID = {
    "junk": "kanban board not moved to its shared folder: {root}/kanban.db is not an SQLite database",
    "link": "blocked: {root}/kanban.db is foreign",
    "fifo": "blocked: {root}/kanban.db is foreign",
    "link_as_wal": "kanban board not moved to its shared folder: {root}/kanban.db-wal is not a regular file",
}


@pytest.mark.parametrize("kind", list(SAID))
def test_a_hostile_board_file_is_named_and_the_fleet_starts(tmp_path: Path, hermesd_factory, faults,
                                                           kind: str) -> None:
    root = make_root(tmp_path)
    write_config(root)
    plant(kind, root)
    faults.inject()
    d = hermesd_factory(root)
    pids = d.wait_running(*PROFILES, timeout=30)
    said = SAID[kind].format(root=root)
    shown = d.log_text() + d.cli("status", "--json").stdout
    ok = said in shown and len(pids) == 3 and not (root / "profiles" / "writer" / "kanban.db").exists() \
        and not (root / "profiles" / "writer" / "state.db").exists()
    faults.check(ok, f"{kind}: {said!r} not shown, or a file created through the link")
    assert ok, shown[-3000:]


FLIPPER = r"""
import os, sys, time
root, source = sys.argv[1], sys.argv[2]
db, tmp = os.path.join(root, "kanban.db"), os.path.join(root, ".flip")
while not os.path.exists(os.path.join(root, "stop-flipping")):
    for make in (lambda: os.symlink("profiles/writer/kanban.db", tmp), lambda: os.link(source, tmp)):
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        make()
        os.replace(tmp, db)
"""


def test_a_board_flipped_between_file_and_link_during_start_up(tmp_path: Path, hermesd_factory, faults) -> None:
    """Three daemon starts while the default profile swaps ``kanban.db`` between a database and a link
    into writer's home as fast as it can: each start brings the fleet up, none creates the link's
    target, and the shared folder never receives a link. (Three starts rarely hit the narrow window
    the old code had; ``tests/isolation/test_board_migration.py`` races the move itself thousands of
    times and caught it every run.)"""
    root = make_root(tmp_path)
    write_config(root)
    source = tmp_path / "source.db"
    sqlite3.connect(source).close()
    flipper = subprocess.Popen([sys.executable, "-c", FLIPPER, str(root), str(source)])
    victim = root / "profiles" / "writer" / "kanban.db"
    try:
        for attempt in range(3):
            faults.inject()
            d = hermesd_factory(root)
            d.wait_running(*PROFILES, timeout=30)
            board = root / "kanban" / "default-board"
            links = [p.name for p in board.iterdir() if p.is_symlink()] if board.is_dir() else []
            ok = not victim.exists() and links == [] and d.proc is not None and d.proc.poll() is None
            faults.check(ok, f"start {attempt + 1}: victim {victim.exists()}, links in the board {links}")
            assert ok
            assert d.close() == []
            # the next start moves again if this one did
            for name in ("kanban.db", "kanban.db-wal", "kanban.db-shm"):
                (board / name).unlink(missing_ok=True)
    finally:
        (root / "stop-flipping").touch()
        flipper.wait(timeout=30)
    assert flipper.returncode == 0 and not victim.exists()
