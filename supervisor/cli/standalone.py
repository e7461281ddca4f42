"""``hermesd standalone [PROFILE…] [--dry-run] [--undo] [--ahead]``: consent to the config.yaml lines a
per-profile fleet needs on upstream's multiplex-default releases, shown as a diff, backed up, and undoable.

On those releases (upstream main after 0.21.3) a named profile runs a gateway of its own only with
``gateway.standalone: true`` in its own config.yaml, and ``hermes update`` folds a per-profile fleet
into one process unless the root's config.yaml says ``gateway.auto_multiplex_migration: false``.
hermesd holds the named profiles until then and never edits a user's file on its own: this command
is the consent. It prints each change as a unified diff, keeps every original byte under
``<root>/.hermesd/standalone/<time>/``, writes the files (never through a link), and ``--undo`` puts the
newest record's files back byte for byte (a file edited since is left alone and named). A running
daemon sees the files change and starts the profiles it held; nothing is ever re-applied by itself.

On a release of the per-profile line (0.19.0, 0.20.1: they ignore both keys) it proposes nothing and
says why; ``--ahead`` writes them anyway, ahead of an upgrade to the multiplex-default line (which
``hermesd upgrade --yes`` can also write, after saving the files, as its first step).

Exit 0: written, undone, or nothing to do (or ``--dry-run``); 1: a file could not be changed or restored.

Its name is upstream's key. It was ``hermesd adopt`` until "adopt" kept one meaning only: the daemon
taking over the gateways a previous hermesd left running. That spelling still works, hidden, and says
the new name in one line.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from supervisor.cli.common import Commands, check_names, renamed, root_of
from supervisor.exits import Failure, UserError
from supervisor.layout import Layout

HELP = "write gateway.standalone into each named profile's config.yaml (with consent, diff, backup, undo)"
EXAMPLE = "hermesd standalone --dry-run"
OLD_NAME = "adopt"  # hidden, deprecated (see the module docstring)
DESCRIPTION = (HELP + ".\nNeeded on the multiplex-default releases (upstream main after 0.21.3): a named "
               "profile gets a gateway of its own\nonly with 'gateway.standalone: true' in its config.yaml; the "
               "root's config.yaml gets 'gateway.auto_multiplex_migration: false'\nso that 'hermes update' does "
               "not fold the fleet. Each change is shown as a diff; the originals are kept under\n"
               "<root>/.hermesd/standalone/; --undo restores the newest record byte for byte.\nExit 0 done or "
               "nothing to do, 1 a file could not be changed, 2 usage error.")


def register(commands: Commands) -> None:
    _arguments(commands.add("standalone", cmd_standalone, HELP,
                            (EXAMPLE, "hermesd standalone", "hermesd standalone --undo"), description=DESCRIPTION))
    _arguments(commands.add(OLD_NAME, cmd_adopt, HELP, description=DESCRIPTION, hidden=True))


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("profiles", nargs="*", metavar="PROFILE",
                   help="profiles to change (default: every named profile, and the root's config.yaml)")
    p.add_argument("--dry-run", action="store_true", help="show the changes, write nothing")
    p.add_argument("--undo", action="store_true", help="restore the files of the newest record")
    p.add_argument("--ahead", action="store_true",
                   help="write them although the installed release does not read them (ahead of an upgrade)")


def _not_needed(root: Path) -> str | None:
    """Why the installed release needs none of these edits (a per-profile-line release), or None: it does,
    or which release runs cannot be told (then the edits are proposed, as before)."""
    from profiles.upstream.releases import Contract  # run-time only (see cli/__init__)
    from supervisor import config as config_mod  # run-time only (see cli/__init__)
    from supervisor.hermes import requirements  # run-time only (see cli/__init__)
    from supervisor.processes import childspec  # run-time only (see cli/__init__)

    try:
        command = childspec.resolve_gateway_command(config_mod.load(Layout(root).config).command,
                                                    os.environ.get("PATH"))
    except (config_mod.ConfigError, childspec.GatewayCommandError):
        return None
    facts = requirements.interpreter_facts(command)
    contract = requirements.release_contract(facts)
    if not isinstance(contract, Contract) or contract.standalone_key:
        return None
    return (f"hermes-agent {facts.version} (the {contract.line.value} line) runs one gateway per profile without "
            "gateway.standalone or gateway.auto_multiplex_migration, and ignores both: nothing to change. To write "
            "them ahead of an upgrade to the multiplex-default line: hermesd standalone --ahead (or 'hermesd upgrade "
            "--to … --yes', which saves the files first)")


def cmd_adopt(args: argparse.Namespace) -> int:
    """The old spelling: one line naming the new one, then the same command."""
    renamed(f"hermesd {OLD_NAME}", "hermesd standalone")
    return cmd_standalone(args)


def cmd_standalone(args: argparse.Namespace) -> int:
    from profiles import standalone  # run-time only (see cli/__init__)
    from profiles.discovery import profiles_to_serve  # run-time only (see cli/__init__)
    from profiles.upstream.multiplex import IDENTITY_MARKERS  # run-time only (see cli/__init__)

    root = root_of(args)
    layout = Layout(root)
    if args.undo:
        if args.profiles or args.dry_run:
            raise UserError("--undo restores a whole record: give no PROFILE and no --dry-run")
        record = standalone.latest(*layout.standalone_dirs)
        if record is None:
            print(f"nothing to undo: no record under {layout.standalone_dir}")
            return 0
        results = standalone.undo(record)
        for r in results:
            print(f"{r.path}: {r.note}")
        print(f"record {record} marked undone")
        if any(not r.restored for r in results):
            raise Failure("some files were left alone (see above)")
        return 0
    if not args.ahead:
        why = _not_needed(root)
        if why is not None:
            print(why)
            return 0
    names = None
    if args.profiles:
        known = [n for n, _ in profiles_to_serve(True, root=root, identity=IDENTITY_MARKERS)]
        names = check_names(list(args.profiles), known)
    changes, refusals = standalone.plan(root, names)
    for c in changes:
        print(f"# {c.profile}: {c.why}")
        sys.stdout.write(c.diff())
    for refused in refusals:
        print(f"# {refused.profile}: cannot change {refused.path}: {refused.reason}", file=sys.stderr)
    if not changes:
        print("nothing to change: every profile already has what a per-profile fleet needs"
              if not refusals else "nothing written")
        return 1 if refusals else 0
    if args.dry_run:
        print(f"(dry run: {len(changes)} file(s) would change; nothing written)")
        return 1 if refusals else 0
    record = standalone.apply(changes, layout.ensure_standalone_dir())
    print(f"wrote {len(changes)} file(s); originals kept in {record} (undo: hermesd standalone --undo --root {root})")
    if refusals:
        raise Failure(f"{len(refusals)} file(s) not changed (see above)")
    return 0
