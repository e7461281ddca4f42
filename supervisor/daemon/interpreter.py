"""Which enabled platforms of each profile lack their libraries, as the gateway command's interpreter says.

The answer comes from the same cached probe (:mod:`supervisor.hermes.requirements`) that tells the release
(:func:`supervisor.daemon.effective.ask`), run in the daemon's reader pool so a slow interpreter
never delays a respawn or a control request.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Executor
from pathlib import Path
from typing import Any

from profiles.snapshot import ProfileFacts
from supervisor.daemon.effective import Effective, InForce
from supervisor.hermes import requirements
from supervisor.plan.model import Profile
from supervisor.processes import childspec


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
