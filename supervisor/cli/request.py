"""One request to a root's daemon, as the commands that talk to it make it.

A client failure becomes the command's exit: no daemon is exit 3, a daemon that does not answer
exit 4, a refused request exit 1 (:mod:`supervisor.exits`). Apart from :mod:`supervisor.cli.common`
so that the commands that never ask the daemon (``probe``, the container health check, above all)
do not load the client and its sockets.
"""

from __future__ import annotations

import argparse
from typing import Any

from supervisor.cli.common import layout_of, root_of
from supervisor.control.client import Client, ControlError, DaemonNotAnswering, DaemonNotRunning
from supervisor.exits import EXIT_NOT_ANSWERING, EXIT_NOT_RUNNING, Failure


def client_of(args: argparse.Namespace) -> Client:
    return Client(layout_of(args))


def call(args: argparse.Namespace, cmd: str, *, wait: float = 30.0, **payload: Any) -> dict[str, Any]:
    """One request to the root's daemon, with every client failure turned into a user-facing error."""
    try:
        return client_of(args).call(cmd, wait=wait, **payload)
    except DaemonNotRunning:
        raise Failure(f"hermesd is not running for {root_of(args)} (start it with 'hermesd start')",
                      EXIT_NOT_RUNNING) from None
    except DaemonNotAnswering as exc:
        raise Failure(str(exc), EXIT_NOT_ANSWERING) from None
    except ControlError as exc:
        raise Failure(str(exc)) from None
