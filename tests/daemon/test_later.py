"""The daemon's held bookkeeping: steps wait for the outermost batch, keep their order, and still run
when the batch fails."""

from __future__ import annotations

import pytest

from supervisor.daemon.later import Later


def test_steps_wait_for_the_outermost_batch_in_order() -> None:
    later, done = Later(), []
    later.run(lambda: done.append("outside"))
    assert done == ["outside"]
    with later.batch():
        later.run(lambda: done.append("exit note"))
        with later.batch():  # a spawn's own step, inside the exit's batch
            done.append("fork")
            later.run(lambda: done.append("started note"))
        assert done == ["outside", "fork"]
    assert done == ["outside", "fork", "exit note", "started note"]


def test_a_failing_batch_still_runs_what_it_held() -> None:
    later, done = Later(), []
    with pytest.raises(RuntimeError), later.batch():
        later.run(lambda: done.append("event"))
        raise RuntimeError("spawn failed")
    assert done == ["event"]
    later.run(lambda: done.append("after"))  # no batch left open
    assert done == ["event", "after"]
