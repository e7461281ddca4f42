"""hermesd's lock files (:mod:`supervisor.processes.lockfile`), held by a real second process.

The holder is another interpreter, as in life (a second ``hermesd upgrade``, ``install-deps`` or
daemon): a taker that finds the lock held is told the PID the holder wrote, then either refuses
(:class:`supervisor.processes.lockfile.Held`, the fleet operation's :class:`supervisor.upgrade.record.Busy`)
or waits and gets the lock once the holder dies, SIGKILL included.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from supervisor.layout import Layout
from supervisor.processes import lockfile
from supervisor.processes.lockholder import holder
from supervisor.upgrade import record
from tests.harness import wait_for

REPO = Path(__file__).resolve().parents[2]
HOLD = ("import sys\nfrom pathlib import Path\nfrom supervisor.processes import lockfile\n"
        "from supervisor.layout import Layout\n"
        "layout = Layout(Path(sys.argv[1]))\nfd = lockfile.take(layout, layout.dir / sys.argv[2])\n"
        "print('held', flush=True)\nsys.stdin.read()\n")


@pytest.fixture
def held_by_another(tmp_path: Path) -> Iterator[tuple[Layout, str, subprocess.Popen[str]]]:
    """``<root>/.hermesd/upgrade.lock`` held by a child process until it is killed."""
    layout = Layout(tmp_path)
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path), layout.upgrade_lock.name], cwd=REPO,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "held\n"
        yield layout, layout.upgrade_lock.name, proc
    finally:
        proc.kill()
        proc.wait()


def test_a_held_lock_names_the_pid_its_holder_wrote(held_by_another) -> None:
    layout, name, proc = held_by_another
    with pytest.raises(lockfile.Held) as err:
        lockfile.take(layout, layout.dir / name)
    assert str(err.value) == str(proc.pid) and holder(layout, layout.upgrade_lock) == proc.pid
    with pytest.raises(record.Busy) as busy, record.lock(layout):
        pass
    assert str(busy.value) == (f"another fleet operation (hermesd upgrade or restart --rolling, PID {proc.pid}) "
                               f"is running on {layout.root}; wait for it to finish")


def test_a_refused_taker_keeps_no_descriptor(held_by_another) -> None:
    layout, name, _proc = held_by_another
    before = set(os.listdir(f"/proc/{os.getpid()}/fd"))
    for _ in range(3):
        with pytest.raises(lockfile.Held):
            lockfile.take(layout, layout.dir / name)
    assert set(os.listdir(f"/proc/{os.getpid()}/fd")) == before


def test_a_waiting_taker_is_told_the_holder_and_gets_the_lock_when_it_dies(held_by_another) -> None:
    layout, name, proc = held_by_another
    told: list[str] = []
    got: list[int] = []
    taker = threading.Thread(target=lambda: got.append(lockfile.take(layout, layout.dir / name, told.append)))
    taker.start()
    try:
        wait_for(lambda: told, 10, what="the waiting taker told the holder's PID")
        assert told == [str(proc.pid)] and not got  # told, and still waiting
        proc.kill()  # the kernel releases a dead holder's lock
        taker.join(10)
        assert not taker.is_alive() and len(got) == 1
        assert (layout.dir / name).read_text() == f"{os.getpid()}\n"  # the new holder's PID replaced it
        assert holder(layout, layout.upgrade_lock) == os.getpid()
    finally:
        taker.join(10)
        for fd in got:
            os.close(fd)
    assert holder(layout, layout.upgrade_lock) is None  # closing the descriptor released it


def test_a_free_lock_is_taken_at_once_and_released_with_its_block(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    with lockfile.held(layout, layout.upgrade_lock, lambda pid: pytest.fail(f"waited for {pid}")):
        assert holder(layout, layout.upgrade_lock) == os.getpid()
        assert layout.upgrade_lock.read_text() == f"{os.getpid()}\n"
    assert holder(layout, layout.upgrade_lock) is None
