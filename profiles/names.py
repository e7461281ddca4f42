"""Profile and alias names: one normalisation, one rule set, one "no such profile", shared by every entry point.

Upstream Hermes normalises at the edges (CLI, dashboard) and validates strictly on disk, so
``Coder`` typed by a person becomes the directory ``coder``. We do the same: callers that
take human input call :func:`normalize_name` first, then :func:`validate_profile_name`
(:func:`parse_profile_name` does both). Aliases are file names in a directory on ``PATH``, so
they also must not shadow a Hermes subcommand.

API (also used by the supervisor's CLI):

* ``parse_profile_name(raw, allow_default=True) -> str`` — normalise + validate a typed name;
* ``is_valid_name(name) -> bool`` — the on-disk id shape, matched against the *whole* string;
* ``no_such_profile(name, known) -> ProfileNotFoundError`` — the one wording for an unknown
  profile, with a did-you-mean suggestion (raise it, or print ``str()`` of it);
* ``resolve_profile_names(raw_names, known) -> list[str]`` — every name checked before any
  is acted on; all unknown names reported in one error.

DECISION — whole-string matching. Upstream's ``_PROFILE_ID_RE`` is ``^…$`` used with
``re.match``, and ``$`` also matches before a trailing newline: upstream lists a folder named
``"ok\\n"`` as a profile, but ``hermes -p 'ok\\n'`` strips the name to ``ok`` and fails. hermesd
matches the whole string (``fullmatch``), so such a folder is never served (it is reported by
``hermesd doctor`` instead). :func:`upstream_id_match` keeps upstream's looser test for the one
place that must predict upstream's answer (the active profile's name, :mod:`profiles.discovery`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from profiles.errors import InvalidNameError, ProfileNotFoundError

# The rule as text: what shells (completion scripts) and messages use. Python code matches it
# with ``NAME_RE.fullmatch`` so a trailing newline is never accepted.
NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,63}$"
NAME_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
_UPSTREAM_ID_RE = re.compile(NAME_PATTERN)  # upstream's own regex, used with .match (see module doc)
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

_SHOWN_NAME_CHARS = 80  # a name quoted in an error message is cut here (names can come from files)


def shown(name: object) -> str:
    """``repr`` of a name for a message, cut to a short prefix: a hostile name never floods a log."""
    text = name if isinstance(name, str) else str(name)
    if len(text) <= _SHOWN_NAME_CHARS:
        return repr(text)
    return f"{text[:_SHOWN_NAME_CHARS]!r}... ({len(text)} characters)"


def normalize_name(name: object) -> str:
    """Trim and lower-case a human-typed name; ``Default`` in any case means ``default``.

    Exactly upstream's ``normalize_profile_name``: ``str()`` of a non-string, ``strip()``,
    ``casefold() == 'default'`` -> ``default``, else ``lower()``.
    """
    text = name if isinstance(name, str) else str(name)
    stripped = text.strip()
    if not stripped:
        raise InvalidNameError("profile name cannot be empty")
    if stripped.casefold() == DEFAULT_PROFILE:
        return DEFAULT_PROFILE
    return stripped.lower()


def is_valid_name(name: str) -> bool:
    """True when the *whole* of ``name`` has the on-disk shape of a profile id (reserved names included)."""
    return isinstance(name, str) and NAME_RE.fullmatch(name) is not None


def upstream_id_match(name: str) -> bool:
    """Upstream's test, ``re.match('^[a-z0-9][a-z0-9_-]{0,63}$', name)``: also true for ``'ok\\n'``."""
    return _UPSTREAM_ID_RE.match(name) is not None


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
        raise InvalidNameError(f"invalid profile name {shown(name)}: {NAME_RULE}")
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
        raise InvalidNameError(f"invalid alias name {shown(name)}: {NAME_RULE}")
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


# --------------------------------------------------------------------------- unknown names


def suggest_profile(name: object, known: Iterable[str]) -> str | None:
    """The known profile name closest to ``name`` (after normalisation), or ``None``."""
    text = name if isinstance(name, str) else str(name)
    candidates = sorted(set(known))
    import difflib  # only when a name is unknown: the daemon never needs it

    close = difflib.get_close_matches(text.strip().lower(), candidates, n=1, cutoff=0.6)
    return close[0] if close else None


def no_such_profile(name: object, known: Iterable[str]) -> ProfileNotFoundError:
    """The one "no such profile" error, e.g. ``no such profile: 'alpah' (did you mean 'alpha'?)``.

    ``name`` is what the user typed (shown as typed, cut to a short prefix); ``known`` the names
    that do exist. Return value is an exception: ``raise no_such_profile(...)``, or print its
    ``str()``. A ``ProfileNotFoundError`` (so a ``ProfileError``): hermesd's CLI turns it into
    ``hermesd: error: …`` and exit status 2.
    """
    suggestion = suggest_profile(name, known)
    hint = f" (did you mean {suggestion!r}?)" if suggestion else ""
    return ProfileNotFoundError(f"no such profile: {shown(name)}{hint}")


def resolve_profile_names(raw_names: Iterable[object], known: Iterable[str]) -> list[str]:
    """Canonical names for ``raw_names``, after checking every one (nothing acts before all are known).

    An invalid name raises :class:`InvalidNameError`; unknown names raise one
    :class:`ProfileNotFoundError` naming each of them (``no such profile: 'a'; no such profile: 'b'
    (did you mean 'bb'?)``). ``known`` holds canonical names (``default`` included when it counts).
    """
    known_set = set(known)
    out: list[str] = []
    unknown: list[str] = []
    for raw in raw_names:
        canon = parse_profile_name(raw)
        if canon in known_set:
            out.append(canon)
        else:
            unknown.append(str(no_such_profile(raw, known_set)))
    if unknown:
        raise ProfileNotFoundError("; ".join(unknown))
    return out
