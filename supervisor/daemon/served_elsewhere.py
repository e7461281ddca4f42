"""Who serves a profile whose gateway just exited 75 before it ever ran (upstream's "attach").

On the multiplex-default line a gateway that finds another live gateway serving its profile (or
an owner of the host lock whose served set it cannot learn) exits 75 at once. That is no restart
request, and the hold it ends in must name the other gateway. Upstream records the host gateway
in ``host-gateway.json`` beside the credential locks; the child's own last words say the rest.
Both are written by gateways, so both are read bounded and every string is escaped.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from profiles.safeio import Beneath
from profiles.upstream import files as gf
from profiles.upstream.multiplex import HOST_RECORD
from profiles.upstream.process import lock_dir
from supervisor import logs
from supervisor.printable import printable

_CLUES = (b"already owns this host", b"already serves profile", b"has not published its served set")


def who_serves(env: Mapping[str, str], home: Path, child_log: Beneath | Path) -> str:
    """One line: the live host gateway (PID, home, profiles) and the child's own reason, as far as known."""
    parts = []
    record = gf.read_json(Path(lock_dir(env)) / HOST_RECORD)
    if record is not None:
        pid = record.get("pid")
        alive = isinstance(pid, int) and not isinstance(pid, bool) and gf.proc_start_time(pid) is not None
        served = record.get("profiles")
        names = ", ".join(printable(str(s), 64) for s in served[:20]) if isinstance(served, list) else "?"
        where = printable(str(record.get("home") or "?"), 200)
        parts.append(f"upstream's host gateway record names PID {pid} ({'alive' if alive else 'not running'}), "
                     f"launched from {where}, serving {names}")
    for line in reversed(logs.tail_lines(child_log, 30)):
        if any(clue in line for clue in _CLUES):
            parts.append("the gateway said: " + printable(line.decode("utf-8", "replace").strip(), 200))
            break
    return "; ".join(parts) if parts else f"no host gateway record found for {home}"
