"""What the gateway command's interpreter says: the hermes-agent release it runs (and so the contract
hermesd follows with it) and which enabled platforms lack their libraries.

Both come from one cached probe (:mod:`supervisor.requirements`), run in the daemon's reader pool
(:func:`ask`, :class:`Requirements`) so a slow interpreter never delays a respawn or a control
request; :func:`read_release` turns the answer into the :class:`Release` the settings in force are
built with (:mod:`supervisor.daemon.effective`). The probe also says where hermes-agent is installed; the
code identity found there (:mod:`supervisor.codeid`, a ``stat`` while nothing changed) is recorded
for every child at its spawn, so ``status`` can tell which gateways run older code than is installed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Executor
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from profiles.snapshot import ProfileFacts
from profiles.upstream.releases import Unsupported, newer_than_known_note
from supervisor import childspec, requirements
from supervisor.plan.model import Profile
from supervisor.plan.verdict import Hold, HoldKind
from supervisor.requirements import Facts

if TYPE_CHECKING:
    from profiles.upstream.releases import Contract
    from supervisor.daemon.effective import Effective, InForce

log = logging.getLogger("hermesd")


class Release(NamedTuple):
    """What the gateway command's interpreter said about hermes-agent."""

    facts: Facts | None = None  # the interpreter's answer (version, where hermes-agent is installed)
    contract: Contract | None = None  # the measured contract hermesd follows (None: unknown or refused)
    problem: str | None = None  # why the release is unknown, or why it is refused
    hold: Hold | None = None  # a release hermesd will not run: every profile is held with this

    @property
    def version(self) -> str | None:
        return self.facts.version if self.facts is not None else None

    @property
    def dist_info(self) -> str | None:
        """Where hermes-agent is installed (its ``*.dist-info`` folder): :mod:`supervisor.codeid` starts there."""
        return self.facts.dist_info if self.facts is not None else None


def ask(command: Sequence[str], env: Mapping[str, str]) -> Facts:
    """The interpreter's answer (for the reader pool). Cached per interpreter and its site-packages, so a
    reload that changes nothing costs a few ``stat`` calls."""
    return requirements.interpreter_facts(command, env=env)


def read_release(facts: Facts) -> Release:
    """The release in ``facts``: its contract, or why there is none. An unsupported release holds every
    profile with its message (never a crash loop); an unreadable one is logged and the newest contract
    is used."""
    contract = requirements.release_contract(facts)
    if contract is None:
        problem = facts.version_error or facts.error
        log.warning("cannot read the hermes-agent release: %s", problem)
        return Release(facts, None, problem)
    if isinstance(contract, Unsupported):
        log.error("%s", contract.message)
        return Release(facts, None, contract.message, Hold(HoldKind.UNSUPPORTED_RELEASE, contract.message))
    if not contract.exact:
        log.warning("%s", newer_than_known_note(facts.version or "?", contract))
    return Release(facts, contract)


class Requirements:
    """Which enabled platforms of each profile lack a library, for status and ``probe --ready``.

    ``profiles``: the planner's, read only (a profile's files as last read); ``in_force``: the
    settings in force now. Asked in the reader pool: the probe may run the interpreter once, when
    its cache is stale.
    """

    def __init__(self, root: Path, env: Mapping[str, str], pool: Executor, profiles: Mapping[str, Profile],
                 in_force: Callable[[], InForce]) -> None:
        self.root = root
        self.env = env
        self.pool = pool
        self.profiles = profiles
        self.in_force = in_force
        self._missing: dict[str, list[dict[str, Any]]] = {}

    def of(self, name: str) -> list[dict[str, Any]]:
        """``[{platform, missing, install}]`` of ``name``; [] when unknown or fine."""
        return list(self._missing.get(name, []))

    async def check(self, names: Iterable[str]) -> None:
        for name in names:
            p = self.profiles.get(name)
            in_force = self.in_force()
            if p is None or not p.present or p.facts is None or in_force.command is None:
                self._missing.pop(name, None)
                continue
            self._missing[name] = await asyncio.get_running_loop().run_in_executor(
                self.pool, _missing, in_force.command, self.env, self.root, p.facts, in_force.of(name))


def _missing(command: Sequence[str], base_env: Mapping[str, str], root: Path, facts: ProfileFacts,
             settings: Effective) -> list[dict[str, Any]]:
    env = childspec.child_env(base_env, root=root, profile=facts.name, home=facts.home, extra=settings.environment)
    return requirements.missing_for_profile(command, facts.home, facts.env, facts.config, child_env=env)
