"""Finding, after hermesd's own restart, the gateways and leftovers its predecessor left behind.

Processes are the truth: every child carries ``HERMESD_ROOT``/``HERMESD_PROFILE`` in its
environment, inherited by everything it starts. A tagged session leader whose command line is a
gateway's and whose ``HERMES_HOME`` is the profile's is a gateway of ours; everything else tagged
is a leftover. The state file adds only history and which identity was hermesd's own child.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from profiles.upstream import files as gf
from supervisor import identity
from supervisor.plan.model import Ident


@dataclass(slots=True)
class Found:
    """What /proc holds for one root: verified gateways per profile, best candidate first, and every tagged PID."""

    gateways: dict[str, list[Ident]] = field(default_factory=dict)
    tagged: dict[str, list[int]] = field(default_factory=dict)


def scan(root: Path, homes: dict[str, Path], saved: dict[str, dict[str, Any]]) -> Found:
    """Every tagged process of ``root``; per profile, its verified gateways ranked for adoption.

    Rank: the identity the previous hermesd recorded, then the PID in the profile's gateway.pid,
    then the youngest. A saved profile whose folder is gone is still found (by its saved home), so
    its gateway is adopted and then stopped rather than left running.
    """
    found = Found()
    for pid, name, env in identity.find_tagged(root):
        found.tagged.setdefault(name, []).append(pid)
        if identity.session_id(pid) != pid or not env.get("HERMES_HOME"):
            continue
        if not identity.is_gateway_cmdline(identity.proc_cmdline(pid)):
            continue
        home = homes.get(name) or Path(str(saved.get(name, {}).get("home") or ""))
        start = identity.proc_start_time(pid)
        if start is None or not str(home) or not identity.verify(Ident(pid, start), home=home, root=root, profile=name):
            continue
        found.gateways.setdefault(name, []).append(Ident(pid, start))
    for name, idents in found.gateways.items():
        rec = saved.get(name, {})
        home = homes.get(name) or Path(str(rec.get("home") or ""))
        recorded = gf.read_pid_record(home)
        saved_ident = (rec.get("pid"), rec.get("start_time"))
        idents.sort(key=lambda i: (
            (i.pid, i.start_time) == saved_ident,
            recorded is not None and recorded.pid == i.pid,
            -i.start_time,
        ), reverse=True)
    return found
