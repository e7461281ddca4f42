"""Profile and alias names: one normalisation, one rule set, shared by every entry point.

Upstream Hermes normalises at the edges (CLI, dashboard) and validates strictly on disk, so
``Coder`` typed by a person becomes the directory ``coder``. We do the same: callers that
take human input call :func:`normalize_name` first, then :func:`validate_profile_name`.
Aliases are file names in a directory on ``PATH``, so they also must not shadow a Hermes
subcommand (``gateway`` as an alias would make ``gateway chat`` ambiguous to the reader).
"""

from __future__ import annotations

import re

from profiles.errors import InvalidNameError

NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,63}$"
NAME_RE = re.compile(NAME_PATTERN)
NAME_RULE = "must match [a-z0-9][a-z0-9_-]{0,63} (lower-case letters, digits, '-' and '_', 1-64 chars)"

DEFAULT_PROFILE = "default"

# Names that would collide with the installation itself or with common system binaries.
RESERVED_NAMES: frozenset[str] = frozenset({"hermes", "default", "test", "tmp", "root", "sudo"})

# Hermes subcommands: an alias with one of these names would read as a subcommand.
HERMES_SUBCOMMANDS: frozenset[str] = frozenset(
    {
        "chat", "model", "gateway", "setup", "whatsapp", "login", "logout",
        "status", "cron", "doctor", "dump", "config", "pairing", "skills", "tools",
        "mcp", "sessions", "insights", "version", "update", "uninstall",
        "profile", "plugins", "honcho", "acp",
    }
)


def normalize_name(name: object) -> str:
    """Trim and lower-case a human-typed name; ``Default`` in any case means ``default``."""
    text = name if isinstance(name, str) else str(name)
    stripped = text.strip()
    if not stripped:
        raise InvalidNameError("profile name cannot be empty")
    if stripped.casefold() == DEFAULT_PROFILE:
        return DEFAULT_PROFILE
    return stripped.lower()


def is_valid_name(name: str) -> bool:
    """True when ``name`` has the on-disk shape of a profile id (reserved names included)."""
    return NAME_RE.match(name) is not None


def validate_profile_name(name: str, *, allow_default: bool = True) -> str:
    """Return ``name`` if it may name a profile; raise :class:`InvalidNameError` otherwise.

    ``default`` is the built-in root profile: valid where a profile is *referenced*, refused
    where a new one would be *created* (``allow_default=False``).
    """
    if name == DEFAULT_PROFILE:
        if allow_default:
            return name
        raise InvalidNameError(
            f"profile name {name!r} is reserved: 'default' is the built-in root profile"
        )
    if not is_valid_name(name):
        raise InvalidNameError(f"invalid profile name {name!r}: {NAME_RULE}")
    if name in RESERVED_NAMES:
        raise InvalidNameError(
            f"profile name {name!r} is reserved (reserved names: {', '.join(sorted(RESERVED_NAMES))})"
        )
    return name


def validate_alias_name(name: str) -> str:
    """Return ``name`` if it may be a wrapper command; raise :class:`InvalidNameError` otherwise.

    The alias becomes a file name, so the profile-name shape (no ``/``, no ``..``) is what
    keeps it inside the wrapper directory.
    """
    if not is_valid_name(name):
        raise InvalidNameError(f"invalid alias name {name!r}: {NAME_RULE}")
    if name in RESERVED_NAMES:
        raise InvalidNameError(
            f"alias name {name!r} is reserved (reserved names: {', '.join(sorted(RESERVED_NAMES))})"
        )
    if name in HERMES_SUBCOMMANDS:
        raise InvalidNameError(f"alias name {name!r} is a Hermes subcommand and would shadow it")
    return name


def parse_profile_name(raw: object, *, allow_default: bool = True) -> str:
    """Normalise then validate: the one call for every name that came from a person."""
    return validate_profile_name(normalize_name(raw), allow_default=allow_default)
