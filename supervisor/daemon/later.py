"""Bookkeeping that waits for the spawns of the step that asked for it.

A respawn is measured from the exit to the fork, and the loop writes a good deal about an exit that
no decision reads: the events (journal, hooks, metrics) and hermesd's line in the child's log.
Within :meth:`Later.batch` such steps are held and run when the batch ends, in the order they
were asked for, so a respawn forks first and writes about the exit after (the exit's line still
comes before the new run's "started" line, which waits in the same batch).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator


class Later:
    """The held steps of the current batch (see the module docstring)."""

    def __init__(self) -> None:
        self._held: list[Callable[[], object]] | None = None

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Hold :meth:`run`'s steps until this block ends (re-entrant: the outermost block runs them)."""
        if self._held is not None:
            yield
            return
        held: list[Callable[[], object]] = []
        self._held = held
        try:
            yield
        finally:
            self._held = None
            for step in held:
                step()

    def run(self, step: Callable[[], object]) -> None:
        """Run ``step`` when the current batch ends; now, outside one."""
        if self._held is None:
            step()
        else:
            self._held.append(step)
