"""The ``hermesd profile`` verbs: what each one does (the parser lives in :mod:`supervisor.cli.profile`).

Imported only when a profile verb runs, so other hermesd commands never pay for archives,
lifecycle and wrappers. Each verb reads its arguments, calls plain functions of :mod:`profiles`
and :mod:`wrappers` (which raise :class:`profiles.errors.ProfileError`), and prints. The
conventions are every command's (:mod:`supervisor.exits`): a mistake the user can fix — a bad or
unknown name, a root that does not exist, a refused archive, conflicting flags — is one line
``hermesd: error: …`` on stderr and exit status 2; a request understood but not carried out (a
deletion not confirmed) is exit status 1; never a traceback. Every verb checks every name it was
given (and that the root exists) before it changes anything.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from profiles.archive import export_profile, import_profile
from profiles.discovery import (
    CUSTOM_PROFILE,
    active_profile,
    clear_active_profile,
    existing_profile_home,
    profile_names,
    set_active_profile,
)
from profiles.errors import ProfileError
from profiles.info import ProfileSummary, list_profiles, read_distribution, show_profile
from profiles.lifecycle import StopGateway, create_profile, refuse_running
from profiles.meta import read_profile_meta, write_profile_meta
from profiles.names import DEFAULT_PROFILE, parse_profile_name
from profiles.paths import existing_root, hermes_home
from profiles.printable import printable
from profiles.progress import Progress
from supervisor.cli.common import guarded
from supervisor.exits import EXIT_FAILURE, Failure, UserError
from supervisor.ops.stopper import stop_for_profile_change
from wrappers.follow import delete_profile, name_aliases, rename_profile
from wrappers.scripts import (
    KIND_UPSTREAM,
    WrapperInfo,
    alias_collision,
    aliases_for_profile,
    all_wrappers,
    convert_wrapper,
    create_wrapper,
    remove_wrapper,
    upstream_style_wrappers,
    wrapper_dir,
)

EXIT_OK = 0


@dataclass(frozen=True)
class Context:
    """How to stop a gateway and which interpreter runs a root's gateways: hermesd's own
    (:func:`supervisor_context`), a test's, or None, which makes a verb refuse rather than guess."""

    stop_gateway: StopGateway | None = None
    upstream_python: Callable[[Path], Sequence[str]] | None = None


Handler = Callable[[argparse.Namespace, Context], int]


def supervisor_context() -> Context:
    """A stop through the daemon (:func:`supervisor.ops.stopper.stop_for_profile_change`), and upstream's
    interpreter."""
    return Context(stop_gateway=stop_for_profile_change, upstream_python=_upstream_python)


def _upstream_python(root: Path) -> list[str]:
    """The interpreter (argv prefix) that runs ``root``'s gateways, for upstream's profile code."""
    from supervisor.config import ConfigError  # only create runs hermes-agent's code
    from supervisor.hermes.release import HermesVersionError, gateway_python  # only create runs hermes-agent's code
    from supervisor.processes.childspec import GatewayCommandError  # only create runs hermes-agent's code

    try:
        return gateway_python(root, os.environ)
    except (ConfigError, GatewayCommandError, HermesVersionError) as exc:
        raise UserError(f"cannot run hermes-agent's profile code: {exc}") from None


def guard(handler: Handler, args: argparse.Namespace, ctx: Context) -> int:
    """Run ``handler`` as every command runs (:func:`supervisor.cli.common.guarded`); a profile's error
    may quote its files (an archive's member names): one line, every control escaped. An OS failure: 1."""

    def run(args: argparse.Namespace) -> int:
        try:
            return handler(args, ctx)
        except ProfileError as exc:
            raise UserError(printable(str(exc))) from None
        except PermissionError:
            raise
        except OSError as exc:
            where = f": {exc.filename}" if exc.filename else ""
            raise Failure(printable(f"{exc.strerror or exc}{where}")) from None
        except KeyboardInterrupt:
            print(file=sys.stderr)
            raise

    return guarded(run, args)


def _root(args: argparse.Namespace) -> Path:
    return existing_root(getattr(args, "root", None))


def _alias_dir(args: argparse.Namespace) -> Path:
    return Path(args.alias_dir) if getattr(args, "alias_dir", None) else wrapper_dir()


def _warn(message: str) -> None:
    print(f"warning: {printable(message)}", file=sys.stderr)


def _create_alias(alias: str, profile: str, root: Path, folder: Path) -> None:
    print(f"Alias created: {create_wrapper(alias, profile, root, folder)}")
    entries = os.environ.get("PATH", "").split(os.pathsep)
    if not any(e and Path(e).absolute() == folder.absolute() for e in entries):
        _warn(f"{folder} is not on your PATH")


def _make_alias(name: str, root: Path, folder: Path) -> None:
    """Create the profile-named alias after create/import; a collision is only a warning (as upstream)."""
    problem = alias_collision(name, name, root, folder)
    if problem:
        _warn(f"alias {name!r} not created: {problem}")
        print(f"  choose another:  hermesd profile alias {name} --name ALIAS", file=sys.stderr)
        return
    _create_alias(name, name, root, folder)


def _alias_text(alias: str, upstream: bool) -> str:
    return f"{alias} (upstream)" if upstream else alias


UPSTREAM_NOTE = (
    "(upstream): an alias written by 'hermes profile'; its 'gateway' commands bypass hermesd. "
    "Convert it: hermesd profile alias --convert"
)


# --------------------------------------------------------------------------- read-only verbs


def _print_summary(s: ProfileSummary) -> None:
    """What ``profile show`` prints. Model, description, listeners and problems come from the
    profile's files: shown escaped (:func:`profiles.printable.printable`), never as terminal input."""
    print(f"Profile: {s.name}{'  (active)' if s.active else ''}")
    print(f"Path:    {printable(s.path)}")
    if s.model:
        print(f"Model:   {printable(s.model)}" + (f" ({printable(s.provider)})" if s.provider else ""))
    print(f"Gateway: {'running (pid ' + str(s.gateway_pid) + ')' if s.gateway_pid else 'stopped'}")
    print(f".env:    {'exists' if s.has_env else 'not configured'}")
    if s.description:
        print(f"About:   {'[auto] ' if s.description_auto else ''}{printable(s.description)}")
    if s.credential_kinds:
        print(f"Credentials: {printable(', '.join(s.credential_kinds))}")
    for port in s.ports:
        print(f"Listens: {printable(port['platform'])} on {printable(port['host'] or '*')}:{printable(port['port'])}")
    for alias in s.aliases:
        if alias in s.upstream_aliases:
            print(f"Alias:   {printable(alias)}  (upstream's wrapper: '{printable(alias)} gateway ...' bypasses "
                  f"hermesd; convert it with: hermesd profile alias {s.name} --convert --name {printable(alias)})")
        else:
            print(f"Alias:   {printable(alias)}")
    for problem in s.problems:
        print(f"Problem: {printable(problem)}")


def cmd_status(args: argparse.Namespace, ctx: Context) -> int:
    root = _root(args)
    name = active_profile(root)
    path = root if name == DEFAULT_PROFILE else root / "profiles" / name
    if name == CUSTOM_PROFILE and not path.is_dir():
        path = hermes_home()  # upstream's "custom": HERMES_HOME is neither the root nor one of its profiles
    print(f"Active profile: {name}")
    print(f"Path:           {path}")
    return EXIT_OK


def cmd_list(args: argparse.Namespace, ctx: Context) -> int:
    root = _root(args)
    summaries, unserved = list_profiles(root)
    name_aliases(summaries, root, _alias_dir(args))
    if args.json:
        payload: dict[str, Any] = {
            "root": str(root),
            "profiles": [s.to_json() for s in summaries],
            "unserved": [{"name": n, "path": str(p), "reason": r} for n, p, r in unserved],
        }
        print(json.dumps(payload, indent=2))
        return EXIT_OK
    print(f" {'Profile':<20} {'Gateway':<10} {'Alias':<16} Description")
    for s in summaries:
        mark = "*" if s.active else " "
        gateway = "running" if s.gateway_pid else "stopped"
        alias = ",".join(_alias_text(a, a in s.upstream_aliases) for a in s.aliases) or "-"
        about = ("! " + s.problems[0]) if s.problems else s.description
        print(f"{mark}{s.name:<20} {gateway:<10} {printable(alias):<16} {printable(about)}")
    for name, path, reason in unserved:
        print(f" skipped: {name!r} ({printable(reason)}) at {printable(path)}")
    if any(s.upstream_aliases for s in summaries):
        print(UPSTREAM_NOTE)
    return EXIT_OK


def cmd_show(args: argparse.Namespace, ctx: Context) -> int:
    root = _root(args)
    summary = show_profile(args.profile_name, root)
    name_aliases([summary], root, _alias_dir(args))
    if args.json:
        print(json.dumps(summary.to_json(), indent=2))
    else:
        _print_summary(summary)
    return EXIT_OK


def cmd_describe(args: argparse.Namespace, ctx: Context) -> int:
    if args.auto or args.all_missing or args.overwrite:
        raise UserError(
            "describe --auto/--all/--overwrite ask a model to write the description; hermesd runs no model: "
            "use 'hermes profile describe NAME --auto', or set it here with --text"
        )
    if args.profile_name is None:
        raise UserError("profile describe needs NAME (see 'hermesd profile describe --help')")
    root = _root(args)
    canon = parse_profile_name(args.profile_name)
    home = existing_profile_home(args.profile_name, root)
    if args.text is not None:
        write_profile_meta(home, description=args.text, description_auto=False)
        print(f"Description updated for {canon!r}.")
        return EXIT_OK
    meta = read_profile_meta(home)
    if not meta["description"]:
        print(f"(no description set for {canon!r})")
    else:
        print(f"{'[auto] ' if meta['description_auto'] else ''}{printable(meta['description'])}")
    return EXIT_OK


def cmd_info(args: argparse.Namespace, ctx: Context) -> int:
    root = _root(args)
    canon = parse_profile_name(args.profile_name)
    home = existing_profile_home(args.profile_name, root)
    data = read_distribution(home)
    if args.json:
        print(json.dumps({"profile": canon, "distribution": data}, indent=2))
        return EXIT_OK
    if not data:
        print(f"Profile {canon!r} is not a distribution (no distribution.yaml).")
        return EXIT_OK
    # distribution.yaml is the profile's file: every value is shown escaped
    print(f"Distribution: {printable(data.get('name'))}")
    print(f"Version:      {printable(data.get('version', '?'))}")
    for key, label in (("description", "Description"), ("author", "Author"), ("license", "License"),
                       ("hermes_requires", "Requires"), ("source", "Source"), ("installed_at", "Installed")):
        if data.get(key):
            shown = ("Hermes " if key == "hermes_requires" else "") + printable(data[key])
            print(f"{label + ':':<14}{shown}")
    env_reqs = data.get("env_requires") or []
    if env_reqs:
        print("Environment variables:")
        for req in env_reqs:
            tag = "required" if req.get("required", True) else "optional"
            line = f"  {printable(req['name'])} ({tag})"
            if req.get("description"):
                line += f" - {printable(req['description'])}"
            print(line)
            if req.get("default") is not None:
                print(f"      default: {printable(req['default'])}")
    return EXIT_OK


# --------------------------------------------------------------------------- create / delete / rename


def cmd_create(args: argparse.Namespace, ctx: Context) -> int:
    root = _root(args)
    interpreter = ctx.upstream_python
    if interpreter is None:
        raise UserError("profile create is not available here: this command has no way to run hermes-agent")
    result = create_profile(
        args.profile_name,
        root,
        python=lambda: interpreter(root),
        clone=args.clone,
        clone_all=args.clone_all,
        clone_from=args.clone_from,
        description=args.description,
        no_skills=args.no_skills,
    )
    print(f"Profile {result.name!r} created at {result.path}")
    if result.source is not None:
        if result.mode == "clone-all":
            print(f"Full copy from {result.source!r} (excluding session history, backups, snapshots and "
                  "runtime files).")
        else:
            print(f"Cloned config, .env, SOUL.md, skills and memories from {result.source!r}.")
    if result.migrated:
        print(printable(result.migrated))
    if args.no_skills:
        print("No bundled skills will be seeded (--no-skills). Delete .no-bundled-skills in the profile to opt "
              "back in.")
    for warning in result.warnings:
        _warn(warning)
    if not args.no_alias:
        _make_alias(result.name, root, _alias_dir(args))
    return EXIT_OK


def _confirm(name: str) -> bool:
    """Upstream's confirmation: type the name. A terminal or a pipe both work; EOF cancels."""
    prompt = f"Type {name!r} to confirm: "
    stdin = sys.stdin
    if stdin is None or stdin.closed:
        raise UserError(f"refusing to delete {name!r} without -y: no input to confirm on")
    try:
        if stdin.isatty():
            answer = input(prompt)
        else:
            print(prompt, end="", flush=True)
            line = stdin.readline()
            print()
            if not line:
                return False
            answer = line
    except EOFError:
        print()
        return False
    return answer.strip() == name


def _stopper(args: argparse.Namespace, ctx: Context) -> StopGateway | None:
    if not args.stop:
        return None
    if ctx.stop_gateway is None:
        raise UserError("--stop is not available here: this command has no way to stop a gateway")
    return ctx.stop_gateway


def cmd_delete(args: argparse.Namespace, ctx: Context) -> int:
    root = _root(args)
    canon = parse_profile_name(args.profile_name)
    if canon == DEFAULT_PROFILE:
        raise UserError("cannot delete the default profile: it is the root folder itself")
    home = existing_profile_home(args.profile_name, root)
    stop = _stopper(args, ctx)
    refuse_running(canon, home, stop)  # before the name is typed: a refusal after it wastes the confirmation
    if not args.yes:
        print(f"This permanently deletes profile {canon!r} at {home} (config, keys, memories, sessions).")
        for w in aliases_for_profile(canon, root, _alias_dir(args), include_upstream=True):
            print(f"  and its alias {_alias_text(w.alias, w.kind == KIND_UPSTREAM)} ({w.path})")
        if not _confirm(canon):
            print("Cancelled.")
            return EXIT_FAILURE
    result = delete_profile(canon, root, stop_gateway=stop, wrapper_dir=_alias_dir(args))
    print(f"Profile {canon!r} deleted.")
    for alias in result.aliases_removed:
        print(f"Alias removed: {alias}")
    if result.active_changed:
        print("Active profile reset to default.")
    for warning in result.warnings:
        _warn(warning)
    return EXIT_OK


def cmd_rename(args: argparse.Namespace, ctx: Context) -> int:
    root = _root(args)
    result = rename_profile(
        args.old_name, args.new_name, root,
        stop_gateway=_stopper(args, ctx), wrapper_dir=_alias_dir(args), create_alias=not args.no_alias,
    )
    print(f"Profile renamed to {result.name!r} at {result.path}")
    for alias in result.aliases_removed:
        print(f"Alias removed: {alias}")
    for alias in result.aliases_created:
        print(f"Alias updated: {alias}")
    if result.active_changed:
        print(f"Active profile updated: {result.name}")
    for warning in result.warnings:
        _warn(warning)
    return EXIT_OK


def cmd_use(args: argparse.Namespace, ctx: Context) -> int:
    root = _root(args)
    if args.clear:
        if args.profile_name is not None:
            raise UserError("profile use takes NAME or --clear, not both")
        clear_active_profile(root)
        print("Switched to: default")
        return EXIT_OK
    if args.profile_name is None:
        raise UserError("profile use needs NAME ('default' or --clear to reset; 'hermesd profile' shows the "
                         "active one)")
    print(f"Switched to: {set_active_profile(args.profile_name, root)}")
    return EXIT_OK


# --------------------------------------------------------------------------- export / import


def cmd_export(args: argparse.Namespace, ctx: Context) -> int:
    root = _root(args)
    canon = parse_profile_name(args.profile_name)
    existing_profile_home(args.profile_name, root)
    shown = Progress("exporting entries")
    try:
        result = export_profile(canon, args.output, root, progress=shown.update)
    finally:
        shown.done()
    print(f"Exported {canon!r} to {result.path} ({result.members} entries)")
    for skipped in result.skipped:
        _warn(f"not exported: {skipped}")
    return EXIT_OK


def cmd_import(args: argparse.Namespace, ctx: Context) -> int:
    root = _root(args)
    shown = Progress("importing entries")
    try:
        result = import_profile(args.archive, args.import_name, root, progress=shown.update)
    finally:
        shown.done()
    print(f"Imported profile {result.name!r} at {result.path}")
    if not args.no_alias:
        _make_alias(result.name, root, _alias_dir(args))
    return EXIT_OK


# --------------------------------------------------------------------------- aliases


def _print_wrapper(w: WrapperInfo) -> None:
    kind = "  [upstream: gateway verbs bypass hermesd]" if w.kind == KIND_UPSTREAM else ""
    print(f"{printable(w.alias)} -> {printable(w.profile)}  ({printable(w.path)}){kind}")


def cmd_alias(args: argparse.Namespace, ctx: Context) -> int:
    root = _root(args)
    folder = _alias_dir(args)
    picked = [flag for flag in ("list", "remove", "convert") if getattr(args, flag)]
    if len(picked) > 1:
        raise UserError(f"profile alias takes one of --list, --remove, --convert (got {', '.join(picked)})")
    canon: str | None = None
    if args.profile_name is not None:
        canon = parse_profile_name(args.profile_name)
        # A profile whose folder went by hand may still have aliases: --remove takes them (doctor's fix).
        gone_with_aliases = args.remove and bool(aliases_for_profile(canon, root, folder, include_upstream=True))
        if canon not in profile_names(root) and not gone_with_aliases:
            existing_profile_home(args.profile_name, root)  # raises: no such profile (did you mean …)
    if args.list:
        shown = [w for w in all_wrappers(root, folder) if canon is None or w.profile == canon]
        for w in shown:
            _print_wrapper(w)
        return EXIT_OK
    if args.convert:
        return _convert(args, root, folder, canon)
    if canon is None:
        raise UserError("profile alias needs NAME (or --list, or --convert)")
    if args.remove:
        names = [args.alias_name] if args.alias_name else [
            w.alias for w in aliases_for_profile(canon, root, folder, include_upstream=True)
        ]
        removed = [
            n for n in dict.fromkeys(names)
            if remove_wrapper(n, folder, root, profile=canon, include_upstream=True) is not None
        ]
        if not removed:
            print(f"No alias for {canon!r} found to remove.")
        for name in removed:
            print(f"Removed alias {name!r}")
        return EXIT_OK
    _create_alias(args.alias_name or canon, canon, root, folder)
    return EXIT_OK


def _convert(args: argparse.Namespace, root: Path, folder: Path, canon: str | None) -> int:
    """Rewrite upstream-style aliases as hermesd wrappers, keeping each one's name and target."""
    found = upstream_style_wrappers(root, folder)
    if canon is not None:
        found = [w for w in found if w.profile == canon]
    if args.alias_name is not None:
        wanted = args.alias_name.strip().lower()
        found = [w for w in found if w.alias == wanted]
    known = set(profile_names(root))
    if not found:
        what = f" for {canon!r}" if canon else ""
        named = f" named {args.alias_name!r}" if args.alias_name else ""
        print(f"No upstream-style alias{named}{what} found (nothing to convert).")
        return EXIT_OK
    failed = 0
    for w in found:
        if w.profile not in known:
            _warn(f"{w.path} runs profile {w.profile!r}, which does not exist under {root}; left alone")
            failed += 1
            continue
        path = convert_wrapper(w, root)
        print(f"Converted alias {w.alias!r} ({path}): now a hermesd wrapper for profile {w.profile!r}")
    return EXIT_FAILURE if failed else EXIT_OK
