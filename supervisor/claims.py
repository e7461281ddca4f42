"""What a profile's files say, read once for every consumer: daemon, doctor and export.

One reader means that what ``doctor`` calls a duplicate, what ``export`` refuses and what the
daemon holds are the same thing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from supervisor.conflicts import Claim


@dataclass(frozen=True, slots=True)
class ProfileFiles:
    """A profile's ``.env``, ``config.yaml`` and the exclusive resources they claim."""

    env: dict[str, str]
    config: dict[str, Any]
    claims: tuple[Claim, ...]


def read_profile_files(home: Path, salt: bytes) -> ProfileFiles:
    """Parse ``.env`` and ``config.yaml`` and derive the profile's credential and port claims.

    Raises what the readers raise (:class:`profiles.errors.ProfileError`, ``ValueError``,
    ``OSError``) for a malformed or unreadable file, naming it; callers decide how to report it.
    """
    from profiles.credentials import load_config, profile_credentials, profile_ports, read_env_file

    env = read_env_file(home / ".env")
    cfg = load_config(home)
    claims = [Claim("credential", c.platform, c.kind, c.fingerprint) for c in profile_credentials(home, salt)]
    claims += [Claim("port", p.platform, "port", str(p.port)) for p in profile_ports(home)]
    return ProfileFiles(env, cfg, tuple(claims))
