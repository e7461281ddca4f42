"""``hermesd events`` and ``hermesd metrics``: read-only commands that work with the daemon down.

Exit codes: 0 ok, 2 usage error (a bad ``--since``, an unknown profile), 130 on Ctrl-C is turned
into 0 for ``-f`` as for ``hermesd logs -f``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from profiles.errors import ProfileError
from profiles.names import no_such_profile, normalize_name
from profiles.printable import printable_tree
from supervisor import __version__
from supervisor.cli.common import Commands, root_of, use_color
from supervisor.exits import UserError
from supervisor.layout import Layout

_COLORS = {"held": "31", "config_rejected": "31", "hung_kill": "31", "limit_kill": "31",
           "foreign": "33", "backoff": "33", "stopped": "90", "ready": "32", "recovered": "32",
           "released": "32"}


def register(commands: Commands) -> None:
    help_ = "what happened: hermesd's event history (works while the daemon is down)"
    p = commands.add("events", _cmd_events, help_, (
        "hermesd events coder --since 2h", "hermesd events -f",
        "hermesd events --json --since 2026-05-01T03:00 | jq ."),
        description=help_ + ".\nOne line per event; --json prints the journal's JSON lines.")
    p.add_argument("profiles", nargs="*", metavar="PROFILE", help="only these profiles' events")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing new events, across rotations")
    p.add_argument("--since", metavar="TIME",
                   help="only events from TIME on: 10m, 2h, 1d, today, an ISO time (local unless zoned), @UNIXTIME")
    p.add_argument("-n", "--lines", type=int, metavar="N",
                   help="only the last N events first (default: all; with -f and no --since: 10)")
    p.add_argument("--json", action="store_true", help="one JSON object per line, as stored")

    help_ = "Prometheus metrics (text format) for the root, from the daemon or the files on disk"
    commands.add("metrics", _cmd_metrics, help_,
                 "hermesd metrics > /var/lib/node_exporter/textfile/hermesd.prom.tmp",
                 description=help_ + ".\nThe same text the optional listener serves at /metrics.")


# --------------------------------------------------------------------------- events


def _wanted_profiles(args: argparse.Namespace, root: Path, folder: Path) -> set[str] | None:
    """Normalised profile names. A name is known if it is served now or appears in the journal
    (a deleted profile's history is still worth reading); anything else is a usage error."""
    from profiles.discovery import profiles_to_serve  # run-time only (see cli/__init__)
    from supervisor.observe.reader import iter_events  # run-time only (see cli/__init__)

    if not args.profiles:
        return None
    try:
        wanted = {normalize_name(p) for p in args.profiles}
    except ProfileError as exc:
        raise UserError(str(exc)) from None
    known: list[str] = []
    with contextlib.suppress(OSError, ProfileError):
        known = [name for name, _home in profiles_to_serve(True, root=root)]
    missing = wanted - set(known)
    if missing:
        for ev in iter_events(folder, profiles=missing):
            missing.discard(ev["profile"])
            if not missing:
                break
    if missing:
        raise UserError("; ".join(str(no_such_profile(n, known)) for n in sorted(missing)))
    return wanted


def _cmd_events(args: argparse.Namespace) -> int:
    try:
        return _events(args)
    except OSError as exc:  # an unreadable or symlinked events folder: one line, no traceback
        raise UserError(str(exc)) from None


def _events(args: argparse.Namespace) -> int:
    from supervisor.observe.events import render_line  # run-time only (see cli/__init__)
    from supervisor.observe.journal import default_folder  # run-time only (see cli/__init__)
    from supervisor.observe.reader import (  # run-time only (see cli/__init__)
        ReadStats,
        follow,
        iter_events,
        parse_since,
    )

    if args.lines is not None and args.lines < 0:
        raise UserError("--lines must be 0 or more")
    root = root_of(args)
    folder = default_folder(root)
    since = None
    if args.since:
        try:
            since = parse_since(args.since, time.time())
        except ValueError as exc:
            raise UserError(f"--since: {exc}") from None
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
    events: Iterator[dict[str, Any]] = iter_events(folder, profiles=profiles, since=since, stats=stats)
    if args.lines is not None:
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
    from supervisor.control.client import (  # run-time only (see cli/__init__)
        Client,
        ControlError,
        DaemonNotAnswering,
        DaemonNotRunning,
    )
    from supervisor.daemon.status_rows import offline_document  # run-time only (see cli/__init__)
    from supervisor.observe.journal import default_folder  # run-time only (see cli/__init__)
    from supervisor.observe.metrics import Counters, render  # run-time only (see cli/__init__)
    from supervisor.observe.reader import last_run  # run-time only (see cli/__init__)

    client = Client(Layout(root))
    down = (DaemonNotRunning, DaemonNotAnswering, FileNotFoundError)
    doc = None
    try:
        reply = client.call("metrics", wait=5.0)
        if isinstance(reply.get("metrics"), str):
            return str(reply["metrics"])
    except down:
        pass
    except ControlError:  # an older daemon, without the request
        with contextlib.suppress(*down, ControlError):
            doc = client.call("status", wait=10.0)["status"]
    if doc is None:
        doc = offline_document(root)
        counters = Counters()
    else:
        counters = Counters.replay(last_run(default_folder(root), daemon=doc["supervisor"].get("pid")))
    return render(doc, counters, version=__version__, now=time.time(), process=False)


def _cmd_metrics(args: argparse.Namespace) -> int:
    sys.stdout.write(metrics_text(root_of(args)))
    sys.stdout.flush()
    return 0
