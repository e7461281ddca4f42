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
from collections.abc import Mapping
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
from profiles.upstream.lines import BASELINE, RuleLine
from profiles.upstream.multiplex import PARKED_MARKER, standalone, without_consent
from profiles.upstream.platforms import SRC_ENV, enabled_platforms, gateway_env
from profiles.upstream.process import FIXED_ENV, Override, env_overrides, profile_drain_seconds


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
    keys no running gateway reads: :data:`profiles.upstream.multiplex.CONSENT_KEYS`); it is one
    ``file=digest`` per file, comma-separated (:func:`changed_files` names the files that differ).
    """

    name: str
    home: Path
    env: dict[str, str] | None
    config: dict[str, Any] | None
    problems: tuple[str, ...]
    claims: tuple[Claim, ...]
    overrides: tuple[Override, ...]  # fixed variables whose behaviour the files change
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

    def gateway_environment(self, child: Mapping[str, str]) -> dict[str, str]:
        """The environment the gateway ends up with when hermesd starts it with ``child``: ``.env``
        over it, then ``.op.env`` and config.yaml's top-level settings for what is still unset."""
        return gateway_env({**child, **(self.env or {})}, self.op_env, self.config or {})[0]


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


def changed_files(before: str, after: str) -> list[str] | None:
    """The files whose content differs between two :attr:`ProfileFacts.digest`, or ``None`` when
    either is not one digest per file (a profile whose files could not be read)."""
    def files(digest: str) -> dict[str, str] | None:
        parts = [p.partition("=") for p in digest.split(",")]
        return {f: d for f, sep, d in parts} if all(sep for _f, sep, _d in parts) else None

    then, now = files(before), files(after)
    if then is None or now is None:
        return None
    return [f for f in dict.fromkeys([*then, *now]) if then.get(f) != now.get(f)]


def read_profile(name: str, home: Path, salt: bytes, line: RuleLine = BASELINE) -> ProfileFacts:
    """Read ``home``'s ``.env`` and ``config.yaml`` as the release whose rules are ``line`` reads
    them; never raises for anything the files contain."""
    home = Path(home)
    problems: list[str] = []
    env: dict[str, str] | None = None
    config: dict[str, Any] | None = None
    try:
        env = read_env_file(home_file(home, ENV_FILE), split=line.splits_run_together)
    except (ProfileConfigError, OSError, ValueError) as exc:
        problems.append(_problem(exc, home / ENV_FILE))
    op_env: dict[str, str] | None = None
    try:
        op_env = read_env_file(home_file(home, OP_ENV_FILE), split=line.splits_run_together)
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
    view = view_of(home, env, config, op_env, line)
    # The gateway's environment: hermesd's fixed values, the profile's files over them.
    gateway, sources = gateway_env({**FIXED_ENV, **env}, op_env, config)
    own = {k: src for k, src in sources.items() if k in env or src != SRC_ENV}
    claims = [
        Claim("credential", c.platform, c.kind, c.fingerprint) for c in profile_credentials(home, salt, view=view)
    ]
    claims += [Claim("port", p.platform, "port", str(p.port)) for p in profile_ports(home, view=view)]
    platforms = enabled_platforms(view)
    return ProfileFacts(
        name, home, env, config, (), tuple(claims), tuple(env_overrides(gateway, own, config, line)), tuple(platforms),
        profile_drain_seconds(gateway, config),
        ",".join(f"{f}={digest_of(v)}"
                 for f, v in ((ENV_FILE, env), (CONFIG_FILE, without_consent(config)), (OP_ENV_FILE, op_env))),
        standalone=standalone(config), parked=parked, op_env=op_env,
    )
