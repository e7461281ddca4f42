"""Profiles that serve: upstream's API-server platform and a model that is the LLM stub.

Two shapes, the two ways a host can serve several profiles:

- **one gateway per profile** (:func:`write_own_server`, what hermesd runs): each profile's ``.env``
  enables the API server on a port of its own, with a key of its own;
- **one multiplexed gateway** (:func:`write_multiplexed`, upstream's ``gateway.multiplex_profiles``,
  the default from the 0.22 line on): only the root (default) profile's ``.env`` enables the API
  server; every profile is reached through ``/p/<profile>/…`` on that one port, with that one key.

Either way each profile's ``config.yaml`` names its own model (:func:`tests.traffic.llm.model_for`)
at the stub, and sets the profile's own approval policy so that a command its agent decides to run
runs without a human (``approvals.mode: off``, upstream's ``tools/approval.py``; its hard-line
block-list, which no setting lifts, stops only catastrophic shell forms such as ``:(){ :|:& };:``).
"""

from __future__ import annotations

import os
import secrets
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.traffic.llm import model_for

DEFAULT = "default"
CHAT_PATH = "/v1/chat/completions"


@dataclass(frozen=True)
class Endpoint:
    """Where the load generator sends one profile's requests."""

    profile: str
    port: int
    path: str
    key: str = field(repr=False)  # never shown: a test's key is still a key
    host: str = "127.0.0.1"


def free_port() -> int:
    """A TCP port of 127.0.0.1 nothing listens on right now (the kernel's pick)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def api_key() -> str:
    """A fresh key for an API server (upstream refuses one under 16 characters)."""
    return "traffic-" + secrets.token_hex(16)


def home_of(root: Path, profile: str) -> Path:
    return root if profile == DEFAULT else root / "profiles" / profile


def profile_config(llm_url: str, profile: str, **extra: Any) -> dict[str, Any]:
    """The profile's config.yaml: its model at the stub, approvals off (see the module docstring)."""
    cfg: dict[str, Any] = {
        "model": {"provider": "custom", "base_url": llm_url, "default": model_for(profile)},
        "approvals": {"mode": "off"},
    }
    cfg.update(extra)
    return cfg


def write_profile(root: Path, profile: str, llm_url: str, env: dict[str, str], **extra: Any) -> Path:
    home = home_of(root, profile)
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.yaml").write_text(yaml.safe_dump(profile_config(llm_url, profile, **extra), sort_keys=False))
    lines = {"OPENAI_API_KEY": "stub-key-not-checked", **env}
    envfile = home / ".env"
    envfile.write_text("".join(f"{k}={v}\n" for k, v in lines.items()))
    os.chmod(envfile, 0o600)
    return home


def server_env(port: int, key: str) -> dict[str, str]:
    return {"API_SERVER_ENABLED": "true", "API_SERVER_KEY": key, "API_SERVER_PORT": str(port)}


def write_own_server(root: Path, profile: str, llm_url: str) -> Endpoint:
    """``profile`` serving on a port of its own (one gateway per profile)."""
    port, key = free_port(), api_key()
    write_profile(root, profile, llm_url, server_env(port, key))
    return Endpoint(profile, port, CHAT_PATH, key)


def write_multiplexed(root: Path, profiles: tuple[str, ...], llm_url: str) -> list[Endpoint]:
    """Every profile of ``profiles`` served by the root's one gateway through ``/p/<profile>/``.

    The root (default) profile holds the listener and is served too (upstream serves it always);
    ``gateway.multiplex_profiles: true`` switches 0.19.0 to one process (the 0.22 line does it by
    default and writes the same key itself). Each named profile's ``.env`` holds the root's key
    (see the module docstring) and no listener of its own.
    """
    port, key = free_port(), api_key()
    write_profile(root, DEFAULT, llm_url, server_env(port, key), gateway={"multiplex_profiles": True})
    out = []
    for name in profiles:
        if name != DEFAULT:
            write_profile(root, name, llm_url, {"API_SERVER_KEY": key})
        out.append(Endpoint(name, port, CHAT_PATH if name == DEFAULT else f"/p/{name}{CHAT_PATH}", key))
    return out
