"""``hermesd doctor``: the checks of :mod:`supervisor.doctor`, printed for people or as JSON."""

from __future__ import annotations

import argparse
import json

from supervisor.cli.common import Commands, root_of


def register(commands: Commands) -> None:
    p = commands.add("doctor", cmd_doctor,
                     "check a root for everything that would stop or confuse its gateways (exit 1 on any error)",
                     "hermesd doctor --json")
    p.add_argument("--json", action="store_true", help="one JSON document")


def cmd_doctor(args: argparse.Namespace) -> int:
    from supervisor import doctor  # run-time only (see cli/__init__)

    root = root_of(args)
    findings = doctor.diagnose(root)
    if args.json:
        print(json.dumps(doctor.to_json(root, findings), indent=2))
    else:
        print(f"hermesd doctor: {root}")
        print(doctor.render(findings))
    return doctor.exit_code(findings)
