"""The doctor's report of the daemon's own verdict: every hold, from the one function the daemon calls."""

from __future__ import annotations

from supervisor.doctor.scan import Scan
from supervisor.isolation.planning import hides_other_profiles
from supervisor.isolation.probing import probe
from supervisor.plan.conflicts import all_conflicts
from supervisor.plan.verdict import WARNING, Candidate, HoldKind, ReleaseRules, judge
from supervisor.processes.identity import gateway_of


def check_verdicts(scan: Scan) -> None:
    """Report exactly what the daemon would hold, and why, from :func:`supervisor.plan.verdict.judge`."""
    assert scan.config is not None
    running = {p.name for p in scan.profiles if gateway_of(p.home, p.name) is not None}
    # A running gateway is taken to use what its files claim (doctor cannot see what it started with).
    candidates = [
        Candidate(p.facts, p.name, active=p.name in running, wants=scan.config.for_profile(p.name).enabled,
                  in_use=p.facts.claims if p.name in running and p.facts is not None else ())
        for p in scan.profiles
    ]
    facts = {p.name: p.facts for p in scan.profiles}
    shared = {claim: names for claim, names in all_conflicts(
        list(facts), {n: f.claims for n, f in facts.items() if f is not None})}
    for name, hold in judge(candidates, rules=_release_rules(scan)).items():
        if hold is None:
            continue
        effect = (f"its running gateway keeps its last good configuration; hermesd holds {name!r} "
                  f"({hold.kind.value}) at its next start" if name in running
                  else f"hermesd holds {name!r} ({hold.kind.value})")
        f = facts.get(name)
        if hold.kind is HoldKind.CONFIG_ERROR and f is not None and f.problems:
            messages = list(f.problems)  # one finding per broken file, each with its file and line
        elif hold.kind in (HoldKind.CREDENTIAL_CONFLICT, HoldKind.PORT_CONFLICT):
            sharing = next((names for claim, names in shared.items()
                            if name in names and claim.describe() in hold.message), [])
            listed = f" (configured in profiles {', '.join(repr(n) for n in sharing)})" if sharing else ""
            note = scan.salt_note if hold.kind is HoldKind.CREDENTIAL_CONFLICT else ""
            messages = [f"{hold.message}{listed}{note}"]
        else:
            messages = [hold.message]
        for what in messages:
            scan.add(hold.kind.severity, hold.kind.doctor_code, name, f"{what}; {effect}", hold.kind.fix)
    # Two profiles that both run with one credential: nobody is held, and upstream's lock makes
    # them take turns with it. Worth saying, but it is not a hold.
    claims = {p.name: p.facts.claims for p in scan.profiles if p.name in running and p.facts is not None}
    for claim, names in all_conflicts(list(claims), claims):
        scan.add(
            WARNING, "shared_while_running", names[1],
            f"{claim.describe()} is used by the running gateways of {', '.join(repr(n) for n in names)}: upstream "
            "makes them take turns with it (or one cannot bind the port)",
            f"give profile {names[1]!r} its own {claim.platform} settings, then 'hermesd restart {names[1]}'",
        )


def _release_rules(scan: Scan) -> ReleaseRules | None:
    """The release rules the daemon builds into its settings (:func:`supervisor.daemon.effective.build`),
    from what doctor learned."""
    if scan.contract is None or scan.config is None:
        return None

    hidden = hides_other_profiles(scan.config.isolation_for("default"), probe())
    return ReleaseRules.of(scan.contract, scan.version, default_hidden=hidden)
