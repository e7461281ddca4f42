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
``use --clear``, ``alias --list`` and ``alias --convert`` (formerly ``--adopt``, still accepted),
``import --no-alias`` and ``--alias-dir`` (also ``$HERMESD_WRAPPER_DIR``).

A user mistake is one line on stderr, ``hermesd: error: ...``, and exit status 2 (argument
errors of the verbs included); never a traceback. What each verb does is
:mod:`supervisor.cli.profile_verbs`; what it needs from outside the process is a
:class:`supervisor.cli.profile_verbs.Context`: how to stop a running gateway first, and the
interpreter hermesd runs the root's gateways with, in which ``create`` runs upstream's own
``create_profile`` (see :mod:`profiles.lifecycle`).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NoReturn

from supervisor.cli.common import Commands, renamed_flag

if TYPE_CHECKING:
    from supervisor.cli.profile_verbs import Context


class VerbParser(argparse.ArgumentParser):
    """A verb's parser whose argument errors are one ``hermesd: error: …`` line and exit status 2."""

    def error(self, message: str) -> NoReturn:
        verb = self.prog.split(" ", 1)[1] if " " in self.prog else self.prog
        self.exit(2, f"hermesd: error: {verb}: {message} (see '{self.prog} --help')\n")

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None,
    ) -> tuple[argparse.Namespace, list[str]]:
        # Left-over words would otherwise reach the top-level parser, which prints its usage
        # too; the verb knows them to be its own mistake.
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras


def _existing(action: argparse.Action) -> None:
    """Mark an argument that names an existing profile: shell completion offers the profiles."""
    action.complete = "profile"  # type: ignore[attr-defined]


# --------------------------------------------------------------------------- parser


def _alias_dir(parser: argparse.ArgumentParser) -> None:
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
  hermesd profile alias coder --convert          convert upstream's wrapper(s) for coder into hermesd
                                               wrappers, keeping each file's name and target
  hermesd profile alias --convert                the same for every upstream-style alias of the root
  hermesd profile alias coder --remove --name cdr

An upstream-style alias is what 'hermes profile create' writes: ~/.local/bin/NAME running
'exec hermes -p NAME "$@"'. Its 'NAME gateway restart' stops the supervised gateway and runs one
in the foreground; a hermesd wrapper sends gateway start|stop|restart|status to hermesd while it
supervises the root, and runs hermes -p NAME for everything else."""


def register(commands: Commands) -> None:
    declare(commands, None)


def declare(commands: Commands, context: Context | None) -> None:
    """``hermesd profile`` and its verbs, run with ``context``: None for the supervisor's own
    (:func:`supervisor.cli.profile_verbs.supervisor_context`), a test's own otherwise."""

    def run(verb: str) -> Callable[[argparse.Namespace], int]:
        def handler(args: argparse.Namespace) -> int:
            from supervisor.cli import profile_verbs as verbs  # run-time only (see cli/__init__)

            return verbs.guard(getattr(verbs, verb), args, context or verbs.supervisor_context())

        return handler

    profile = commands.add("profile", run("cmd_status"), "manage Hermes profiles (isolated HERMES_HOMEs)",
                           "hermesd profile list", root=False)
    profile.set_defaults(root=None)
    verbs = commands.verbs(profile, dest="profile_action", metavar="VERB", parser_class=VerbParser)

    p = verbs.add("list", run("cmd_list"), "list profiles", "hermesd profile list --json")
    _alias_dir(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")

    p = verbs.add("show", run("cmd_show"), "show one profile", "hermesd profile show coder")
    _existing(p.add_argument("profile_name", metavar="NAME"))
    _alias_dir(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")

    p = verbs.add("create", run("cmd_create"), "create a profile",
                  "hermesd profile create coder --clone --description 'writes code'")
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
    _alias_dir(p)

    p = verbs.add("delete", run("cmd_delete"), "delete a profile and its aliases",
                  "hermesd profile delete coder -y --stop")
    _existing(p.add_argument("profile_name", metavar="NAME"))
    p.add_argument("-y", "--yes", action="store_true",
                   help="do not ask for confirmation (otherwise type NAME, on a terminal or a pipe)")
    p.add_argument("--stop", action="store_true", help="stop the profile's running gateway first")
    _alias_dir(p)

    p = verbs.add("rename", run("cmd_rename"), "rename a profile (its aliases follow)",
                  "hermesd profile rename coder dev --stop")
    _existing(p.add_argument("old_name", metavar="OLD"))
    p.add_argument("new_name", metavar="NEW")
    p.add_argument("--stop", action="store_true", help="stop the profile's running gateway first")
    p.add_argument("--no-alias", action="store_true",
                   help="do not create an alias named NEW when OLD had none (upstream always tries)")
    _alias_dir(p)

    p = verbs.add("use", run("cmd_use"), "set the sticky active profile ('default' or --clear to reset)",
                  "hermesd profile use coder")
    _existing(p.add_argument("profile_name", metavar="NAME", nargs="?", default=None))
    p.add_argument("--clear", action="store_true", help="make default active again")

    p = verbs.add("describe", run("cmd_describe"), "show or set a profile's description (profile.yaml)",
                  "hermesd profile describe coder --text 'Writes and reviews code.'")
    _existing(p.add_argument("profile_name", metavar="NAME", nargs="?", default=None))
    p.add_argument("--text", default=None, help="set the description to this text")
    p.add_argument("--auto", action="store_true", help="(upstream only: asks a model; refused here)")
    p.add_argument("--all", dest="all_missing", action="store_true", help="(upstream only, with --auto)")
    p.add_argument("--overwrite", action="store_true", help="(upstream only, with --auto)")

    p = verbs.add("info", run("cmd_info"), "show a profile's distribution manifest (distribution.yaml)",
                  "hermesd profile info coder")
    _existing(p.add_argument("profile_name", metavar="NAME"))
    p.add_argument("--json", action="store_true", help="machine-readable output")

    p = verbs.add("export", run("cmd_export"), "export a profile to a .tar.gz (no credentials)",
                  "hermesd profile export coder -o coder.tar.gz")
    _existing(p.add_argument("profile_name", metavar="NAME"))
    p.add_argument("-o", "--output", default=None,
                   help="output file (default: ./NAME.tar.gz; '.tgz'/'.tar.gz' stripped, '.tar.gz' added)")

    p = verbs.add("import", run("cmd_import"), "import a profile from a .tar.gz",
                  "hermesd profile import coder.tar.gz --name coder2")
    p.add_argument("archive", metavar="ARCHIVE")
    p.add_argument("--name", dest="import_name", metavar="NAME", default=None, help="profile name")
    p.add_argument("--no-alias", action="store_true", help="do not create a wrapper alias")
    _alias_dir(p)

    p = verbs.add("alias", run("cmd_alias"), "create, list, remove or convert wrapper aliases",
                  epilog=ALIAS_EPILOG)
    _existing(p.add_argument("profile_name", metavar="NAME", nargs="?", default=None))
    p.add_argument("--name", dest="alias_name", metavar="ALIAS", default=None, help="alias name (default: NAME)")
    p.add_argument("--remove", action="store_true", help="remove the alias(es) instead")
    p.add_argument("--list", action="store_true", help="list the aliases of this root (hermesd's and upstream's)")
    p.add_argument("--convert", action="store_true",
                   help="turn upstream-style aliases (of NAME, or all) into hermesd wrappers, same name and target")
    renamed_flag(p, "--adopt", "--convert", dest="convert")  # its name until 'adopt' kept one meaning
    _alias_dir(p)
