"""What each child really serves, a second gateway beside ours, and upstream's config rewrites, as events.

On the multiplex-default line a gateway reports the profiles it serves (``served_profiles`` in its
state file, ``identify`` on its ``gateway.sock``); anything beyond its own profile is a gateway
folding others in. A live gateway that hermesd did not start, recorded in the home of a profile our
child serves, is a second poller. Both go to the planner, which decides (``served``, ``rival``); this
collaborator only reads, off the loop where it must (``identify`` runs in the reader pool), and
keeps what it read for ``status`` in the profile's ``extra``.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from profiles.names import DEFAULT_PROFILE
from profiles.upstream import files as gf
from profiles.upstream.bools import coerce_bool
from profiles.upstream.multiplex import REWRITTEN_MARKER, SERVED_KEY, multiplex_flag, others_served
from profiles.upstream.process import GatewayState
from supervisor import identity
from supervisor.plan import model as m
from supervisor.printable import printable

if TYPE_CHECKING:
    from profiles.snapshot import ProfileFacts
    from supervisor.daemon.loop import Daemon
    from supervisor.plan.model import Profile
    from supervisor.watch.events import FsEvents

log = logging.getLogger("hermesd")

IDENTIFY_EVERY_S = 30.0  # upstream's gateways rescan profiles/ every 30 s
IDENTIFY_RETRIES = 10  # a new gateway's socket not answering yet: asked again this often...
IDENTIFY_RETRY_S = 1.0  # ... this far apart


class Serving:
    """See the module docstring."""

    def __init__(self, daemon: Daemon) -> None:
        self.d = daemon
        self.rewrite_note: str | None = None  # a gateway rewrote the root's config.yaml (upstream's marker)
        self.candidates: list[Path] = []  # folders under profiles/ that lack only an identity file (watched)
        self._rewrite_seen: float | None = None

    def discover(self) -> list[tuple[str, Path]]:
        """The profiles to serve as the installed release defines a profile (its identity files), and
        the folders that lack only such a file, which are watched all the same: the file that makes one
        a profile is written inside it (``hermes profile create`` writes it after the mkdir)."""
        from profiles.discovery import REASON_NO_IDENTITY, profiles_to_serve, unserved_profile_dirs

        d = self.d
        identity = d.contract.identity_markers if d.contract is not None else ()
        served = profiles_to_serve(True, root=d.root, identity=identity)
        self.candidates = [path for _n, path, why in unserved_profile_dirs(d.root, identity=identity)
                           if why == REASON_NO_IDENTITY] if identity else []
        return served

    def on_events(self, ev: FsEvents) -> None:
        if ev.rewritten:
            self.note_rewrite()

    def check(self, name: str, gstate: dict[str, Any]) -> None:
        """A profile's gateway wrote its state or PID file: what our child serves, and a second gateway."""
        p = self.d.planner.profiles[name]
        if p.child is not None and gstate.get("pid") == p.child.ident.pid:
            self._check_state(p, p.child.ident.pid, gstate)
        self.check_rival(name)

    def _check_state(self, p: Profile, pid: int, gstate: dict[str, Any]) -> None:
        """Our child ``pid`` rewrote its state file: its served set, and (once running) ask it directly."""
        d = self.d
        name = p.name
        if p.extra.get("serving_pid") != pid:  # a new gateway: what the previous one served says nothing
            for key in ("identify", "served_state", "serving_pid", "identify_tries"):
                p.extra.pop(key, None)
            p.extra["serving_pid"] = pid
        state = gstate.get("gateway_state")
        # Upstream's read-merge-write keeps a previous gateway's served_profiles in the file until the
        # new one reaches "running" and stamps its own: before that the list is stale.
        others = others_served(gstate.get(SERVED_KEY), name) if state == GatewayState.RUNNING else None
        if others is not None:
            p.extra["served_state"] = [name, *others]
        if others:
            d.execute(d.planner.served(name, pid, others, "its gateway_state.json"))
        if state == GatewayState.RUNNING and self._has_socket() and p.extra.get("identify_asked") != pid:
            p.extra["identify_asked"] = pid  # once per gateway, then every IDENTIFY_EVERY_S (housekeeping)
            d.spawn_task(self.ask_identity(name, pid))

    def housekeeping(self, name: str) -> None:
        """Ask a running child again now and then: a rescan folds profiles in without a state write."""
        p = self.d.planner.profiles[name]
        if p.child is None or not p.child.ready or not self._has_socket():
            return
        now = time.monotonic()
        if now - p.extra.get("identify_at", 0.0) >= IDENTIFY_EVERY_S:
            p.extra["identify_at"] = now
            self.d.spawn_task(self.ask_identity(name, p.child.ident.pid))

    def _has_socket(self) -> bool:
        return self.d.contract is not None and self.d.contract.control_socket

    def check_rival(self, name: str) -> None:
        """A live gateway hermesd did not start, recorded in the home of a profile our child serves."""
        d = self.d
        p = d.planner.profiles.get(name)
        if p is None or p.child is None:
            return
        rec = gf.live_gateway(p.home)
        if rec is None or rec.pid == p.child.ident.pid or rec.pid in d.children \
                or any(i.pid == rec.pid for i in d.adopted):
            return
        argv = " ".join(identity.proc_cmdline(rec.pid))
        d.execute(d.planner.rival(name, rec.pid, f"its gateway.pid names it; command: {printable(argv, 200)}"))

    async def ask_identity(self, name: str, pid: int) -> None:
        """``identify`` over the child's gateway.sock (in the reader pool): what it really serves."""
        from supervisor import gatewaysock

        d = self.d
        p = d.planner.profiles.get(name)
        if p is None or p.child is None or p.child.ident.pid != pid:
            return
        try:
            ident = await d.loop().run_in_executor(d.pool, gatewaysock.identify, p.home, 1.0)
        except gatewaysock.GatewaySockError as exc:
            p.extra["identify"] = {"error": str(exc)}
            # upstream binds the socket a moment after it writes "running" (later still on a busy host)
            tries = p.extra["identify_tries"] = p.extra.get("identify_tries", 0) + 1
            if tries <= IDENTIFY_RETRIES:
                d.loop().call_later(IDENTIFY_RETRY_S, lambda: d.spawn_task(self.ask_identity(name, pid)))
            return
        p = d.planner.profiles.get(name)
        if p is None or p.child is None or p.child.ident.pid != pid:
            return
        p.extra["identify"] = {**ident.to_json(), "served": list(ident.served) if ident.served else [name]}
        if ident.pid != pid:
            d.execute(d.planner.rival(name, ident.pid, "it answers on the profile's gateway.sock"))
            return
        others = ident.serves_others(name)
        if others:
            d.execute(d.planner.served(name, pid, others, "its gateway.sock identify"))

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
        self.d.execute([m.Emit({"type": "config_rewritten", "profile": DEFAULT_PROFILE,
                                "file": str(after.home / "config.yaml"), "marker": None})])

    def note_rewrite(self) -> None:
        """A gateway left upstream's marker: it rewrote the root's config.yaml (multiplex_profiles: true)."""
        d = self.d
        marker = d.root / REWRITTEN_MARKER
        seen = _mtime(marker)
        if seen is None or seen == self._rewrite_seen:
            return
        self._rewrite_seen = seen
        message = (f"a gateway rewrote {d.root / 'config.yaml'} ('gateway.multiplex_profiles: true') and left "
                   f"{marker}: upstream's one-gateway-per-host default is on for this root")
        log.error("%s", message)
        self.rewrite_note = message
        d.execute([m.Emit({"type": "config_rewritten", "profile": "default", "file": str(d.root / "config.yaml"),
                           "marker": str(marker)})])


def _mtime(path: Path) -> float | None:
    try:
        return os.lstat(path).st_mtime
    except OSError:
        return None
