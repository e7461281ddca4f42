"""What every hermesd command shares: the root, the client, names, errors and exit codes.

One convention for every command: a mistake the user can fix is :class:`UserError` (one line
``hermesd: error: …``, exit 2); a request that was understood but not achieved (a restart refused,
a state not reached in time) is :class:`Failure` (exit 1); ``main`` turns both into their exit
codes, so no command prints a traceback for anything a user can cause.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_NOT_RUNNING = 3
EXIT_NOT_ANSWERING = 4


class UserError(Exception):
    """A mistake the user can fix (bad root, unknown profile, bad option); exit 2."""


class Failure(Exception):
    """Understood but not achieved (refused, not reached in time); exit 1."""

    def __init__(self, message: str, code: int = EXIT_FAILURE) -> None:
        super().__init__(message)
        self.code = code


ROOT_HELP = "Hermes root (default: resolved from HERMES_HOME as upstream does)"


def add_root(p: argparse.ArgumentParser) -> None:
    p.add_argument("--root", help=ROOT_HELP)


def root_of(args: argparse.Namespace, *, must_exist: bool = True) -> Path:
    """The root the command acts on; a root that does not exist is an error, never an empty root."""
    raw = getattr(args, "root", None)
    if raw:
        root = Path(raw).expanduser()
    else:
        from profiles.paths import resolve_root

        root = resolve_root()
    try:
        root = root.resolve()
    except OSError as exc:
        raise UserError(f"root {root}: {exc.strerror or exc}") from None
    if must_exist and not root.is_dir():
        if root.exists():
            raise UserError(f"root {root} is not a directory (pass --root, or set HERMES_HOME)")
        setup = "hermes setup" if not raw else f"HERMES_HOME={root} hermes setup"
        raise UserError(f"root {root} does not exist: create it with '{setup}' (Hermes' setup wizard) or "
                        f"'mkdir -p {root}' (an empty default profile), then 'hermesd doctor' and 'hermesd start'; "
                        "or pass --root, or set HERMES_HOME, to use another root")
    return root


def layout_of(args: argparse.Namespace) -> Any:
    from supervisor.layout import Layout

    return Layout(root_of(args))


def client_of(args: argparse.Namespace) -> Any:
    from supervisor.control.client import Client

    return Client(layout_of(args))


def call(args: argparse.Namespace, cmd: str, *, wait: float = 30.0, **payload: Any) -> dict[str, Any]:
    """One request to the root's daemon, with every client failure turned into a user-facing error."""
    from supervisor.control.client import ControlError, DaemonNotAnswering, DaemonNotRunning

    try:
        return client_of(args).call(cmd, wait=wait, **payload)
    except DaemonNotRunning:
        raise Failure(f"hermesd is not running for {root_of(args)} (start it with 'hermesd start')",
                      EXIT_NOT_RUNNING) from None
    except DaemonNotAnswering as exc:
        raise Failure(str(exc), EXIT_NOT_ANSWERING) from None
    except ControlError as exc:
        raise Failure(str(exc)) from None


def check_names(names: list[str], known: list[str]) -> list[str]:
    """Canonical names, after checking every one of them (nothing acts before all are known); the
    wording is :func:`profiles.names.no_such_profile`'s, the one every command uses."""
    from profiles.errors import ProfileError
    from profiles.names import resolve_profile_names

    try:
        return resolve_profile_names(names, known)
    except ProfileError as exc:
        raise UserError(str(exc)) from None


def use_color(stream: Any) -> bool:
    return stream.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


def fail_line(message: str) -> None:
    """The error for the terminal; reasons from a profile's files or a gateway's state are shown escaped
    (only the line breaks of a multi-line message stay)."""
    from profiles.printable import printable_lines

    print(f"hermesd: error: {printable_lines(message)}", file=sys.stderr)
