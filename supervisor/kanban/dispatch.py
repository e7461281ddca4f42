"""The kanban dispatcher as a choice: the environment that makes it so, and who holds the lock.

Why the environment and not start order: upstream's gateway reads
``HERMES_KANBAN_DISPATCH_IN_GATEWAY`` before it even tries the lock
(``gateway/kanban_watchers.py``, ``_kanban_dispatcher_watcher``: a false-y value — ``0``,
``false``, ``no``, ``off`` — returns at once). hermesd sets it to ``false`` for every gateway but
the chosen one, so no other hermesd child ever takes the lock, whatever order they start or
restart in, and no profile file is edited. The chosen one gets ``true``: not a value upstream
acts on, but it overrides a false-y value inherited from hermesd's own environment or
hermesd.yaml's ``environment``. What it cannot override (say so in ``doctor``): the profile's own
``.env`` (upstream loads it with override) and ``kanban.dispatch_in_gateway: false`` in the
chosen profile's ``config.yaml``; and a gateway outside hermesd may hold the lock first.

Who holds the lock is read, not guessed: ``/proc/locks`` lists every ``flock`` with its owner's
PID and the file's device and inode. Taking the lock to test it would make a gateway starting
at that instant lose it (and then never retry), so it is never taken here.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from profiles.envfile import read_env_file
from profiles.fileio import load_yaml_mapping
from supervisor.processes.identity import proc_environ
from supervisor.processes.tags import TAG_PROFILE, TAG_ROOT

DISPATCH_ENV = "HERMES_KANBAN_DISPATCH_IN_GATEWAY"
# The restricted socket a dispatching gateway's messenger uses (supervisor.kanban.handoff).
HANDOFF_ENV = "HERMESD_KANBAN_SOCKET"
OFF = "off"
LOCK_NAME = ".dispatcher.lock"
HANDOFF_DIR = "handoff"
SOCKET_NAME = "worker.sock"
LAUNCHER_NAME = "hermes"


def handoff_dir(hermesd_dir: Path, profile: str) -> Path:
    """``<root>/.hermesd/handoff/<profile>/``: the dispatcher's hand-off socket and its ``HERMES_BIN``.

    Put back read-only into that one profile's confinement (and no other's): the folder lies in
    hermesd's own folder, hidden from every profile.
    """
    return hermesd_dir / HANDOFF_DIR / profile


def dispatcher_env(choice: str, profile: str) -> dict[str, str]:
    """The variable to add to ``profile``'s gateway environment, after every other source.

    ``choice`` is hermesd.yaml's ``kanban.dispatcher`` (a profile name or ``off``).
    """
    return {DISPATCH_ENV: "true" if choice == profile else "false"}


def lock_path(root: Path, env: Mapping[str, str] | None = None) -> Path:
    """Where upstream's gateways lock: ``<kanban home>/kanban/.dispatcher.lock``.

    The kanban home is ``HERMES_KANBAN_HOME`` when set (as upstream's ``kanban_home()``), else
    the root.
    """
    override = (env or {}).get("HERMES_KANBAN_HOME", "").strip()
    base = Path(override).expanduser() if override else root
    return base / "kanban" / LOCK_NAME


def lock_pids(path: Path, locks_text: str | None = None) -> list[int]:
    """PIDs holding a lock on ``path`` according to ``/proc/locks`` (empty: nobody, or no file).

    A line reads ``1: FLOCK  ADVISORY  WRITE 1234 fe:00:2154897 0 EOF``: the owner's PID (in
    our PID namespace), then device major:minor in hex and the inode in decimal. Lines for
    processes blocked on the lock (``->``) are waiters, not holders.
    """
    try:
        st = os.stat(path)
    except OSError:
        return []
    if locks_text is None:
        try:
            with open("/proc/locks", encoding="ascii", errors="replace") as fh:
                locks_text = fh.read()
        except OSError:
            return []
    want = (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)
    pids: list[int] = []
    for line in locks_text.splitlines():
        parts = line.split()
        if len(parts) < 6 or "->" in parts[:2]:
            continue
        try:
            pid = int(parts[4])
            major, minor, ino = parts[5].split(":")
            key = (int(major, 16), int(minor, 16), int(ino))
        except ValueError:
            continue
        if key == want and pid > 0 and pid not in pids:
            pids.append(pid)
    return pids


@dataclass(frozen=True, slots=True)
class Holder:
    """The process holding the dispatcher lock, and which profile's gateway it is (if known)."""

    pid: int
    profile: str | None  # from hermesd's tag, else HERMES_HOME; None when unreadable
    supervised: bool  # carries this root's hermesd tag: a gateway child of this daemon


def holder(root: Path, env: Mapping[str, str] | None = None, locks_text: str | None = None) -> Holder | None:
    """Who holds ``root``'s dispatcher lock now, or ``None``."""
    pids = lock_pids(lock_path(root, env), locks_text)
    if not pids:
        return None
    pid = pids[0]
    penv = proc_environ(pid)
    root_s = str(root)
    if penv.get(TAG_ROOT) == root_s and penv.get(TAG_PROFILE):
        return Holder(pid, penv[TAG_PROFILE], True)
    return Holder(pid, _profile_of_home(root, penv.get("HERMES_HOME")), False)


def _profile_of_home(root: Path, home: str | None) -> str | None:
    if not home:
        return None
    with contextlib.suppress(OSError, ValueError):
        p = Path(home).resolve()
        if p == root:
            return "default"
        if p.parent == root / "profiles":
            return p.name
    return None


# --- doctor ---------------------------------------------------------------------------------------
_FALSY = {"0", "false", "no", "off"}


def _env_value(path: Path, key: str) -> str | None:
    """``key``'s value in a ``.env`` file as upstream's loader reads it (``None``: unset or unreadable)."""
    try:
        return read_env_file(path).get(key)
    except (OSError, ValueError):  # ProfileConfigError is a ValueError: refused, unreadable, malformed
        return None


def _config_dispatch(path: Path) -> object:
    """``kanban.dispatch_in_gateway`` of a profile's ``config.yaml`` (``None``: not set or unreadable)."""
    try:
        kanban = load_yaml_mapping(path).get("kanban")
    except (OSError, ValueError):  # as above: doctor reports what it can read, never stops on a file
        return None
    return kanban.get("dispatch_in_gateway") if isinstance(kanban, dict) else None


def kanban_findings(root: Path, config: object) -> list[tuple[str, str, str | None, str, str]]:
    """Doctor's kanban findings: ``(severity, code, profile | None, message, fix)``.

    * ``kanban_dispatcher_disabled`` (warning): the chosen profile's own ``.env`` or
      ``config.yaml`` turns dispatching off, which hermesd's variable cannot override;
    * ``kanban_dispatcher_foreign`` (warning): a gateway hermesd does not run holds the lock;
    * ``kanban_dispatcher_other`` (warning): a gateway of another profile holds it (started
      outside hermesd's choice, or before it);
    * ``kanban_dispatcher_unknown_profile`` (warning): ``kanban.dispatcher`` names no profile;
    * ``kanban_dispatcher_closed`` (warning): the chosen profile has ``isolation.kanban: false``.

    Reads files and ``/proc/locks`` only; never takes the lock, never signals.
    """
    out: list[tuple[str, str, str | None, str, str]] = []
    choice = str(getattr(config, "kanban_dispatcher", "default") or "default")
    chosen_home = root if choice == "default" else root / "profiles" / choice
    if choice != OFF:
        if choice != "default" and not chosen_home.is_dir():
            out.append(("warning", "kanban_dispatcher_unknown_profile", None,
                        f"hermesd.yaml kanban.dispatcher names {choice!r}, which is not a profile of {root}:"
                        " no gateway dispatches kanban tasks",
                        "create the profile, or set kanban.dispatcher to an existing profile or off"))
        else:
            isolation_for = getattr(config, "isolation_for", None)
            if isolation_for is not None and not isolation_for(choice).kanban:
                out.append(("warning", "kanban_dispatcher_closed", choice,
                            f"the chosen kanban dispatcher {choice} does not share the board"
                            " (isolation.kanban: false): under confinement it cannot reach it, so no task"
                            " is dispatched",
                            f"choose a profile that keeps the board as kanban.dispatcher, or set"
                            f" profiles.{choice}.isolation.kanban: true"))
            env_value = _env_value(chosen_home / ".env", DISPATCH_ENV)
            if env_value is not None and env_value.strip().lower() in _FALSY:
                out.append(("warning", "kanban_dispatcher_disabled", choice,
                            f"{chosen_home / '.env'} sets {DISPATCH_ENV}={env_value}: the chosen dispatcher"
                            " will not dispatch (a profile's .env overrides hermesd's variable)",
                            f"remove {DISPATCH_ENV} from {chosen_home / '.env'}, or choose another"
                            " kanban.dispatcher"))
            cfg_value = _config_dispatch(chosen_home / "config.yaml")
            if cfg_value is False or (isinstance(cfg_value, str) and cfg_value.strip().lower() in _FALSY):
                out.append(("warning", "kanban_dispatcher_disabled", choice,
                            f"{chosen_home / 'config.yaml'} sets kanban.dispatch_in_gateway: {cfg_value}: the"
                            " chosen dispatcher will not dispatch",
                            f"remove kanban.dispatch_in_gateway from {chosen_home / 'config.yaml'}, or choose"
                            " another kanban.dispatcher"))
    h = holder(root)
    if h is not None:
        who = f"profile {h.profile}" if h.profile else "an unknown HERMES_HOME"
        if not h.supervised:
            out.append(("warning", "kanban_dispatcher_foreign", h.profile,
                        f"PID {h.pid} ({who}), a gateway hermesd does not run, holds the kanban dispatcher lock"
                        f" {lock_path(root)}: it spawns every profile's kanban workers in its own process tree"
                        + ("" if choice == OFF else f", and {choice} cannot dispatch"),
                        "stop that gateway (hermes gateway stop, or the service that runs it) and let hermesd"
                        " run the profile"))
        elif choice == OFF or h.profile != choice:
            want = "no gateway" if choice == OFF else f"{choice}'s gateway"
            out.append(("warning", "kanban_dispatcher_other", h.profile,
                        f"{who}'s gateway (PID {h.pid}) holds the kanban dispatcher lock, but hermesd.yaml"
                        f" chooses {want} (kanban.dispatcher: {choice})",
                        f"hermesd restart {h.profile} (it then starts with dispatching off and releases"
                        " the lock)"))
    return out
