"""Stopping one profile's gateway for good before its folder is moved or deleted.

Used by ``hermesd profile delete|rename --stop``. The gateway is pinned with a pidfd *before* it is
asked to stop, and the folder may change only once that process has exited: upstream removes
``gateway.pid`` early in its shutdown and then, at exit, writes ``logs/gateway-exit-diag.log``
with ``mkdir -p`` — a folder deleted while the gateway was still shutting down would reappear,
and a supervisor watching the root would start it again. Through the daemon when one holds the
root (it also sweeps the gateway's leftovers), otherwise with the same sequence the daemon uses:
planned-stop marker, SIGTERM through the pidfd, SIGKILL to the group when the timeout passes.
"""

from __future__ import annotations

import os
import select
import signal
import time
from pathlib import Path

from profiles.errors import GatewayRunningError
from profiles.snapshot import read_profile
from profiles.upstream import files as gf
from profiles.upstream.process import DEFAULT_PROFILE, stop_timeout
from supervisor.control.client import Client, ControlError, DaemonNotAnswering, DaemonNotRunning
from supervisor.layout import Layout
from supervisor.plan.model import Ident
from supervisor.processes import child, identity


def _pin(home: Path) -> tuple[Ident, int] | None:
    """The live gateway of ``home``, proven to be this home's and pinned with a pidfd (``None`` when
    none runs). ``gateway.pid`` is the profile's own file: a PID it names that is not this
    profile's gateway (another profile's, hermesd's) is never signalled, and the real one is still
    found by the tags hermesd gave it."""
    name = gf.home_profile(home)
    root = home.parent.parent if name != DEFAULT_PROFILE else home
    ident = identity.find_gateway(root.resolve(), home, name)
    if ident is None:
        return None
    fd = identity.open_pidfd(ident)
    return (ident, fd) if fd is not None else None


def _exited(fd: int, timeout: float) -> bool:
    return bool(select.select([fd], [], [], max(0.0, timeout))[0])


def _drain(home: Path) -> float:
    """The profile's drain timeout as the daemon reads it (config.yaml, else its environment files)."""
    return read_profile(gf.home_profile(home), home, b"").drain_s


def stop_unsupervised(home: Path, timeout: float | None = None) -> bool:
    """Stop the gateway recorded in ``home``; True if one was running and is now gone."""
    pinned = _pin(home)
    if pinned is None:
        return False
    ident, fd = pinned
    try:
        gf.write_planned_stop_marker(home, ident.pid, ident.start_time)
        identity.send_signal(fd, signal.SIGTERM)
        if not _exited(fd, timeout if timeout is not None else stop_timeout(_drain(home))):
            child.kill_group(ident, fd)
            _exited(fd, 10.0)
        return True
    finally:
        os.close(fd)


# Upstream's marker watcher (every release that polls the planned-stop marker, every 0.5 s) acts only
# while the gateway says "running" (``runner._running`` is set as that state is written): then it starts
# the clean stop by itself and consumes the marker. A SIGTERM arriving after that consumption and
# before the stop has written "stopped" is taken for an unexpected one: upstream then leaves "running"
# and exits 1 (measured on 0.19.0: 5 of 8 runs that signalled right after the watcher took the marker).
MARKER_WATCHED_STATES = frozenset({"running", "degraded"})
MARKER_TAKEN_WITHIN = 5.0  # s: ten of the watcher's polls; a gateway that has not taken it by then does not poll


def await_marked_stop(home: Path, ident: Ident) -> bool:
    """After the planned-stop marker was written for ``ident``: if upstream's watcher is active, wait
    until it has taken the marker and the gateway has exited (at most upstream's stop timeout).

    For a stopper that cannot choose when the signal comes (systemd's ExecStop, Kubernetes' preStop:
    the service manager sends SIGTERM once the helper returns), so that the signal cannot land inside
    the stop the watcher began. True when the gateway is gone; False when the signal is still needed
    (a gateway still starting, a release that does not poll, or a stop that outlasted the timeout).
    """
    state = gf.read_gateway_state(home)
    if state.get("pid") != ident.pid or state.get("gateway_state") not in MARKER_WATCHED_STATES:
        return False
    fd = identity.open_pidfd(ident)
    if fd is None:
        return True
    try:
        marker = home / gf.PLANNED_STOP_MARKER
        deadline = time.monotonic() + MARKER_TAKEN_WITHIN
        while os.path.lexists(marker):
            if _exited(fd, 0.05):
                return True
            if time.monotonic() >= deadline:
                return False
        return _exited(fd, stop_timeout(_drain(home)))
    finally:
        os.close(fd)


def stop_for_profile_change(name: str, home: Path, timeout: float = 180.0) -> None:
    """Stop ``name``'s gateway and return only once that process (and the daemon's sweep) is done."""
    root = home.parent.parent if name != DEFAULT_PROFILE else home
    pinned = _pin(home)
    if pinned is None:
        return
    ident, fd = pinned
    try:
        client = Client(Layout(root.resolve()))
        try:
            client.call("stop", profile=name, wait=30.0)
        except DaemonNotRunning:
            stop_unsupervised(home)
        except (DaemonNotAnswering, ControlError) as exc:
            raise GatewayRunningError(f"cannot stop the gateway of profile {name!r} through hermesd: {exc}") from None
        if not _exited(fd, timeout):
            raise GatewayRunningError(f"the gateway of profile {name!r} (PID {ident.pid}) did not stop within "
                                      f"{timeout:.0f}s")
    finally:
        os.close(fd)
    # The daemon kills the gateway's leftovers right after its exit; wait for them too.
    deadline = time.monotonic() + 10.0
    while any(True for _ in identity.find_tagged(root.resolve(), name)) and time.monotonic() < deadline:
        time.sleep(0.05)
