"""The upstream contract for one gateway child, in one place: argv, environment, stop timing.

Every rule here comes from measurements of hermes-agent 0.19.0 (see the README's "Upstream
contract"). If upstream changes how a supervised gateway must be started, this is the only
module that should change.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path

from supervisor.notify import SERVICE_MANAGER_VARIABLES

# Tags hermesd puts in every child's environment. They are inherited by anything the gateway
# spawns (even a setsid'd restarter), which is how hermesd finds its processes again after its
# own crash and how it finds descendants that escaped the process group.
TAG_ROOT = "HERMESD_ROOT"
TAG_PROFILE = "HERMESD_PROFILE"

GATEWAY_ARGS = ("gateway", "run", "--external-supervisor")

# Set for every child; see upstream-contract section 1 for why each one matters.
FIXED_ENV = {
    "HERMES_S6_SUPERVISED_CHILD": "1",  # ignore the sticky active_profile
    "HERMES_GATEWAY_MAX_STARTS": "0",  # no upstream respawn-storm sleep
    "GATEWAY_MULTIPLEX_PROFILES": "false",  # the default child serves only the default profile
    "HERMES_DISABLE_LAZY_INSTALLS": "1",  # no pip installs into the shared environment
}

# Platform settings in hermesd's own environment would be inherited by every child whose .env
# lacks them: the same bot token polled N times. They are removed from the child environment.
PLATFORM_PREFIXES = (
    "TELEGRAM_", "DISCORD_", "SLACK_", "SIGNAL_", "WEIXIN_", "QQ_", "YUANBAO_", "FEISHU_",
    "IRC_", "LINE_", "WHATSAPP_", "MATRIX_", "MATTERMOST_", "EMAIL_", "SMS_", "TWILIO_",
    "BLUEBUBBLES_", "WECOM_", "DINGTALK_", "MSGRAPH_", "HASS_", "API_SERVER_", "WEBHOOK_",
)
# Process-identity variables that must come from hermesd, never from its own environment.
# Also hermesd's own service-manager channel: a child must not notify (or feed the watchdog) for it.
_DROPPED = {"HERMES_HOME", "HERMES_PROFILE", TAG_ROOT, TAG_PROFILE, *SERVICE_MANAGER_VARIABLES}


class GatewayCommandError(RuntimeError):
    """No way to run ``hermes`` was found."""


def is_platform_variable(name: str) -> bool:
    return name.startswith(PLATFORM_PREFIXES)


def child_argv(command: list[str], profile: str) -> list[str]:
    """``hermes [-p NAME] gateway run --external-supervisor``; never ``--replace``.

    The named profile must appear as ``-p NAME``: upstream attributes a process to a profile by
    its command line, and a named gateway started with HERMES_HOME alone would be taken for the
    default profile's (and killed by ``hermes gateway stop`` run there).
    """
    prefix = [] if profile == "default" else ["-p", profile]
    return [*command, *prefix, *GATEWAY_ARGS]


def child_env(
    base: Mapping[str, str],
    *,
    root: Path,
    profile: str,
    home: Path,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The child's initial environment, built from hermesd's own minus what must not leak.

    HOME, XDG_STATE_HOME and HERMES_GATEWAY_LOCK_DIR pass through unchanged, so they are
    identical for every child and upstream's cross-profile credential locks keep working.
    """
    env = {k: v for k, v in base.items() if k not in _DROPPED and not is_platform_variable(k)}
    env.update(extra or {})
    env.update(FIXED_ENV)
    env["HERMES_HOME"] = str(home)
    env[TAG_ROOT] = str(root)
    env[TAG_PROFILE] = profile
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def forbidden_extra_env(name: str) -> str | None:
    """Why an operator-supplied variable may not be set through hermesd.yaml, or ``None``."""
    if name in _DROPPED or name in FIXED_ENV:
        return "it is set by hermesd itself (upstream contract)"
    if is_platform_variable(name):
        return "platform settings belong in the profile's .env, where conflict checks can see them"
    return None


_TRUTHY = {"1", "true", "yes", "on"}
_FALSY = {"0", "false", "no", "off", ""}


def _canon(value: str) -> str:
    v = value.strip().lower()
    return "true" if v in _TRUTHY else "false" if v in _FALSY else v


def env_file_overrides(profile_env: Mapping[str, str]) -> list[str]:
    """Contract variables a profile's ``.env`` would override in the child.

    Upstream loads ``.env`` with override, so ``GATEWAY_MULTIPLEX_PROFILES=true`` there beats
    hermesd's ``false`` and that child would serve every profile, polling their tokens twice.
    """
    return sorted(
        k for k, v in FIXED_ENV.items() if k in profile_env and _canon(profile_env[k]) != _canon(v)
    )


def stop_timeout(drain_seconds: float) -> float:
    """Upstream's own service stop timeout: ``max(60, drain + 30)`` seconds."""
    return max(60.0, drain_seconds + 30.0)


def profile_drain_seconds(home: Path) -> float:
    """``agent.restart_drain_timeout`` from the profile's config.yaml (0 when absent or bad)."""
    path = home / "config.yaml"
    if not path.is_file():
        return 0.0
    import yaml  # lazy: keeps ``hermesd status`` light

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        value = (data.get("agent") or {}).get("restart_drain_timeout", 0)
        return max(0.0, float(value or 0))
    except (OSError, ValueError, TypeError, AttributeError, yaml.YAMLError):
        return 0.0


def resolve_gateway_command(configured: list[str] | None, path_env: str | None = None) -> list[str]:
    """The command prefix that runs ``hermes``.

    Configured command first, then ``hermes`` on PATH, then this interpreter's
    ``hermes_cli.main`` (hermes-agent installed beside hermesd).
    """
    if configured:
        exe = configured[0]
        found = shutil.which(exe, path=path_env) if "/" not in exe else exe
        if not found or not Path(found).exists():
            raise GatewayCommandError(f"gateway command {exe!r} (from hermesd.yaml 'command') not found")
        return [found, *configured[1:]]
    found = shutil.which("hermes", path=path_env)
    if found:
        return [found]
    if importlib.util.find_spec("hermes_cli") and importlib.util.find_spec("hermes_cli.main"):
        return [sys.executable, "-m", "hermes_cli.main"]
    raise GatewayCommandError(
        "cannot find the hermes command: install hermes-agent (pip install 'hermesd-supervisor[hermes]'),"
        " put 'hermes' on PATH, or set 'command' in hermesd.yaml"
    )
