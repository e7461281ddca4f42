"""Wrapper aliases: a command named ``coder`` that runs ``hermes -p coder "$@"``.

Upstream Hermes writes the same kind of script to ``~/.local/bin``. Ours differ in three
ways, each for a reason:

* **Gateway verbs go to hermesd while it runs.** Once hermesd supervises a root,
  ``coder gateway start`` from upstream's script would start a second gateway behind the
  supervisor's back (and ``restart`` would run one inside the CLI process). Our script
  asks ``hermesd ping --root R``; if the daemon is up, ``gateway start|stop|restart|status``
  become ``hermesd <verb> --root R coder`` (any further arguments are passed along, so
  hermesd rejects a flag it does not support instead of the flag being dropped silently;
  the Windows script passes none). Every other command (``coder chat``, and gateway verbs
  while hermesd is down) runs through ``hermesd exec --root R coder -- hermes -p coder …``:
  the profile's environment contract and confinement, so a chat is kept to its profile exactly
  as that profile's gateway is. When the hermesd the script was written with is gone (it was
  uninstalled), the script falls back to plain ``hermes -p coder``; the Windows script always
  runs hermes directly (no confinement exists there).
* **It is pinned to its root.** The script exports ``HERMES_HOME`` as the profile's home,
  so ``-p coder`` resolves under the root the wrapper was made for even when the user's
  shell points ``HERMES_HOME`` somewhere else (custom roots, Docker volumes).
* **It is marked.** The second line is ``# hermesd-wrapper profile=<name> root=<root>``
  (``REM ...`` in ``.bat``). Listing and removal only ever touch files carrying that mark,
  and a file at the target path without it is never overwritten.

Executables are resolved to absolute paths when the script is written, so the wrapper does
not depend on the ``PATH`` of whoever runs it. The wrapper directory is
``$HERMESD_WRAPPER_DIR`` when set, else ``~/.local/bin``; every function also takes it
explicitly so tests never write into the real one.

**Upstream-style wrappers.** ``hermes profile create alpha`` writes ``~/.local/bin/alpha``
containing ``exec hermes -p alpha "$@"`` (no marker). They are recognised exactly as upstream's
``build_alias_map`` does (:func:`read_upstream_wrapper`), and belong to the root the user's
environment resolves to (the script runs plain ``hermes -p NAME``). They are listed as the
profile's alias with ``kind="upstream"``, removed with their profile, re-pointed on rename, and
:func:`convert_wrapper` rewrites one as a hermesd wrapper keeping its name and target.
"""

from __future__ import annotations

import codecs
import os
import re
import shlex
import shutil
import stat
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from profiles import safeio
from profiles.errors import InvalidNameError, WrapperError
from profiles.names import normalize_name, parse_profile_name, validate_alias_name
from profiles.paths import get_profile_dir, resolve_root, user_home

WRAPPER_DIR_ENV = "HERMESD_WRAPPER_DIR"
MARKER = "hermesd-wrapper"
GATEWAY_VERBS = ("start", "stop", "restart", "status")
_READ_LIMIT = 4096
_UPSTREAM_READ_LIMIT = 8192  # upstream's _WRAPPER_READ_LIMIT
_UPSTREAM_NEEDLE = "hermes -p "
KIND_HERMESD = "hermesd"
KIND_UPSTREAM = "upstream"


@dataclass(frozen=True, slots=True)
class WrapperInfo:
    """An alias script: its alias, file, target profile and root, and who wrote it.

    ``kind`` is ``"hermesd"`` (marked, routes gateway verbs to hermesd) or ``"upstream"``
    (``hermes profile create``'s plain ``exec hermes -p NAME``; ``root`` is then the root the
    environment resolves to, which is where that script's ``hermes -p`` looks).
    """

    alias: str
    path: Path
    profile: str
    root: Path
    kind: str = KIND_HERMESD


def _env(env: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if env is None else env


def is_windows() -> bool:
    """Whether wrappers should be ``.bat`` files (the default for ``windows=None``)."""
    return sys.platform == "win32"


def wrapper_dir(env: Mapping[str, str] | None = None) -> Path:
    """``$HERMESD_WRAPPER_DIR`` if set, else ``~/.local/bin`` (upstream's directory)."""
    e = _env(env)
    override = e.get(WRAPPER_DIR_ENV, "").strip()
    if override:
        return Path(override)
    home = e.get("HOME", "").strip()
    return (Path(home) if home else Path.home()) / ".local" / "bin"


def upstream_wrapper_dir(env: Mapping[str, str] | None = None) -> Path:
    """``~/.local/bin``: where upstream's ``hermes profile create`` writes its wrappers (never elsewhere)."""
    return user_home(_env(env)) / ".local" / "bin"


def wrapper_path(alias: str, directory: Path, windows: bool | None = None) -> Path:
    """Where the wrapper for ``alias`` lives (``<alias>.bat`` on Windows)."""
    win = is_windows() if windows is None else windows
    return Path(directory) / (f"{alias}.bat" if win else alias)


def _search_path(env: Mapping[str, str]) -> str:
    return env.get("PATH", os.defpath)


def find_hermes(env: Mapping[str, str] | None = None) -> str:
    """Absolute path of ``hermes`` on ``PATH``, or the bare name when it is not installed yet."""
    return shutil.which("hermes", path=_search_path(_env(env))) or "hermes"


def find_hermesd(env: Mapping[str, str] | None = None) -> str:
    """Absolute path of ``hermesd``: on ``PATH``, else next to this interpreter, else the bare name."""
    found = shutil.which("hermesd", path=_search_path(_env(env)))
    if found:
        return found
    sibling = Path(sys.executable).parent / ("hermesd.exe" if is_windows() else "hermesd")
    return str(sibling) if sibling.is_file() else "hermesd"


def _marker_line(profile: str, root: Path) -> str:
    return f"{MARKER} profile={profile} root={root}"


def _check_root(root: Path) -> Path:
    text = str(root)
    if "\n" in text or "\r" in text:
        raise WrapperError(f"root {text!r} contains a line break and cannot be recorded in a wrapper")
    return root


def render_posix_wrapper(profile: str, root: Path, hermes: str, hermesd: str) -> str:
    """The POSIX ``sh`` script for ``profile`` under ``root`` (see the module docstring)."""
    q = shlex.quote
    root = _check_root(Path(root))
    verbs = "|".join(GATEWAY_VERBS)
    return (
        "#!/bin/sh\n"
        f"# {_marker_line(profile, root)}\n"
        f"# Runs Hermes profile {profile!r} confined as its gateway is (hermesd exec); gateway {verbs} go to\n"
        f"# hermesd while it supervises this root.\n"
        f"HERMES_HOME={q(str(get_profile_dir(profile, root)))}\n"
        "export HERMES_HOME\n"
        'case "$1" in\n'
        "  gateway)\n"
        '    case "$2" in\n'
        f"      {verbs})\n"
        f"        if {q(hermesd)} ping --root {q(str(root))} >/dev/null 2>&1; then\n"
        '          hermesd_verb=$2\n'
        "          shift 2\n"
        f'          exec {q(hermesd)} "$hermesd_verb" --root {q(str(root))} {q(profile)} "$@"\n'
        "        fi\n"
        "        ;;\n"
        "    esac\n"
        "    ;;\n"
        "esac\n"
        f"if [ -x {q(hermesd)} ]; then\n"
        f'  exec {q(hermesd)} exec --root {q(str(root))} {q(profile)} -- {q(hermes)} -p {q(profile)} "$@"\n'
        "fi\n"
        f'exec {q(hermes)} -p {q(profile)} "$@"\n'
    )


def _bat_quote(text: str) -> str:
    """A double-quoted ``cmd.exe`` word; ``%`` is doubled so it is not expanded as a variable."""
    if '"' in text:
        raise WrapperError(f"{text!r} contains a double quote and cannot be written into a .bat wrapper")
    return '"' + text.replace("%", "%%") + '"'


def render_bat_wrapper(profile: str, root: Path, hermes: str, hermesd: str) -> str:
    """The Windows ``.bat`` script for ``profile`` under ``root`` (CRLF line endings)."""
    root = _check_root(Path(root))
    home = str(get_profile_dir(profile, root)).replace("%", "%%")
    verb_lines = [f'if /I "%~2"=="{verb}" set "HERMESD_VERB={verb}"' for verb in GATEWAY_VERBS]
    lines = [
        "@echo off",
        f"REM {_marker_line(profile, root)}",
        "setlocal",
        f'set "HERMES_HOME={home}"',
        'set "HERMESD_VERB="',
        'if /I not "%~1"=="gateway" goto run_hermes',
        *verb_lines,
        "if not defined HERMESD_VERB goto run_hermes",
        f"{_bat_quote(hermesd)} ping --root {_bat_quote(str(root))} >nul 2>&1",
        "if errorlevel 1 goto run_hermes",
        f"{_bat_quote(hermesd)} %HERMESD_VERB% --root {_bat_quote(str(root))} {profile}",
        "exit /b %ERRORLEVEL%",
        ":run_hermes",
        f"{_bat_quote(hermes)} -p {profile} %*",
        "exit /b %ERRORLEVEL%",
    ]
    return "\r\n".join(lines) + "\r\n"


def read_wrapper(path: Path) -> WrapperInfo | None:
    """The wrapper info if ``path`` is a wrapper hermesd wrote, else ``None`` (binaries included)."""
    path = Path(path)
    head = _head(path, _READ_LIMIT)
    if head is None or b"\0" in head:
        return None
    text = head.decode("utf-8", "replace")
    for line in text.splitlines()[:4]:
        body = line.strip()
        for prefix in ("# ", "REM "):
            if body.startswith(prefix + MARKER + " "):
                fields = body[len(prefix) + len(MARKER) + 1 :]
                if not fields.startswith("profile=") or " root=" not in fields:
                    return None
                profile, _, root = fields[len("profile=") :].partition(" root=")
                alias = path.stem if path.suffix.lower() == ".bat" else path.name
                return WrapperInfo(alias, path, profile, Path(root))
    return None


def _head(path: Path, limit: int) -> bytes | None:
    """The first ``limit`` bytes of ``path`` if it is a regular file in its folder (not a link: an alias
    hermesd reads, rewrites or removes is never one a link redirects), else ``None``."""
    try:
        fd = safeio.open_beneath(safeio.at(path.parent, path.name), os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        return os.read(fd, limit) if stat.S_ISREG(os.fstat(fd).st_mode) else None
    except OSError:
        return None
    finally:
        os.close(fd)


def _decode_head(head: bytes) -> str | None:
    """The head of a file as strict UTF-8 (an incomplete character at the cut is allowed), or ``None``."""
    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    try:
        return decoder.decode(head, final=False)
    except UnicodeDecodeError:
        return None


def read_upstream_wrapper(path: Path, root: Path, *, windows: bool | None = None) -> WrapperInfo | None:
    """The alias info if ``path`` is an upstream-style wrapper (``hermes -p NAME``, no hermesd mark).

    Upstream's own recognition (``build_alias_map``): on POSIX an extensionless file (``.bat``
    on Windows), a regular file (links followed), its first 8 KiB valid UTF-8, the profile being
    the first token after the first ``hermes -p `` (normalised). ``root`` is recorded as the root
    the script acts on (the caller knows it: see :func:`all_wrappers`).
    """
    path = Path(path)
    win = is_windows() if windows is None else windows
    if (win and path.suffix.lower() != ".bat") or (not win and path.suffix):
        return None
    head = _head(path, _UPSTREAM_READ_LIMIT)
    if head is None:
        return None
    text = _decode_head(head)
    if text is None or read_wrapper(path) is not None:
        return None
    idx = text.find(_UPSTREAM_NEEDLE)
    if idx == -1:
        return None
    rest = text[idx + len(_UPSTREAM_NEEDLE):]
    token = rest.split(None, 1)[0].strip() if rest.strip() else ""
    if not token:
        return None
    try:
        profile = normalize_name(token)
    except InvalidNameError:
        return None
    alias = path.stem if win else path.name
    return WrapperInfo(alias, path, profile, Path(root), KIND_UPSTREAM)


def _upstream_hermes(path: Path) -> str | None:
    """The absolute ``hermes`` an upstream wrapper runs (``exec /abs/hermes -p …``), if it still exists."""
    head = _head(path, _UPSTREAM_READ_LIMIT)
    text = _decode_head(head) or "" if head is not None else ""
    found = re.search(r"exec\s+(/\S*hermes)\s+-p\s", text)
    if found and os.access(found.group(1), os.X_OK):
        return found.group(1)
    return None


def _same_root(a: Path, b: Path) -> bool:
    try:
        return Path(a).resolve() == Path(b).resolve()
    except OSError:
        return Path(a) == Path(b)


def _entries(folder: Path) -> list[Path]:
    try:
        return sorted(folder.iterdir())
    except OSError:
        return []


def list_wrappers(
    directory: Path | None = None, root: Path | None = None, env: Mapping[str, str] | None = None
) -> list[WrapperInfo]:
    """Every wrapper hermesd wrote in ``directory``, optionally only those for ``root``, sorted by alias."""
    folder = Path(directory) if directory is not None else wrapper_dir(env)
    found = [info for entry in _entries(folder) if (info := read_wrapper(entry)) is not None]
    if root is not None:
        found = [info for info in found if _same_root(info.root, root)]
    return found


def upstream_wrappers_apply(root: Path, env: Mapping[str, str] | None = None) -> bool:
    """Whether upstream-style wrappers (plain ``hermes -p NAME``) act on ``root`` under ``env``."""
    return _same_root(resolve_root(_env(env)), Path(root))


def upstream_style_wrappers(
    root: Path, directory: Path | None = None, env: Mapping[str, str] | None = None
) -> list[WrapperInfo]:
    """Upstream-style wrappers acting on ``root``: in hermesd's wrapper folder and upstream's ``~/.local/bin``.

    Their ``gateway`` verbs bypass hermesd (``NAME gateway restart`` stops the supervised gateway and
    runs one in the foreground), so doctor lists them, with ``hermesd profile alias --convert`` as the fix.
    Empty when ``env`` (the user's shell's; default this process's) resolves to another root (those
    scripts run that root's profiles).
    """
    e = _env(env)
    if not upstream_wrappers_apply(root, e):
        return []
    own = Path(directory) if directory is not None else wrapper_dir(e)
    upstream = upstream_wrapper_dir(e)
    folders = [own] if _same_root(own, upstream) else [own, upstream]
    found: list[WrapperInfo] = []
    for folder in folders:
        found.extend(info for entry in _entries(folder) if (info := read_upstream_wrapper(entry, root)) is not None)
    return sorted(found, key=lambda w: (w.alias, str(w.path)))


def all_wrappers(root: Path, directory: Path | None = None, env: Mapping[str, str] | None = None) -> list[WrapperInfo]:
    """Every alias of ``root``'s profiles: hermesd's wrappers and upstream-style ones, sorted by alias."""
    found = list_wrappers(directory, root, env) + upstream_style_wrappers(root, directory, env)
    return sorted(found, key=lambda w: (w.alias, w.kind, str(w.path)))


def aliases_for_profile(profile: str, root: Path, directory: Path | None = None, env: Mapping[str, str] | None = None,
                        *, include_upstream: bool = False) -> list[WrapperInfo]:
    """The wrappers that run ``profile`` of ``root`` (hermesd's; with ``include_upstream``, upstream-style too)."""
    found = all_wrappers(root, directory, env) if include_upstream else list_wrappers(directory, root, env)
    return [w for w in found if w.profile == profile]


def alias_collision(alias: str, profile: str, root: Path, directory: Path | None = None, *,
                    env: Mapping[str, str] | None = None, windows: bool | None = None,
                    replace_own: bool = False) -> str | None:
    """Why ``alias`` cannot be (re)written for ``profile``, or ``None`` when it is safe.

    Refused: invalid, reserved or subcommand names; a file at the target that hermesd did
    not write (or wrote for another profile/root, unless ``replace_own``), except an
    upstream-style wrapper for the same profile of the same root (converting it is safe); a
    command of the same name anywhere else on ``PATH``.
    """
    e = _env(env)
    try:
        validate_alias_name(alias)
    except InvalidNameError as exc:
        return str(exc)
    folder = Path(directory) if directory is not None else wrapper_dir(e)
    target = wrapper_path(alias, folder, windows)
    if target.exists() or target.is_symlink():
        info = read_wrapper(target)
        if info is None:
            upstream = read_upstream_wrapper(target, root, windows=windows)
            if upstream is None:
                return f"{target} already exists and was not written by hermesd"
            if upstream.profile != profile or not upstream_wrappers_apply(root, e):
                return f"{target} is upstream's alias of profile {upstream.profile!r} (written by 'hermes profile')"
        elif not replace_own and (info.profile != profile or not _same_root(info.root, root)):
            return f"{target} is already the alias of profile {info.profile!r} (root {info.root})"
    found = shutil.which(alias, path=_search_path(e))
    if found and not _same_file(Path(found), target):
        return f"{alias!r} conflicts with an existing command ({found})"
    return None


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def _write_script(target: Path, text: str) -> Path:
    """Write ``text`` to ``target`` atomically, mode 0755."""
    folder = target.parent
    os.makedirs(folder, exist_ok=True)  # the operator's alias folder; what goes in it, through safeio
    mode = stat.S_IRWXU | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH
    safeio.replace_bytes(safeio.at(folder, target.name), text.encode("utf-8"), mode, exact_mode=True)
    return target


def _render(profile: str, root: Path, env: Mapping[str, str], hermes: str | None, hermesd: str | None,
            windows: bool) -> str:
    render = render_bat_wrapper if windows else render_posix_wrapper
    return render(profile, root, hermes or find_hermes(env), hermesd or find_hermesd(env))


def create_wrapper(alias: str, profile: str, root: Path, directory: Path | None = None, *,
                   env: Mapping[str, str] | None = None, hermes: str | None = None, hermesd: str | None = None,
                   windows: bool | None = None, replace_own: bool = False) -> Path:
    """Write the wrapper ``alias`` running ``profile`` of ``root``; raise :class:`WrapperError` on a collision.

    Re-creating an alias hermesd already wrote for the same profile and root is allowed
    (it refreshes the executable paths), and so is replacing upstream's wrapper of the same
    name for the same profile. The file is written atomically.
    """
    alias = validate_alias_name(alias.strip().lower())
    profile = parse_profile_name(profile)
    root = _check_root(Path(root).absolute())
    e = _env(env)
    folder = Path(directory) if directory is not None else wrapper_dir(e)
    problem = alias_collision(alias, profile, root, folder, env=e, windows=windows, replace_own=replace_own)
    if problem:
        raise WrapperError(f"cannot create alias {alias!r}: {problem}")
    win = is_windows() if windows is None else windows
    return _write_script(wrapper_path(alias, folder, win), _render(profile, root, e, hermes, hermesd, win))


def convert_wrapper(info: WrapperInfo, root: Path, *, env: Mapping[str, str] | None = None, hermes: str | None = None,
                    hermesd: str | None = None, profile: str | None = None) -> Path:
    """Rewrite an upstream-style wrapper as a hermesd wrapper: same file (name), same target profile.

    ``profile`` re-points it at another profile instead (used by rename). The file is re-read
    first and must still be that upstream wrapper; anything else is a :class:`WrapperError`.
    """
    current = read_upstream_wrapper(info.path, root, windows=info.path.suffix.lower() == ".bat")
    if current is None or current.profile != info.profile:
        raise WrapperError(f"{info.path} is no longer upstream's alias of profile {info.profile!r}; left alone")
    if hermes is None:
        hermes = _upstream_hermes(info.path)  # keep the Hermes installation the alias already ran
    try:
        target = parse_profile_name(profile if profile is not None else info.profile)
    except InvalidNameError as exc:
        raise WrapperError(
            f"cannot convert {info.path}: it runs {info.profile!r}, which is not a profile ({exc})"
        ) from None
    root = _check_root(Path(root).absolute())
    win = info.path.suffix.lower() == ".bat"
    return _write_script(info.path, _render(target, root, _env(env), hermes, hermesd, win))


def remove_wrapper(alias: str, directory: Path | None = None, root: Path | None = None, *,
                   env: Mapping[str, str] | None = None, profile: str | None = None,
                   include_upstream: bool = False) -> Path | None:
    """Remove the wrapper ``alias`` if hermesd wrote it (and, given ``root``/``profile``, for those).

    With ``include_upstream`` (needs ``root`` and ``profile``), an upstream-style wrapper of that
    name for that profile of that root is removed too (hermesd's folder, then ``~/.local/bin``).
    Returns the removed path, or ``None`` when there was nothing to remove; a file of the same
    name that is neither is never touched.
    """
    alias = alias.strip().lower()
    try:
        validate_alias_name(alias)
    except InvalidNameError:
        return None
    e = _env(env)
    folder = Path(directory) if directory is not None else wrapper_dir(e)
    for candidate in (folder / f"{alias}.bat", folder / alias):
        info = read_wrapper(candidate)
        if info is None or (root is not None and not _same_root(info.root, root)):
            continue
        if profile is not None and info.profile != profile:
            continue
        safeio.unlink(safeio.at(candidate.parent, candidate.name), missing_ok=False)
        return candidate
    if include_upstream and root is not None and profile is not None:
        for info in upstream_style_wrappers(root, folder, e):
            if info.alias == alias and info.profile == profile:
                safeio.unlink(safeio.at(info.path.parent, info.path.name), missing_ok=False)
                return info.path
    return None
