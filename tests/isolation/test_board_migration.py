"""The legacy board's move (``shared_board.migrate``) under a hostile default profile (issue 33, hole 2).

The root is the default profile's home, and hermesd moves ``<root>/kanban.db`` as root at start-up.
It used to open the database by path with SQLite (to checkpoint it): a non-database there made
``hermesd start`` exit with ``sqlite3.DatabaseError``, and a ``kanban.db`` flipped between a file and
a link made root create a file in another profile's home (SQLite follows the link and creates its
target), or ``readlink`` fail with EINVAL. Here every such file is an error naming it, nothing is
created through a link, and the daemon's caller gets an exception it logs (the live test of that
is ``tests/faults/test_hostile_board.py``).
"""

from __future__ import annotations

import os
import sqlite3
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from supervisor.isolation import shared_board as kb


def make_root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    (root / "profiles" / "other").mkdir(parents=True)
    return root


def real_db(path: Path, value: int = 42) -> None:
    conn = sqlite3.connect(path)
    conn.execute("pragma journal_mode=wal")
    conn.execute("create table t(x)")
    conn.execute("insert into t values (?)", (value,))
    conn.commit()
    conn.close()


def no_links_in_board(root: Path) -> None:
    board = root / kb.BOARD_DIR
    if board.exists():
        assert [p.name for p in board.iterdir() if p.is_symlink()] == []


def test_a_junk_database_is_named_and_left_where_it_is(tmp_path: Path) -> None:
    root = make_root(tmp_path)
    (root / "kanban.db").write_bytes(b"this is not a database, it is what the agent wrote\n" * 20)
    with pytest.raises(kb.BoardNotMovedError) as caught:
        kb.migrate(root)
    assert str(caught.value).startswith(f"{root / 'kanban.db'} is not an SQLite database")
    assert kb.layout(root) == "legacy" and (root / "kanban.db").read_bytes().startswith(b"this is not")
    assert not (root / "kanban").exists()


def test_a_real_database_moves_with_its_wal_unread(tmp_path: Path) -> None:
    """hermesd never opens the database: its WAL, left by a writer that died without a checkpoint,
    moves beside it, and SQLite replays it through the link afterwards."""
    root = make_root(tmp_path)
    db = root / "kanban.db"
    writer = ("import os, sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute('pragma journal_mode=wal'); "
              "c.execute('pragma wal_autocheckpoint=0'); c.execute('create table t(x)'); "
              "c.execute('insert into t values (42)'); c.commit(); os._exit(0)")
    subprocess.run([sys.executable, "-c", writer, str(db)], check=True, timeout=60)
    assert (root / "kanban.db-wal").stat().st_size > 0  # the rows are in the WAL only
    alone = tmp_path / "alone.db"
    alone.write_bytes(db.read_bytes())
    with pytest.raises(sqlite3.OperationalError, match="no such table"):
        sqlite3.connect(alone).execute("select x from t")
    assert kb.migrate(root) == "linked"
    board = root / kb.BOARD_DIR
    assert (board / "kanban.db").is_file() and (board / "kanban.db-wal").is_file()
    assert sqlite3.connect(root / "kanban.db").execute("select x from t").fetchall() == [(42,)]
    no_links_in_board(root)


def test_a_link_is_foreign_and_nothing_is_created_at_its_target(tmp_path: Path) -> None:
    root = make_root(tmp_path)
    victim = root / "profiles" / "other" / "kanban.db"
    (root / "kanban.db").symlink_to("profiles/other/kanban.db")
    assert kb.layout(root) == "foreign" and kb.migrate(root) == "foreign"
    assert not victim.exists() and not (root / "kanban").exists()
    victim.write_bytes(b"other profile's data")
    assert kb.migrate(root) == "foreign" and victim.read_bytes() == b"other profile's data"


def test_a_fifo_is_foreign_and_never_opened(tmp_path: Path) -> None:
    root = make_root(tmp_path)
    os.mkfifo(root / "kanban.db")
    started = time.monotonic()
    assert kb.layout(root) == "foreign" and kb.migrate(root) == "foreign"
    assert time.monotonic() - started < 5  # opening a FIFO for reading would block until a writer came
    assert stat.S_ISFIFO(os.lstat(root / "kanban.db").st_mode)


@pytest.mark.parametrize("kind", ["link", "fifo", "folder"])
def test_a_sidecar_that_is_not_a_file_stops_the_move(tmp_path: Path, kind: str) -> None:
    """SQLite opens ``-wal`` and ``-shm`` by the database's name: moved into the shared folder, a link
    there would lead every profile's SQLite to the other profile's file."""
    root = make_root(tmp_path)
    real_db(root / "kanban.db")
    side = root / "kanban.db-wal"
    side.unlink(missing_ok=True)
    victim = root / "profiles" / "other" / "state.db"
    if kind == "link":
        side.symlink_to("profiles/other/state.db")
    elif kind == "fifo":
        os.mkfifo(side)
    else:
        side.mkdir()
    with pytest.raises(kb.BoardNotMovedError, match=f"^{side} is not a regular file"):
        kb.migrate(root)
    assert kb.layout(root) == "legacy" and not victim.exists()
    no_links_in_board(root)


def test_the_board_folder_replaced_by_a_link_is_refused(tmp_path: Path) -> None:
    root = make_root(tmp_path)
    real_db(root / "kanban.db")
    (root / "kanban").symlink_to("profiles/other")
    with pytest.raises(OSError, match="link"):
        kb.migrate(root)
    assert list((root / "profiles" / "other").iterdir()) == []
    assert kb.layout(root) == "legacy"


FLIPPER = r"""
import os, sys, time
root, source, until = sys.argv[1], sys.argv[2], time.monotonic() + float(sys.argv[3])
db, tmp = os.path.join(root, "kanban.db"), os.path.join(root, ".flip")
flips = 0
while time.monotonic() < until:
    for make in (lambda: os.symlink("profiles/other/kanban.db", tmp), lambda: os.link(source, tmp)):
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        make()
        os.replace(tmp, db)
        flips += 1
print(flips)
"""


def test_flipping_file_and_link_during_the_move(tmp_path: Path) -> None:
    """The profile swaps ``kanban.db`` between a real database and a link into another profile's home
    as fast as it can while hermesd looks and moves, again and again. Whatever each attempt
    decides, nothing appears in the other profile's home, no link lands in the shared folder, and
    the only errors are the ones the daemon logs (named, never a crash)."""
    root = make_root(tmp_path)
    source = tmp_path / "source.db"
    real_db(source)
    victim = root / "profiles" / "other" / "kanban.db"
    seconds = 4.0
    flipper = subprocess.Popen([sys.executable, "-c", FLIPPER, str(root), str(source), str(seconds)],
                               stdout=subprocess.PIPE, text=True)
    seen: dict[str, int] = {}
    try:
        deadline = time.monotonic() + seconds - 0.2
        while time.monotonic() < deadline:
            seen[kb.layout(root)] = seen.get(kb.layout(root), 0) + 1
            try:
                outcome = kb.migrate(root)
            except kb.BoardNotMovedError as exc:
                outcome = type(exc).__name__
            except OSError as exc:  # a name gone between two steps: the daemon logs these too
                outcome = f"OSError {exc.errno}"
            seen[outcome] = seen.get(outcome, 0) + 1
            moved = root / kb.BOARD_DIR / "kanban.db"
            if os.path.lexists(moved):
                assert stat.S_ISREG(os.lstat(moved).st_mode)
                moved.unlink()  # undo, so the next round moves again
            assert not victim.exists(), seen
            no_links_in_board(root)
    finally:
        out, _ = flipper.communicate(timeout=30)
    assert flipper.returncode == 0 and int(out) > 100, out
    print(seen, f"{out.strip()} flips")
    assert seen.get("legacy", 0) and seen.get("foreign", 0), seen  # both states were met while moving
    assert not victim.exists()
