"""Which profiles exist, which ones hermesd serves, and which one is active.

A profile is a directory directly under ``<root>/profiles/`` whose name has the profile-id
shape; no marker file is needed (upstream semantics). ``profiles_to_serve`` mirrors
upstream's function of the same name: ``default`` first, then the named profiles sorted.

DECISION — served is stricter than upstream. A supervisor must not spawn a child that can
only fail, so two kinds of directory that upstream would list are *not* served:

* reserved names (``hermes``, ``test``, ``tmp``, ``root``, ``sudo``, ``default``):
  upstream lists them, but ``hermes -p test`` refuses the name and exits 1;
* symlinked directories: a link can point out of the root, and hermesd never follows a
  link out of the profiles folder.

:func:`unserved_profile_dirs` lists every skipped entry with its reason (invalid name,
reserved name, symlink, not a directory) so ``hermesd doctor`` can report them instead of
them vanishing silently. Entries whose name starts with ``.`` are hermesd's (or the
user's) scratch space — temp folders of an import in progress, for instance — and are
ignored without a word.

The *active* profile is the one a bare ``hermes`` command would use: ``HERMES_HOME`` when
it points at ``<root>/profiles/<name>``, else the sticky ``<root>/active_profile`` file
(unless ``HERMES_S6_SUPERVISED_CHILD`` is set, exactly as upstream), else ``default``.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from profiles.errors import InvalidNameError, ProfileConfigError, ProfileNotFoundError, UnsafePathError
from profiles.names import DEFAULT_PROFILE, RESERVED_NAMES, is_valid_name, parse_profile_name
from profiles.paths import (
    PROFILES_DIRNAME,
    active_profile_path,
    get_profile_dir,
    hermes_home,
    root_or_env,
)

REASON_NOT_DIR = "not a directory"
REASON_SYMLINK = "symlink"
REASON_INVALID = "invalid name"
REASON_RESERVED = "reserved name"


@dataclass(frozen=True, slots=True)
class UnservedEntry:
    """One entry under ``profiles/`` that hermesd will not serve, and why."""

    name: str
    path: Path
    reason: str


def _classify(entry: os.DirEntry[str]) -> str | None:
    """``None`` for a servable profile directory, else the reason it is skipped."""
    try:
        if entry.is_symlink():
            return REASON_SYMLINK
        if not entry.is_dir(follow_symlinks=False):
            return REASON_NOT_DIR
    except OSError:
        return REASON_NOT_DIR
    if not is_valid_name(entry.name):
        return REASON_INVALID
    if entry.name in RESERVED_NAMES:
        return REASON_RESERVED
    return None


def _scan(root: Path) -> tuple[list[tuple[str, Path]], list[UnservedEntry]]:
    served: list[tuple[str, Path]] = []
    skipped: list[UnservedEntry] = []
    folder = root / PROFILES_DIRNAME
    try:
        it = os.scandir(folder)
    except (FileNotFoundError, NotADirectoryError):
        return served, skipped
    with it:
        for entry in it:
            if entry.name.startswith("."):
                continue
            reason = _classify(entry)
            if reason is None:
                served.append((entry.name, Path(entry.path)))
            else:
                skipped.append(UnservedEntry(entry.name, Path(entry.path), reason))
    served.sort()
    skipped.sort(key=lambda u: u.name)
    return served, skipped


def named_profiles(root: Path | str | None = None, env: Mapping[str, str] | None = None) -> list[tuple[str, Path]]:
    """Every servable named profile under ``<root>/profiles``, sorted by name."""
    return _scan(root_or_env(root, env))[0]


def unserved_profile_dirs(
    root: Path | str | None = None, env: Mapping[str, str] | None = None
) -> list[tuple[str, Path, str]]:
    """Every non-dot entry under ``profiles/`` that is not served, as ``(name, path, reason)``."""
    return [(u.name, u.path, u.reason) for u in _scan(root_or_env(root, env))[1]]


def profile_exists(name: str, root: Path | str | None = None, env: Mapping[str, str] | None = None) -> bool:
    """True for ``default`` and for a real (non-symlink) directory ``profiles/<name>``."""
    canon = parse_profile_name(name)
    if canon == DEFAULT_PROFILE:
        return True
    path = get_profile_dir(canon, root, env)
    return path.is_dir() and not path.is_symlink()


def existing_profile_home(
    name: str, root: Path | str | None = None, env: Mapping[str, str] | None = None
) -> Path:
    """The home of an existing profile: the root for ``default``, else the real folder ``profiles/<name>``.

    A symlinked entry raises :class:`UnsafePathError` instead of being followed: it could
    point anywhere, and hermesd never acts on a folder outside the profiles folder.
    """
    canon = parse_profile_name(name)
    base = root_or_env(root, env)
    if canon == DEFAULT_PROFILE:
        if not base.is_dir():
            raise ProfileNotFoundError(f"the root {base} does not exist")
        return base
    path = base / PROFILES_DIRNAME / canon
    try:
        st = path.lstat()
    except FileNotFoundError:
        raise ProfileNotFoundError(f"profile {canon!r} does not exist under {base / PROFILES_DIRNAME}") from None
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePathError(
            f"{path} is a symlink; hermesd never follows links out of the profiles folder "
            "(remove the link itself if you meant to)"
        )
    if not stat.S_ISDIR(st.st_mode):
        raise ProfileNotFoundError(f"{path} is not a directory, so it is not a profile")
    return path


def read_active_profile(root: Path | str | None = None, env: Mapping[str, str] | None = None) -> str:
    """The sticky profile name in ``<root>/active_profile``; ``default`` when absent or empty.

    A file holding something that is not a valid profile name raises
    :class:`ProfileConfigError`, because upstream would refuse to start with it too.
    """
    path = active_profile_path(root, env)
    try:
        raw = path.read_text(encoding="utf-8").strip()
    except (FileNotFoundError, NotADirectoryError):
        return DEFAULT_PROFILE
    except (OSError, UnicodeDecodeError) as exc:
        raise ProfileConfigError(path, f"unreadable: {exc}") from exc
    if not raw:
        return DEFAULT_PROFILE
    try:
        return parse_profile_name(raw)
    except InvalidNameError as exc:
        raise ProfileConfigError(path, str(exc), line=1) from exc


def set_active_profile(name: str, root: Path | str | None = None, env: Mapping[str, str] | None = None) -> str:
    """Make ``name`` the sticky profile (``default`` clears it); returns the canonical name."""
    canon = parse_profile_name(name)
    base = root_or_env(root, env)
    if canon == DEFAULT_PROFILE:
        clear_active_profile(base)
        return canon
    if not profile_exists(canon, base):
        raise ProfileNotFoundError(f"profile {canon!r} does not exist under {base / PROFILES_DIRNAME}")
    path = active_profile_path(base)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(canon + "\n", encoding="utf-8")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return canon


def clear_active_profile(root: Path | str | None = None, env: Mapping[str, str] | None = None) -> None:
    """Remove the sticky profile, so ``default`` is active again (upstream's representation)."""
    active_profile_path(root, env).unlink(missing_ok=True)


def _profile_named_by_home(home: Path, root: Path) -> str | None:
    """The profile ``home`` is, when it is ``<root>/profiles/<name>``."""
    if home.parent.name != PROFILES_DIRNAME:
        return None
    try:
        same_root = home.parent.parent.resolve() == root.resolve()
    except OSError:
        same_root = False
    return home.name if same_root else None


def active_profile(root: Path | str | None = None, env: Mapping[str, str] | None = None) -> str:
    """The profile a bare ``hermes`` command would use under ``env`` (see module docstring)."""
    e = os.environ if env is None else env
    base = root_or_env(root, e)
    if e.get("HERMES_HOME", "").strip():
        named = _profile_named_by_home(hermes_home(e), base)
        if named is not None:
            return parse_profile_name(named)
    if not e.get("HERMES_S6_SUPERVISED_CHILD"):
        return read_active_profile(base)
    return DEFAULT_PROFILE


def profiles_to_serve(
    multiplex: bool, root: Path | str | None = None, env: Mapping[str, str] | None = None
) -> list[tuple[str, Path]]:
    """The ``(name, home)`` pairs to run a gateway for.

    ``multiplex=False``: just the active profile (as upstream's single-profile gateway).
    ``multiplex=True``: ``default`` first, then every servable named profile, sorted.
    """
    base = root_or_env(root, env)
    if not multiplex:
        name = active_profile(base, env)
        if name != DEFAULT_PROFILE and not any(n == name for n, _ in named_profiles(base)):
            raise ProfileNotFoundError(
                f"active profile {name!r} is not a servable profile under {base / PROFILES_DIRNAME}"
            )
        return [(name, get_profile_dir(name, base))]
    return [(DEFAULT_PROFILE, base), *named_profiles(base)]

