"""What a profile's files say, read once for every consumer: the daemon, doctor, export and status.

One reader, returning facts rather than raising, means that what ``doctor`` reports, what
``export`` refuses and what the daemon holds are computed from the same object. Reading is bounded
(:mod:`profiles.fileio`): a FIFO, a device, an oversized file or a YAML bomb is a named problem of
this profile, never a stall of the reader.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from profiles.credentials import (
    CONFIG_FILE,
    ENV_FILE,
    OP_ENV_FILE,
    profile_credentials,
    profile_ports,
    shared_config,
    view_of,
)
from profiles.envfile import read_env_file
from profiles.errors import ProfileConfigError
from profiles.safeio import home_file
from profiles.upstream.multiplex import PARKED_MARKER, standalone, without_consent
from profiles.upstream.platforms import enabled_platforms
from profiles.upstream.process import FixedVariable, drain_seconds, env_overrides


@dataclass(frozen=True, slots=True)
class Claim:
    """One exclusive resource a profile would take: a credential or a port."""

    kind: str  # "credential" or "port"
    platform: str
    what: str  # credential kind (lock scope) or "port"
    key: str  # salted fingerprint, or the port number as text: never a credential value

    def describe(self) -> str:
        if self.kind == "port":
            return f"{self.platform} port {self.key}"
        return f"{self.platform} {self.what} (fingerprint {self.key})"


@dataclass(frozen=True, slots=True)
class ProfileFacts:
    """One profile's files as its gateway would read them, or what is wrong with them.

    ``problems`` names every unreadable or malformed file (file and line, never a value); when it
    is non-empty, ``env``/``config`` may be missing and ``claims`` is empty. ``digest`` changes
    exactly when the effective content changes (comments and formatting do not count, nor the consent
    keys no running gateway reads: :data:`profiles.upstream.multiplex.CONSENT_KEYS`).
    """

    name: str
    home: Path
    env: dict[str, str] | None
    config: dict[str, Any] | None
    problems: tuple[str, ...]
    claims: tuple[Claim, ...]
    overrides: tuple[FixedVariable, ...]
    platforms: tuple[str, ...]  # platforms the files enable (those hermesd models)
    drain_s: float
    digest: str
    # What the multiplex-default line reads (ignored by earlier releases): ``gateway.standalone`` in
    # the profile's own config.yaml, and ``gateway.parked`` (``hermes -p X gateway stop``) in its home.
    standalone: bool = False
    parked: bool = False
    op_env: dict[str, str] | None = None  # .op.env, which fills what .env and hermesd leave unset

    @property
    def ok(self) -> bool:
        return not self.problems


def _problem(exc: BaseException, path: Path) -> str:
    if isinstance(exc, ProfileConfigError):
        return str(exc)
    if isinstance(exc, OSError) and exc.strerror:
        return f"{path}: cannot read: {exc.strerror}"
    return f"{path}: {exc}"


def digest_of(obj: object) -> str:
    """A short digest of parsed content (bounded by the reader, so serialising it is cheap)."""
    text = json.dumps(obj, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def read_profile(name: str, home: Path, salt: bytes) -> ProfileFacts:
    """Read ``home``'s ``.env`` and ``config.yaml``; never raises for anything the files contain."""
    home = Path(home)
    problems: list[str] = []
    env: dict[str, str] | None = None
    config: dict[str, Any] | None = None
    try:
        env = read_env_file(home_file(home, ENV_FILE))
    except (ProfileConfigError, OSError, ValueError) as exc:
        problems.append(_problem(exc, home / ENV_FILE))
    op_env: dict[str, str] | None = None
    try:
        op_env = read_env_file(home_file(home, OP_ENV_FILE))
    except (ProfileConfigError, OSError, ValueError) as exc:
        problems.append(_problem(exc, home / OP_ENV_FILE))
    try:
        config = shared_config(home)  # read-only: ProfileFacts never changes it
    except (ProfileConfigError, OSError, ValueError) as exc:
        problems.append(_problem(exc, home / CONFIG_FILE))
    parked = os.path.lexists(home / PARKED_MARKER)
    if env is None or config is None or op_env is None:
        return ProfileFacts(name, home, env, config, tuple(problems), (), (), (), 0.0,
                            "error:" + digest_of(problems), parked=parked, op_env=op_env)
    view = view_of(home, env, config, op_env)
    claims = [
        Claim("credential", c.platform, c.kind, c.fingerprint) for c in profile_credentials(home, salt, view=view)
    ]
    claims += [Claim("port", p.platform, "port", str(p.port)) for p in profile_ports(home, view=view)]
    platforms = enabled_platforms(view)
    return ProfileFacts(
        name, home, env, config, (), tuple(claims), tuple(env_overrides(env, config)), tuple(platforms),
        drain_seconds(config), digest_of({"env": env, "config": without_consent(config), "op_env": op_env}),
        standalone=standalone(config), parked=parked, op_env=op_env,
    )
