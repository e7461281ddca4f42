"""``hermesd events`` and ``hermesd metrics``: read-only commands that work with the daemon down.

The CLI adds both with one line: ``from supervisor.observe import cli as observe_cli;
observe_cli.register(sub)``. Imports stay inside the handlers so ``hermesd --help`` pays nothing.
Exit codes: 0 ok, 2 usage error (a bad ``--since``, an unknown profile), 130 on Ctrl-C is turned
into 0 for ``-f`` as for ``hermesd logs -f``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path
from typing import Any

_ROOT_HELP = "Hermes root (default: resolved from HERMES_HOME as upstream does)"
_COLORS = {"held": "31", "conflict": "31", "config_rejected": "31", "hung_kill": "31", "limit_kill": "31",
           "foreign": "33", "backoff": "33", "stopped": "90", "ready": "32", "recovered": "32",
           "released": "32", "conflict_resolved": "32"}


def register(subparsers: Any) -> None:
    """Add ``hermesd events`` and ``hermesd metrics`` to the CLI's subparsers."""
    help_ = "what happened: hermesd's event history (works while the daemon is down)"
    p = subparsers.add_parser(
        "events", help=help_, description=help_ + ".\nOne line per event; --json prints the journal's JSON lines.",
        epilog="examples:\n  hermesd events coder --since 2h\n  hermesd events -f\n"
               "  hermesd events --json --since 2026-05-01T03:00 | jq .",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("profiles", nargs="*", metavar="PROFILE", help="only these profiles' events")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing new events, across rotations")
    p.add_argument("--since", metavar="TIME",
                   help="only events from TIME on: 10m, 2h, 1d, today, an ISO time (local unless zoned), @UNIXTIME")
    p.add_argument("-n", "--lines", type=int, metavar="N",
                   help="only the last N events first (default: all; with -f and no --since: 10)")
    p.add_argument("--json", action="store_true", help="one JSON object per line, as stored")
    p.add_argument("--root", help=_ROOT_HELP)
    p.set_defaults(func=_cmd_events)

    help_ = "Prometheus metrics (text format) for the root, from the daemon or the files on disk"
    p = subparsers.add_parser(
        "metrics", help=help_, description=help_ + ".\nThe same text the optional listener serves at /metrics.",
        epilog="example:\n  hermesd metrics > /var/lib/node_exporter/textfile/hermesd.prom.tmp",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--root", help=_ROOT_HELP)
    p.set_defaults(func=_cmd_metrics)


# --------------------------------------------------------------------------- events


def _user_error(message: str) -> Exception:
    from supervisor.observe.links import user_error

    return user_error(message)


def _wanted_profiles(args: argparse.Namespace, root: Path, folder: Path) -> set[str] | None:
    """Normalised profile names. A name is known if it is served now or appears in the journal
    (a deleted profile's history is still worth reading); anything else is a usage error."""
    if not args.profiles:
        return None
    from profiles.errors import ProfileError
    from profiles.names import normalize_name
    from supervisor.observe.links import no_such_profile, served_profiles

    try:
        wanted = {normalize_name(p) for p in args.profiles}
    except ProfileError as exc:
        raise _user_error(str(exc)) from None
    known: list[str] = []
    with contextlib.suppress(OSError, ProfileError):
        known = served_profiles(root)
    missing = wanted - set(known)
    if missing:
        from supervisor.observe.reader import iter_events

        for ev in iter_events(folder, profiles=missing):
            missing.discard(ev["profile"])
            if not missing:
                break
    if missing:
        raise _user_error("; ".join(no_such_profile(n, known) for n in sorted(missing)))
    return wanted


def _cmd_events(args: argparse.Namespace) -> int:
    try:
        return _events(args)
    except OSError as exc:  # an unreadable or symlinked events folder: one line, no traceback
        raise _user_error(str(exc)) from None


def _events(args: argparse.Namespace) -> int:
    from profiles.printable import printable_tree
    from supervisor.observe.events import render_line
    from supervisor.observe.journal import default_folder
    from supervisor.observe.reader import ReadStats, follow, iter_events, parse_since

    if args.lines is not None and args.lines < 0:
        raise _user_error("--lines must be 0 or more")
    from supervisor.observe.links import root_of, use_color

    root = root_of(args)
    folder = default_folder(root)
    since = None
    if args.since:
        try:
            since = parse_since(args.since, time.time())
        except ValueError as exc:
            raise _user_error(f"--since: {exc}") from None
    profiles = _wanted_profiles(args, root, folder)
    width = max([8, *(len(p) for p in profiles or ())])
    color = not args.json and use_color(sys.stdout)

    def line(ev: dict[str, Any]) -> str:
        if args.json:
            return json.dumps(ev, separators=(",", ":"))  # ASCII: every control character escaped
        text = render_line(printable_tree(ev), width=width)
        code = _COLORS.get(ev["type"])
        if ev["type"] == "exited" and ev.get("kind") not in ("planned", "restart_requested"):
            code = "31"
        return f"\x1b[{code}m{text}\x1b[0m" if color and code else text

    stats = ReadStats()
    out = sys.stdout
    if args.follow:
        history = args.lines if args.lines is not None else (None if since is not None else 10)
        try:
            for ev in follow(folder, profiles=profiles, since=since, history=history, stats=stats):
                out.write(line(ev) + "\n")
                out.flush()
        except KeyboardInterrupt:
            return 0
        return 0
    events = iter_events(folder, profiles=profiles, since=since, stats=stats)
    if args.lines is not None:
        from collections import deque

        events = iter(deque(events, maxlen=args.lines))
    n = 0
    for ev in events:
        out.write(line(ev) + "\n")
        n += 1
    out.flush()
    if stats.skipped:
        print(f"hermesd events: skipped {stats.skipped} damaged line(s) in {folder} "
              "(a crash of hermesd mid-write leaves at most one)", file=sys.stderr)
    for problem in stats.refused:
        print(f"hermesd events: not read: {printable_tree(problem)}", file=sys.stderr)
    if n == 0 and not args.json and not folder.exists():
        print(f"no events recorded yet ({folder} does not exist)", file=sys.stderr)
    return 0


# --------------------------------------------------------------------------- metrics


def metrics_text(root: Path) -> str:
    """The daemon's own /metrics text when it is up; otherwise the files on disk.

    A daemon that does not know the ``metrics`` request is answered from its status and a replay of
    its run in the journal (the counters are a fold over the events, so they come out the same,
    except control requests and hook runs, which are not events).
    """
    from supervisor.observe import links
    from supervisor.observe.journal import default_folder
    from supervisor.observe.metrics import Counters, render
    from supervisor.observe.reader import last_run

    doc = None
    try:
        reply = links.daemon_call(root, "metrics")
        if isinstance(reply.get("metrics"), str):
            return reply["metrics"]
    except links.DaemonDown:
        pass
    except links.RequestRefused:
        try:
            doc = links.daemon_call(root, "status", wait=10.0)["status"]
        except (links.DaemonDown, links.RequestRefused):
            doc = None
    if doc is None:
        from supervisor.status import offline_document

        doc = offline_document(root)
        counters = Counters()
    else:
        counters = Counters.replay(last_run(default_folder(root), daemon=doc["supervisor"].get("pid")))
    return render(doc, counters, version=links.version(), now=time.time(), process=False)


def _cmd_metrics(args: argparse.Namespace) -> int:
    from supervisor.observe.links import root_of

    sys.stdout.write(metrics_text(root_of(args)))
    sys.stdout.flush()
    return 0
