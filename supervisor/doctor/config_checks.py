"""Doctor checks of hermesd.yaml and of what every child inherits (command, lock folders, .env modes)."""

from __future__ import annotations

import os
import shlex
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from profiles.errors import ProfileConfigError
from profiles.fileio import MAX_PROFILE_FILE, parse_yaml
from profiles.numbers import DRAIN
from profiles.printable import printable
from profiles.safeio import read_operator_file
from profiles.upstream.platforms import PLATFORMS
from profiles.upstream.process import LOCK_VARIABLES, drain_as_written, lock_dir, stop_timeout
from supervisor import config as config_mod
from supervisor.doctor.scan import DEFAULT, Scan
from supervisor.layout import Layout, UnsafeFolderError, check_private
from supervisor.plan.verdict import ERROR, INFO, WARNING, HoldKind
from supervisor.processes.childspec import GatewayCommandError, child_env, resolve_gateway_command, scrubbed

if TYPE_CHECKING:
    from profiles.snapshot import ProfileFacts


def check_hermesd_config(scan: Scan) -> None:
    path = Layout(scan.root).config
    try:
        scan.config = config_mod.load(path)
    except config_mod.ConfigError as exc:
        scan.config, scan.config_ok = config_mod.Config(), False
        scan.fallback_command = _command_as_written(path)
        scan.add(
            ERROR, "hermesd_config_invalid", None,
            f"{exc}. hermesd starts no gateway until it can read this file (a running daemon keeps "
            "its last good configuration)",
            f"fix the line named above in {path}",
        )

def check_command(scan: Scan) -> None:
    assert scan.config is not None
    if scan.config_ok:
        configured = list(scan.config.command) if scan.config.command else None
    elif scan.fallback_command is False:
        return  # not even YAML: the command cannot be known, and the config finding says why
    else:
        configured = scan.fallback_command if isinstance(scan.fallback_command, list) else None
    try:
        resolve_gateway_command(configured, scan.env.get("PATH"))
    except GatewayCommandError as exc:
        fix = (
            "point 'command' in hermesd.yaml at the hermes executable (or remove it to use 'hermes' on PATH)"
            if configured
            else "install hermes-agent beside hermesd, put 'hermes' on PATH, or set 'command' in hermesd.yaml"
        )
        scan.add(ERROR, "gateway_command_not_found", None,
                 f"{exc}; hermesd would hold every profile ({HoldKind.NO_COMMAND.value})", fix)

def check_config_profiles(scan: Scan) -> None:
    assert scan.config is not None
    served = {p.name for p in scan.profiles}
    for name, settings in sorted(scan.config.profiles.items()):
        if name not in served:
            scan.add(
                WARNING, "config_unknown_profile", None,
                f"hermesd.yaml has settings for profile {name!r}, but no such profile is served under "
                f"{scan.root / 'profiles'}; they apply to nothing",
                f"fix the name under 'profiles:' in hermesd.yaml or remove the {name!r} entry",
            )
        elif not settings.enabled:
            scan.add(
                INFO, "profile_disabled", name,
                f"profile {name!r} is disabled in hermesd.yaml (enabled: false): hermesd will not run it "
                "and it does not take part in credential or port conflicts",
                "set enabled: true (or remove the line) in hermesd.yaml to run it",
            )


def check_lock_environment(scan: Scan) -> None:
    """Every child must agree on HOME, XDG_STATE_HOME and HERMES_GATEWAY_LOCK_DIR.

    hermesd passes its own values unchanged to every child; a per-profile ``environment:``
    in hermesd.yaml, or the profile's own files (``.env`` is loaded with override, ``.op.env`` and
    config.yaml's top-level settings fill what is unset), can still change them for one profile,
    and then that gateway's credential locks live in another directory where no other profile's
    gateway looks. A lock folder that is relative (an empty or relative XDG_STATE_HOME up to 0.21, a
    relative HERMES_GATEWAY_LOCK_DIR) depends on each gateway's working folder, which is its own
    home under confinement.
    """
    assert scan.config is not None
    relative_ignored = scan.line.relative_state_home_ignored
    shared = child_env(scan.env, root=scan.root, profile=DEFAULT, home=scan.root,
                       extra=scan.config.environment)
    shared_dir = lock_dir(shared, relative_state_ignored=relative_ignored)
    for prof in scan.profiles:
        extra = scan.config.child_environment(prof.name)
        child = child_env(scan.env, root=scan.root, profile=prof.name, home=prof.home, extra=extra)
        sources = {v: f"hermesd.yaml profiles.{prof.name}.environment" for v in LOCK_VARIABLES
                   if v in scan.config.for_profile(prof.name).environment}
        effective = prof.facts.gateway_environment(child) if prof.facts is not None and prof.facts.ok else child
        for var in LOCK_VARIABLES:
            if effective.get(var) != child.get(var) or (prof.env is not None and var in prof.env):
                sources[var] = str(prof.home / _setting_file(prof.facts, var))
        here = lock_dir(effective, cwd=str(prof.home), relative_state_ignored=relative_ignored)
        if here != lock_dir(effective, cwd="/", relative_state_ignored=relative_ignored):
            scan.add(
                WARNING, "lock_dir_relative", prof.name,
                f"the gateway of profile {prof.name!r} would keep its credential locks in a relative folder "
                f"({here} when it runs in its own home, as it does when confined): each gateway then looks in "
                "its own working folder, so upstream's cross-profile token protection silently stops working",
                "set XDG_STATE_HOME and HERMES_GATEWAY_LOCK_DIR, if at all, to absolute paths, once for every "
                "child in hermesd.yaml's top-level environment:",
            )
        # Only a profile-level source can make one child differ, so each differing one has a source.
        differing = [v for v in LOCK_VARIABLES if effective.get(v) != shared.get(v) and v in sources]
        if not differing:
            continue
        details = "; ".join(
            f"{v}={effective.get(v)!r} from {sources.get(v, 'its environment')} (others: {shared.get(v)!r})"
            for v in differing
        )
        scan.add(
            WARNING, "lock_dir_mismatch", prof.name,
            f"the gateway of profile {prof.name!r} would run with {details}. Its credential locks go to "
            f"{lock_dir(effective, relative_state_ignored=relative_ignored)} instead of {shared_dir}, so upstream's "
            "cross-profile token protection silently stops working between it and the other profiles",
            f"remove {', '.join(differing)} from {' and '.join(sorted({sources[v] for v in differing}))}; "
            "set them, if at all, once for every child in hermesd.yaml's top-level environment:",
        )


def _setting_file(facts: ProfileFacts | None, name: str) -> str:
    """Which of a profile's files sets variable ``name`` for its gateway (``.env`` wins)."""
    if facts is None or facts.env is None or name in facts.env:
        return ".env"
    return ".op.env" if facts.op_env and name in facts.op_env else "config.yaml"


def check_unmodelled_platforms(scan: Scan) -> None:
    """Platforms a profile configures that do not match the release: one the release ships and hermesd
    has no rules for (its credentials and ports are claimed by nobody, so a second profile using them
    is not held), and one hermesd knows but the release does not ship (Home Assistant on 0.22: the
    gateway never starts it, whatever the files say)."""
    gone = {p.name: p.env_prefixes for p in PLATFORMS if p.name not in scan.line.platforms}
    for prof in scan.profiles:
        facts = prof.facts
        if facts is None or not facts.ok or scan.contract is None:
            continue
        used = _configured(facts, scan.unmodelled)
        if used:
            scan.add(WARNING, "unmodelled_platform_configured", prof.name,
                     f"profile {prof.name!r} configures {', '.join(used)}, which hermesd has no rules for on "
                     f"hermes-agent {scan.version}: it does not know whether the gateway enables it, and another "
                     "profile using the same credentials or port is not held",
                     "make sure no other profile uses the same credentials or port")
        dropped = _configured(facts, gone)
        if dropped:
            scan.add(WARNING, "platform_not_in_release", prof.name,
                     f"profile {prof.name!r} configures {', '.join(dropped)}, which hermes-agent {scan.version} does "
                     "not ship: its gateway never starts it",
                     f"install the platform's plugin, or remove its settings from {prof.home}")


def _configured(facts: ProfileFacts, platforms: Mapping[str, Sequence[str]]) -> list[str]:
    """Which of ``platforms`` (name → variable names and ``_`` prefixes) the profile's files mention:
    one of their variables in .env, .op.env or config.yaml's top level, or a block named for one."""
    cfg = facts.config or {}
    raw = cfg.get("gateway")
    gateway: dict[str, Any] = raw if isinstance(raw, dict) else {}
    names = [n for n in (*(facts.env or {}), *(facts.op_env or {}), *cfg) if isinstance(n, str)]
    blocks = [b for b in (cfg, cfg.get("platforms"), gateway.get("platforms"), gateway) if isinstance(b, dict)]
    return sorted(p for p, scrub in platforms.items()
                  if any(scrubbed(n, scrub) for n in names) or any(p in b for b in blocks))


def check_env_permissions(scan: Scan) -> None:
    for prof in scan.profiles:
        path = prof.home / ".env"
        try:
            mode = path.stat().st_mode
        except OSError:
            continue
        if mode & 0o077:
            scan.add(
                WARNING, "env_file_permissions", prof.name,
                f"{path} is readable or writable by group or others (mode {stat.S_IMODE(mode):04o}); "
                "it holds this profile's tokens",
                f"chmod 600 {path}",
            )


def check_drain_bounds(scan: Scan) -> None:
    """A drain longer than hermesd waits: the profile runs, but its stops, restarts and exports use
    :data:`profiles.numbers.DRAIN`'s bound instead (a profile must not make a stop last forever)."""
    for prof in scan.profiles:
        config = prof.config
        if config is None or drain_as_written(config) <= DRAIN.high:
            continue
        agent = config.get("agent")
        written = agent.get("restart_drain_timeout") if isinstance(agent, dict) else None
        scan.add(
            WARNING, "drain_timeout_clamped", prof.name,
            f"{prof.home / 'config.yaml'}: agent.restart_drain_timeout is {printable(repr(written), 40)}; hermesd "
            f"waits at most {DRAIN.high:g} s for a drain (a stop timeout of {stop_timeout(DRAIN.high):g} s), and "
            "its exports say the same",
            f"set agent.restart_drain_timeout to at most {DRAIN.high:g}, or stop_timeout for profile "
            f"{prof.name!r} in hermesd.yaml",
        )


def _command_as_written(path: Path) -> list[str] | bool | None:
    """``command`` from a hermesd.yaml that failed validation; ``False`` when it is not even YAML."""
    try:
        data = parse_yaml(read_operator_file(path, MAX_PROFILE_FILE).decode("utf-8"), path)
    except (OSError, ValueError, ProfileConfigError):  # ValueError: UnicodeDecodeError
        return False
    command = data.get("command") if isinstance(data, dict) else None
    if isinstance(command, str):
        try:
            return shlex.split(command) or None
        except ValueError:
            return None
    if isinstance(command, list) and command and all(isinstance(p, str) and p for p in command):
        return list(command)
    return None


def check_hermesd_folder(scan: Scan) -> None:
    """``<root>/.hermesd`` must be a private directory of this user, as the daemon demands before it
    starts (a link to a shared folder, a plain file, or a folder others can write is refused)."""
    layout = Layout(scan.root)
    for folder in (layout.dir, layout.logs):
        if not os.path.lexists(folder):
            continue
        try:
            check_private(folder)
        except UnsafeFolderError as exc:
            scan.add(ERROR, "hermesd_folder_unsafe", None,
                     f"{exc}; hermesd refuses to start on this root until it is fixed",
                     f"move {folder} away (hermesd recreates it, mode 0700) or make it a private directory of "
                     f"uid {os.getuid()}")
            return
        except OSError as exc:
            scan.add(ERROR, "hermesd_folder_unreadable", None, f"{folder}: {exc.strerror or exc}",
                     f"make {folder} readable by uid {os.getuid()}")
            return
