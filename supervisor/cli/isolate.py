"""``hermesd isolate-user PROFILE [ACCOUNT]``: give a profile's home to the account its gateway runs
as (``isolation.user``), after showing what changes and asking.

Why a command and not the daemon: an ownership change is the operator's decision (hermesd never
changes owners or modes on its own), and it is the one step between "created as root" and "runs as
its own account" that upstream cannot take for itself. The walk is :func:`supervisor.isolation.ownership.chown_home`
(no link followed, nothing outside the home); what it cannot do (a folder on the way the account
cannot pass, the shared channels, the credential-lock folder) is said, never changed.
"""

from __future__ import annotations

import argparse
import os
import stat
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from supervisor.cli.common import Commands, check_names, root_of
from supervisor.cli.request import call
from supervisor.exits import Failure, UserError
from supervisor.layout import Layout

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from supervisor.config import Config
    from supervisor.isolation.planning import UserIds


def register(commands: Commands) -> None:
    p = commands.add("isolate-user", cmd_isolate_user,
                     "give a profile's home to the account its gateway runs as (isolation.user), after showing "
                     "what changes", "hermesd isolate-user coder hermes-coder")
    p.add_argument("profile", metavar="PROFILE")
    p.add_argument("account", nargs="?", metavar="ACCOUNT",
                   help="the account (default: the profile's isolation.user in hermesd.yaml)")
    p.add_argument("--yes", action="store_true", help="do it without asking (the changes are still printed)")


def cmd_isolate_user(args: argparse.Namespace) -> int:
    from profiles.discovery import profiles_to_serve  # run-time only (see cli/__init__)
    from supervisor import config as config_mod  # run-time only (see cli/__init__)
    from supervisor.isolation import ownership  # run-time only (see cli/__init__)
    from supervisor.isolation.install import credential_lock_dir, resolve_user  # run-time only (see cli/__init__)

    root = root_of(args)
    homes = {n: Path(h) for n, h in profiles_to_serve(True, root=root)}
    (name,) = check_names([args.profile], list(homes))
    home = homes[name]
    try:
        cfg = config_mod.load(Layout(root).config)
    except config_mod.ConfigError as exc:
        raise UserError(str(exc)) from None
    configured = cfg.isolation_for(name).user
    wanted = args.account or configured
    if not wanted:
        raise UserError(f"profile {name} has no isolation.user in hermesd.yaml: name the account "
                        f"(hermesd isolate-user {name} ACCOUNT)")
    try:
        account = resolve_user(str(wanted))
    except (KeyError, ValueError, OSError):
        raise UserError(f"no account {str(wanted)[:80]!r} on this machine (create it first, e.g. "
                        f"useradd --system --no-create-home {wanted})") from None
    if os.geteuid() != 0:
        raise Failure("changing the owner of a profile's files needs root (hermesd runs as root to run "
                      "profiles as other accounts)")
    dry = ownership.chown_home(home, account.uid, account.gid, apply=False)
    print(f"profile {name} is to run as {account.name} (uid {account.uid}, gid {account.gid}); hermesd will change:")
    print(f"  the owner of {home} and everything in it to {account.uid}:{account.gid}: "
          f"{dry.changed} entr{'y' if dry.changed == 1 else 'ies'} ({dry.unchanged} already are)")
    notes = [*dry.lines(), *_outside(root, name, home, account, cfg, credential_lock_dir)]
    if configured != account.name and configured != str(account.uid):
        notes.append(f"hermesd.yaml: add profiles.{name}.isolation.user: {account.name} (until then the gateway "
                     "keeps running as it does now)")
    if notes:
        print("and will not change (see what to do):")
        for line in notes:
            print(f"  {line}")
    if not dry.changed:
        print("nothing to change")
        return 0
    if not args.yes and not _confirmed():
        print("nothing changed" + ("" if sys.stdin.isatty() else " (not a terminal: rerun with --yes)"))
        return 1
    done = ownership.chown_home(home, account.uid, account.gid, apply=True)
    print(f"changed {done.changed} entr{'y' if done.changed == 1 else 'ies'}")
    for line in done.errors:
        print(f"  {line}", file=sys.stderr)
    left = ownership.problems(home, account)
    if left:
        raise Failure("; ".join(left))
    _start_again(args, name)
    return 1 if done.errors else 0


def _outside(root: Path, name: str, home: Path, account: UserIds, cfg: Config,
             lock_dir_of: Callable[[Mapping[str, str]], Path | None]) -> list[str]:
    """What the account also needs beyond the home, which this command does not change."""
    from supervisor.isolation import ownership  # run-time only (see cli/__init__)
    from supervisor.processes.childspec import child_env  # run-time only (see cli/__init__)

    out = [p for p in ownership.problems(home, account) if not p.startswith(str(home))]
    env = child_env(os.environ, root=root, profile=name, home=home, extra=cfg.child_environment(name))
    lock_dir = lock_dir_of(env)
    if lock_dir is not None and not _writable_by(Path(lock_dir), account):
        out.append(f"{lock_dir} (upstream's credential locks, shared by every profile) is not writable by "
                   f"{account.name}: its platforms' locks fail; point HERMES_GATEWAY_LOCK_DIR (hermesd.yaml "
                   "environment) at a folder every profile's account can write")
    iso = cfg.isolation_for(name)
    for keep, folder in ((iso.kanban, root / "kanban"), (iso.shared_auth, root / "shared")):
        if keep and folder.is_dir() and not _writable_by(folder, account):
            out.append(f"{folder} (shared by the profiles) is not writable by {account.name}: give it to a group of "
                       "the profiles' accounts with mode 2770, or close the channel in its isolation settings")
    return out


def _writable_by(folder: Path, account: UserIds) -> bool:
    try:
        st = folder.stat()
    except OSError:
        return True  # not there yet: whoever creates it decides
    if st.st_uid == account.uid:
        return bool(st.st_mode & stat.S_IWUSR)
    if st.st_gid == account.gid or st.st_gid in account.groups:
        return bool(st.st_mode & stat.S_IWGRP)
    return bool(st.st_mode & stat.S_IWOTH)


def _confirmed() -> bool:
    if not sys.stdin.isatty():
        return False
    try:
        return input("change these owners? [y/N] ").strip().lower() in ("y", "yes")
    except EOFError:
        return False


def _start_again(args: argparse.Namespace, name: str) -> None:
    """Clear the profile's isolation hold when a daemon runs the root; otherwise say what is next."""
    try:
        reply = call(args, "start", profile=name, wait=5.0)
    except Failure:
        print(f"then: hermesd start (or hermesd start {name} when the daemon runs)")
        return
    print(f"asked hermesd to start {name}: {reply.get('result')}")
