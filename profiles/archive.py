"""Export a profile to ``.tar.gz`` and import one back, treating every archive as hostile.

Export leaves out what must not travel or cannot be reused elsewhere: credentials
(``.env``, ``auth.json``, at any depth), databases (``*.db``, ``*.db-wal``, ``*.db-shm``,
``*.sqlite*``), PID and lock files (``*.pid``, ``*.lock``), caches, logs, byte-code,
sockets, temp files, hermesd's ``.hermesd`` and the gateway's runtime files. The default
profile (the root itself) is exported like upstream: only the known profile artifacts at
its top level (``config.yaml``, ``SOUL.md``, ``skills``, ``memories``, ``cron``, ...), so a
root that doubles as a working directory does not leak unrelated files; its archive is
rooted at ``default/``. Symlinks and special files are skipped (and reported), because
import refuses them. The archive is written to a temp file and renamed into place.

Import — DECISION: links are refused outright. Only regular files and directories are
accepted; any symlink or hardlink (even one pointing inside the archive), device, fifo
or sparse member is an error, as are absolute paths, drive letters, ``..`` components,
members outside the single top-level folder, duplicate or conflicting paths, more than
``max_members`` members and more than ``max_bytes`` of content. Every member is checked
*before* anything is written; extraction then happens in a dot-named scratch folder
inside ``profiles/`` (the same filesystem) and the result is renamed into place in one
step, so a failure at any point leaves nothing behind. Extracted files get their archived
permission bits (never set-id bits), at least owner read/write; ``.env`` is ``0600``.
"""

from __future__ import annotations

import gzip
import lzma
import os
import shutil
import stat
import tarfile
import tempfile
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath, PureWindowsPath

from profiles.discovery import existing_profile_home
from profiles.errors import InvalidNameError, ProfileExistsError, ProfileNotFoundError, UnsafeArchiveError
from profiles.gateway_files import HEARTBEAT_FILE, RUNTIME_TOP_FILES
from profiles.names import DEFAULT_PROFILE, parse_profile_name
from profiles.paths import HERMESD_DIRNAME, PROFILES_DIRNAME, root_or_env

DEFAULT_MAX_BYTES = 2 * 1024**3
DEFAULT_MAX_MEMBERS = 100_000

# Top-level entries never exported from a named profile: the runtime state, databases,
# credentials and caches upstream leaves out of the default export, plus hermesd's own folder.
# (The root's infrastructure folders are not listed: in a named profile they are user data.)
EXPORT_EXCLUDE_TOP: frozenset[str] = frozenset(
    {
        "state.db", "state.db-shm", "state.db-wal", "hermes_state.db",
        "response_store.db", "response_store.db-shm", "response_store.db-wal",
        *RUNTIME_TOP_FILES,
        "auth.json", ".env", "auth.lock", "active_profile", ".update_check", "errors.log", ".hermes_history",
        "image_cache", "audio_cache", "document_cache", "browser_screenshots", "checkpoints", "sandboxes",
        "cache", "logs", HERMESD_DIRNAME,
    }
)
# The only top-level entries exported from the default profile (upstream's allow-list).
DEFAULT_EXPORT_INCLUDE_TOP: frozenset[str] = frozenset(
    {
        "config.yaml", "SOUL.md", "MEMORY.md", "USER.md", "todo.json", "system_prompt.md", "AGENTS.md",
        "CLAUDE.md", ".cursorrules", "skills", "cron", "scripts", "sessions", "plugins", "memories",
        "knowledge", "preferences",
    }
)
_EXCLUDE_ANY_DEPTH_NAMES = frozenset({"__pycache__", ".env", "auth.json", "package.json", "package-lock.json"})
_EXCLUDE_ANY_DEPTH_SUFFIXES = (
    ".pyc", ".pyo", ".sock", ".tmp", ".db", ".db-wal", ".db-shm", ".db-journal", ".sqlite", ".sqlite3",
    ".pid", ".lock",
)


@dataclass
class ExportResult:
    """The archive written, how many members it holds, and what was skipped and why."""

    path: Path
    members: int
    skipped: list[str] = field(default_factory=list)


@dataclass
class ImportResult:
    """The imported profile and how many members were extracted."""

    name: str
    path: Path
    members: int


# --------------------------------------------------------------------------- export


def _excluded(rel_parts: tuple[str, ...], is_default: bool) -> bool:
    name = rel_parts[-1]
    if name in _EXCLUDE_ANY_DEPTH_NAMES or name.endswith(_EXCLUDE_ANY_DEPTH_SUFFIXES):
        return True
    if len(rel_parts) == 1:
        return name not in DEFAULT_EXPORT_INCLUDE_TOP if is_default else name in EXPORT_EXCLUDE_TOP
    return "/".join(rel_parts) == HEARTBEAT_FILE


def _walk(home: Path, is_default: bool, skipped: list[str]) -> Iterator[tuple[Path, tuple[str, ...]]]:
    """Exportable entries under ``home`` as ``(path, relative parts)``, parents before children."""
    stack: list[tuple[Path, tuple[str, ...]]] = [(home, ())]
    while stack:
        folder, rel = stack.pop()
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError as exc:
            skipped.append(f"{'/'.join(rel) or '.'}: unreadable ({exc.strerror})")
            continue
        subdirs: list[tuple[Path, tuple[str, ...]]] = []
        for entry in entries:
            parts = (*rel, entry.name)
            if _excluded(parts, is_default):
                continue
            shown = "/".join(parts)
            if entry.is_symlink():
                skipped.append(f"{shown}: symlink")
            elif entry.is_dir(follow_symlinks=False):
                yield Path(entry.path), parts
                subdirs.append((Path(entry.path), parts))
            elif entry.is_file(follow_symlinks=False):
                yield Path(entry.path), parts
            else:
                skipped.append(f"{shown}: special file")
        stack.extend(reversed(subdirs))


def _archive_path(output: Path | str | None, canon: str) -> Path:
    if output is None:
        return Path.cwd() / f"{canon}.tar.gz"
    out = Path(output)
    return out if out.name.endswith((".tar.gz", ".tgz")) else out.with_name(out.name + ".tar.gz")


def _normalised_info(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mode &= 0o777
    return info


def export_profile(
    name: str,
    output: Path | str | None = None,
    root: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    progress: Callable[[int, int | None], None] | None = None,
) -> ExportResult:
    """Write profile ``name`` to ``output`` (default ``./<name>.tar.gz``), rooted at ``<name>/``."""
    canon = parse_profile_name(name)
    home = existing_profile_home(canon, root, env)
    is_default = canon == DEFAULT_PROFILE
    target = _archive_path(output, canon)
    target.parent.mkdir(parents=True, exist_ok=True)
    skipped: list[str] = []
    count = 0
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as raw, tarfile.open(fileobj=raw, mode="w:gz") as tar:
            tar.addfile(_normalised_info(tar.gettarinfo(str(home), arcname=canon)))
            count += 1
            for path, parts in _walk(home, is_default, skipped):
                info = _normalised_info(tar.gettarinfo(str(path), arcname="/".join((canon, *parts))))
                if info.isreg():
                    with open(path, "rb") as fh:
                        tar.addfile(info, fh)
                else:
                    tar.addfile(info)
                count += 1
                if progress is not None:
                    progress(count, None)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return ExportResult(target, count, skipped)


# --------------------------------------------------------------------------- import


def member_parts(member_name: str) -> tuple[str, ...]:
    """The safe relative path parts of an archive member name, or :class:`UnsafeArchiveError`.

    Backslashes count as separators (archives made on Windows); absolute paths, drive
    letters, UNC paths and ``..`` are refused; ``.`` and empty parts are dropped.
    """
    normalised = member_name.replace("\\", "/")
    windows = PureWindowsPath(member_name)
    posix = PurePosixPath(normalised)
    if not normalised or posix.is_absolute() or windows.is_absolute() or windows.drive or windows.root:
        raise UnsafeArchiveError(f"unsafe archive member {member_name!r}: absolute path or drive letter")
    parts = tuple(p for p in posix.parts if p not in ("", "."))
    if not parts:
        raise UnsafeArchiveError(f"unsafe archive member {member_name!r}: empty path")
    if ".." in parts:
        raise UnsafeArchiveError(f"unsafe archive member {member_name!r}: '..' component")
    if any(":" in p or "\0" in p for p in parts):
        raise UnsafeArchiveError(f"unsafe archive member {member_name!r}: ':' or NUL in a path component")
    return parts


def _member_kind(member: tarfile.TarInfo) -> str:
    if member.issym():
        return "symlink"
    if member.islnk():
        return "hardlink"
    if member.ischr() or member.isblk():
        return "device file"
    if member.isfifo():
        return "fifo"
    if member.issparse():
        return "sparse file"
    if member.isdir():
        return "dir"
    if member.isreg():
        return "file"
    return f"member of type {member.type!r}"


@dataclass
class _Plan:
    top: str
    members: list[tuple[tarfile.TarInfo, tuple[str, ...]]]


def _plan(tar: tarfile.TarFile, max_bytes: int, max_members: int) -> _Plan:
    """Check every member before anything is written; raise on the first unsafe one."""
    planned: list[tuple[tarfile.TarInfo, tuple[str, ...]]] = []
    files: set[tuple[str, ...]] = set()
    dirs: set[tuple[str, ...]] = set()
    total = 0
    top: str | None = None
    for member in tar:
        if len(planned) >= max_members:
            raise UnsafeArchiveError(f"archive has more than {max_members} members (at {member.name!r})")
        parts = member_parts(member.name)
        kind = _member_kind(member)
        if kind not in ("file", "dir"):
            raise UnsafeArchiveError(f"archive member {member.name!r} is a {kind}; only files and folders are imported")
        if top is None:
            top = parts[0]
        elif parts[0] != top:
            raise UnsafeArchiveError(
                f"archive member {member.name!r} is outside the single top-level folder {top!r}"
            )
        if len(parts) == 1 and kind == "file":
            raise UnsafeArchiveError(f"archive member {member.name!r} is a file at the top level, not a profile folder")
        for i in range(1, len(parts)):
            if parts[:i] in files:
                raise UnsafeArchiveError(f"archive member {member.name!r} is inside a path that is a file")
        if parts in files or (kind == "file" and parts in dirs):
            raise UnsafeArchiveError(f"archive member {member.name!r} appears more than once")
        if kind == "file":
            total += member.size
            if total > max_bytes:
                raise UnsafeArchiveError(
                    f"archive expands past the {max_bytes}-byte limit (at member {member.name!r})"
                )
            files.add(parts)
        else:
            dirs.add(parts)
        planned.append((member, parts))
    if top is None:
        raise UnsafeArchiveError("archive is empty")
    return _Plan(top, planned)


def _extract(
    tar: tarfile.TarFile, plan: _Plan, dest: Path, progress: Callable[[int, int | None], None] | None = None
) -> None:
    dir_modes: list[tuple[Path, int]] = []
    dest.mkdir()
    for n, (member, parts) in enumerate(plan.members, 1):
        if progress is not None:
            progress(n, len(plan.members))
        rel = parts[1:]
        target = dest.joinpath(*rel) if rel else dest
        if member.isdir():
            target.mkdir(parents=True, exist_ok=True)
            dir_modes.append((target, (member.mode & 0o777) | stat.S_IRWXU))
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        source = tar.extractfile(member)
        if source is None:
            raise UnsafeArchiveError(f"cannot read archive member {member.name!r}")
        with source, open(target, "xb") as out:
            shutil.copyfileobj(source, out)
        mode = 0o600 if rel == (".env",) else (member.mode & 0o777) | stat.S_IRUSR | stat.S_IWUSR
        os.chmod(target, mode)
    for path, mode in reversed(dir_modes):
        os.chmod(path, mode)


def _import_name(explicit: str | None, top: str) -> str:
    if explicit is not None:
        return parse_profile_name(explicit, allow_default=False)
    try:
        return parse_profile_name(top, allow_default=False)
    except InvalidNameError as exc:
        raise InvalidNameError(f"the archive's folder {top!r} cannot be a profile name ({exc}); use --name") from exc


def import_profile(
    archive: Path | str,
    name: str | None = None,
    root: Path | str | None = None,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_members: int = DEFAULT_MAX_MEMBERS,
    env: Mapping[str, str] | None = None,
    progress: Callable[[int, int | None], None] | None = None,
) -> ImportResult:
    """Import ``archive`` as profile ``name`` (default: the archive's top-level folder name)."""
    source = Path(archive)
    if not source.is_file():
        raise ProfileNotFoundError(f"archive not found: {source}")
    base = root_or_env(root, env)
    try:
        with tarfile.open(source, mode="r:*") as tar:
            plan = _plan(tar, max_bytes, max_members)
            canon = _import_name(name, plan.top)
            target = base / PROFILES_DIRNAME / canon
            if os.path.lexists(target):
                raise ProfileExistsError(f"profile {canon!r} already exists at {target}")
            folder = base / PROFILES_DIRNAME
            folder.mkdir(parents=True, exist_ok=True)
            scratch = Path(tempfile.mkdtemp(prefix=f".importing-{canon}-", dir=folder))
            try:
                staged = scratch / canon
                _extract(tar, plan, staged, progress)
                if os.path.lexists(target):
                    raise ProfileExistsError(f"profile {canon!r} already exists at {target}")
                os.rename(staged, target)
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile, lzma.LZMAError) as exc:
        raise UnsafeArchiveError(f"cannot read archive {source}: {exc}") from exc
    return ImportResult(canon, target, len(plan.members))
