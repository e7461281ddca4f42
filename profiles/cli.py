"""``hermesd profile ...``: the profile verbs of upstream ``hermes profile``, safe under a supervisor.

Verbs and flags match upstream where upstream has them (``create --clone | --clone-all |
--clone-from | --no-alias | --description``, ``delete -y``, ``alias --name | --remove``,
``export -o``, ``import --name``, ``use NAME`` with ``use default`` clearing), so muscle
memory carries over. Differences are additions: ``--root`` on every verb (default: the
root resolved from the environment, as upstream resolves it), ``--json`` on ``list`` and
``show``, ``delete/rename --stop`` (stop a running gateway first, through the supervisor's
injected ``stop_gateway``; without it both refuse while a gateway runs), ``use --clear``,
``alias --list``, ``import --no-alias`` and ``--alias-dir`` (also ``$HERMESD_WRAPPER_DIR``).

A user mistake is one line on stderr, ``hermesd: error: ...``, and exit status 1; never a
traceback. Handlers take the parsed ``args`` and return the exit status.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

StopGateway = Callable[[str, Path], None]


def _lazy(name: str, stop_gateway: StopGateway | None = None) -> Callable[[argparse.Namespace], int]:
    """A handler that imports ``profiles.commands`` only when the verb actually runs."""

    def run(args: argparse.Namespace) -> int:
        from profiles import commands

        handler = getattr(commands, name)
        if name in ("_cmd_delete", "_cmd_rename"):
            return commands._guard(lambda a: handler(a, stop_gateway))(args)
        return commands._guard(handler)(args)

    return run


def _verb(verbs: Any, name: str, *, help: str, example: str) -> argparse.ArgumentParser:
    return verbs.add_parser(
        name,
        help=help,
        description=help,
        epilog=f"example:\n  {example}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


# --------------------------------------------------------------------------- parser


def _common(parser: argparse.ArgumentParser, *, aliases: bool = False) -> None:
    parser.add_argument("--root", metavar="PATH", default=None, help="Hermes root (default: from HERMES_HOME)")
    if aliases:
        parser.add_argument(
            "--alias-dir",
            metavar="DIR",
            default=None,
            help="wrapper directory (default: $HERMESD_WRAPPER_DIR or ~/.local/bin)",
        )


def register(subparsers: argparse._SubParsersAction, *, stop_gateway: StopGateway | None = None) -> None:
    """Add the ``profile`` command and its verbs to ``subparsers``.

    ``stop_gateway(name, home)`` is what ``delete --stop`` and ``rename --stop`` call to stop a
    running gateway first; the supervisor provides it, this package never signals a process.
    """
    profile = subparsers.add_parser("profile", help="manage Hermes profiles (isolated HERMES_HOMEs)")
    profile.set_defaults(func=_lazy("_cmd_status"), root=None)
    verbs = profile.add_subparsers(dest="profile_action", metavar="VERB")

    p = _verb(verbs, "list", help="list profiles", example="hermesd profile list --json")
    _common(p, aliases=True)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_lazy("_cmd_list"))

    p = _verb(verbs, "show", help="show one profile", example="hermesd profile show coder")
    p.add_argument("profile_name", metavar="NAME")
    _common(p, aliases=True)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_lazy("_cmd_show"))

    p = _verb(
        verbs,
        "create",
        help="create a profile",
        example="hermesd profile create coder --clone --description 'writes code'",
    )
    p.add_argument("profile_name", metavar="NAME")
    p.add_argument("--clone", action="store_true", help="copy config.yaml, .env, SOUL.md, skills and memories")
    p.add_argument("--clone-all", action="store_true", help="full copy, excluding history and runtime files")
    p.add_argument("--clone-from", metavar="SOURCE", default=None, help="source profile (default: the active one)")
    p.add_argument("--no-alias", action="store_true", help="do not create a wrapper alias")
    p.add_argument("--description", default=None, help="one or two sentences about the profile")
    _common(p, aliases=True)
    p.set_defaults(func=_lazy("_cmd_create"))

    p = _verb(verbs, "delete", help="delete a profile", example="hermesd profile delete coder -y --stop")
    p.add_argument("profile_name", metavar="NAME")
    p.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    p.add_argument("--stop", action="store_true", help="stop the profile's running gateway first")
    _common(p, aliases=True)
    p.set_defaults(func=_lazy("_cmd_delete", stop_gateway))

    p = _verb(verbs, "rename", help="rename a profile", example="hermesd profile rename coder dev --stop")
    p.add_argument("old_name", metavar="OLD")
    p.add_argument("new_name", metavar="NEW")
    p.add_argument("--stop", action="store_true", help="stop the profile's running gateway first")
    _common(p, aliases=True)
    p.set_defaults(func=_lazy("_cmd_rename", stop_gateway))

    p = _verb(
        verbs,
        "use",
        help="set the sticky active profile ('default' or --clear to reset)",
        example="hermesd profile use coder",
    )
    p.add_argument("profile_name", metavar="NAME", nargs="?", default=None)
    p.add_argument("--clear", action="store_true", help="make default active again")
    _common(p)
    p.set_defaults(func=_lazy("_cmd_use"))

    p = _verb(
        verbs,
        "export",
        help="export a profile to a .tar.gz (no credentials)",
        example="hermesd profile export coder -o coder.tar.gz",
    )
    p.add_argument("profile_name", metavar="NAME")
    p.add_argument("-o", "--output", default=None, help="output file (default: ./NAME.tar.gz)")
    _common(p)
    p.set_defaults(func=_lazy("_cmd_export"))

    p = _verb(
        verbs,
        "import",
        help="import a profile from a .tar.gz",
        example="hermesd profile import coder.tar.gz --name coder2",
    )
    p.add_argument("archive", metavar="ARCHIVE")
    p.add_argument("--name", dest="import_name", metavar="NAME", default=None, help="profile name")
    p.add_argument("--no-alias", action="store_true", help="do not create a wrapper alias")
    _common(p, aliases=True)
    p.set_defaults(func=_lazy("_cmd_import"))

    p = _verb(
        verbs, "alias", help="create, list or remove wrapper aliases", example="hermesd profile alias coder --name cdr"
    )
    p.add_argument("profile_name", metavar="NAME", nargs="?", default=None)
    p.add_argument("--name", dest="alias_name", metavar="ALIAS", default=None, help="alias name (default: NAME)")
    p.add_argument("--remove", action="store_true", help="remove the alias instead")
    p.add_argument("--list", action="store_true", help="list hermesd's aliases for this root")
    _common(p, aliases=True)
    p.set_defaults(func=_lazy("_cmd_alias"))
