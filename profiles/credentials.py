"""The exclusive platform credentials and TCP ports a profile's gateway would claim.

Two gateways polling one bot token do not fail: upstream's per-user credential lock makes them
trade the token back and forth, each reporting ``running``. Two gateways binding one port do fail,
but only after start-up. hermesd catches both *before* spawning by reading each profile's ``.env``
and ``config.yaml`` the way the gateway would (the rules live with each platform in
:mod:`profiles.upstream.platforms`), and comparing.

Lock scopes (``Credential.kind``): ``telegram-bot-token``, ``discord-bot-token``,
``slack-app-token``, ``signal-phone``, ``weixin-bot-token``, ``qqbot-appid``, ``yuanbao-app-key``,
``feishu-app-id``, ``whatsapp-session``, ``irc`` (``server:nickname``), ``line`` (the first 16 hex
digits of the channel access token's SHA-256). Upstream's IRC and LINE locks never stop a second
gateway; hermesd holds it anyway (docs/upstream.md). Values never leave this module: callers get a
salted fingerprint only.
"""

from __future__ import annotations

import copy
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from profiles.envfile import read_env_file
from profiles.fileio import as_mapping, decode_text, parse_yaml, read_cached
from profiles.safeio import home_file
from profiles.upstream.lines import BASELINE, RuleLine
from profiles.upstream.platforms import PortBinding, View, credentials_of, ports_of

ENV_FILE = ".env"
OP_ENV_FILE = ".op.env"  # upstream loads it after .env, without override (1Password's bootstrap token)
CONFIG_FILE = "config.yaml"


@dataclass(frozen=True)
class Credential:
    """One exclusive credential: which platform, which lock scope, a salted fingerprint, where from."""

    platform: str
    kind: str
    fingerprint: str
    source: str


def fingerprint(value: str, salt: bytes) -> str:
    """12 hex digits of a keyed BLAKE2b of ``value``: comparable across profiles, never reversible.

    The salt is the caller's secret (hermesd keeps one per root), so a fingerprint in a log
    or a status file cannot be checked against a guessed token elsewhere.
    """
    key = salt if len(salt) <= 64 else hashlib.sha256(salt).digest()
    return hashlib.blake2b(value.encode("utf-8", "surrogatepass"), key=key, digest_size=6).hexdigest()


# --------------------------------------------------------------------------- config.yaml

_config_cache: dict[str, tuple[tuple[int, int, int], dict[str, Any]]] = {}


def shared_config(home: Path | str) -> dict[str, Any]:
    """``config.yaml`` parsed once per file version; ``{}`` when absent. Callers must not mutate it:
    the daemon's rescan reads it without a copy (copying cost 15 % of a 1,000-profile scan)."""
    spot = home_file(home, CONFIG_FILE)

    def parse(raw: bytes) -> dict[str, Any]:
        return as_mapping(parse_yaml(decode_text(raw, spot), spot.path), spot.path)

    data = read_cached(spot, _config_cache, parse)
    return {} if data is None else data


def load_config(home: Path) -> dict[str, Any]:
    """A profile's ``config.yaml`` as a fresh dict (``{}`` if missing); malformed -> ProfileConfigError."""
    return copy.deepcopy(shared_config(Path(home)))


def view_of(home: Path, env: dict[str, str] | None = None, cfg: dict[str, Any] | None = None,
            op_env: dict[str, str] | None = None, line: RuleLine = BASELINE) -> View:
    """The profile's files as its gateway would merge them; reads whichever of the three is not given.

    ``line``: the rules of the release that reads them. Raises :class:`ProfileConfigError` when
    ``.env``, ``.op.env`` or ``config.yaml`` is malformed.
    """
    if env is None:
        env = read_env_file(home_file(home, ENV_FILE), split=line.splits_run_together)
    if cfg is None:
        cfg = shared_config(home)
    if op_env is None:
        op_env = read_env_file(home_file(home, OP_ENV_FILE), split=line.splits_run_together)
    return View(Path(home), env, cfg, op_env, line)


def profile_credentials(home: Path, salt: bytes, *, view: View | None = None) -> list[Credential]:
    """The exclusive credentials ``home``'s gateway would lock, fingerprinted with ``salt``."""
    found = credentials_of(view or view_of(home))
    return [Credential(p, kind, fingerprint(value, salt), src) for p, kind, value, src in found]


def credential_kinds(home: Path) -> list[str]:
    """The lock scopes ``home`` configures, sorted: what a clone warning names (never values)."""
    return sorted({kind for _, kind, _, _ in credentials_of(view_of(home))})


def profile_ports(home: Path, *, view: View | None = None) -> list[PortBinding]:
    """The TCP listeners ``home``'s gateway would open, in a stable platform order."""
    return ports_of(view or view_of(home))
