"""Doctor checks that ask the gateway's own interpreter: which hermes-agent release it runs (and
whether hermesd supports it), and whether each enabled platform's libraries are there.

Both answers come from one cached probe of that interpreter (:mod:`supervisor.hermes.requirements`), the
same one the daemon uses, so doctor and ``status`` cannot disagree about them. The same probe says
where hermes-agent is installed, so doctor also names every gateway still running older code than
that (:mod:`supervisor.hermes.codeid`, the rule ``status`` applies).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from profiles.upstream import files as gf
from profiles.upstream.lines import unmodelled
from profiles.upstream.releases import Unsupported, newer_than_known_note
from supervisor import config as config_mod
from supervisor.daemon import state as state_mod
from supervisor.doctor.scan import Scan
from supervisor.hermes import codeid
from supervisor.hermes.release import HermesVersionError, interpreter_argv
from supervisor.hermes.requirements import interpreter_facts, release_contract, release_line, requirement_findings
from supervisor.layout import Layout
from supervisor.ops.status import stale_note
from supervisor.plan.verdict import ERROR, INFO, WARNING, HoldKind
from supervisor.processes import childspec, identity, lockholder
from supervisor.processes.childspec import unmodelled_note


def check_gateway_interpreter(scan: Scan) -> None:
    if scan.config is None or not scan.config_ok:
        return
    try:
        command = childspec.resolve_gateway_command(scan.config.command, scan.env.get("PATH"))
    except childspec.GatewayCommandError:
        return  # check_command has said so
    scan.command = command
    facts = interpreter_facts(command, env=dict(scan.env))
    contract = release_contract(facts)
    scan.version = facts.version
    scan.line = release_line(facts)
    scan.unmodelled = unmodelled(scan.line, facts.platforms)
    note = unmodelled_note(facts.version, scan.unmodelled)
    if note:
        scan.add(WARNING, "unmodelled_platforms", None, note,
                 "check the profiles that use them by hand, or use a hermesd release that knows this hermes-agent "
                 "release")
    if isinstance(contract, Unsupported):
        scan.add(ERROR, HoldKind.UNSUPPORTED_RELEASE.doctor_code, None,
                 f"{contract.message}; hermesd holds every profile ({HoldKind.UNSUPPORTED_RELEASE.value})",
                 HoldKind.UNSUPPORTED_RELEASE.fix)
    elif contract is not None:
        scan.contract = contract
        if not contract.exact:
            scan.add(WARNING, "release_newer_than_known", None, newer_than_known_note(facts.version or "?", contract),
                     "run 'bash scripts/test-releases.sh' from hermesd's source against this release, or pin a "
                     "measured one")
        if contract.multiplex_default:
            force = ("hermesd starts every gateway with --force" if contract.force_flag else
                     "hermesd starts with --force only a gateway whose confinement hides the other profiles "
                     "(upstream's own attach check guards the others)")
            scan.add(INFO, "release_multiplex_default", None,
                     f"hermes-agent {facts.version} follows upstream's one-gateway-per-host line: {force}, and a named "
                     "profile needs 'gateway.standalone: true' in its own config.yaml to keep a gateway of its own",
                     "nothing to do when 'hermesd standalone' has run; see docs/upstream.md")
    guard = duplicate_guard_problem(command)
    if guard:
        scan.add(WARNING, "command_defeats_duplicate_guard", None, guard,
                 f"set 'command: [{_interpreter_of(command, scan.env)}, -m, hermes_cli.main]' in hermesd.yaml")
    try:
        found = requirement_findings(scan.root, command=command, env=dict(scan.env))
    except (childspec.GatewayCommandError, config_mod.ConfigError):
        return
    for f in found:
        what = ", ".join(f.missing)
        fix = f.install or f.hint or "install what is missing into the gateway's environment"
        if f.install:
            fix = f"{fix} (or: hermesd install-deps {f.profile} --root {scan.root})"
        scan.add(ERROR, "platform_requirements_missing", f.profile,
                 f"{f.platform} is enabled by the files of profile {f.profile!r}, but the gateway's interpreter lacks "
                 f"{what}: upstream never starts {f.platform} there (lazy installs are off under hermesd), while "
                 "the gateway itself runs", fix)


def check_stale_code(scan: Scan) -> None:
    """A gateway that runs older code than is installed (a ``pip install`` nobody restarted after)."""
    if scan.command is None:
        return  # no usable configuration or command (check_gateway_interpreter resolves it)
    installed = codeid.installed_now(interpreter_facts(scan.command, env=dict(scan.env)).dist_info)
    if installed is None:
        return
    saved = state_mod.load(Layout(scan.root).state, identity.boot_id())
    rolling = lockholder.fleet_operation(Layout(scan.root))
    for prof in scan.profiles:
        live = gf.live_gateway(prof.home)
        if live is None:
            continue
        rec = saved.profiles.get(prof.name, {})
        found = codeid.view(prof.home, live.pid, started_wall=identity.proc_start_wall(live.pid), installed=installed,
                            recorded=state_mod.recorded_code(rec, live.pid, live.start_time))
        if found is not None and found.stale:
            note = stale_note(found.to_json(), rolling=rolling is not None).removeprefix("stale code: ")
            scan.add(WARNING, "stale_code", prof.name,
                     f"the gateway (PID {live.pid}) {note}; "
                     "a first import of a changed module can fail in it ('cannot import name …')",
                     f"wait for the fleet operation running now (PID {rolling}) to finish" if rolling is not None
                     else f"hermesd upgrade --root {scan.root} (one gateway at a time, each health-checked), "
                     f"or hermesd restart {prof.name}")


def duplicate_guard_problem(command: list[str]) -> str | None:
    """Why upstream's own duplicate-gateway guard cannot see hermesd's children run as ``command``, or None.

    Upstream takes a recorded gateway for a live one only when its command line names ``hermes`` (the
    basename) or ``hermes_cli.main`` (``gateway/status.py _gateway_command_subcommand``); a renamed
    console script (``hermesx``, a wrapper) makes every record look stale, so a manual ``hermes -p X
    gateway run`` starts a second gateway beside hermesd's.
    """
    words = [os.path.basename(w).lower() for w in command]
    if any(w in ("hermes", "hermes.exe") for w in words) or any("hermes_cli.main" in w or "hermes_cli/main.py" in w
                                                                 for w in command):
        return None
    return (f"the gateway command {' '.join(command)!r} names neither 'hermes' nor 'hermes_cli.main': upstream's "
            "duplicate-gateway guard does not recognise its gateways, so a manual 'hermes -p NAME gateway run' starts "
            "a second gateway beside hermesd's (hermesd then stops its own, to keep one)")


def _interpreter_of(command: list[str], env: Mapping[str, str]) -> str:
    try:
        interp = interpreter_argv(command, env.get("PATH"))
    except HermesVersionError:
        interp = None
    return interp[0] if interp else "/path/to/python"
