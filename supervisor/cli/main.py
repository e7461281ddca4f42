"""``hermesd``: the parser and the entry point. Thin: parse, call one command, turn errors into exit codes.

Every command lives in one module of :mod:`supervisor.cli` and is declared there by
``register(commands)`` (:class:`supervisor.cli.common.Commands`). ``hermesd status`` starts fast
because parsing a command imports only its own module (:data:`GROUPS`); the daemon, asyncio and
the other commands' code are loaded only by the commands that run them.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from supervisor import __version__
from supervisor.cli.common import Commands, HelpFormatter, fail_line, guarded
from supervisor.exits import EXIT_USAGE

EXAMPLES = """\
examples:
  hermesd run                      supervise every profile in the foreground
  hermesd start                    the same, as a background daemon
  hermesd status --json            per-profile health for scripts
  hermesd restart coder            restart one profile, touching no other
  hermesd logs coder -f            follow one profile's gateway output
"""


# Which commands each command module registers, in the order ``--help`` lists them. Parsing a
# command imports only its own module (``hermesd status`` need not build completion's tables or
# export's records); anything else (no command, ``--help``, a typo, ``completion``, which walks the
# whole tree) builds every module's. tests/cli/test_cli_groups.py holds this table to the truth.
GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("supervisor.cli.run", ("run",)),
    ("supervisor.cli.daemon", ("start", "stop", "restart")),
    ("supervisor.cli.status", ("status", "logs", "ping", "reload")),
    ("supervisor.cli.exec", ("exec",)),
    ("supervisor.cli.isolate", ("isolate-user",)),
    ("supervisor.cli.doctor", ("doctor",)),
    ("supervisor.cli.probe", ("probe",)),
    ("supervisor.cli.export", ("export", "_planned-stop")),  # _planned-stop: systemd ExecStop, Kubernetes preStop
    ("supervisor.cli.service", ("install-service",)),
    ("supervisor.cli.completion", ("completion",)),
    ("supervisor.cli.observe", ("events", "metrics")),
    ("supervisor.cli.deps", ("install-deps",)),
    ("supervisor.cli.upgrade", ("upgrade",)),
    ("supervisor.cli.standalone", ("standalone", "adopt")),  # adopt: its old name, hidden
    ("supervisor.cli.profile", ("profile",)),
)


# Old names of commands, hidden (not listed, completed or suggested); each still works and says its new one.
RENAMED = frozenset({"adopt"})


def _command_of(argv: list[str]) -> str | None:
    """The command word of ``argv``: its first word that is neither an option nor ``--root``'s value."""
    skip = False
    for a in argv:
        if skip:
            skip = False
        elif a == "--root":
            skip = True
        elif not a.startswith("-"):
            return a
    return None


def _group_of(argv: list[str]) -> str | None:
    """The one module whose commands can parse ``argv``, or None when the whole tree is needed."""
    command = _command_of(argv)
    if command is None or command == "completion" or "-h" in argv[:argv.index(command)] or "--help" in argv:
        return None
    return next((module for module, names in GROUPS if command in names), None)


def _unknown_command(argv: list[str]) -> str | None:
    """``unknown command 'stauts' (did you mean 'status'?)`` for a word no group registers; None
    otherwise. Hidden helpers (``_planned-stop``) are neither listed nor suggested."""
    command = _command_of(argv)
    known = [n for _, names in GROUPS for n in names]
    if command is None or command in known:
        return None
    import difflib  # only for a word that is no command: 3 ms every other start need not pay

    public = [n for n in known if not n.startswith("_") and n not in RENAMED]
    close = difflib.get_close_matches(command, public, n=1, cutoff=0.6)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return f"unknown command {command[:80]!r}{hint}; the commands are: {', '.join(public)}"


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The command-line parser: every command, or (given ``argv``) only the module's that parse it."""
    parser = argparse.ArgumentParser(
        prog="hermesd",
        description="Process-per-profile supervisor for Hermes Agent gateways.",
        epilog=EXAMPLES,
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"hermesd {__version__}")
    parser.add_argument("--root", dest="global_root", metavar="PATH",
                        help="Hermes root for the command (the same as the command's own --root)")
    commands = Commands(parser.add_subparsers(dest="command", metavar="COMMAND"))
    only = _group_of(argv) if argv is not None else None
    for module, _names in GROUPS:
        if only is None or module == only:
            importlib.import_module(module).register(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    unknown = _unknown_command(argv)
    if unknown is not None:
        fail_line(unknown)
        return EXIT_USAGE
    parser = build_parser(argv)
    if "_ARGCOMPLETE" in os.environ:  # a shell asking for completions (argcomplete's protocol): answer, exit
        from supervisor.cli.completion import complete  # argcomplete: only a <TAB> loads it

        complete(parser)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_USAGE
    if args.global_root is not None:
        if not hasattr(args, "root"):
            fail_line(f"{args.command} takes no --root")
            return EXIT_USAGE
        if args.root is not None and args.root != args.global_root:
            fail_line(f"two roots given: --root {args.global_root} before the command and --root {args.root} after it")
            return EXIT_USAGE
        args.root = args.global_root
    args.parser = parser
    args.argv = list(argv)  # as typed: argparse drops a "--" that exec must see
    return guarded(args.func, args)


if __name__ == "__main__":
    sys.exit(main())
