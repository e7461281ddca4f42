"""``hermesd probe PROFILE --ready|--live``: the container health check of :mod:`supervisor.ops.probe`.

Kubernetes (or compose) runs this every few seconds inside the gateway's container: this module and
its imports are all that ``hermesd probe`` loads besides the entry point.
"""

from __future__ import annotations

import argparse
import sys

from profiles.errors import ProfileError
from supervisor.cli.common import Commands
from supervisor.ops.probe import DEFAULT_MAX_AGE, READY_RULE, check, resolve_home

HELP = "health probe for one profile's gateway, from its files (no daemon needed; for Kubernetes)"


def register(commands: Commands) -> None:
    p = commands.add("probe", cmd_probe, HELP, "hermesd probe coder --ready --root /opt/hermes",
                     description=HELP + ".\nExit 0 healthy, 1 not (the reason on stderr).\n" + READY_RULE)
    p.add_argument("profile", metavar="PROFILE", help="profile name ('default' is the root)")
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--ready", action="store_true",
                      help="exit 0 only when the gateway state is 'running', no platform is 'fatal' and every "
                           "enabled platform has its libraries in the gateway's interpreter")
    mode.add_argument("--live", action="store_true",
                      help="exit 0 when the gateway is running, degraded or draining")
    p.add_argument("--max-age", type=float, default=DEFAULT_MAX_AGE, metavar="SECONDS",
                   help=f"oldest acceptable heartbeat (default {DEFAULT_MAX_AGE:.0f}; the gateway beats every 30)")
    p.add_argument("--no-requirements", action="store_true",
                   help="--ready: skip the requirements check (it reads config.yaml and runs the gateway's "
                        "interpreter, about 0.2 s)")


def cmd_probe(args: argparse.Namespace) -> int:
    name = args.profile
    try:
        home = resolve_home(args.profile, args.root)
    except ProfileError as exc:
        print(f"{name}: {exc}", file=sys.stderr)
        return 1
    if not home.is_dir():
        print(f"{name}: no such profile ({home} is not a directory)", file=sys.stderr)
        return 1
    ok, reason = check(home, "ready" if args.ready else "live", args.max_age,
                       requirements=bool(args.ready and not args.no_requirements))
    print(f"{name}: {reason}", file=sys.stdout if ok else sys.stderr)
    return 0 if ok else 1
