"""``hermesd profile ...``: the profile verbs of upstream ``hermes profile``, safe under a supervisor.

Verbs and flags match upstream where upstream has them (``create --clone | --clone-all |
--clone-from | --no-alias | --no-skills | --description``, ``delete -y``, ``describe NAME
[--text]``, ``info NAME``, ``alias --name | --remove``, ``export -o``, ``import --name``, ``use
NAME`` with ``use default`` clearing), so muscle memory carries over, and so do upstream's
meanings: ``--clone-all`` wins over ``--clone``; ``use`` needs a name; ``export -o c.tgz`` writes
``c.tar.gz``; a confirmation piped to ``delete`` is read. Additions: ``--root`` on every verb
(default: the root resolved from the environment, as upstream resolves it; it must exist),
``--json`` on ``list``, ``show`` and ``info``, ``delete/rename --stop`` (through the supervisor's
injected ``stop_gateway``; without it both refuse while a gateway runs), ``rename --no-alias``,
``use --clear``, ``alias --list`` and ``alias --adopt``, ``import --no-alias`` and
``--alias-dir`` (also ``$HERMESD_WRAPPER_DIR``).

A user mistake is one line on stderr, ``hermesd: error: ...``, and exit status 2 (argument
errors of the verbs included); never a traceback. ``register`` is the supervisor's entry point:

    register(subparsers, stop_gateway=fn(name, home), upstream_python=fn(root) -> [argv prefix])

``upstream_python(root)`` is the interpreter hermesd runs that root's gateways with; ``create``
runs upstream's own ``create_profile`` there (see :mod:`profiles.lifecycle`). Without it,
``create`` refuses.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

StopGateway = Callable[[str, Path], None]
UpstreamPython = Callable[[Path], Sequence[str]]


class VerbParser(argparse.ArgumentParser):
    """A verb's parser whose argument errors are one ``hermesd: error: …`` line and exit status 2."""

    def error(self, message: str) -> NoReturn:
        verb = self.prog.split(" ", 1)[1] if " " in self.prog else self.prog
        self.exit(2, f"hermesd: error: {verb}: {message} (see '{self.prog} --help')\n")

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        # Left-over words would otherwise reach the top-level parser, which prints its usage
        # too; the verb knows them to be its own mistake.
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras


def _lazy(name: str, ctx: Any) -> Callable[[argparse.Namespace], int]:
    """A handler that imports ``profiles.commands`` only when the verb actually runs."""

    def run(args: argparse.Namespace) -> int:
        from profiles import commands

        context = commands.Context(**ctx)
        return commands.guard(getattr(commands, name), context)(args)

    return run


def _existing(action: argparse.Action) -> None:
    """Mark an argument that names an existing profile: shell completion offers the profiles."""
    action.complete = "profile"  # type: ignore[attr-defined]


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


ALIAS_EPILOG = """\
examples:
  hermesd profile alias coder                  write the wrapper 'coder' (runs hermes -p coder)
  hermesd profile alias coder --name cdr       a second name for it
  hermesd profile alias --list                 every alias of this root, hermesd's and upstream's
  hermesd profile alias coder --adopt          convert upstream's wrapper(s) for coder into hermesd
                                               wrappers, keeping each file's name and target
  hermesd profile alias --adopt                the same for every upstream-style alias of the root
  hermesd profile alias coder --remove --name cdr

An upstream-style alias is what 'hermes profile create' writes: ~/.local/bin/NAME running
'exec hermes -p NAME "$@"'. Its 'NAME gateway restart' stops the supervised gateway and runs one
in the foreground; a hermesd wrapper sends gateway start|stop|restart|status to hermesd while it
supervises the root, and runs hermes -p NAME for everything else."""


def register(
    subparsers: argparse._SubParsersAction,
    *,
    stop_gateway: StopGateway | None = None,
    upstream_python: UpstreamPython | None = None,
) -> None:
    """Add the ``profile`` command and its verbs to ``subparsers``.

    ``stop_gateway(name, home)`` is what ``delete --stop`` and ``rename --stop`` call to stop a
    running gateway first; the supervisor provides it, this package never signals a process.
    ``upstream_python(root)`` returns the interpreter (argv prefix) that runs ``root``'s gateways.
    """
    ctx = {"stop_gateway": stop_gateway, "upstream_python": upstream_python}
    profile = subparsers.add_parser("profile", help="manage Hermes profiles (isolated HERMES_HOMEs)")
    profile.set_defaults(func=_lazy("_cmd_status", ctx), root=None)
    verbs = profile.add_subparsers(dest="profile_action", metavar="VERB", parser_class=VerbParser)

    p = _verb(verbs, "list", help="list profiles", example="hermesd profile list --json")
    _common(p, aliases=True)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_lazy("_cmd_list", ctx))

    p = _verb(verbs, "show", help="show one profile", example="hermesd profile show coder")
    _existing(p.add_argument("profile_name", metavar="NAME"))
    _common(p, aliases=True)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_lazy("_cmd_show", ctx))

    p = _verb(
        verbs,
        "create",
        help="create a profile",
        example="hermesd profile create coder --clone --description 'writes code'",
    )
    p.add_argument("profile_name", metavar="NAME")
    p.add_argument("--clone", action="store_true",
                   help="copy config.yaml, .env, SOUL.md, skills and memories, as upstream does (no link out of it)")
    p.add_argument("--clone-all", action="store_true",
                   help="full copy, excluding history and runtime files (wins over --clone)")
    p.add_argument("--clone-from", metavar="SOURCE", default=None, help="source profile (default: the active one)")
    p.add_argument("--no-alias", action="store_true", help="do not create a wrapper alias")
    p.add_argument("--no-skills", action="store_true",
                   help="never seed bundled skills into it (writes .no-bundled-skills; not with --clone*)")
    p.add_argument("--description", default=None, help="one or two sentences about the profile")
    _common(p, aliases=True)
    p.set_defaults(func=_lazy("_cmd_create", ctx))

    p = _verb(verbs, "delete", help="delete a profile and its aliases",
              example="hermesd profile delete coder -y --stop")
    _existing(p.add_argument("profile_name", metavar="NAME"))
    p.add_argument("-y", "--yes", action="store_true",
                   help="do not ask for confirmation (otherwise type NAME, on a terminal or a pipe)")
    p.add_argument("--stop", action="store_true", help="stop the profile's running gateway first")
    _common(p, aliases=True)
    p.set_defaults(func=_lazy("_cmd_delete", ctx))

    p = _verb(verbs, "rename", help="rename a profile (its aliases follow)",
              example="hermesd profile rename coder dev --stop")
    _existing(p.add_argument("old_name", metavar="OLD"))
    p.add_argument("new_name", metavar="NEW")
    p.add_argument("--stop", action="store_true", help="stop the profile's running gateway first")
    p.add_argument("--no-alias", action="store_true",
                   help="do not create an alias named NEW when OLD had none (upstream always tries)")
    _common(p, aliases=True)
    p.set_defaults(func=_lazy("_cmd_rename", ctx))

    p = _verb(
        verbs,
        "use",
        help="set the sticky active profile ('default' or --clear to reset)",
        example="hermesd profile use coder",
    )
    _existing(p.add_argument("profile_name", metavar="NAME", nargs="?", default=None))
    p.add_argument("--clear", action="store_true", help="make default active again")
    _common(p)
    p.set_defaults(func=_lazy("_cmd_use", ctx))

    p = _verb(verbs, "describe", help="show or set a profile's description (profile.yaml)",
              example="hermesd profile describe coder --text 'Writes and reviews code.'")
    _existing(p.add_argument("profile_name", metavar="NAME", nargs="?", default=None))
    p.add_argument("--text", default=None, help="set the description to this text")
    p.add_argument("--auto", action="store_true", help="(upstream only: asks a model; refused here)")
    p.add_argument("--all", dest="all_missing", action="store_true", help="(upstream only, with --auto)")
    p.add_argument("--overwrite", action="store_true", help="(upstream only, with --auto)")
    _common(p)
    p.set_defaults(func=_lazy("_cmd_describe", ctx))

    p = _verb(verbs, "info", help="show a profile's distribution manifest (distribution.yaml)",
              example="hermesd profile info coder")
    _existing(p.add_argument("profile_name", metavar="NAME"))
    p.add_argument("--json", action="store_true", help="machine-readable output")
    _common(p)
    p.set_defaults(func=_lazy("_cmd_info", ctx))

    p = _verb(
        verbs,
        "export",
        help="export a profile to a .tar.gz (no credentials)",
        example="hermesd profile export coder -o coder.tar.gz",
    )
    _existing(p.add_argument("profile_name", metavar="NAME"))
    p.add_argument("-o", "--output", default=None,
                   help="output file (default: ./NAME.tar.gz; '.tgz'/'.tar.gz' stripped, '.tar.gz' added)")
    _common(p)
    p.set_defaults(func=_lazy("_cmd_export", ctx))

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
    p.set_defaults(func=_lazy("_cmd_import", ctx))

    p = verbs.add_parser(
        "alias",
        help="create, list, remove or adopt wrapper aliases",
        description="create, list, remove or adopt wrapper aliases",
        epilog=ALIAS_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _existing(p.add_argument("profile_name", metavar="NAME", nargs="?", default=None))
    p.add_argument("--name", dest="alias_name", metavar="ALIAS", default=None, help="alias name (default: NAME)")
    p.add_argument("--remove", action="store_true", help="remove the alias(es) instead")
    p.add_argument("--list", action="store_true", help="list the aliases of this root (hermesd's and upstream's)")
    p.add_argument("--adopt", action="store_true",
                   help="turn upstream-style aliases (of NAME, or all) into hermesd wrappers, same name and target")
    _common(p, aliases=True)
    p.set_defaults(func=_lazy("_cmd_alias", ctx))
