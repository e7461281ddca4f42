"""Reading the profiles' files off the loop: one read per profile at a time, repeated when asked again.

A profile's files are hostile input that may be slow to read (a FIFO, a huge file, a slow disk),
so :func:`profiles.snapshot.read_profile` runs in the daemon's reader thread and never delays
another profile's respawn or a control request. A change that arrives while the profile is being
read is not lost and not read twice at once: the running read is simply repeated once it ends.
Each result goes to ``on_read`` on the loop, awaited, so whoever awaits :meth:`Reads.read` (a
``restart`` judging the files as they are now) knows it has been taken in.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping
from concurrent.futures import Executor
from typing import Any

from profiles.snapshot import ProfileFacts, read_profile
from profiles.upstream.lines import RuleLine
from supervisor.plan.model import Profile


class Reads:
    """See the module docstring. ``profiles``: the planner's, read only (which profiles exist, and
    where); ``salt``: the root's fingerprint salt; ``line``: the installed release's rules for reading
    a profile's files; ``spawn``: runs a coroutine as one of the loop's tasks."""

    def __init__(self, pool: Executor, profiles: Mapping[str, Profile], salt: Callable[[], bytes],
                 line: Callable[[], RuleLine], on_read: Callable[[ProfileFacts], Awaitable[None]],
                 spawn: Callable[[Coroutine[Any, Any, Any]], None]) -> None:
        self.pool = pool
        self.profiles = profiles
        self.salt = salt
        self.line = line
        self.on_read = on_read
        self.spawn = spawn
        self._reading: set[str] = set()
        self._again: set[str] = set()

    def refresh(self, names: Iterable[str]) -> None:
        """Re-read these profiles' files; a read already running is simply repeated after."""
        for name in names:
            if name in self._reading:
                self._again.add(name)
            else:
                self.spawn(self.read(name))

    async def read(self, name: str) -> ProfileFacts | None:
        """Read ``name``'s files now (None: the profile is gone) and hand them to ``on_read``."""
        loop = asyncio.get_running_loop()
        self._reading.add(name)
        try:
            while True:
                p = self.profiles.get(name)
                if p is None or not p.present:
                    return None
                facts = await loop.run_in_executor(self.pool, read_profile, name, p.home, self.salt(), self.line())
                await self.on_read(facts)
                if name not in self._again:
                    return facts
                self._again.discard(name)
        finally:
            self._reading.discard(name)
