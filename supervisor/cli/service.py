"""``hermesd install-service``: hermesd as a systemd (user or system) service, or a launchd agent.

The unit's text and the steps that enable it are :mod:`supervisor.ops.service`'s.
"""

from __future__ import annotations

import argparse

from supervisor.cli.common import Commands, root_of

HELP = "install hermesd as a systemd (user or system) service, or a launchd agent on macOS"


def register(commands: Commands) -> None:
    p = commands.add("install-service", cmd_install_service, HELP, (
        "hermesd install-service --dry-run",
        "sudo hermesd install-service --system --run-as alice --root ~alice/.hermes"),
        description=HELP + ".\nThe unit runs this hermesd with --root; gateways survive a hermesd crash "
                           "(KillMode=process) and are adopted by the restarted hermesd.")
    p.add_argument("--system", action="store_true", help="a system unit in /etc/systemd/system (run as root)")
    p.add_argument("--run-as", metavar="USER",
                   help="with --system: the account hermesd runs as (default: the root folder's owner)")
    p.add_argument("--dry-run", action="store_true", help="print the unit and the commands; change nothing")
    p.add_argument("--dest", metavar="DIR", help="write the unit into DIR instead, and do not enable it")
    p.add_argument("--manager", choices=("systemd", "launchd"), help="default: launchd on macOS, else systemd")


def cmd_install_service(args: argparse.Namespace) -> int:
    from supervisor.ops import service  # run-time only (see cli/__init__)

    return service.install_service(root_of(args), manager=args.manager, system=bool(args.system),
                                   run_as=args.run_as, dest=args.dest, dry_run=bool(args.dry_run))
