"""What every hermesd command shares: how a command is declared, the root, profile names, errors.

Every command is declared the same way: its module in :mod:`supervisor.cli` has
``register(commands)``, which calls :meth:`Commands.add` once per command with its name, handler,
help and examples. ``add`` gives every command the same shape (the help as the description unless a
longer one is given, the examples as the epilog, ``--root`` unless the command takes none), so
``--root`` is declared here and nowhere else. The handler takes the parsed arguments and returns the
exit code; a mistake the user can fix raises :class:`supervisor.exits.UserError`, a request not
achieved raises :class:`supervisor.exits.Failure`, and ``main`` turns both into exit codes.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

from profiles.errors import ProfileError
from profiles.names import resolve_profile_names
from profiles.paths import resolve_root
from profiles.printable import printable, printable_lines
from supervisor.exits import EXIT_USAGE, Failure, UserError
from supervisor.layout import Layout, UnsafeFolderError

Handler = Callable[[argparse.Namespace], int]
SubParsers = argparse._SubParsersAction  # argparse's own type for what add_subparsers returns


def renamed(old: str, new: str) -> None:
    """The one line an old spelling prints on stderr: it still works, under its new name."""
    print(f"hermesd: '{old}' is now '{new}' (the old name still works, for now)", file=sys.stderr)


class _RenamedFlag(argparse.Action):
    """An old flag, hidden from help and completion: sets the new flag's ``dest`` and says its new name."""

    def __init__(self, option_strings: Sequence[str], dest: str, new: str = "", **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help=argparse.SUPPRESS, **kwargs)
        self.new = new

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: str | None = None) -> None:
        renamed(str(option_string), self.new)
        setattr(namespace, self.dest, True)


def renamed_flag(parser: argparse.ArgumentParser, old: str, new: str, dest: str) -> None:
    """Accept ``old`` as a hidden, deprecated spelling of the store-true flag ``new`` (whose ``dest`` it sets)."""
    parser.add_argument(old, dest=dest, action=_RenamedFlag, new=new)

ROOT_HELP = "Hermes root (default: resolved from HERMES_HOME as upstream does)"


def _terminal_columns() -> int:
    """``shutil.get_terminal_size().columns``, looked up the same way without importing ``shutil``."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
        columns = columns or 80
    return columns


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """argparse's raw-description formatter, the same width, without ``import shutil``.

    argparse makes a formatter in every ``add_argument`` (to check the metavar), and the stock one
    imports ``shutil`` for the terminal's width, which brings ``bz2``, ``lzma`` and ``zlib``: ~3 ms
    of every command, and ~0.5 MiB the daemon (the process that parsed ``hermesd run``) kept.
    """

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24,
                 width: int | None = None) -> None:
        super().__init__(prog, indent_increment, max_help_position,
                         _terminal_columns() - 2 if width is None else width)


class Commands:
    """Where a command module declares its commands (and a command its verbs), one :meth:`add` each."""

    def __init__(self, sub: SubParsers) -> None:
        self._sub = sub

    def add(self, name: str, func: Handler, help: str, examples: str | Sequence[str] = (), *,
            description: str | None = None, epilog: str | None = None, root: bool = True,
            hidden: bool = False) -> argparse.ArgumentParser:
        """A parser for command ``name`` run by ``func``; ``hidden`` keeps it out of the command list
        (an internal helper), ``root=False`` for a command that takes no ``--root``."""
        shown = [examples] if isinstance(examples, str) else list(examples)
        tail = [epilog] if epilog else []
        if shown:
            tail.append(("example:\n  " if len(shown) == 1 else "examples:\n  ") + "\n  ".join(shown))
        extra: dict[str, Any] = {} if hidden else {"help": help}
        p = self._sub.add_parser(name, description=description or help, epilog="\n\n".join(tail) or None,
                                 formatter_class=HelpFormatter, **extra)
        if root:
            p.add_argument("--root", help=ROOT_HELP)
        p.set_defaults(func=func)
        return p

    def verbs(self, parser: argparse.ArgumentParser, *, dest: str, metavar: str,
              parser_class: type[argparse.ArgumentParser] = argparse.ArgumentParser) -> Commands:
        """The verbs of a command (``hermesd profile list``), declared with :meth:`add` like commands."""
        return Commands(parser.add_subparsers(dest=dest, metavar=metavar, parser_class=parser_class))


def root_of(args: argparse.Namespace, *, must_exist: bool = True) -> Path:
    """The root the command acts on; a root that does not exist is an error, never an empty root."""
    raw = getattr(args, "root", None)
    root = Path(raw).expanduser() if raw else resolve_root()
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


def layout_of(args: argparse.Namespace) -> Layout:
    return Layout(root_of(args))


def check_names(names: list[str], known: list[str]) -> list[str]:
    """Canonical names, after checking every one of them (nothing acts before all are known); the
    wording is :func:`profiles.names.no_such_profile`'s, the one every command uses."""
    try:
        return resolve_profile_names(names, known)
    except ProfileError as exc:
        raise UserError(str(exc)) from None


def use_color(stream: TextIO) -> bool:
    return stream.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


def fail_line(message: str) -> None:
    """The error for the terminal; reasons from a profile's files or a gateway's state are shown escaped
    (only the line breaks of a multi-line message stay)."""
    print(f"hermesd: error: {printable_lines(message)}", file=sys.stderr)


def guarded(func: Handler, args: argparse.Namespace) -> int:
    """Run a command's handler: its errors become one line on stderr and their exit codes, never a traceback."""
    try:
        return int(func(args) or 0)
    except (UserError, ProfileError, UnsafeFolderError) as exc:
        fail_line(str(exc))
        return EXIT_USAGE
    except Failure as exc:
        fail_line(str(exc))
        return exc.code
    except PermissionError as exc:
        where = f" {printable(str(exc.filename))}" if exc.filename else ""  # a line break in a name too
        fail_line(f"permission denied:{where} (run as the user that owns the root)")
        return EXIT_USAGE
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        return 130
