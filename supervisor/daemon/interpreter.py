"""What the gateway command's interpreter says, asked off the loop: the hermes-agent release it runs
(and so the contract hermesd follows with it) and which enabled platforms lack their libraries.

Both come from one cached probe (:mod:`supervisor.requirements`), run in the daemon's reader pool
so a slow interpreter never delays a respawn or a control request. The probe also says where
hermes-agent is installed; the code identity found there (:mod:`supervisor.codeid`, a ``stat`` while
nothing changed) is recorded for every child at its spawn, so ``status`` can tell which gateways run
older code than is installed.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING

from supervisor import childspec, codeid
from supervisor.codeid import CodeId, Installed
from supervisor.plan.verdict import Hold, HoldKind, ReleaseRules

if TYPE_CHECKING:
    from supervisor.config import Config
    from supervisor.daemon.loop import Daemon
    from supervisor.plan.planner import Settings

log = logging.getLogger("hermesd")


async def learn_release(d: Daemon, command: list[str]) -> Hold | None:
    """Ask the gateway command's interpreter its release (in the reader pool, never on the loop).

    Cached per interpreter and its site-packages, so a reload that changes nothing costs a few
    ``stat`` calls. An unsupported release holds every profile with its message (never a crash
    loop); an unreadable one is logged and the newest contract is used.
    """
    import functools

    from profiles.upstream.releases import Unsupported, newer_than_known_note
    from supervisor import requirements

    facts = await d.loop().run_in_executor(
        d.pool, functools.partial(requirements.interpreter_facts, command, env=d.env))
    d.domains.facts = facts
    contract = requirements.release_contract(facts)
    if contract is None:
        d.contract, d.release_problem = None, facts.version_error or facts.error
        log.warning("cannot read the hermes-agent release: %s", d.release_problem)
        return None
    if isinstance(contract, Unsupported):
        d.contract, d.release_problem = None, contract.message
        log.error("%s", contract.message)
        return Hold(HoldKind.UNSUPPORTED_RELEASE, contract.message)
    d.contract, d.release_problem = contract, None
    if not contract.exact:
        log.warning("%s", newer_than_known_note(facts.version or "?", contract))
    return None

def installed(d: Daemon) -> Installed | None:
    """The hermes-agent code installed now (a ``stat`` while nothing changed; see :mod:`supervisor.codeid`)."""
    return codeid.installed_now(getattr(d.domains.facts, "dist_info", None))


def code_now(d: Daemon) -> CodeId | None:
    """The code a gateway spawned now starts with: read from disk at the spawn, not from the last
    probe, so a ``pip install`` the daemon has not been told about is still recorded right."""
    found = installed(d)
    return found.code if found is not None else None


def planner_settings(d: Daemon, cfg: Config) -> Settings:
    """hermesd.yaml's settings for the planner, with what the installed release asks of the files."""
    return dataclasses.replace(cfg.planner_settings(), release=release_rules(d))


def release_rules(d: Daemon) -> ReleaseRules | None:
    """What the installed release asks of the profiles' files (None: release unknown), for the planner.

    The default profile's gateway folds in the named profiles it can see; whether it can is its
    confinement's business (a private mount namespace hides them).
    """
    from supervisor.isolation.plan import hides_other_profiles

    contract = d.contract
    if contract is None or d.domains.probe is None:
        return None
    hidden = hides_other_profiles(d.config.isolation_for("default"), d.domains.probe)
    return ReleaseRules.of(contract, getattr(d.domains.facts, "version", None), default_hidden=hidden)


async def check_requirements(d: Daemon, names: list[str]) -> None:
    """Which enabled platforms of these profiles lack a library, for status and ``probe --ready``."""
    import functools

    from supervisor import requirements

    for name in names:
        p = d.planner.profiles.get(name)
        command = d.command
        if p is None or not p.present or p.facts is None or command is None:
            d.domains.requirements.pop(name, None)
            continue
        env = childspec.child_env(d.env, root=d.root, profile=name, home=p.home,
                                  extra=d.config.child_environment(name))
        d.domains.requirements[name] = await d.loop().run_in_executor(d.pool, functools.partial(
            requirements.missing_for_profile, command, p.home, p.facts.env, p.facts.config, child_env=env))
