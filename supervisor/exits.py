"""How a hermesd command ends: its exit codes and the two errors that carry them.

One convention for every command: a mistake the user can fix is :class:`UserError` (one line
``hermesd: error: …``, exit 2); a request that was understood but not achieved (a restart refused,
a state not reached in time) is :class:`Failure` (exit 1, or the code it carries). The entry point
(:func:`supervisor.cli.main.main`) turns both into their exit codes, so no command prints a
traceback for anything a user can cause. They live this low so that the operations a command runs
(export, install-service, upgrade) can raise them without importing the command line.
"""

from __future__ import annotations

EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_NOT_RUNNING = 3
EXIT_NOT_ANSWERING = 4


class UserError(Exception):
    """A mistake the user can fix (bad root, unknown profile, bad option); exit 2."""


class Failure(Exception):
    """Understood but not achieved (refused, not reached in time); exit 1 unless ``code`` says otherwise."""

    def __init__(self, message: str, code: int = EXIT_FAILURE) -> None:
        super().__init__(message)
        self.code = code
