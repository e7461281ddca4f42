"""Stopping a gateway no daemon supervises (``hermesd profile delete --stop`` with hermesd down).

The same sequence hermesd uses for its children: planned-stop marker, SIGTERM through a pidfd,
then SIGKILL to the process group when the timeout passes. The PID comes from ``gateway.pid``
and is verified against the live start time first, so a recycled PID is never signalled.
"""

from __future__ import annotations

import os
import select
import signal
from pathlib import Path

from profiles import gateway_files as gf
from supervisor import child, contract, identity
from supervisor.identity import Ident


def stop_unsupervised(home: Path, timeout: float | None = None) -> bool:
    """Stop the gateway recorded in ``home``; True if one was running and is now gone."""
    rec = gf.live_gateway(home)
    if rec is None:
        return False
    start = rec.start_time if rec.start_time is not None else identity.proc_start_time(rec.pid)
    if start is None:
        return False
    ident = Ident(rec.pid, start)
    fd = identity.open_pidfd(ident)
    if fd is None:
        return False
    try:
        gf.write_planned_stop_marker(home, ident.pid, ident.start_time)
        identity.send_signal(fd, signal.SIGTERM)
        wait = timeout if timeout is not None else contract.stop_timeout(contract.profile_drain_seconds(home))
        if not select.select([fd], [], [], wait)[0]:
            child.kill_group(ident, fd)
            select.select([fd], [], [], 10.0)
        return True
    finally:
        os.close(fd)
