"""I/O helpers that gather the planner's inputs: install paths, the credential-lock folder, accounts.

Kept apart from :mod:`plan`, which stays pure. Call them when the daemon resolves the gateway
command (install paths change only with ``command``) and when settings change (accounts).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import stat
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from profiles import safeio
from profiles.paths import which
from supervisor.isolation import shared_board
from supervisor.isolation.planning import ROOT_AUTH, SHARED_DIR, UserIds

_SYSTEM_PREFIXES = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc")
_PATH_IN_TEXT = re.compile(r"""['"](/[^'"\n]+)['"]""")


def credential_lock_dir(env: Mapping[str, str]) -> Path:
    """Upstream's per-user credential-lock folder for a child with environment ``env``
    (``gateway/status.py`` ``_get_lock_dir``): every profile must keep it read-write."""
    override = env.get("HERMES_GATEWAY_LOCK_DIR")
    if override:
        return Path(override)
    state = env.get("XDG_STATE_HOME") or str(Path(env.get("HOME") or Path.home()) / ".local" / "state")
    return Path(state) / "hermes" / "gateway-locks"


def _shebang(path: Path) -> str | None:
    try:
        with open(path, "rb") as fh:
            head = fh.read(256)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return None
    parts = head[2:].split(b"\n", 1)[0].decode("utf-8", "replace").split()
    if not parts:
        return None
    if os.path.basename(parts[0]) == "env" and len(parts) > 1:
        return which(parts[1])
    return parts[0]


def _prefixes(interpreter: Path) -> list[Path]:
    """The venv (and its base installation) or the prefix an interpreter belongs to."""
    out = []
    for candidate in (interpreter, interpreter.resolve()):
        root = candidate.parent.parent
        cfg = root / "pyvenv.cfg"
        if cfg.is_file():
            out.append(root)
            with contextlib.suppress(OSError):
                for line in cfg.read_text(encoding="utf-8", errors="replace").splitlines():
                    key, _, value = line.partition("=")
                    if key.strip() == "home" and value.strip():
                        out.append(Path(value.strip()).parent)
        else:
            out.append(root)
    return out


def _checkouts(prefix: Path) -> list[Path]:
    """Folders that editable installs in a venv point at (``.pth`` lines, editable finders)."""
    out: list[Path] = []
    for site in prefix.glob("lib/python3*/site-packages"):
        for f in [*site.glob("*.pth"), *site.glob("__editable__*finder.py")]:
            try:
                text = f.read_text(encoding="utf-8", errors="replace")[:65536]
            except OSError:
                continue
            lines = [ln for ln in text.splitlines() if ln.startswith("/")] if f.suffix == ".pth" else []
            for raw in [*lines, *_PATH_IN_TEXT.findall(text)]:
                p = Path(raw.strip())
                if p.is_dir():
                    out.append(p if f.suffix == ".pth" else p.parent)
    return out


def discover_install_paths(command: Sequence[str], path_env: str | None = None) -> tuple[Path, ...]:
    """Everything a gateway started with ``command`` executes, plus hermesd's own code.

    The planner makes these read-only for every profile: one profile able to edit the shared
    interpreter, site-packages or a hermes-agent checkout would run its code inside every other
    profile at their next start; and what lies below ``/tmp`` is put back into the profile's
    private one. A script named by its absolute path among the arguments (``[sh, /opt/gw.sh]``)
    counts too. System folders (``/usr``…) are left out: only root can write them, and writes
    there are denied to every confined profile anyway.
    """
    found: list[Path] = []
    exe = command[0] if command else ""
    resolved = exe if "/" in exe else which(exe, path=path_env)
    if resolved:
        exe_path = Path(resolved)
        interp = _shebang(exe_path)
        found.extend(_prefixes(Path(interp) if interp else exe_path))
        found.append(exe_path.resolve().parent)
    for prefix in list(found):
        found.extend(_checkouts(prefix))
    found.extend(Path(arg) for arg in command[1:] if arg.startswith("/") and os.path.exists(arg))
    found.extend([Path(sys.prefix), Path(sys.base_prefix), Path(__file__).resolve().parents[2]])
    return _without_system(found)


def environment_code_paths(env: Mapping[str, str]) -> tuple[Path, ...]:
    """The folders a child's ``PYTHONPATH`` names: code its interpreter imports before its own, so
    read-only like the install (and put back into a private ``/tmp`` when they lie below it)."""
    return _without_system([Path(p) for p in (env.get("PYTHONPATH") or "").split(os.pathsep)
                            if p.startswith("/") and os.path.isdir(p)])


def _without_system(found: list[Path]) -> tuple[Path, ...]:
    """Resolved, without duplicates, ``/`` and the system's own folders."""
    out: list[Path] = []
    for p in found:
        with contextlib.suppress(OSError):
            p = p.resolve()
        s = str(p)
        if s == "/" or any(s == q or s.startswith(q + "/") for q in _SYSTEM_PREFIXES):
            continue
        if p not in out:
            out.append(p)
    return tuple(out)


def resolve_user(name: str) -> UserIds:
    """An account by name or uid, with its supplementary groups; ``KeyError`` when unknown."""
    entry = pwd.getpwuid(int(name)) if name.isdigit() else pwd.getpwnam(name)
    groups = tuple(sorted(set(os.getgrouplist(entry.pw_name, entry.pw_gid))))
    return UserIds(entry.pw_name, entry.pw_uid, entry.pw_gid, groups)


def linked_channels(root: Path) -> tuple[Path, ...]:
    """The root's shared channels that are (or lie under) a symbolic link: never put back for anyone.

    The default profile owns the root folder and could replace ``shared/`` or ``kanban/`` by a link
    to another profile's home or to ``.hermesd``; the plan then closes that channel (and says so in
    status), and the shim refuses the link on its own as well.
    """
    names = (shared_board.KANBAN_DIR, SHARED_DIR, ROOT_AUTH)  # each directly in the root: its own lstat says
    return tuple(root / n for n in names
                 if (st := safeio.lstat(safeio.at(root, n))) is not None and stat.S_ISLNK(st.st_mode))
