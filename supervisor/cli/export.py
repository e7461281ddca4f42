"""``hermesd export`` and its hidden helper ``_planned-stop`` (systemd ExecStop, Kubernetes preStop).

What the exported files hold is :mod:`supervisor.ops.export`'s; this module reads the options and
writes the files where they were asked for.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from supervisor.cli.common import Commands, root_of
from supervisor.exits import UserError

# supervisor.ops.export's own (a test holds them equal): spelled here so that declaring the command, which
# --help and <TAB> do for every command, does not import what an export needs.
FORMATS = ("systemd", "compose", "kubernetes")
DEFAULT_IMAGE = "hermes-agent:latest"
HELP = "turn the profile tree into systemd units, a Compose file or Kubernetes manifests, one gateway per profile"


def register(commands: Commands) -> None:
    p = commands.add("export", cmd_export, HELP, (
        "hermesd export kubernetes --image registry.example/hermes:1 > hermes.yaml",
        "hermesd export systemd --out ~/.config/systemd/user", "hermesd export compose --out deploy/"),
        description=HELP + ".\nEach carries hermesd's child contract (argv, environment, planned stop, stop "
                           "timeout).\nRefuses a tree where two profiles share a credential or a port. Never writes "
                           "a credential.")
    p.add_argument("format", choices=FORMATS)
    p.add_argument("--out", metavar="DIR", help="write files into DIR (default: stdout; required for systemd)")
    p.add_argument("--image", default=DEFAULT_IMAGE,
                   help=f"container image with hermes and hermesd on PATH (default: {DEFAULT_IMAGE}, "
                        "a placeholder)")
    p.add_argument("--storage", default="1Gi", help="Kubernetes: size of each profile's volume (default: 1Gi)")

    helper = "write the planned-stop marker for the live gateway of HOME (systemd ExecStop, Kubernetes preStop)"
    h = commands.add("_planned-stop", cmd_planned_stop, helper, "hermesd _planned-stop /opt/hermes/profiles/coder",
                     description=helper + ".", root=False, hidden=True)
    h.add_argument("home", nargs="?", metavar="HOME", help="the gateway's HERMES_HOME (default: $HERMES_HOME)")


def cmd_export(args: argparse.Namespace) -> int:
    from supervisor.ops import export  # run-time only (see cli/__init__)

    root = root_of(args)
    if args.format == "systemd" and not args.out:
        raise UserError("systemd export writes one unit per profile: give --out DIR")
    try:
        files = export.export_files(args.format, root, image=args.image, storage=args.storage)
    except export.ExportError as exc:
        raise UserError(str(exc)) from None
    if args.out:
        export.write_files(Path(args.out).expanduser(), files)
        return 0
    if args.format == "kubernetes":
        sys.stdout.write("---\n".join(files.values()))
    else:
        sys.stdout.write(next(iter(files.values())))
    return 0


def cmd_planned_stop(args: argparse.Namespace) -> int:
    """Write upstream's planned-stop marker for the live gateway of HOME (no gateway: nothing to do)."""
    from profiles.upstream.files import write_planned_stop_marker  # run-time only (see cli/__init__)
    from supervisor.ops.stopper import await_marked_stop  # run-time only (see cli/__init__)
    from supervisor.processes import identity  # run-time only (see cli/__init__)

    raw = args.home or os.environ.get("HERMES_HOME", "")
    if not raw:
        raise UserError("give the gateway's HERMES_HOME (or set HERMES_HOME)")
    home = Path(raw).expanduser()
    rec = identity.gateway_of(home)
    if rec is None:
        print(f"no live gateway of {home} (gateway.pid names none, or not this home's): nothing to mark",
              file=sys.stderr)
        return 0
    write_planned_stop_marker(home, rec.pid, rec.start_time)
    # A running gateway stops by itself on the marker: the service manager's SIGTERM must not land in
    # that stop (upstream would take it for an unexpected one), so wait for the exit then.
    if await_marked_stop(home, rec):
        print(f"gateway PID {rec.pid} in {home} took the planned-stop marker and has exited")
    else:
        print(f"planned-stop marker written for gateway PID {rec.pid} in {home}")
    return 0
