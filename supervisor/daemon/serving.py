"""What each child really serves, a second gateway beside ours, and upstream's config rewrites, as findings.

On the multiplex-default line a gateway reports the profiles it serves (``served_profiles`` in its
state file, ``identify`` on its ``gateway.sock``); anything beyond its own profile is a gateway
folding others in. A live gateway that hermesd did not start, recorded in the home of a profile our
child serves, is a second poller. This collaborator only reads, off the loop where it must
(``identify`` runs in the reader pool), keeps what it read for ``status``, and hands each finding
to the loop through :class:`Findings`: the loop gives a child serving others and a rival to the
planner, which decides (``served``, ``rival``), and journals a rewrite.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from profiles.discovery import REASON_NO_IDENTITY, profiles_to_serve, unserved_profile_dirs
from profiles.names import DEFAULT_PROFILE
from profiles.printable import printable
from profiles.upstream import files as gf
from profiles.upstream.bools import coerce_bool
from profiles.upstream.multiplex import REWRITTEN_MARKER, SERVED_KEY, multiplex_flag, others_served
from profiles.upstream.process import GatewayState
from supervisor.plan.model import Profile
from supervisor.processes import identity

if TYPE_CHECKING:
    from profiles.snapshot import ProfileFacts
    from profiles.upstream.releases import Contract
    from supervisor.watch.classify import FsEvents

log = logging.getLogger("hermesd")

IDENTIFY_EVERY_S = 30.0  # upstream's gateways rescan profiles/ every 30 s
IDENTIFY_RETRIES = 10  # a new gateway's socket not answering yet: asked again this often...
IDENTIFY_RETRY_S = 1.0  # ... this far apart


@dataclass(slots=True)
class _Seen:
    """What was learned about one profile's current gateway (a new gateway starts afresh)."""

    pid: int
    identify: dict[str, Any] | None = None  # its last identify answer, or the error asking it
    served_state: list[str] | None = None  # the profiles its state file says it serves
    identify_tries: int = 0
    identify_asked: bool = False  # asked once it first said "running"
    identify_at: float = field(default_factory=time.monotonic)  # then again every IDENTIFY_EVERY_S


class Findings(Protocol):
    """Where the findings go (the loop)."""

    def handle_served(self, name: str, pid: int, others: Sequence[str], source: str) -> None:
        """Our child ``pid`` of ``name`` serves ``others`` too (``source``: how it said so)."""

    def handle_rival(self, name: str, pid: int, how: str) -> None:
        """A live gateway ``pid`` that hermesd did not start serves ``name`` beside our child."""

    def handle_rewrite(self, file: Path, marker: Path | None) -> None:
        """A gateway turned upstream's one-gateway-per-host default on in ``file`` (``marker``: the one it left)."""


class Serving:
    """See the module docstring.

    ``profiles``: the planner's, read only; ``holds(pid)``: whether hermesd runs that process;
    ``spawn``: runs a coroutine as one of the loop's tasks; ``pool``: the reader thread.
    """

    def __init__(self, root: Path, pool: Executor, profiles: Mapping[str, Profile], holds: Callable[[int], bool],
                 findings: Findings, spawn: Callable[[Coroutine[Any, Any, None]], None]) -> None:
        self.root = root
        self.pool = pool
        self.profiles = profiles
        self.holds = holds
        self.findings = findings
        self.spawn = spawn
        self.rewrite_note: str | None = None  # a gateway rewrote the root's config.yaml (upstream's marker)
        self.candidates: list[Path] = []  # folders under profiles/ that lack only an identity file (watched)
        self._rewrite_seen: float | None = None
        self._seen: dict[str, _Seen] = {}

    def discover(self, contract: Contract | None) -> list[tuple[str, Path]]:
        """The profiles to serve as the installed release defines a profile (its identity files), and
        the folders that lack only such a file, which are watched all the same: the file that makes one
        a profile is written inside it (``hermes profile create`` writes it after the mkdir)."""
        markers = contract.identity_markers if contract is not None else ()
        served = profiles_to_serve(True, root=self.root, identity=markers)
        self.candidates = [path for _n, path, why in unserved_profile_dirs(self.root, identity=markers)
                           if why == REASON_NO_IDENTITY] if markers else []
        return served

    def on_events(self, ev: FsEvents) -> None:
        if ev.rewritten:
            self.note_rewrite()

    def check(self, name: str, gstate: dict[str, Any], contract: Contract | None) -> None:
        """A profile's gateway wrote its state or PID file: what our child serves, and a second gateway."""
        p = self.profiles[name]
        if p.child is not None and gstate.get("pid") == p.child.ident.pid:
            self._check_state(p, p.child.ident.pid, gstate, _has_socket(contract))
        self.check_rival(name)

    def _seen_of(self, name: str, pid: int) -> _Seen:
        seen = self._seen.get(name)
        if seen is None or seen.pid != pid:  # a new gateway: what the previous one served says nothing
            seen = self._seen[name] = _Seen(pid)
        return seen

    def _check_state(self, p: Profile, pid: int, gstate: dict[str, Any], socket: bool) -> None:
        """Our child ``pid`` rewrote its state file: its served set, and (once running) ask it directly."""
        name = p.name
        seen = self._seen_of(name, pid)
        state = gstate.get("gateway_state")
        # Upstream's read-merge-write keeps a previous gateway's served_profiles in the file until the
        # new one reaches "running" and stamps its own: before that the list is stale.
        others = others_served(gstate.get(SERVED_KEY), name) if state == GatewayState.RUNNING else None
        if others is not None:
            seen.served_state = [name, *others]
        if others:
            self.findings.handle_served(name, pid, others, "its gateway_state.json")
        if state == GatewayState.RUNNING and socket and not seen.identify_asked:
            seen.identify_asked = True  # once per gateway, then every IDENTIFY_EVERY_S (housekeeping)
            self.spawn(self.ask_identity(name, pid))

    def housekeeping(self, name: str, contract: Contract | None) -> None:
        """Ask a running child again now and then: a rescan folds profiles in without a state write."""
        p = self.profiles[name]
        if p.child is None or not p.child.ready or not _has_socket(contract):
            return
        seen = self._seen_of(name, p.child.ident.pid)
        now = time.monotonic()
        if now - seen.identify_at >= IDENTIFY_EVERY_S:
            seen.identify_at = now
            self.spawn(self.ask_identity(name, p.child.ident.pid))

    def check_rival(self, name: str) -> None:
        """A live gateway hermesd did not start, recorded in the home of a profile our child serves."""
        p = self.profiles.get(name)
        if p is None or p.child is None:
            return
        try:
            rec = gf.live_gateway(p.home)
        except OSError:  # /proc unreadable now (out of descriptors): asked again at the next check
            return
        if rec is None or rec.pid == p.child.ident.pid or self.holds(rec.pid):
            return
        c = p.child.ident
        if identity.prove_gateway(c.pid, c.start_time, home=p.home, profile=name) is None:
            # Ours is ending (its memory, environment and command line go before it is a zombie) or
            # ended: no second gateway *beside* it. Its exit decides, and finds the one that replaced
            # it (exit_report.read_exit).
            return
        argv = " ".join(identity.proc_cmdline(rec.pid))
        self.findings.handle_rival(name, rec.pid, f"its gateway.pid names it; command: {printable(argv, 200)}")

    def _current(self, name: str, pid: int) -> Profile | None:
        p = self.profiles.get(name)
        return p if p is not None and p.child is not None and p.child.ident.pid == pid else None

    async def ask_identity(self, name: str, pid: int) -> None:
        """``identify`` over the child's gateway.sock (in the reader pool): what it really serves."""
        p = self._current(name, pid)
        if p is None:
            return
        # Imported at the first question: only gateways of the multiplex-default line answer on
        # gateway.sock, and its two modules would cost every other daemon about 50 KB of memory.
        from supervisor.processes import gatewaysock  # at the first question (see above)

        loop = asyncio.get_running_loop()
        try:
            ident = await loop.run_in_executor(self.pool, gatewaysock.identify, p.home, 1.0)
        except gatewaysock.GatewaySockError as exc:
            seen = self._seen_of(name, pid)
            seen.identify = {"error": str(exc)}
            # upstream binds the socket a moment after it writes "running" (later still on a busy host)
            seen.identify_tries += 1
            if seen.identify_tries <= IDENTIFY_RETRIES:
                loop.call_later(IDENTIFY_RETRY_S, lambda: self.spawn(self.ask_identity(name, pid)))
            return
        if self._current(name, pid) is None:
            return
        self._seen_of(name, pid).identify = {**ident.to_json(),
                                             "served": list(ident.served) if ident.served else [name]}
        if ident.pid != pid:
            self.findings.handle_rival(name, ident.pid, "it answers on the profile's gateway.sock")
            return
        others = ident.serves_others(name)
        if others:
            self.findings.handle_served(name, pid, others, "its gateway.sock identify")

    def fields(self, name: str, pid: int) -> dict[str, Any]:
        """For ``status``: what the running child ``pid`` serves, its own ``identify`` answer first, else its
        state file's list (either only once it is about this very child; a restart leaves the previous
        one's for a moment)."""
        seen = self._seen.get(name)
        if seen is None or seen.pid != pid:
            return {}
        ident = seen.identify
        state = seen.served_state
        state_set = sorted(set(state) or {name}) if state is not None else None  # []: only itself
        if ident is not None and isinstance(ident.get("served"), list):
            served = sorted(set(ident["served"]))
            return {"serves": served, "serves_source": "identify", "identify": ident,
                    "serves_agree": state_set is None or state_set == served}
        if state_set is not None:
            return {"serves": state_set, "serves_source": "state file", "identify": ident, "serves_agree": None}
        return {"identify": ident}

    def compare(self, before: ProfileFacts | None, after: ProfileFacts) -> None:
        """The default profile's config.yaml changed: did ``multiplex_profiles`` just turn on? Upstream's
        default gateway writes it when it folds profiles in (a marker is left only when it overwrote an
        explicit false), so the key flipping is a rewrite too, whoever ran that gateway."""
        if after.name != DEFAULT_PROFILE or before is None or before.config is None or after.config is None:
            return
        if coerce_bool(multiplex_flag(before.config), False) or not coerce_bool(multiplex_flag(after.config), False):
            return
        message = (f"{after.home / 'config.yaml'} now says gateway.multiplex_profiles: true: a gateway of the "
                   "multiplex-default line rewrote it when it folded other profiles in (or someone set it)")
        log.error("%s", message)
        self.rewrite_note = message
        self.findings.handle_rewrite(after.home / "config.yaml", None)

    def note_rewrite(self) -> None:
        """A gateway left upstream's marker: it rewrote the root's config.yaml (multiplex_profiles: true)."""
        marker = self.root / REWRITTEN_MARKER
        seen = _mtime(marker)
        if seen is None or seen == self._rewrite_seen:
            return
        self._rewrite_seen = seen
        message = (f"a gateway rewrote {self.root / 'config.yaml'} ('gateway.multiplex_profiles: true') and left "
                   f"{marker}: upstream's one-gateway-per-host default is on for this root")
        log.error("%s", message)
        self.rewrite_note = message
        self.findings.handle_rewrite(self.root / "config.yaml", marker)


def _has_socket(contract: Contract | None) -> bool:
    return contract is not None and contract.control_socket


def _mtime(path: Path) -> float | None:
    try:
        return os.lstat(path).st_mtime
    except OSError:
        return None
