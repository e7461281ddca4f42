"""The settings in force: hermesd.yaml and the installed release, merged once per change of either.

hermesd.yaml layers its settings (defaults, the top level, a profile's own section), and the
installed hermes-agent release changes what some of them mean (a release that writes no heartbeat
cannot be judged hung by the heartbeat's age; which profiles the default gateway would fold in
depends on its confinement). The loop builds one :class:`InForce` each time hermesd.yaml is
loaded (the release is asked at the same moment); spawn, the hung and limits guard, status, the
requirement check and the kanban hand-off read a profile's :class:`Effective` from it, and the
planner gets its :class:`~supervisor.plan.planner.Settings` from the same merge, so no two of
them can disagree about a profile and nothing merges again between two changes.

:func:`load` reads: hermesd.yaml and the interpreter's answer (:func:`ask`, :func:`read_release`: the
release it runs and so the contract hermesd follows) in the daemon's reader pool, so a
slow disk or a slow interpreter never delays a respawn or a control request. A malformed file
raises :class:`~supervisor.config.ConfigError` (the loop keeps the settings it had); a command that
cannot be found is no error of the file: it holds every profile, with the reason, until it
appears. :func:`build` is pure: it combines what was found (and is what tests and benchmarks call).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import replace
from typing import TYPE_CHECKING, NamedTuple

from profiles.snapshot import digest_of
from profiles.upstream.lines import RuleLine, unmodelled
from profiles.upstream.releases import Unsupported, newer_than_known_note
from supervisor import config as config_mod
from supervisor.config import Config
from supervisor.hermes import requirements
from supervisor.hermes.requirements import Facts, release_line
from supervisor.isolation.planning import hides_other_profiles
from supervisor.kanban.dispatch import OFF
from supervisor.plan.planner import Settings
from supervisor.plan.verdict import Hold, HoldKind, ReleaseRules
from supervisor.processes import childspec
from supervisor.settings import RESTARTING

if TYPE_CHECKING:
    from profiles.upstream.releases import Contract
    from supervisor.isolation.probing import Probe
    from supervisor.layout import Layout
    from supervisor.settings import HungSettings, IsolationSettings, Limits

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
        """Where hermes-agent is installed (its ``*.dist-info`` folder): :mod:`supervisor.hermes.codeid` starts
        there."""
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


class Effective(NamedTuple):
    """One profile's settings in force."""

    environment: Mapping[str, str]  # what hermesd.yaml adds to the gateway's environment
    isolation: IsolationSettings
    limits: Limits
    hung: HungSettings  # hung_after None: off (also when the release writes no heartbeat)
    # digest of the parts the settings that restart a gateway are carried by (``Setting.restarts``:
    # environment, isolation, limits): a change restarts it. Not the
    # gateway command: a new ``command:`` is new code under the fleet, rolled out like an upgrade (each
    # gateway whose code differs is flagged stale; ``hermesd upgrade`` restarts them canary first, each
    # gated), never all at once by an edit.
    spec: str
    # Its confinement hides the other profiles' homes (a private mount namespace), so upstream's attach
    # check could not reach their gateways' control sockets: the child needs ``--force`` where the release
    # has that check (``Contract.gateway_args_for``). True when the kernel's facts are unknown.
    hidden: bool


class InForce(NamedTuple):
    """Everything the loop and its helpers read about settings until hermesd.yaml or the release changes."""

    config: Config
    command: tuple[str, ...] | None  # the resolved gateway command prefix
    command_error: str | None  # why there is none
    release: Release
    root_hold: Hold | None  # what holds every profile (no valid hermesd.yaml yet, no command, a refused release)
    planner: Settings
    default: Effective  # a profile hermesd.yaml does not name
    named: Mapping[str, Effective]

    def of(self, name: str) -> Effective:
        return self.named.get(name, self.default)

    @property
    def contract(self) -> Contract | None:
        return self.release.contract

    @property
    def line(self) -> RuleLine:
        """How the installed release reads a profile's files (the baseline while it is unknown)."""
        return release_line(self.release.facts)

    @property
    def unmodelled(self) -> dict[str, tuple[str, ...]]:
        """Platforms the installed release ships that hermesd has no rules for, with their variables."""
        return unmodelled(self.line, self.release.facts.platforms) if self.release.facts is not None else {}

    @property
    def scrub(self) -> tuple[str, ...]:
        """Their variables (names, and prefixes ending in ``_``), kept out of every child's environment."""
        return tuple(sorted({v for names in self.unmodelled.values() for v in names}))


def build(cfg: Config, *, command: tuple[str, ...] | None = None, command_error: str | None = None,
          release: Release | None = None, probe: Probe | None = None, root_hold: Hold | None = None) -> InForce:
    """Merge ``cfg`` with the resolved command and the release; ``probe``: the kernel's confinement
    facts (the default gateway's view of the other profiles depends on them); ``root_hold``: a hold
    the caller already knows of (no valid hermesd.yaml), which beats the others."""
    release = release or Release()
    default = _effective(cfg, "", release.contract, probe)
    # The chosen kanban dispatcher's environment differs from every other profile's: its own entry.
    named = {n: _effective(cfg, n, release.contract, probe) for n in {*cfg.profiles, cfg.kanban_dispatcher} - {OFF}}
    rules = None
    if release.contract is not None and probe is not None:
        rules = ReleaseRules.of(release.contract, release.version, default_hidden=named.get("default", default).hidden)
    if root_hold is None:
        root_hold = release.hold or (Hold(HoldKind.NO_COMMAND, command_error) if command_error else None)
    planner = Settings(
        policy=cfg.restart,
        disabled=frozenset(n for n, s in cfg.profiles.items() if not s.enabled),
        stop_timeout=cfg.stop_timeout,
        stop_timeouts={n: s.stop_timeout for n, s in cfg.profiles.items() if s.stop_timeout is not None},
        specs={n: e.spec for n, e in named.items()},
        default_spec=default.spec,
        # The cores: a slot frees the moment a gateway reports running, so one start-up per core
        # keeps them busy (tests/benchmarks/storm.py, N = 20 real gateways on 2 cores: 2 slots
        # reach the mean/last running at 0.61-0.66/1.08-1.18x the CPU floor, 3 slots at
        # 0.67-0.71/1.16-1.26x, all at once 1.29/1.35x).
        max_starting=cfg.max_starting or (os.cpu_count() or 1),
        release=rules,
    )
    return InForce(cfg, command, command_error, release, root_hold, planner, default, named)


def _effective(cfg: Config, name: str, contract: Contract | None, probe: Probe | None) -> Effective:
    environment = cfg.child_environment(name)
    isolation = cfg.isolation_for(name)
    limits = cfg.limits_for(name)
    hung = cfg.hung_for(name)
    if contract is not None and not contract.heartbeat:
        hung = replace(hung, hung_after=None)  # no heartbeat: "no beat" or an old beat says nothing
    hidden = probe is None or hides_other_profiles(isolation, probe)
    parts = {"environment": environment, "isolation": isolation, "limits": limits}
    spec = digest_of({part: repr(parts[part]) for part in RESTARTING})
    return Effective(environment, isolation, limits, hung, spec, hidden)


async def load(layout: Layout, env: Mapping[str, str], pool: Executor, probe: Probe | None) -> InForce:
    """hermesd.yaml of ``layout``'s root merged with its command and release (``env``: hermesd's own
    environment, whose PATH finds the command; ``probe``: the kernel's confinement facts)."""
    loop = asyncio.get_running_loop()
    cfg = await loop.run_in_executor(pool, config_mod.load, layout.config)
    command, command_error, release = None, None, None
    try:
        command = tuple(childspec.resolve_gateway_command(cfg.command, env.get("PATH")))
    except childspec.GatewayCommandError as exc:
        command_error = str(exc)
        log.error("%s", exc)
    if command is not None:
        release = read_release(await loop.run_in_executor(pool, ask, command, env))
    return build(cfg, command=command, command_error=command_error, release=release, probe=probe)
