"""``hermesd upgrade`` (and its ``--rollback``, ``--list``), and ``hermesd restart --rolling``.

Exit 0: done, nothing to do, or ``--dry-run``; 1: refused or stopped at a failure (the message
names the step; the record says the rest); 2: usage; 3: hermesd is not running (4: not answering).
``--json`` prints one document on stdout: the operation's record, or ``{"ok": false, "error"}``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from supervisor.cli.common import Commands, check_names, layout_of, root_of
from supervisor.exits import Failure, UserError
from supervisor.layout import Layout

if TYPE_CHECKING:
    from supervisor.upgrade.operations import Options
    from supervisor.upgrade.run import Reporter

HELP = "upgrade hermes-agent under the fleet: a canary first, then one gateway at a time, each health-gated"
EXAMPLE = "hermesd upgrade --to 0.19.0"
DESCRIPTION = HELP + """.
Saves what the new release may migrate (each profile's config.yaml, .env, skills manifest) and, with
--to, the installed distributions pip replaces, under <root>/.hermesd/upgrades/<id>/; installs; makes
hermesd read the new release; then restarts the gateways that run older code, canary first. Each must
come back running, heartbeat fresh, its platforms connected as before, with no new hold, before the
next is touched; the first failure stops the upgrade with the rest untouched.
Without --to it rolls the gateways onto the release already installed (after a pip install of your own).
--rollback puts the old distributions and the saved files back byte for byte and restarts what runs
other code."""


def register(commands: Commands) -> None:
    p = commands.add("upgrade", cmd_upgrade, HELP, (
        EXAMPLE, "hermesd upgrade --to ./hermes_agent-0.19.1-py3-none-any.whl --canary coder",
        "hermesd upgrade --dry-run", "hermesd upgrade --rollback"), description=DESCRIPTION)
    p.add_argument("--to", metavar="VERSION|WHEEL", help="install this release (or wheel, or pip requirement) into "
                                                        "the gateway's interpreter first")
    p.add_argument("--rollback", nargs="?", const="", metavar="ID", help="undo the newest upgrade (or upgrade ID)")
    p.add_argument("--list", action="store_true", help="list the records of past operations")
    p.add_argument("--canary", metavar="PROFILE",
                   help="the profile restarted first (default: the one with the fewest connected platforms)")
    p.add_argument("--only", nargs="+", metavar="PROFILE", help="restart only these profiles")
    add_gate_options(p)
    p.add_argument("--yes", action="store_true", help="consent to the settings the new release needs")
    p.add_argument("--dry-run", action="store_true", help="show what would be installed and restarted; change nothing")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout (no progress)")


def add_gate_options(p: argparse.ArgumentParser) -> None:
    """The health gate's options (``upgrade`` and ``restart --rolling`` share them)."""
    p.add_argument("--gate-timeout", type=float, default=120.0, metavar="S",
                   help="seconds each gateway may take to become healthy (default 120: a platform may take 30 s "
                        "to connect)")
    p.add_argument("--settle", type=float, default=5.0, metavar="S",
                   help="seconds each gateway must stay healthy before the next is touched (default 5)")
    p.add_argument("--canary-settle", type=float, default=15.0, metavar="S",
                   help="the same for the canary (default 15)")


def options(args: argparse.Namespace) -> Options:
    from supervisor.upgrade.operations import Options  # run-time only (see cli/__init__)

    for name in ("gate_timeout", "settle", "canary_settle"):
        if getattr(args, name) < 0:
            raise UserError(f"--{name.replace('_', '-')} must not be negative")
    return Options(to=getattr(args, "to", None), canary=getattr(args, "canary", None),
                   only=tuple(args.only) if getattr(args, "only", None) else None, timeout_s=args.gate_timeout,
                   settle_s=args.settle, canary_settle_s=args.canary_settle, graceful=getattr(args, "graceful", False),
                   assume_yes=getattr(args, "yes", False), dry_run=getattr(args, "dry_run", False))


def cmd_upgrade(args: argparse.Namespace) -> int:
    from supervisor.upgrade import operations  # run-time only (see cli/__init__)
    from supervisor.upgrade.run import Reporter  # run-time only (see cli/__init__)

    if args.rollback is not None and (args.to or args.dry_run or args.only or args.canary):
        raise UserError("--rollback takes no --to, --dry-run, --only or --canary")
    layout = layout_of(args)
    if args.list:
        return _list(layout, args.json)
    reporter = Reporter(json_mode=args.json)
    opts = options(args)
    if args.only or args.canary:
        _check_names(args, list(args.only or []) + ([args.canary] if args.canary else []))
    return _run(args, reporter, lambda: operations.rollback(layout, args.rollback or None, opts, reporter)
                if args.rollback is not None else operations.upgrade(layout, opts, reporter))


def cmd_rolling_restart(args: argparse.Namespace, names: list[str] | None) -> int:
    """``hermesd restart --rolling [PROFILE…|--all]`` (called by the restart command)."""
    from supervisor.upgrade import operations  # run-time only (see cli/__init__)
    from supervisor.upgrade.run import Reporter  # run-time only (see cli/__init__)

    reporter = Reporter(json_mode=getattr(args, "json", False))
    opts = options(args)
    return _run(args, reporter, lambda: operations.rolling_restart(layout_of(args), names, opts, reporter))


def _check_names(args: argparse.Namespace, names: list[str]) -> None:
    from profiles.discovery import profiles_to_serve  # run-time only (see cli/__init__)

    check_names(names, [n for n, _ in profiles_to_serve(True, root=root_of(args))])


def _run(args: argparse.Namespace, reporter: Reporter, work: Callable[[], dict[str, Any]]) -> int:
    from supervisor.upgrade.record import Busy  # run-time only (see cli/__init__)
    from supervisor.upgrade.run import OperationFailed  # run-time only (see cli/__init__)

    try:
        result = work()
    except (OperationFailed, Busy) as exc:
        reporter.clear()
        code = getattr(exc, "code", 1)
        if args.json:
            print(json.dumps({"ok": False, "error": str(exc), "exit": code}, indent=2, sort_keys=True))
            return code
        raise Failure(str(exc), code) from None
    if args.json:
        print(json.dumps({"ok": True, **result}, indent=2, sort_keys=True, default=str))
    return 0


def _list(layout: Layout, as_json: bool) -> int:
    from supervisor.upgrade.record import every  # run-time only (see cli/__init__)

    recs = every(layout)
    if as_json:
        print(json.dumps([r.data for r in recs], indent=2, sort_keys=True, default=str))
        return 0
    if not recs:
        print(f"no fleet operations recorded under {layout.upgrades}")
        return 0
    for r in recs:
        d = r.data
        src, dst = d.get("from") or {}, d.get("to") or {}
        versions = f" {src.get('version', '?')} -> {dst.get('version', '?')}" if d.get("operation") == "upgrade" else ""
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(d.get("created_at") or 0))
        print(f"{r.id}  {when}  {d.get('operation')}{versions}  {d.get('result')}"
              + (f": {d['reason']}" if d.get("reason") else ""), file=sys.stdout)
    return 0
