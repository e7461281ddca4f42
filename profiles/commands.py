"""The ``hermesd profile`` verbs: what each one does (the parser lives in ``profiles.cli``).

Imported only when a profile verb runs, so other hermesd commands never pay for archives,
lifecycle and wrappers.
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
from profiles.progress import Progress
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
    shown = Progress("exporting entries")
    try:
        result = export_profile(args.profile_name, args.output, _root(args), progress=shown.update)
    finally:
        shown.done()
    print(f"Exported {parse_profile_name(args.profile_name)!r} to {result.path} ({result.members} entries)")
    for skipped in result.skipped:
        _warn(f"not exported: {skipped}")
    return 0


def _cmd_import(args: argparse.Namespace) -> int:
    root = _root(args)
    shown = Progress("importing entries")
    try:
        result = import_profile(args.archive, args.import_name, root, progress=shown.update)
    finally:
        shown.done()
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
