"""``hermesd``: the parser and the entry point. Thin: parse, call one command, turn errors into exit codes.

Imports stay lazy so that ``hermesd status`` starts fast: the daemon, asyncio and yaml are loaded
only by the commands that need them. Every command module registers its own subcommands; the
root parser is handed to the commands that need it (completion) instead of being imported back.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

EXAMPLES = """\
examples:
  hermesd run                      supervise every profile in the foreground
  hermesd start                    the same, as a background daemon
  hermesd status --json            per-profile health for scripts
  hermesd restart coder            restart one profile, touching no other
  hermesd logs coder -f            follow one profile's gateway output
"""


def build_parser() -> argparse.ArgumentParser:
    from supervisor import __version__
    from supervisor.cli import daemon
    from supervisor.cli.common import add_root

    parser = argparse.ArgumentParser(
        prog="hermesd",
        description="Process-per-profile supervisor for Hermes Agent gateways.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"hermesd {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def add(name: str, func: Any, help_: str, example: str) -> argparse.ArgumentParser:
        p = sub.add_parser(
            name, help=help_, description=help_, epilog=f"example:\n  {example}",
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        add_root(p)
        p.set_defaults(func=func)
        return p

    daemon.register(sub, add)
    from supervisor.cli import exec as exec_cli
    exec_cli.register(sub, add)
    from profiles.cli import register as register_profile
    from supervisor import completion, doctor, export, probe, service
    from supervisor.observe import cli as observe_cli

    doctor.register(sub)
    probe.register(sub)
    export.register(sub)  # also the hidden `_planned-stop` helper (systemd ExecStop, Kubernetes preStop)
    service.register(sub)
    completion.register(sub)
    observe_cli.register(sub)
    __import__("supervisor.cli.deps", fromlist=["register"]).register(sub)  # hermesd install-deps
    register_profile(sub, stop_gateway=_stop_for_profile_change)
    return parser


def _stop_for_profile_change(name: str, home: Any) -> None:
    from supervisor.stopper import stop_for_profile_change

    stop_for_profile_change(name, home)


def main(argv: list[str] | None = None) -> int:
    from supervisor.cli.common import EXIT_USAGE, Failure, UserError, fail_line

    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_USAGE
    args.parser = parser
    from profiles.errors import ProfileError
    from supervisor.layout import UnsafeFolderError

    try:
        return int(args.func(args) or 0)
    except (UserError, ProfileError) as exc:
        fail_line(str(exc))
        return EXIT_USAGE
    except UnsafeFolderError as exc:
        fail_line(str(exc))
        return EXIT_USAGE
    except Failure as exc:
        fail_line(str(exc))
        return exc.code
    except PermissionError as exc:
        where = f" {exc.filename}" if exc.filename else ""
        fail_line(f"permission denied:{where} (run as the user that owns the root)")
        return EXIT_USAGE
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
