"""hermesd's memory across its own restarts: ``<root>/.hermesd/state.json``.

Processes are the truth about what runs; this file only carries what processes cannot tell:
which identity hermesd started for each profile (with the code it loaded and the confinement it
was started under), restart counts, the last exit, and whether the operator asked for a profile to
stay down. Written atomically, read defensively: a junk
file is reported and ignored, never fatal.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from profiles.safeio import Beneath, beneath, lstat
from profiles.upstream.files import read_json, write_json_atomic
from supervisor.hermes.codeid import CodeId

if TYPE_CHECKING:
    from supervisor.plan.planner import Planner

VERSION = 1


@dataclass(slots=True)
class Saved:
    boot_id: str
    profiles: dict[str, dict[str, Any]]
    problem: str | None = None  # why the file was ignored, for the log and for status
    dist_info: str | None = None  # the gateway command's hermes-agent as the daemon last saw it


def _names(rec: dict[str, Any], pid: int | None, start_time: int | None) -> bool:
    return pid is not None and rec.get("pid") == pid and rec.get("start_time") == start_time


def recorded_code(rec: dict[str, Any], pid: int | None, start_time: int | None) -> CodeId | None:
    """The code hermesd recorded for the gateway ``pid`` (only when the record names that very process)."""
    return CodeId.from_json(rec.get("code")) if _names(rec, pid, start_time) else None


def recorded_isolation(rec: dict[str, Any], pid: int | None, start_time: int | None) -> dict[str, Any] | None:
    """The confinement (``status``'s ``isolation`` object) the gateway ``pid`` was started under, as
    the hermesd that started it recorded it (only when the record names that very process). What
    the shim applied before the gateway's ``execve`` holds for the process's whole life: Landlock,
    the mount namespace and the system-call filter cannot be loosened from inside."""
    iso = rec.get("isolation")
    return iso if _names(rec, pid, start_time) and isinstance(iso, dict) else None


def load(where: Beneath | Path, boot_id: str) -> Saved:
    spot = beneath(where)
    path = spot.path
    if lstat(spot) is None:
        return Saved(boot_id, {})
    data = read_json(spot)
    if data is None or data.get("version") != VERSION or not isinstance(data.get("profiles"), dict):
        return Saved(boot_id, {}, f"{path}: unreadable or not hermesd state; starting with empty history")
    profiles = {k: v for k, v in data["profiles"].items() if isinstance(k, str) and isinstance(v, dict)}
    if data.get("boot_id") != boot_id:
        # Process identities from another boot are meaningless; history still counts.
        for rec in profiles.values():
            rec.pop("pid", None)
            rec.pop("start_time", None)
            rec.pop("code", None)
            rec.pop("isolation", None)
    dist_info = data.get("dist_info")
    return Saved(boot_id, profiles, dist_info=dist_info if isinstance(dist_info, str) else None)


def records(planner: Planner, isolation: Mapping[str, dict[str, Any]] | None = None) -> dict[str, dict[str, Any]]:
    """What is worth remembering of each profile across a hermesd restart (``isolation``: per profile,
    the confinement its running gateway was started under)."""
    out: dict[str, dict[str, Any]] = {}
    for name, p in planner.profiles.items():
        rec: dict[str, Any] = {
            "home": str(p.home),
            "restarts": p.restarts,
            "failures": p.failures,
            "last_exit": p.last_exit,
            "down": p.down,
            "hold": p.hold.to_json() if p.hold else None,
            "next_retry_at": p.retry_at_wall,
        }
        c = p.child
        if c is not None:
            rec.update(pid=c.ident.pid, start_time=c.ident.start_time, started_at=c.started_wall,
                       stopping=c.stop_requested, then_restart=c.then_restart,
                       code=c.code.to_json() if c.code is not None else None,
                       isolation=(isolation or {}).get(name))
        out[name] = rec
    return out


def save(where: Beneath | Path, boot_id: str, daemon_pid: int, profiles: dict[str, dict[str, Any]], now: float,
         dist_info: str | None = None) -> None:
    """``dist_info``: where the gateway command's hermes-agent is installed (the probe's answer), so
    ``status`` and ``doctor`` can tell stale code without a daemon and without asking the interpreter."""
    write_json_atomic(
        where,
        {"version": VERSION, "boot_id": boot_id, "daemon_pid": daemon_pid, "saved_at": now, "profiles": profiles,
         "dist_info": dist_info},
    )


def exit_record(raw: Any) -> dict[str, Any] | None:
    """A saved ``last_exit`` with every field of the right type, or ``None``: never trust the file."""
    if not isinstance(raw, dict):
        return None
    out: dict[str, Any] = {}
    for key, kinds in (
        ("code", int),
        ("signal", (str, int)),
        ("at", (int, float)),
        ("kind", str),
        ("reason", str),
        ("description", str),
        ("uptime_s", (int, float)),
    ):
        value = raw.get(key)
        out[key] = value if isinstance(value, kinds) and not isinstance(value, bool) else None
    return out


def saved_int(rec: dict[str, Any], key: str) -> int:
    value = rec.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0
