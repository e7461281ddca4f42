"""The environment tags hermesd puts on every child, and the check that a tag is really hermesd's.

The tags are inherited by anything the gateway spawns (even a ``setsid``'d restarter), which is how
hermesd finds its processes again after its own crash and how it finds descendants that escaped the
process group. Everything that asks "whose process is this?" reads them: the child contract
(:mod:`supervisor.processes.childspec`), identity, the limits watcher, kanban's worker scan, hooks.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Mapping
from pathlib import Path

TAG_ROOT = "HERMESD_ROOT"
TAG_PROFILE = "HERMESD_PROFILE"
# Any process can *set* a tag (``HERMESD_PROFILE=p2 cmd``), so a tag alone proves nothing: this
# keyed digest of root and profile (hermesd's per-root salt, which no confined profile can read)
# makes a claim checkable. A profile knows only its own token (another profile's environment is
# out of its reach under confinement), so a process can claim membership of its own profile
# only. Where cgroups give exact membership, tags are not needed at all.
TAG_TOKEN = "HERMESD_TAG_TOKEN"


def tag_token(salt: bytes, root: Path | str, profile: str) -> str:
    """The token that proves a process was started by hermesd of ``root`` for ``profile``."""
    msg = b"hermesd-tag\0" + os.fsencode(str(root)) + b"\0" + profile.encode("utf-8", "surrogateescape")
    return hmac.new(salt, msg, hashlib.sha256).hexdigest()[:32]


def verified_profile(env: Mapping[str, str], salt: bytes, root: Path | str) -> str | None:
    """The profile a process's environment proves it belongs to, or ``None`` (no tag, another
    root's, or a tag without the right token: set by the process itself, not by hermesd)."""
    name = env.get(TAG_PROFILE)
    if not name or env.get(TAG_ROOT) != str(root):
        return None
    return name if hmac.compare_digest(env.get(TAG_TOKEN, ""), tag_token(salt, root, name)) else None
