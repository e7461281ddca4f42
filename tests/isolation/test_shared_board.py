"""The shared kanban board keeps working for every profile under confinement (issue 16's constraint).

Upstream's own ``hermes_cli.kanban_db`` is driven from confined processes of two named profiles,
the default profile and an unconfined process (a user's shell), at the same time: they must all
see one board, with SQLite's ``-wal``/``-shm`` shared (a private ``-shm`` per profile would
corrupt the database under concurrent writers).
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
from pathlib import Path

import pytest

from supervisor.isolation import shared_board
from supervisor.isolation.shim_argv import wrap_argv
from tests.isolation.conftest import MECHANISMS, PY, Tree, need, wait_for

pytest.importorskip("hermes_cli.kanban_db")

# Each writer connects once, then waits for the others before writing: upstream 0.19.0 can lose
# a row written by one process while another process runs its first connect() on the same board
# (its additive migrations), with or without hermesd — reproduced on a plain root, see the report.
WRITER = """
import os, sys, time
from hermes_cli import kanban_db as kb
who, n = sys.argv[1], int(sys.argv[2])
kb.connect().close()
if len(sys.argv) > 3:
    open(sys.argv[3] + "." + who, "w").close()
    while not os.path.exists(sys.argv[3]):
        time.sleep(0.01)
for i in range(n):
    with kb.connect_closing() as conn:
        kb.create_task(conn, title=f"{who}-{i}", assignee="b", created_by=who)
with kb.connect_closing() as conn:
    print("tasks=%d" % len(kb.list_tasks(conn)))
    print("integrity=%s" % conn.execute("pragma integrity_check").fetchone()[0])
"""


def env_for(tree: Tree, profile: str) -> dict[str, str]:
    return {**os.environ, "HERMES_HOME": str(tree.home(profile)), "PYTHONDONTWRITEBYTECODE": "1"}


def result(out: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


@pytest.mark.slow
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_one_board_for_every_domain(tree: Tree, facts, mechanism: str) -> None:
    need(facts, mechanism)
    script = tree.elsewhere / "writer.py"
    script.write_text(WRITER)
    n = 15
    go = tree.root / "kanban" / "go"  # the rendezvous in the one folder both domains may write
    procs = []
    for profile in ("a", "b"):
        argv = wrap_argv(tree.plan(facts, profile, mechanism), [PY, str(script), profile, str(n), str(go)])
        procs.append(subprocess.Popen(argv, env=env_for(tree, profile), stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    tree.procs.extend(procs)
    wait_for(lambda: all(p.poll() is not None or go.with_name(f"go.{w}").exists()
                         for p, w in zip(procs, "ab", strict=True)), timeout=60, what="both writers connected")
    go.touch()  # both write at once: a private -shm per domain would corrupt the database here
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        assert result(out)["integrity"] == "ok"
    mine = subprocess.run([PY, str(script), "shell", str(n)], env=env_for(tree, "default"),
                          capture_output=True, text=True, timeout=120)
    assert mine.returncode == 0, mine.stderr
    assert result(mine.stdout) == {"tasks": str(3 * n), "integrity": "ok"}
    if mechanism == "namespace+landlock":
        last = subprocess.run(wrap_argv(tree.plan(facts, "default", mechanism), [PY, str(script), "default", "1"]),
                              env=env_for(tree, "default"), capture_output=True, text=True, timeout=120)
        assert result(last.stdout) == {"tasks": str(3 * n + 1), "integrity": "ok"}, last.stderr
    # every sidecar lives beside the real database, none in the root
    root = tree.root
    assert shared_board.layout(root) == "linked"
    for name in shared_board.LINKS:
        assert (root / name).is_symlink()
    assert not any((root / f"kanban.db{s}").exists() and not (root / f"kanban.db{s}").is_symlink()
                   for s in ("-wal", "-shm", "-journal"))
    assert (root / shared_board.BOARD_DIR / "kanban.db").is_file()


def test_legacy_board_migrates_only_when_idle(tree: Tree) -> None:
    root = tree.root
    db = root / "kanban.db"
    conn = sqlite3.connect(db)
    conn.execute("pragma journal_mode=wal")
    conn.execute("create table t(x)")
    conn.execute("insert into t values (42)")
    conn.commit()
    assert shared_board.layout(root) == "legacy"
    holder = subprocess.Popen([PY, "-c", f"import sqlite3, sys; c = sqlite3.connect({str(db)!r}); "
                                          "c.execute('select * from t').fetchall(); sys.stdin.read()"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    tree.procs.append(holder)
    conn.close()
    try:
        import time

        deadline = time.monotonic() + 10
        st = db.stat()
        while not shared_board.open_by({(st.st_dev, st.st_ino)}) and time.monotonic() < deadline:
            time.sleep(0.02)
        with pytest.raises(shared_board.KanbanBusyError, match=f"PID {holder.pid}"):
            shared_board.migrate(root)
        assert shared_board.layout(root) == "legacy"
    finally:
        holder.stdin.close()
        holder.wait(timeout=10)
    assert shared_board.migrate(root) == "linked"
    assert shared_board.migrate(root) == "linked"  # idempotent
    assert sqlite3.connect(root / "kanban.db").execute("select x from t").fetchall() == [(42,)]
    assert (root / shared_board.BOARD_DIR / "kanban.db").is_file() and not (root / "kanban.db-wal").exists()


def test_fresh_root_gets_links(tmp_path: Path) -> None:
    assert shared_board.layout(tmp_path) == "absent"
    assert shared_board.migrate(tmp_path) == "linked"
    (tmp_path / "kanban.db").unlink()
    (tmp_path / "kanban.db").mkdir()
    assert shared_board.layout(tmp_path) == "foreign" and shared_board.migrate(tmp_path) == "foreign"


def test_legacy_board_is_not_forked_by_a_confined_profile(tree: Tree, facts) -> None:
    """With a legacy board the plan keeps named profiles off it rather than giving them a board
    of their own: their kanban calls fail, and nothing new appears in the root."""
    need(facts, "namespace+landlock")
    sqlite3.connect(tree.root / "kanban.db").close()
    plan = tree.plan(facts, "a")
    assert dict(plan.channels)["kanban"].startswith("blocked")
    script = tree.elsewhere / "writer.py"
    script.write_text(WRITER)
    r = subprocess.run(wrap_argv(plan, [PY, str(script), "a", "1"]), env=env_for(tree, "a"),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert not (tree.root / "kanban").exists() and shared_board.layout(tree.root) == "legacy"
