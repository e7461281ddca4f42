"""Where profiles live, resolved the way upstream Hermes resolves them.

Nothing here is computed at import time: ``HERMES_HOME`` is read on every call, because
the supervisor, the CLI and the tests each run under a different environment and a value
captured at import would silently point all of them at the first one. Every function
also accepts an explicit ``env`` mapping (and the callers above accept an explicit
``root``) so no caller has to mutate ``os.environ`` to ask a question.

Root resolution (upstream ``get_default_hermes_root``):

* ``HERMES_HOME`` unset, or inside ``~/.hermes`` -> ``~/.hermes``;
* ``HERMES_HOME``'s parent is named ``profiles`` -> its grandparent (a profile of a custom root);
* otherwise ``HERMES_HOME`` itself (a custom root, e.g. ``/opt/data`` in Docker).

The profiles folder is always ``<root>/profiles``, anchored at the root and never at the
current profile, so a command run from inside a profile still sees every profile.
"""

from __future__ import annotations

import os
import pwd
import sys
from collections.abc import Mapping
from pathlib import Path

from profiles.errors import ProfileNotFoundError
from profiles.names import DEFAULT_PROFILE, parse_profile_name

PROFILES_DIRNAME = "profiles"
ACTIVE_PROFILE_FILE = "active_profile"
HERMESD_DIRNAME = ".hermesd"


def _env(env: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if env is None else env


def user_home(env: Mapping[str, str] | None = None) -> Path:
    """The user's home as ``Path.home()`` computes it, but from ``env`` (so tests can fake it).

    ``posixpath.expanduser``: ``$HOME`` when the variable is set (even empty: trailing slashes
    dropped, ``""`` becomes ``/``), else the password database.
    """
    env = _env(env)
    if "HOME" in env:
        return Path(env["HOME"].rstrip("/") or "/")
    try:
        return Path(pwd.getpwuid(os.getuid()).pw_dir.rstrip("/") or "/")
    except KeyError:  # pragma: no cover - a uid without a passwd entry
        return Path.home()


def native_default_home(env: Mapping[str, str] | None = None) -> Path:
    """``~/.hermes`` (``%LOCALAPPDATA%\\hermes`` on Windows), as upstream defaults it."""
    e = _env(env)
    if sys.platform == "win32":
        local = e.get("LOCALAPPDATA", "").strip()
        base = Path(local) if local else user_home(e) / "AppData" / "Local"
        return base / "hermes"
    return user_home(e) / ".hermes"


def hermes_home(env: Mapping[str, str] | None = None) -> Path:
    """The current ``HERMES_HOME`` (a profile home or the root), defaulting to ``~/.hermes``."""
    e = _env(env)
    raw = e.get("HERMES_HOME", "").strip()
    return Path(raw) if raw else native_default_home(e)


def resolve_root(env: Mapping[str, str] | None = None) -> Path:
    """The Hermes root for ``env`` (see the module docstring for the three cases)."""
    e = _env(env)
    return _root_of(e.get("HERMES_HOME", "").strip(), e)


def upstream_root(env: Mapping[str, str] | None = None) -> Path:
    """The root exactly as upstream's ``get_default_hermes_root()`` computes it, messy input included.

    Upstream does *not* strip ``HERMES_HOME`` here (``get_hermes_home`` does), so a value with
    surrounding blanks gives a relative, cwd-dependent root. :func:`resolve_root` strips instead
    (a deliberate difference: a supervisor must not serve a cwd-relative root); this function
    exists for the predictions that must equal upstream's (the active profile).
    """
    e = _env(env)
    return _root_of(e.get("HERMES_HOME", ""), e)


def _root_of(raw: str, env: Mapping[str, str]) -> Path:
    native = native_default_home(env)
    if not raw:
        return native
    env_path = Path(raw)
    try:
        env_path.resolve().relative_to(native.resolve())
        return native
    except (ValueError, OSError):
        pass
    if env_path.parent.name == PROFILES_DIRNAME:
        return env_path.parent.parent
    return env_path


def root_or_env(root: Path | str | None, env: Mapping[str, str] | None = None) -> Path:
    """An explicit root wins; otherwise the root resolved from ``env``."""
    return Path(root) if root is not None else resolve_root(env)


def existing_root(root: Path | str | None, env: Mapping[str, str] | None = None) -> Path:
    """The root a command acts on (``--root``, else resolved from ``env``), made absolute and resolved.

    A root that does not exist, or is not a directory, is a :class:`ProfileNotFoundError` naming
    it, never an empty root with a made-up ``default`` profile: a typo in ``--root`` must not look
    like a machine with no profiles. (Same wording as the rest of hermesd's commands.)
    """
    base = Path(root).expanduser() if root is not None else resolve_root(env)
    try:
        base = base.resolve()
    except (OSError, RuntimeError) as exc:
        raise ProfileNotFoundError(f"root {base}: {getattr(exc, 'strerror', None) or exc}") from None
    if not base.is_dir():
        what = "is not a directory" if base.exists() else "does not exist"
        raise ProfileNotFoundError(f"root {base} {what} (pass --root, or set HERMES_HOME)")
    return base


def get_profile_dir(
    name: str, root: Path | str | None = None, env: Mapping[str, str] | None = None
) -> Path:
    """The home of profile ``name``; ``default`` is the root itself."""
    canon = parse_profile_name(name)
    base = root_or_env(root, env)
    if canon == DEFAULT_PROFILE:
        return base
    return base / PROFILES_DIRNAME / canon


def active_profile_path(root: Path | str | None = None, env: Mapping[str, str] | None = None) -> Path:
    """``<root>/active_profile``: the sticky default written by ``profile use``."""
    return root_or_env(root, env) / ACTIVE_PROFILE_FILE


def which(cmd: str, path: str | None = None) -> str | None:
    """``shutil.which(cmd, path=path)`` for POSIX, looked up the same way without importing ``shutil``.

    The daemon looks its commands up at every spawn, and ``shutil`` brings ``bz2``, ``lzma`` and
    ``zlib`` with it: ~0.5 MiB of its memory for this one function (measured).
    """

    def runnable(fn: str) -> bool:
        return os.path.exists(fn) and os.access(fn, os.F_OK | os.X_OK) and not os.path.isdir(fn)

    if os.path.dirname(cmd):
        return cmd if runnable(cmd) else None
    if path is None:
        path = os.environ.get("PATH")
        if path is None:
            try:
                path = os.confstr("CS_PATH") or os.defpath
            except (AttributeError, ValueError):
                path = os.defpath
    if not path:
        return None
    seen = set()
    for folder in path.split(os.pathsep):
        if folder not in seen:
            seen.add(folder)
            candidate = os.path.join(folder, cmd)
            if runnable(candidate):
                return candidate
    return None
