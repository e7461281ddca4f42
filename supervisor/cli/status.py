"""The commands that ask a root's daemon about its gateways: status, logs, ping, reload.

``status`` is the command people and scripts run most, so this group imports only what it needs:
with the daemon down it reads hermesd's state file, the gateways' files and ``/proc``
(:func:`supervisor.daemon.status_rows.offline_document`); asking whether a daemon runs goes through the root's
lock (:mod:`supervisor.control.client`), so a slow daemon is waited for, never taken for an absent one.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from profiles.printable import printable_lines
from supervisor.cli.common import Commands, check_names, layout_of, root_of, use_color
from supervisor.cli.request import call, client_of
from supervisor.control.client import ControlError, DaemonNotAnswering, DaemonNotRunning
from supervisor.exits import EXIT_NOT_ANSWERING, Failure
from supervisor.layout import Layout
from supervisor.processes import lockholder


def register(commands: Commands) -> None:
    p = commands.add("status", cmd_status, "per-profile health (exit 0 only when all that should run are serving)",
                     "hermesd status --json")
    p.add_argument("profiles", nargs="*", metavar="PROFILE")
    p.add_argument("--json", action="store_true", help="one JSON document")
    p.add_argument("--watch", action="store_true", help="redraw live until interrupted (plain when piped)")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between redraws with --watch")
    p.add_argument("--wait", type=float, default=5.0, help="seconds to wait for a busy daemon before showing files")

    p = commands.add("logs", cmd_logs, "show a profile's gateway output (no profile: the daemon's own log)",
                     "hermesd logs coder -f -n 100")
    p.add_argument("profile", nargs="?")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing new lines, across rotations")
    p.add_argument("-n", "--lines", type=int, default=50, help="lines of history to show first")

    p = commands.add("ping", cmd_ping, "exit 0 if the daemon for this root is up", "hermesd ping --root ~/.hermes")
    p.add_argument("--wait", type=float, default=5.0, help="seconds to wait for a daemon that is busy or starting")
    commands.add("reload", cmd_reload, "re-read hermesd.yaml and rescan the profiles folder", "hermesd reload")



# --------------------------------------------------------------------------- status


def _offline(root: Path, why: str | None = None) -> dict[str, Any]:
    """The document from the files on disk, when the daemon is down."""
    from supervisor.daemon.status_rows import offline_document  # daemon down only (40 ms an answer needn't)

    return offline_document(root) if why is None else offline_document(root, why)


def _status_document(args: argparse.Namespace) -> dict[str, Any]:
    root = root_of(args)
    try:
        doc = client_of(args).call("status", wait=args.wait)["status"]
    except DaemonNotRunning:
        doc = _offline(root)
    except DaemonNotAnswering as exc:
        doc = _offline(root, why="hermesd does not answer")
        doc["supervisor"].update(running=True, answering=False, problem=str(exc))
    except ControlError as exc:
        raise Failure(str(exc)) from None
    # A fleet operation restarting gateways one at a time: status says so instead of advising one.
    doc["supervisor"]["fleet_operation"] = lockholder.fleet_operation(Layout(root))
    if args.profiles:
        wanted = check_names(args.profiles, [r["name"] for r in doc["profiles"]])
        doc["profiles"] = [r for r in doc["profiles"] if r["name"] in wanted]
    return doc


def cmd_status(args: argparse.Namespace) -> int:
    from supervisor.ops import status  # run-time only (see cli/__init__)

    if args.watch:
        return _watch_status(args)
    doc = _status_document(args)
    if args.json:
        print(json.dumps(doc, indent=2, sort_keys=True))
    else:
        print(status.render(doc, color=use_color(sys.stdout)))
        if len(doc["profiles"]) == 1 and args.profiles:
            from supervisor.observe.detail import render_detail  # the journal's reader: one profile's view only


            unicode = (sys.stdout.encoding or "").lower().replace("-", "") == "utf8"
            print()
            print(render_detail(root_of(args), doc["profiles"][0]["name"], now=time.time(),
                                color=use_color(sys.stdout), unicode=unicode))
    return status.exit_code(doc)


def _watch_status(args: argparse.Namespace) -> int:
    """Redraw the table in place until interrupted; on a pipe, print one snapshot per interval."""
    from supervisor.ops import status  # run-time only (see cli/__init__)

    tty = sys.stdout.isatty()
    try:
        while True:
            doc = _status_document(args)
            text = json.dumps(doc, sort_keys=True) if args.json else status.render(doc, color=use_color(sys.stdout))
            if tty:
                sys.stdout.write("\x1b[H\x1b[2J" + text + f"\n\n(every {args.interval:g}s; Ctrl-C to quit)\n")
            else:
                sys.stdout.write(text + "\n\n")
            sys.stdout.flush()
            time.sleep(args.interval)
    except KeyboardInterrupt:
        return 0


# --------------------------------------------------------------------------- logs, ping, reload


def cmd_logs(args: argparse.Namespace) -> int:
    from profiles.discovery import profiles_to_serve  # run-time only (see cli/__init__)
    from supervisor.processes import logs  # run-time only (see cli/__init__)

    layout = layout_of(args)
    if args.profile:
        known = [n for n, _ in profiles_to_serve(True, root=layout.root)]
        name = check_names([args.profile], known)[0]
        path = layout.child_log(name)
        if not path.exists() and not args.follow:
            print(f"profile {name!r} has no log yet ({path}): its gateway has not been started by hermesd",
                  file=sys.stderr)
            return 0
    else:
        path = layout.daemon_log
        if not path.exists() and not args.follow:
            raise Failure(f"no daemon log yet at {path}")
    # A gateway's output is its own words, printed as written when piped (grep, a file). On a terminal
    # every control character but line breaks and tabs is shown escaped: a gateway (or the agent in it)
    # must not be able to erase lines, retitle the window or write the clipboard of whoever reads it.
    show = printable_lines if sys.stdout.isatty() else (lambda text: text)
    try:
        sys.stdout.write(show(b"".join(logs.tail_lines(layout.beneath(path), args.lines)).decode("utf-8", "replace")))
    except PermissionError as exc:
        raise Failure(f"cannot read {path}: {exc.strerror} (run as the user hermesd runs as)") from None
    sys.stdout.flush()
    if args.follow:
        try:
            logs.follow(layout.beneath(path), show=show)
        except KeyboardInterrupt:
            return 0
    return 0


def cmd_ping(args: argparse.Namespace) -> int:
    try:
        up = client_of(args).ping(wait=args.wait)
    except DaemonNotAnswering as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_NOT_ANSWERING
    if not up:
        print(f"hermesd is not running for {root_of(args)}", file=sys.stderr)
        return 1
    print(f"hermesd running for {up['root']} (PID {up['pid']}{', ready' if up.get('ready') else ''})")
    return 0


def cmd_reload(args: argparse.Namespace) -> int:
    reply = call(args, "reload")
    if reply.get("config_problem"):
        print(f"warning: {reply['config_problem']}", file=sys.stderr)
    print("reloaded")
    return 0
