"""Doctor checks of what is on disk and running now: PID and lock files, foreign gateways, services."""

from __future__ import annotations

import re
import shlex
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from profiles import safeio
from profiles.discovery import profile_exists
from profiles.upstream import files as gf
from profiles.upstream.process import hermes_command, proc_start_time
from supervisor.doctor.scan import DEFAULT, Scan
from supervisor.isolation import install
from supervisor.plan.verdict import ERROR, WARNING
from supervisor.processes.identity import gateway_of
from supervisor.processes.tags import TAG_ROOT
from wrappers.scripts import all_wrappers, upstream_style_wrappers

if TYPE_CHECKING:
    from profiles.upstream.files import PidRecord


def service_profile_name(filename: str) -> str | None:
    """The profile an upstream service file is for, from its name alone; ``None`` if not one.

    Upstream names units after the profile: ``hermes-gateway.service`` and
    ``ai.hermes.gateway.plist`` serve the root (``default``), ``hermes-gateway-<name>.service``
    and ``ai.hermes.gateway-<name>.plist`` serve profile ``<name>``.
    """
    for prefix, suffix in (("hermes-gateway", ".service"), ("ai.hermes.gateway", ".plist")):
        if not filename.endswith(suffix):
            continue
        stem = filename[: -len(suffix)]
        if stem == prefix:
            return DEFAULT
        if stem.startswith(prefix + "-") and len(stem) > len(prefix) + 1:
            return stem[len(prefix) + 1 :]
    return None


def default_service_dirs(env: Mapping[str, str]) -> list[Path]:
    """Where upstream's ``hermes gateway install`` puts units: systemd user, system, launchd."""
    home = Path(env.get("HOME") or Path.home())
    return [home / ".config" / "systemd" / "user", Path("/etc/systemd/system"), home / "Library" / "LaunchAgents"]


def check_runtime_files(scan: Scan) -> None:
    for prof in scan.profiles:
        pid_path = prof.home / gf.PID_FILE
        if safeio.lstat(safeio.home_file(prof.home, gf.PID_FILE)) is not None:
            rec = gf.read_pid_record(prof.home)
            live = gateway_of(prof.home, prof.name)
            claimed = rec is not None and proc_start_time(rec.pid) is not None and (
                rec.start_time in (None, proc_start_time(rec.pid)))
            if rec is not None and claimed and live is None:
                scan.add(
                    WARNING, "pid_file_not_this_profile", prof.name,
                    f"{pid_path} names PID {rec.pid}, a live process that is not this profile's gateway "
                    "(another profile's gateway, or another program): hermesd never signals or holds for it. "
                    "A gateway writes its own PID there; a different one was put there by hand or by the "
                    "profile's agent",
                    f"make sure no gateway runs for {prof.name!r}, then remove {pid_path}",
                )
            elif live is None:
                why = _stale_reason(rec)
                scan.add(
                    WARNING, "stale_pid_file", prof.name,
                    f"{pid_path} {why}: left by a gateway that died without cleaning up. With a dead PID "
                    "file, 'hermes gateway stop' falls back to signalling any gateway whose command line "
                    "matches the profile",
                    f"make sure no gateway runs for {prof.name!r}, then remove {pid_path}",
                )
            elif not _ours(scan, live.pid):
                scan.add(
                    WARNING, "foreign_gateway", prof.name,
                    f"a gateway hermesd did not start (PID {live.pid}) is running for profile {prof.name!r}; "
                    "hermesd will hold the profile (foreign_gateway) until it exits",
                    f"stop it ('{hermes_command(prof.name)} gateway stop', or disable the service that runs it) "
                    "and let hermesd run the profile",
                )

# Files a profile's gateway and hermesd read from its home; hermesd follows no link there.
LINK_CHECKED = (".env", "config.yaml", "profile.yaml", "auth.json", "gateway.json", "gateway.pid",
                "gateway_state.json", "state", "state/gateway.heartbeat")


def check_links(scan: Scan) -> None:
    """A link where hermesd reads a profile's file, or in place of a shared channel, is named here.

    hermesd never follows such a link (another profile's ``.env`` would otherwise be read, or
    overwritten, as root): the file is then a problem of this profile (held), or the channel is
    closed, and this says which link to replace.
    """
    for prof in scan.profiles:
        for name in LINK_CHECKED:
            where = safeio.home_file(prof.home, name)
            st = safeio.lstat(where)
            if st is None or not stat.S_ISLNK(st.st_mode):
                continue
            scan.add(
                WARNING, "linked_profile_file", prof.name,
                f"{where.path} is a symbolic link; hermesd does not follow links in a profile's folder (it runs "
                "as root, and the profile's agent could point one at another profile's secrets), so it "
                + ("holds the profile until the link is gone" if name in (".env", "config.yaml")
                   else "treats the file as absent"),
                f"replace the link by the file itself: cp --remove-destination \"$(readlink -f {where.path})\" "
                f"{where.path}",
            )
    for path in install.linked_channels(scan.root):
        scan.add(
            ERROR, "linked_channel", None,
            f"{path} is a symbolic link (or lies under one): hermesd never puts it back for a confined profile, "
            "so that shared channel is closed for every named profile. A profile that owns the root folder "
            "(the default profile) could otherwise hand every profile another profile's home or hermesd's "
            "folder",
            f"remove the link and recreate {path.name} as a real folder (mkdir {path})",
        )


def _ours(scan: Scan, pid: int) -> bool:
    """Whether ``pid`` was started by hermesd for this root (its children carry HERMESD_ROOT).

    Unknown (unreadable environment) counts as ours: a false "foreign" claim is worse
    than a missed one.
    """
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return True
    tag = f"{TAG_ROOT}=".encode()
    for item in raw.split(b"\0"):
        if item.startswith(tag):
            try:
                return Path(item[len(tag) :].decode()).resolve() == scan.root
            except (UnicodeDecodeError, OSError):
                return True
    return False

def check_services(scan: Scan) -> None:
    served = {p.name for p in scan.profiles}
    for folder in scan.service_dirs:
        folder = Path(folder)
        try:
            entries = sorted(folder.iterdir())
        except OSError:
            continue
        for unit in entries:
            by_name = service_profile_name(unit.name)
            if by_name is None:
                continue
            target = _service_target(scan, unit)
            if target == _ELSEWHERE:
                continue  # a unit for another root's profile
            name = target or by_name
            if name not in served:
                continue
            enabled = any(folder.glob(f"*.wants/{unit.name}")) if unit.suffix == ".service" else True
            state = "enabled" if enabled else "installed"
            basis = " (assumed from its name)" if target is None else ""
            manager = "launchd" if unit.suffix == ".plist" else "systemd"
            scan.add(
                ERROR, "upstream_service_installed", name,
                f"{unit} ({manager}, {state}) runs the gateway of profile {name!r}{basis} and restarts it "
                "on its own; it races hermesd for the same profile, and 'hermes gateway start|restart' "
                "acts on it",
                _service_fix(unit, manager, name),
            )

def _service_target(scan: Scan, unit: Path) -> str | None:
    """The profile a unit's ``HERMES_HOME`` names; ``None`` when it names none, ``_ELSEWHERE`` for another root.

    Upstream writes ``HERMES_HOME`` into every unit it installs, which is more reliable than
    the name: a unit named ``hermes-gateway.service`` may serve ``~/.hermes`` while this
    doctor checks a custom root.
    """
    try:
        text = unit.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    m = re.search(r'HERMES_HOME=([^"\s]+)', text) or re.search(
        r"<key>HERMES_HOME</key>\s*<string>([^<]*)</string>", text
    )
    if m is None:
        return None
    home = Path(m.group(1).strip()).expanduser()
    try:
        home = home.resolve()
    except OSError:
        return _ELSEWHERE
    if home == scan.root:
        return DEFAULT
    if home.parent == scan.root / "profiles":
        return home.name
    return _ELSEWHERE


_ELSEWHERE = ""  # never a profile name


def _stale_reason(rec: PidRecord | None) -> str:
    if rec is None:
        return "is not a gateway PID record (empty or unreadable)"
    live = proc_start_time(rec.pid)
    if live is None:
        return f"names PID {rec.pid}, which is not running"
    return f"names PID {rec.pid}, which now belongs to another process (PID recycled)"


def _service_fix(unit: Path, manager: str, profile: str) -> str:
    if manager == "launchd":
        return f"launchctl bootout gui/$(id -u) {unit} && rm {unit}"
    # Units under the system folders are system units; anything else (the user folder, or a
    # folder a caller passed in) is managed with ``systemctl --user``.
    if str(unit).startswith(("/etc/", "/usr/", "/lib/", "/run/")):
        return f"sudo systemctl disable --now {unit.name} && sudo rm {unit} (hermesd runs profile {profile!r} itself)"
    return f"systemctl --user disable --now {unit.name} && rm {unit} (hermesd runs profile {profile!r} itself)"


def check_wrappers(scan: Scan) -> None:
    """Aliases written by ``hermes profile create`` run ``hermes -p NAME`` directly: their gateway verbs
    stop the supervised gateway and run another in the foreground, behind hermesd's back. And an
    alias (hermesd's or upstream's) whose profile folder was moved or deleted by hand, not through
    ``profile rename|delete`` (which take its aliases along): running it fails."""
    root = shlex.quote(str(scan.root))
    for w in all_wrappers(scan.root, env=scan.env):
        if profile_exists(w.profile, scan.root):
            continue
        scan.add(
            WARNING, "alias_without_profile", w.profile,
            f"alias {w.alias!r} ({w.path}) runs profile {w.profile!r}, which has no folder under {scan.root} "
            "(moved or deleted by hand): running it fails",
            f"hermesd profile alias {w.profile} --remove --root {root} (removes that profile's aliases only); "
            f"if the folder was renamed, then: hermesd profile alias NEWNAME --name {w.alias} --root {root}",
        )
    served = {p.name for p in scan.profiles}
    for w in upstream_style_wrappers(scan.root, env=scan.env):
        if w.profile not in served:
            continue
        scan.add(
            WARNING, "upstream_wrapper", w.profile,
            f"{w.path} runs 'hermes -p {w.profile}' directly: '{w.alias} gateway restart' (or stop/start) acts "
            f"behind hermesd's back and runs its own gateway in the foreground",
            f"hermesd profile alias {w.profile} --convert --name {w.alias} --root {root} "
            "(keeps its name and target; gateway verbs then go to hermesd)",
        )
