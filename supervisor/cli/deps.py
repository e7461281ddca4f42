"""``hermesd install-deps [PROFILE…] [--dry-run]``: install what the enabled platforms need, once.

hermesd runs every gateway with ``HERMES_DISABLE_LAZY_INSTALLS=1`` so that twenty gateways never
race pip installs into one shared environment. This command is the other half: it collects, over
the chosen profiles, every enabled platform whose library the gateway command's interpreter lacks
(:mod:`supervisor.hermes.requirements`), prints the one ``<python> -m pip install …`` command that fixes
them all, and runs it once. Two invocations never race either: the install runs under an
``flock`` on ``<root>/.hermesd/install-deps.lock``; the second waits, then checks again and
usually finds nothing left to do.

Exit 0: nothing was missing, or the install worked and the check now passes (or ``--dry-run``).
Exit 1: pip failed, or something is still missing (a program or sidecar pip cannot install).
"""

from __future__ import annotations

import argparse
import contextlib
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from supervisor.cli.common import Commands, check_names, root_of
from supervisor.exits import Failure, UserError
from supervisor.layout import Layout

if TYPE_CHECKING:
    from supervisor.hermes.requirements import Facts, Finding

HELP = "install the libraries the profiles' enabled platforms need, into the gateway's interpreter"
EXAMPLE = "hermesd install-deps coder --dry-run"
LOCK_NAME = "install-deps.lock"
PIP_TIMEOUT_S = 1800.0


def register(commands: Commands) -> None:
    p = commands.add("install-deps", cmd_install_deps, HELP, EXAMPLE,
                     description=HELP + ".\nRuns pip once, serially (a lock in <root>/.hermesd), with the same "
                                        "pins upstream's own lazy installer uses.\nExit 0 done or nothing to do, "
                                        "1 pip failed or something is still missing, 2 usage error.")
    p.add_argument("profiles", nargs="*", metavar="PROFILE", help="profiles to consider (default: every one)")
    p.add_argument("--dry-run", action="store_true", help="print the command, install nothing")


def _collect(root: Path, names: list[str] | None) -> tuple[list[Finding], Facts | None]:
    from supervisor import config as config_mod  # run-time only (see cli/__init__)
    from supervisor.hermes import requirements  # run-time only (see cli/__init__)
    from supervisor.processes import childspec  # run-time only (see cli/__init__)

    try:
        return requirements.collect(root, names, None, None)
    except childspec.GatewayCommandError as exc:
        raise Failure(str(exc)) from None
    except config_mod.ConfigError as exc:
        raise UserError(f"hermesd.yaml: {exc}") from None


def _describe(found: list[Finding]) -> list[str]:
    lines = []
    for finding in found:
        hint = f" ({finding.hint})" if finding.hint else ""
        lines.append(f"  {finding.profile}: {finding.platform} (missing: {', '.join(finding.missing)}){hint}")
    return lines


def cmd_install_deps(args: argparse.Namespace) -> int:
    from profiles.discovery import profiles_to_serve  # run-time only (see cli/__init__)
    from supervisor.hermes.requirements import install_command, merge_specs  # run-time only (see cli/__init__)
    from supervisor.processes import lockfile  # run-time only (see cli/__init__)

    root = root_of(args)
    names = None
    if args.profiles:
        names = check_names(list(args.profiles), [n for n, _ in profiles_to_serve(True, root=root)])
    found, facts = _collect(root, names)
    if facts is not None and not facts.ok:
        print(f"hermesd: cannot check the gateway's interpreter: {facts.error}", file=sys.stderr)
        return 1
    if not found:
        print("nothing to install: every enabled platform has what it needs")
        return 0
    print("missing:")
    print("\n".join(_describe(found)))
    specs = merge_specs(f.specs for f in found)
    command = install_command(facts, specs) if facts is not None else None
    if command is None:
        print("pip cannot install what is missing; see the hints above", file=sys.stderr)
        return 1
    print(command)
    if args.dry_run:
        return 0
    affected = sorted({f.profile for f in found})
    layout = Layout(root)
    with lockfile.held(layout, layout.dir / LOCK_NAME, lambda pid: print(
            f"waiting for another 'hermesd install-deps' (PID {pid}) to finish…", file=sys.stderr)):
        # Another invocation may have installed it while we waited: check again (the cache sees
        # the changed site-packages and asks the interpreter afresh).
        found, facts = _collect(root, names)
        specs = merge_specs(f.specs for f in found)
        command = install_command(facts, specs) if facts is not None else None
        if command is None or facts is None:
            return _finish(root, names, affected, installed=False)
        argv = [facts.executable or facts.interpreter[-1], "-m", "pip", "install", *specs]
        try:
            code = subprocess.run(argv, stdin=subprocess.DEVNULL, timeout=PIP_TIMEOUT_S, check=False).returncode
        except (OSError, subprocess.TimeoutExpired) as exc:
            print(f"hermesd: pip did not run to completion: {exc}", file=sys.stderr)
            return 1
        if code != 0:
            print(f"hermesd: pip failed (exit {code}); nothing else was changed", file=sys.stderr)
            return 1
    return _finish(root, names, affected, installed=True)


def _finish(root: Path, names: list[str] | None, affected: list[str], *, installed: bool) -> int:
    """Check again after the install; tell the running daemon, and which gateways need a restart."""
    left, _facts = _collect(root, names)
    if left:
        print("still missing after the install:", file=sys.stderr)
        print("\n".join(_describe(left)), file=sys.stderr)
        return 1
    _tell_daemon(root)
    print("installed" if installed else "nothing left to install (another install-deps did it)")
    print(f"restart the gateways so they load it: hermesd restart {' '.join(affected)}")
    return 0


def _tell_daemon(root: Path) -> None:
    """Ask a running daemon to re-read everything, so status stops reporting what is now installed."""
    from supervisor.control.client import Client, ControlError  # run-time only (see cli/__init__)

    with contextlib.suppress(ControlError, OSError):
        Client(Layout(root)).call("reload", wait=10.0)
