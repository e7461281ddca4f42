"""Doctor checks that ask the gateway's own interpreter: which hermes-agent release it runs (and
whether hermesd supports it), and whether each enabled platform's libraries are there.

Both answers come from one cached probe of that interpreter (:mod:`supervisor.requirements`), the
same one the daemon uses, so doctor and ``status`` cannot disagree about them. The same probe says
where hermes-agent is installed, so doctor also names every gateway still running older code than
that (:mod:`supervisor.codeid`, the rule ``status`` applies).
"""

from __future__ import annotations

from supervisor.doctor.scan import Scan
from supervisor.plan.verdict import ERROR, WARNING, HoldKind


def check_gateway_interpreter(scan: Scan) -> None:
    from profiles.upstream.releases import Unsupported, contract_for
    from supervisor import childspec
    from supervisor import config as config_mod
    from supervisor.requirements import interpreter_facts, requirement_findings

    if scan.config is None or not scan.config_ok:
        return
    try:
        command = childspec.resolve_gateway_command(list(scan.config.command) if scan.config.command else None,
                                                    scan.env.get("PATH"))
    except childspec.GatewayCommandError:
        return  # check_command has said so
    facts = interpreter_facts(command, env=dict(scan.env))
    if facts.version:
        contract = contract_for(facts.version)
        if isinstance(contract, Unsupported):
            scan.add(ERROR, HoldKind.UNSUPPORTED_RELEASE.doctor_code, None,
                     f"{contract.message}; hermesd holds every profile ({HoldKind.UNSUPPORTED_RELEASE.value})",
                     HoldKind.UNSUPPORTED_RELEASE.fix)
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
    from profiles.upstream import files as gf
    from supervisor import childspec, codeid, identity
    from supervisor import state as state_mod
    from supervisor.layout import Layout
    from supervisor.requirements import interpreter_facts
    from supervisor.status import stale_note

    if scan.config is None or not scan.config_ok:
        return
    try:
        command = childspec.resolve_gateway_command(list(scan.config.command) if scan.config.command else None,
                                                    scan.env.get("PATH"))
    except childspec.GatewayCommandError:
        return
    installed = codeid.installed_now(interpreter_facts(command, env=dict(scan.env)).dist_info)
    if installed is None:
        return
    saved = state_mod.load(Layout(scan.root).state, identity.boot_id())
    for prof in scan.profiles:
        live = gf.live_gateway(prof.home)
        if live is None:
            continue
        rec = saved.profiles.get(prof.name, {})
        found = codeid.view(prof.home, live.pid, started_wall=identity.proc_start_wall(live.pid), installed=installed,
                            recorded=state_mod.recorded_code(rec, live.pid, live.start_time))
        if found is not None and found.stale:
            scan.add(WARNING, "stale_code", prof.name,
                     f"the gateway (PID {live.pid}) {stale_note(found.to_json()).removeprefix('stale code: ')}; "
                     "a first import of a changed module can fail in it ('cannot import name …')",
                     f"hermesd upgrade --root {scan.root} (one gateway at a time, each health-checked), "
                     f"or hermesd restart {prof.name}")
