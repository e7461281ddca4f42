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
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from profiles.archive import export_profile, import_profile
from profiles.discovery import active_profile, clear_active_profile, existing_profile_home, set_active_profile
from profiles.errors import ProfileError
from profiles.info import ProfileSummary, list_profiles, show_profile
from profiles.lifecycle import create_profile, delete_profile, rename_profile
from profiles.names import DEFAULT_PROFILE, parse_profile_name
from profiles.paths import resolve_root
from wrappers.scripts import (
    alias_collision,
    aliases_for_profile,
    create_wrapper,
    list_wrappers,
    remove_wrapper,
    wrapper_dir,
)

StopGateway = Callable[[str, Path], None]
Handler = Callable[[argparse.Namespace], int]


def _fail(message: str) -> int:
    print(f"hermesd: error: {message}", file=sys.stderr)
    return 1


def _guard(handler: Handler) -> Handler:
    """Turn user-facing errors into one stderr line and exit status 1."""

    def run(args: argparse.Namespace) -> int:
        try:
            return handler(args)
        except ProfileError as exc:
            return _fail(str(exc))
        except OSError as exc:
            where = f": {exc.filename}" if exc.filename else ""
            return _fail(f"{exc.strerror or exc}{where}")
        except KeyboardInterrupt:
            print(file=sys.stderr)
            return 130

    run.__name__ = handler.__name__
    run.__doc__ = handler.__doc__
    return run


def _root(args: argparse.Namespace) -> Path:
    return Path(args.root) if args.root is not None else resolve_root()


def _alias_dir(args: argparse.Namespace) -> Path:
    return Path(args.alias_dir) if getattr(args, "alias_dir", None) else wrapper_dir()


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


def _on_path(folder: Path) -> bool:
    entries = os.environ.get("PATH", "").split(os.pathsep)
    return any(e and Path(e).absolute() == folder.absolute() for e in entries)


def _make_alias(name: str, root: Path, folder: Path) -> None:
    """Create the profile-named alias after create/import; a collision is only a warning."""
    problem = alias_collision(name, name, root, folder)
    if problem:
        _warn(f"alias {name!r} not created: {problem}")
        print(f"  choose another:  hermesd profile alias {name} --name ALIAS", file=sys.stderr)
        return
    path = create_wrapper(name, name, root, folder)
    print(f"Alias created: {path}")
    if not _on_path(folder):
        _warn(f"{folder} is not on your PATH")


# --------------------------------------------------------------------------- handlers


def _print_summary(s: ProfileSummary) -> None:
    print(f"Profile: {s.name}{'  (active)' if s.active else ''}")
    print(f"Path:    {s.path}")
    if s.model:
        print(f"Model:   {s.model}" + (f" ({s.provider})" if s.provider else ""))
    print(f"Gateway: {'running (pid ' + str(s.gateway_pid) + ')' if s.gateway_pid else 'stopped'}")
    print(f".env:    {'exists' if s.has_env else 'not configured'}")
    if s.description:
        print(f"About:   {'[auto] ' if s.description_auto else ''}{s.description}")
    if s.credential_kinds:
        print(f"Credentials: {', '.join(s.credential_kinds)}")
    for port in s.ports:
        print(f"Listens: {port['platform']} on {port['host'] or '*'}:{port['port']}")
    for alias in s.aliases:
        print(f"Alias:   {alias}")
    for problem in s.problems:
        print(f"Problem: {problem}")


def _cmd_list(args: argparse.Namespace) -> int:
    root = _root(args)
    summaries, unserved = list_profiles(root, wrapper_dir=_alias_dir(args))
    if args.json:
        payload: dict[str, Any] = {
            "root": str(root),
            "profiles": [s.to_json() for s in summaries],
            "unserved": [{"name": n, "path": str(p), "reason": r} for n, p, r in unserved],
        }
        print(json.dumps(payload, indent=2))
        return 0
    print(f" {'Profile':<20} {'Gateway':<10} {'Alias':<16} Description")
    for s in summaries:
        mark = "*" if s.active else " "
        gateway = "running" if s.gateway_pid else "stopped"
        alias = ",".join(s.aliases) or "-"
        about = ("! " + s.problems[0]) if s.problems else s.description
        print(f"{mark}{s.name:<20} {gateway:<10} {alias:<16} {about}")
    for name, path, reason in unserved:
        print(f" skipped: {name} ({reason}) at {path}")
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    summary = show_profile(args.profile_name, _root(args), wrapper_dir=_alias_dir(args))
    if args.json:
        print(json.dumps(summary.to_json(), indent=2))
    else:
        _print_summary(summary)
    return 0


def _cmd_create(args: argparse.Namespace) -> int:
    root = _root(args)
    if args.clone and args.clone_all:
        return _fail("--clone and --clone-all are mutually exclusive")
    result = create_profile(
        args.profile_name,
        root,
        clone=args.clone,
        clone_all=args.clone_all,
        clone_from=args.clone_from,
        description=args.description,
    )
    print(f"Profile {result.name!r} created at {result.path}")
    if result.source is not None:
        print(f"{'Full copy' if result.mode == 'clone-all' else 'Cloned config'} from {result.source!r}.")
    for warning in result.warnings:
        _warn(warning)
    if not args.no_alias:
        _make_alias(result.name, root, _alias_dir(args))
    return 0


def _confirm(name: str) -> bool:
    if not sys.stdin or not sys.stdin.isatty():
        raise ProfileError(f"refusing to delete {name!r} without -y (no terminal to confirm on)")
    answer = input(f"Type {name!r} to confirm deletion: ").strip()
    return answer == name


def _stopper(args: argparse.Namespace, stop_gateway: StopGateway | None) -> StopGateway | None:
    if not args.stop:
        return None
    if stop_gateway is None:
        raise ProfileError("--stop is not available here: this command has no way to stop a gateway")
    return stop_gateway


def _cmd_delete(args: argparse.Namespace, stop_gateway: StopGateway | None) -> int:
    root = _root(args)
    canon = parse_profile_name(args.profile_name)
    home = existing_profile_home(canon, root)
    if not args.yes:
        print(f"This permanently deletes profile {canon!r} at {home} (config, keys, memories, sessions).")
        if not _confirm(canon):
            print("Cancelled.")
            return 1
    result = delete_profile(canon, root, stop_gateway=_stopper(args, stop_gateway), wrapper_dir=_alias_dir(args))
    print(f"Profile {canon!r} deleted.")
    for alias in result.aliases_removed:
        print(f"Alias removed: {alias}")
    if result.active_changed:
        print("Active profile reset to default.")
    for warning in result.warnings:
        _warn(warning)
    return 0


def _cmd_rename(args: argparse.Namespace, stop_gateway: StopGateway | None) -> int:
    root = _root(args)
    result = rename_profile(
        args.old_name, args.new_name, root, stop_gateway=_stopper(args, stop_gateway), wrapper_dir=_alias_dir(args)
    )
    print(f"Profile renamed to {result.name!r} at {result.path}")
    for alias in result.aliases_created:
        print(f"Alias updated: {alias}")
    if result.active_changed:
        print(f"Active profile updated: {result.name}")
    for warning in result.warnings:
        _warn(warning)
    return 0


def _cmd_use(args: argparse.Namespace) -> int:
    root = _root(args)
    if args.clear:
        clear_active_profile(root)
        print("Switched to: default")
    elif args.profile_name is None:
        print(f"Active profile: {active_profile(root)}")
    else:
        print(f"Switched to: {set_active_profile(args.profile_name, root)}")
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    result = export_profile(args.profile_name, args.output, _root(args))
    print(f"Exported {parse_profile_name(args.profile_name)!r} to {result.path} ({result.members} entries)")
    for skipped in result.skipped:
        _warn(f"not exported: {skipped}")
    return 0


def _cmd_import(args: argparse.Namespace) -> int:
    root = _root(args)
    result = import_profile(args.archive, args.import_name, root)
    print(f"Imported profile {result.name!r} at {result.path}")
    if not args.no_alias:
        _make_alias(result.name, root, _alias_dir(args))
    return 0


def _cmd_alias(args: argparse.Namespace) -> int:
    root = _root(args)
    folder = _alias_dir(args)
    if args.list:
        shown = list_wrappers(folder, root)
        if args.profile_name is not None:
            shown = [w for w in shown if w.profile == parse_profile_name(args.profile_name)]
        for w in shown:
            print(f"{w.alias} -> {w.profile}  ({w.path})")
        return 0
    if args.profile_name is None:
        return _fail("a profile name is required (or use --list)")
    canon = parse_profile_name(args.profile_name)
    existing_profile_home(canon, root)
    if args.remove:
        names = [args.alias_name] if args.alias_name else [w.alias for w in aliases_for_profile(canon, root, folder)]
        removed = [n for n in names if remove_wrapper(n, folder, root) is not None]
        if not removed:
            print(f"No hermesd alias for {canon!r} found to remove.")
        for name in removed:
            print(f"Removed alias {name!r}")
        return 0
    path = create_wrapper(args.alias_name or canon, canon, root, folder)
    print(f"Alias created: {path}")
    if not _on_path(folder):
        _warn(f"{folder} is not on your PATH")
    return 0


def _cmd_status(args: argparse.Namespace) -> int:
    root = _root(args)
    name = active_profile(root)
    print(f"Active profile: {name}")
    print(f"Path:           {root if name == DEFAULT_PROFILE else root / 'profiles' / name}")
    return 0


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
    profile.set_defaults(func=_guard(_cmd_status), root=None)
    verbs = profile.add_subparsers(dest="profile_action", metavar="VERB")

    p = verbs.add_parser("list", help="list profiles")
    _common(p, aliases=True)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_guard(_cmd_list))

    p = verbs.add_parser("show", help="show one profile")
    p.add_argument("profile_name", metavar="NAME")
    _common(p, aliases=True)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_guard(_cmd_show))

    p = verbs.add_parser("create", help="create a profile")
    p.add_argument("profile_name", metavar="NAME")
    p.add_argument("--clone", action="store_true", help="copy config.yaml, .env, SOUL.md, skills and memories")
    p.add_argument("--clone-all", action="store_true", help="full copy, excluding history and runtime files")
    p.add_argument("--clone-from", metavar="SOURCE", default=None, help="source profile (default: the active one)")
    p.add_argument("--no-alias", action="store_true", help="do not create a wrapper alias")
    p.add_argument("--description", default=None, help="one or two sentences about the profile")
    _common(p, aliases=True)
    p.set_defaults(func=_guard(_cmd_create))

    p = verbs.add_parser("delete", help="delete a profile")
    p.add_argument("profile_name", metavar="NAME")
    p.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    p.add_argument("--stop", action="store_true", help="stop the profile's running gateway first")
    _common(p, aliases=True)
    p.set_defaults(func=_guard(lambda a: _cmd_delete(a, stop_gateway)))

    p = verbs.add_parser("rename", help="rename a profile")
    p.add_argument("old_name", metavar="OLD")
    p.add_argument("new_name", metavar="NEW")
    p.add_argument("--stop", action="store_true", help="stop the profile's running gateway first")
    _common(p, aliases=True)
    p.set_defaults(func=_guard(lambda a: _cmd_rename(a, stop_gateway)))

    p = verbs.add_parser("use", help="set the sticky active profile ('default' or --clear to reset)")
    p.add_argument("profile_name", metavar="NAME", nargs="?", default=None)
    p.add_argument("--clear", action="store_true", help="make default active again")
    _common(p)
    p.set_defaults(func=_guard(_cmd_use))

    p = verbs.add_parser("export", help="export a profile to a .tar.gz (no credentials)")
    p.add_argument("profile_name", metavar="NAME")
    p.add_argument("-o", "--output", default=None, help="output file (default: ./NAME.tar.gz)")
    _common(p)
    p.set_defaults(func=_guard(_cmd_export))

    p = verbs.add_parser("import", help="import a profile from a .tar.gz")
    p.add_argument("archive", metavar="ARCHIVE")
    p.add_argument("--name", dest="import_name", metavar="NAME", default=None, help="profile name")
    p.add_argument("--no-alias", action="store_true", help="do not create a wrapper alias")
    _common(p, aliases=True)
    p.set_defaults(func=_guard(_cmd_import))

    p = verbs.add_parser("alias", help="create, list or remove wrapper aliases")
    p.add_argument("profile_name", metavar="NAME", nargs="?", default=None)
    p.add_argument("--name", dest="alias_name", metavar="ALIAS", default=None, help="alias name (default: NAME)")
    p.add_argument("--remove", action="store_true", help="remove the alias instead")
    p.add_argument("--list", action="store_true", help="list hermesd's aliases for this root")
    _common(p, aliases=True)
    p.set_defaults(func=_guard(_cmd_alias))
