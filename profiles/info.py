"""What ``profile list`` and ``profile show`` report about a profile, gathered without side effects.

A broken file in one profile (malformed ``config.yaml``, ``profile.yaml`` or ``.env``) must
not break the listing of the others, so each summary collects such errors as ``problems``
instead of raising. Nothing here starts, signals or probes a process beyond reading
``gateway.pid`` and ``/proc``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from profiles.credentials import credential_kinds, load_config, profile_ports
from profiles.discovery import active_profile, existing_profile_home, named_profiles, unserved_profile_dirs
from profiles.errors import ProfileConfigError, ProfileError
from profiles.gateway_files import live_gateway
from profiles.meta import read_profile_meta
from profiles.names import DEFAULT_PROFILE, parse_profile_name
from profiles.paths import root_or_env
from wrappers.scripts import list_wrappers


@dataclass
class ProfileSummary:
    """One profile as the CLI shows it (also the ``--json`` shape)."""

    name: str
    path: Path
    is_default: bool
    active: bool
    gateway_pid: int | None
    model: str | None = None
    provider: str | None = None
    has_env: bool = False
    description: str = ""
    description_auto: bool = False
    aliases: list[str] = field(default_factory=list)
    credential_kinds: list[str] = field(default_factory=list)
    ports: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready mapping (paths as strings)."""
        data = asdict(self)
        data["path"] = str(self.path)
        return data


def _model(config: Mapping[str, Any]) -> tuple[str | None, str | None]:
    model = config.get("model")
    if isinstance(model, str):
        return model, None
    if isinstance(model, Mapping):
        name = model.get("default") or model.get("model")
        provider = model.get("provider")
        return (str(name) if name else None, str(provider) if provider else None)
    return None, None


def summarize(
    name: str, home: Path, *, active: str, aliases: Mapping[str, list[str]] | None = None
) -> ProfileSummary:
    """Everything ``show`` prints about one profile; file errors land in ``problems``."""
    record = live_gateway(home)
    summary = ProfileSummary(
        name=name,
        path=home,
        is_default=name == DEFAULT_PROFILE,
        active=name == active,
        gateway_pid=record.pid if record else None,
        has_env=(home / ".env").is_file(),
        aliases=list((aliases or {}).get(name, [])),
    )
    try:
        summary.model, summary.provider = _model(load_config(home))
    except ProfileConfigError as exc:
        summary.problems.append(str(exc))
    try:
        meta = read_profile_meta(home)
        summary.description = meta["description"]
        summary.description_auto = meta["description_auto"]
    except ProfileConfigError as exc:
        summary.problems.append(str(exc))
    try:
        summary.credential_kinds = credential_kinds(home)
        summary.ports = [asdict(b) for b in profile_ports(home)]
    except ProfileConfigError as exc:
        if str(exc) not in summary.problems:
            summary.problems.append(str(exc))
    return summary


def alias_map(
    root: Path, wrapper_dir: Path | None = None, env: Mapping[str, str] | None = None
) -> dict[str, list[str]]:
    """``{profile: [aliases]}`` for the wrappers hermesd wrote for ``root``."""
    found: dict[str, list[str]] = {}
    for info in list_wrappers(wrapper_dir, root, env):
        found.setdefault(info.profile, []).append(info.alias)
    return found


def _active_or_default(base: Path, env: Mapping[str, str] | None) -> str:
    try:
        return active_profile(base, env)
    except ProfileError:
        return DEFAULT_PROFILE


def list_profiles(
    root: Path | str | None = None, env: Mapping[str, str] | None = None, wrapper_dir: Path | None = None
) -> tuple[list[ProfileSummary], list[tuple[str, Path, str]]]:
    """Summaries of ``default`` and every served profile, plus the unserved entries and why."""
    base = root_or_env(root, env)
    active = _active_or_default(base, env)
    aliases = alias_map(base, wrapper_dir, env)
    homes = [(DEFAULT_PROFILE, base), *named_profiles(base)]
    summaries = [summarize(n, h, active=active, aliases=aliases) for n, h in homes]
    return summaries, unserved_profile_dirs(base)


def show_profile(
    name: str, root: Path | str | None = None, env: Mapping[str, str] | None = None, wrapper_dir: Path | None = None
) -> ProfileSummary:
    """The summary of one existing profile."""
    canon = parse_profile_name(name)
    base = root_or_env(root, env)
    home = existing_profile_home(canon, base)
    return summarize(canon, home, active=_active_or_default(base, env), aliases=alias_map(base, wrapper_dir, env))
