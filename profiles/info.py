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
from profiles.fileio import parse_yaml, read_text
from profiles.meta import read_profile_meta
from profiles.names import DEFAULT_PROFILE, parse_profile_name
from profiles.paths import root_or_env
from profiles.upstream.files import live_gateway


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
    aliases: list[str] = field(default_factory=list)  # named by :func:`wrappers.follow.name_aliases`
    upstream_aliases: list[str] = field(default_factory=list)  # of ``aliases``: upstream-style wrappers
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


def summarize(name: str, home: Path, *, active: str) -> ProfileSummary:
    """Everything ``show`` prints about one profile; file errors land in ``problems``."""
    record = live_gateway(home, search=False)  # a PID to show: no pass over /proc per profile listed
    summary = ProfileSummary(
        name=name,
        path=home,
        is_default=name == DEFAULT_PROFILE,
        active=name == active,
        gateway_pid=record.pid if record else None,
        has_env=(home / ".env").is_file(),
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


def _active_or_default(base: Path, env: Mapping[str, str] | None) -> str:
    try:
        return active_profile(base, env)
    except ProfileError:
        return DEFAULT_PROFILE


def list_profiles(root: Path | str | None = None,
                  env: Mapping[str, str] | None = None) -> tuple[list[ProfileSummary], list[tuple[str, Path, str]]]:
    """Summaries of ``default`` and every served profile, plus the unserved entries and why."""
    base = root_or_env(root, env)
    active = _active_or_default(base, env)
    homes = [(DEFAULT_PROFILE, base), *named_profiles(base)]
    summaries = [summarize(n, h, active=active) for n, h in homes]
    return summaries, unserved_profile_dirs(base)


def show_profile(name: str, root: Path | str | None = None, env: Mapping[str, str] | None = None) -> ProfileSummary:
    """The summary of one existing profile."""
    canon = parse_profile_name(name)
    base = root_or_env(root, env)
    home = existing_profile_home(name, base)
    return summarize(canon, home, active=_active_or_default(base, env))


# --------------------------------------------------------------------------- distribution manifest

DISTRIBUTION_FILE = "distribution.yaml"


def read_distribution(home: Path) -> dict[str, Any] | None:
    """``distribution.yaml`` as upstream's ``describe_distribution`` shows it, or ``None`` when absent.

    The fields and their defaults are upstream's ``DistributionManifest`` (``name`` required,
    ``version`` ``0.1.0``, ``env_requires`` a list of ``{name, description, required, default}``);
    a malformed manifest is a :class:`ProfileConfigError` naming the file (read bounded).
    """
    path = Path(home) / DISTRIBUTION_FILE
    if not path.is_file():
        return None
    data = parse_yaml(read_text(path), path) or {}
    if not isinstance(data, dict):
        raise ProfileConfigError(path, f"must be a mapping, got {type(data).__name__}")
    name = str(data.get("name") or "").strip()
    if not name:
        raise ProfileConfigError(path, "missing 'name'")
    env_raw = data.get("env_requires") or []
    if not isinstance(env_raw, list):
        raise ProfileConfigError(path, "env_requires must be a list")
    env_requires: list[dict[str, Any]] = []
    for entry in env_raw:
        if not isinstance(entry, dict):
            raise ProfileConfigError(path, f"env_requires entry must be a mapping, got {type(entry).__name__}")
        var = str(entry.get("name") or "").strip()
        if not var:
            raise ProfileConfigError(path, "env_requires entry missing 'name'")
        item: dict[str, Any] = {"name": var, "description": str(entry.get("description") or "")}
        if not bool(entry.get("required", True)):
            item["required"] = False
        if entry.get("default") is not None:
            item["default"] = entry.get("default")
        env_requires.append(item)
    out: dict[str, Any] = {"name": name, "version": str(data.get("version") or "0.1.0")}
    for key in ("description", "hermes_requires", "author", "license"):
        value = str(data.get(key) or "")
        if value:
            out[key] = value
    if env_requires:
        out["env_requires"] = env_requires
    for key in ("source", "installed_at"):
        value = str(data.get(key) or "")
        if value:
            out[key] = value
    return out
