"""A child's log in hermesd's folder is appended to only when it is a regular file reached without a link."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from profiles.safeio import Beneath
from supervisor.processes.child import SpawnError, spawn


@pytest.fixture
def bounded() -> Iterator[None]:
    """A regression (an open that blocks on the FIFO) fails the test instead of hanging the run."""

    def stuck(signum: int, frame: object) -> None:
        raise TimeoutError("spawn blocked on its log")

    old = signal.signal(signal.SIGALRM, stuck)
    signal.alarm(20)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def test_a_fifo_or_link_at_the_log_is_a_spawn_error_not_a_stall(tmp_path: Path, bounded: None) -> None:
    root = tmp_path / "root"
    logs = root / ".hermesd" / "logs"
    logs.mkdir(parents=True)
    os.mkfifo(logs / "alpha.log")
    with pytest.raises(SpawnError, match="cannot open its log"):
        spawn(["/bin/true"], {}, Beneath(root, ".hermesd/logs/alpha.log"))
    reader = os.open(logs / "alpha.log", os.O_RDONLY | os.O_NONBLOCK)
    try:
        with pytest.raises(SpawnError, match="FIFO"):
            spawn(["/bin/true"], {}, Beneath(root, ".hermesd/logs/alpha.log"))
    finally:
        os.close(reader)
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    (logs / "bravo.log").symlink_to(victim)
    with pytest.raises(SpawnError, match="symbolic link"):
        spawn(["/bin/true"], {}, Beneath(root, ".hermesd/logs/bravo.log"))
    assert victim.read_text() == "keep\n"
    ident = spawn(["/bin/sh", "-c", "echo started"], {}, Beneath(root, ".hermesd/logs/charlie.log"))
    os.waitpid(ident.pid, 0)
    assert (logs / "charlie.log").read_text() == "started\n"
