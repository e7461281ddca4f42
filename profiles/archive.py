"""Export a profile to ``.tar.gz`` and import one back, treating every archive as hostile.

Export leaves out what must not travel or cannot be reused elsewhere: credentials
(``.env``, ``auth.json``, at any depth), databases (``*.db``, ``*.db-wal``, ``*.db-shm``,
``*.sqlite*``), PID and lock files (``*.pid``, ``*.lock``), caches, logs, byte-code,
sockets, temp files, hermesd's ``.hermesd`` and the gateway's runtime files. The default
profile (the root itself) is exported like upstream: only the known profile artifacts at
its top level (``config.yaml``, ``SOUL.md``, ``skills``, ``memories``, ``cron``, ...), so a
root that doubles as a working directory does not leak unrelated files; its archive is
rooted at ``default/``. Symlinks and special files are skipped (and reported), because
import refuses them; the profile is read by descriptor (:func:`profiles.safetree.walk`), so a
name swapped for a link or a FIFO after the listing adds nothing else. A file with several
hard links is archived as a file each time (a hard-link member would be refused on import).
The archive is written to a temp file and renamed into place.

Import — DECISION: links are refused outright. Only regular files and directories are
accepted; any symlink or hardlink (even one pointing inside the archive), device, fifo
or sparse member is an error, as are absolute paths, drive letters, ``..`` components,
members outside the single top-level folder, duplicate or conflicting paths, more than
``max_members`` members and more than ``max_bytes`` of content. Every member is checked
*before* anything is written; extraction then happens in a dot-named scratch folder
inside ``profiles/`` (the same filesystem), every path resolved beneath it without following a
link (:mod:`profiles.safeio`), and the result is renamed into place in one step, so a failure at
any point leaves nothing behind.

Why not ``tarfile``'s ``filter="data"``: it is a sanitiser for extracting into a real folder, and
each of its answers is weaker than this decision. It strips a leading ``/`` instead of refusing the
member, admits links whose target stays inside the destination, and decides "inside" with
``os.path.realpath`` on the live filesystem: that is a check made by path, and the extraction that
follows it is by path too. Here every member is judged by its name alone before anything is
written, and every write is resolved beneath the scratch folder by descriptor.

Modes are masked, because root may later run what another user packed: a file keeps its
archived owner/exec bits but never group/other write and never set-id bits, and is at least
owner read/write (``0755`` at most); a folder is ``0700`` or ``0755`` at most (``0700`` when the
archive gives it no group/other access); ``.env`` and ``auth.json`` at the top are ``0600``.

Names are bounded before they are read: a GNU long-name (or long-link) header, or a PAX header,
announces its size before its data, and ``tarfile`` would read all of it into memory (a 400 MB
"name" costs gigabytes). :class:`_BoundedTarInfo` checks that size first (names over
:data:`MAX_NAME_BYTES` and PAX headers over :data:`MAX_PAX_BYTES` reject the archive), and no
error message quotes more than a short prefix of a name.

Output names follow upstream's rule: ``-o`` minus a trailing ``.tar.gz``, then minus a trailing
``.tgz``, plus ``.tar.gz`` (``-o c.tgz`` writes ``c.tar.gz``; ``-o c`` writes ``c.tar.gz``).
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
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath, PureWindowsPath

from profiles import safeio, safetree
from profiles.discovery import existing_profile_home
from profiles.errors import InvalidNameError, ProfileExistsError, ProfileNotFoundError, UnsafeArchiveError
from profiles.names import DEFAULT_PROFILE, parse_profile_name, shown
from profiles.paths import HERMESD_DIRNAME, PROFILES_DIRNAME, root_or_env
from profiles.safeio import Beneath
from profiles.upstream.files import HEARTBEAT_FILE, RUNTIME_TOP_FILES

DEFAULT_MAX_BYTES = 2 * 1024**3
DEFAULT_MAX_MEMBERS = 100_000
MAX_NAME_BYTES = 4096  # PATH_MAX: no real member name is longer
MAX_PAX_BYTES = 64 * 1024  # a PAX header holds a path, a link and a few numbers
FILE_MODE_MASK = 0o755  # no group/other write, no set-id, no sticky bit
DIR_MODE_MASK = 0o755
CREDENTIAL_FILES = frozenset({".env", "auth.json"})

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


def _walk(home: Path, is_default: bool, skipped: list[str]) -> Iterator[safetree.Entry]:
    """The home and its exportable entries, parents before children, each pinned (never a link followed)."""

    def enter(entry: safetree.Entry) -> bool:
        return not entry.parts or not _excluded(entry.parts, is_default)

    def unreadable(parts: tuple[str, ...], exc: OSError, listing: bool) -> None:
        skipped.append(f"{'/'.join(parts) or '.'}: unreadable ({exc.strerror or exc})")

    for entry in safetree.walk(safeio.home_file(home), enter=enter, on_error=unreadable):
        if entry.parts and _excluded(entry.parts, is_default):
            continue
        mode = entry.st.st_mode
        if stat.S_ISLNK(mode):
            skipped.append(f"{entry.rel}: symlink")
        elif stat.S_ISDIR(mode) or stat.S_ISREG(mode):
            yield entry
        else:
            skipped.append(f"{entry.rel}: special file")


def archive_path(output: Path | str | None, canon: str) -> Path:
    """Where ``export -o OUTPUT`` writes: upstream's rule (``.tar.gz`` then ``.tgz`` stripped, ``.tar.gz`` added)."""
    if output is None or str(output) == "":
        return Path.cwd() / f"{canon}.tar.gz"
    base = str(Path(output)).removesuffix(".tar.gz").removesuffix(".tgz")
    return Path(base + ".tar.gz")


def _info(name: str, st: os.stat_result) -> tarfile.TarInfo:
    """A member for a folder or regular file, from the ``fstat`` of the entry that is archived (no
    owner, no set-id bits: the archive may be imported by another user)."""
    info = tarfile.TarInfo(name)
    info.mode = stat.S_IMODE(st.st_mode) & 0o777
    info.mtime = int(st.st_mtime)
    if stat.S_ISDIR(st.st_mode):
        info.type = tarfile.DIRTYPE
    else:
        info.size = st.st_size
    return info


def _write_archive(target: Path, fill: Callable[[tarfile.TarFile], None]) -> None:
    """Write the operator's archive file atomically: a temp file beside ``target``, renamed over it."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as raw, tarfile.open(fileobj=raw, mode="w:gz") as tar:
            fill(tar)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def export_profile(
    name: str,
    output: Path | str | None = None,
    root: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    progress: Callable[[int, int | None], None] | None = None,
) -> ExportResult:
    """Write profile ``name`` to ``output`` (default ``./<name>.tar.gz``), rooted at ``<name>/``.

    The profile's files are read through :func:`profiles.safetree.walk`: each entry is judged and
    read through the descriptor that pins it, so a name swapped for a link or a FIFO after the
    listing puts nothing else into the archive.
    """
    canon = parse_profile_name(name)
    home = existing_profile_home(canon, root, env)
    is_default = canon == DEFAULT_PROFILE
    target = archive_path(output, canon)
    skipped: list[str] = []
    count = 0

    def fill(tar: tarfile.TarFile) -> None:
        nonlocal count
        for entry in _walk(home, is_default, skipped):
            arcname = "/".join((canon, *entry.parts))
            if stat.S_ISDIR(entry.st.st_mode):
                tar.addfile(_info(arcname, entry.st))
            else:
                with os.fdopen(safetree.open_entry(entry, os.O_RDONLY), "rb") as fh:
                    tar.addfile(_info(arcname, os.fstat(fh.fileno())), fh)
            count += 1
            if progress is not None and entry.parts:
                progress(count, None)

    _write_archive(target, fill)
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
        raise UnsafeArchiveError(f"unsafe archive member {shown(member_name)}: absolute path or drive letter")
    parts = tuple(p for p in posix.parts if p not in ("", "."))
    if not parts:
        raise UnsafeArchiveError(f"unsafe archive member {shown(member_name)}: empty path")
    if ".." in parts:
        raise UnsafeArchiveError(f"unsafe archive member {shown(member_name)}: '..' component")
    if any(":" in p or "\0" in p for p in parts):
        raise UnsafeArchiveError(f"unsafe archive member {shown(member_name)}: ':' or NUL in a path component")
    return parts


class _BoundedTarInfo(tarfile.TarInfo):
    """A ``TarInfo`` that refuses oversized name and PAX headers *before* ``tarfile`` reads them.

    ``tarfile`` reads a GNU long-name/long-link header's data (the name) and a PAX header's data
    in one ``read(size)``; the size comes from the header, so a hostile archive chooses how much
    memory that read takes. ``_proc_member`` is where ``tarfile`` dispatches on the header type,
    after parsing the 512-byte header and before reading the data: the size is checked there.
    """

    def _proc_member(self, tarfile_: tarfile.TarFile) -> tarfile.TarInfo:
        if self.type in (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK) and self.size > MAX_NAME_BYTES:
            what = "name" if self.type == tarfile.GNUTYPE_LONGNAME else "link target"
            raise UnsafeArchiveError(
                f"archive has a member {what} of {self.size} bytes (more than {MAX_NAME_BYTES}); refused unread"
            )
        if self.type in (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE) and self.size > MAX_PAX_BYTES:
            raise UnsafeArchiveError(
                f"archive has a PAX header of {self.size} bytes (more than {MAX_PAX_BYTES}); refused unread"
            )
        if self.type == tarfile.GNUTYPE_SPARSE:
            # Sparse members are refused anyway; refusing before tarfile walks their extension
            # blocks (unbounded in number) keeps that walk from costing memory too.
            raise UnsafeArchiveError(f"archive member {shown(self.name)} is a sparse file; only files and folders "
                                     "are imported")
        return super()._proc_member(tarfile_)  # type: ignore[misc]


def _check_name_length(member: tarfile.TarInfo) -> None:
    """A PAX ``path`` (bounded by the header size) can still exceed a sane name length."""
    if len(member.name.encode("utf-8", "surrogateescape")) > MAX_NAME_BYTES:
        raise UnsafeArchiveError(
            f"archive member name {shown(member.name)} is longer than {MAX_NAME_BYTES} bytes"
        )


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
        _check_name_length(member)
        if len(planned) >= max_members:
            raise UnsafeArchiveError(f"archive has more than {max_members} members (at {shown(member.name)})")
        parts = member_parts(member.name)
        kind = _member_kind(member)
        if kind not in ("file", "dir"):
            raise UnsafeArchiveError(
                f"archive member {shown(member.name)} is a {kind}; only files and folders are imported"
            )
        if top is None:
            top = parts[0]
        elif parts[0] != top:
            raise UnsafeArchiveError(
                f"archive member {shown(member.name)} is outside the single top-level folder {shown(top)}"
            )
        if len(parts) == 1 and kind == "file":
            raise UnsafeArchiveError(
                f"archive member {shown(member.name)} is a file at the top level, not a profile folder"
            )
        for i in range(1, len(parts)):
            if parts[:i] in files:
                raise UnsafeArchiveError(f"archive member {shown(member.name)} is inside a path that is a file")
        if parts in files or (kind == "file" and parts in dirs):
            raise UnsafeArchiveError(f"archive member {shown(member.name)} appears more than once")
        if kind == "file":
            total += member.size
            if total > max_bytes:
                raise UnsafeArchiveError(
                    f"archive expands past the {max_bytes}-byte limit (at member {shown(member.name)})"
                )
            files.add(parts)
        else:
            dirs.add(parts)
        planned.append((member, parts))
    if top is None:
        raise UnsafeArchiveError("archive is empty")
    return _Plan(top, planned)


def file_mode(archived: int, rel: tuple[str, ...]) -> int:
    """The mode an imported file gets: masked archive bits, owner read/write, credentials ``0600``."""
    if len(rel) == 1 and rel[0] in CREDENTIAL_FILES:
        return 0o600
    return (archived & FILE_MODE_MASK) | stat.S_IRUSR | stat.S_IWUSR


def dir_mode(archived: int | None) -> int:
    """The mode an imported folder gets: ``0700`` plus at most group/other read and search (``0755``)."""
    if archived is None:
        return 0o755  # a folder the archive implies but does not list
    return (archived & DIR_MODE_MASK) | stat.S_IRWXU


def _below(dest: Beneath, rel: tuple[str, ...]) -> Beneath:
    return dest / "/".join(rel) if rel else dest


def _extract(
    tar: tarfile.TarFile, plan: _Plan, dest: Beneath, progress: Callable[[int, int | None], None] | None = None
) -> None:
    # Everything is created owner-only inside the owner-only scratch folder and given its final
    # (masked) mode at the end, folders deepest first, so no moment exposes a writable path.
    # Every path is resolved beneath the scratch folder without following a link.
    dir_modes: dict[tuple[str, ...], int] = {(): dir_mode(None)}

    def make_dirs(rel: tuple[str, ...]) -> None:
        for i in range(1, len(rel) + 1):
            if rel[:i] not in dir_modes:
                safeio.mkdir(_below(dest, rel[:i]), 0o700)
                dir_modes[rel[:i]] = dir_mode(None)

    safeio.mkdir(dest, 0o700)
    for n, (member, parts) in enumerate(plan.members, 1):
        if progress is not None:
            progress(n, len(plan.members))
        rel = parts[1:]
        if member.isdir():
            make_dirs(rel)
            dir_modes[rel] = dir_mode(member.mode)
            continue
        make_dirs(rel[:-1])
        source = tar.extractfile(member)
        if source is None:
            raise UnsafeArchiveError(f"cannot read archive member {shown(member.name)}")
        fd = safeio.open_beneath(_below(dest, rel), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with source, os.fdopen(fd, "wb") as out:
            shutil.copyfileobj(source, out)
            os.fchmod(out.fileno(), file_mode(member.mode, rel))
    for rel in sorted(dir_modes, key=len, reverse=True):
        safeio.chmod(_below(dest, rel), dir_modes[rel])


def _import_name(explicit: str | None, top: str) -> str:
    if explicit is not None:
        return parse_profile_name(explicit, allow_default=False)
    try:
        return parse_profile_name(top, allow_default=False)
    except InvalidNameError as exc:
        raise InvalidNameError(
            f"the archive's folder {shown(top)} cannot be a profile name ({exc}); use --name"
        ) from exc


@contextmanager
def _open_archive(source: Path) -> Iterator[tarfile.TarFile]:
    """The archive the operator names on the command line (its own file: a link to it is fine)."""
    with open(source, "rb") as raw, tarfile.open(fileobj=raw, mode="r:*", tarinfo=_BoundedTarInfo) as tar:
        yield tar


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
    if name is not None:  # check the name the user gave before reading the archive
        explicit = parse_profile_name(name, allow_default=False)
        if os.path.lexists(base / PROFILES_DIRNAME / explicit):
            raise ProfileExistsError(f"profile {explicit!r} already exists at {base / PROFILES_DIRNAME / explicit}")
    try:
        with _open_archive(source) as tar:
            plan = _plan(tar, max_bytes, max_members)
            canon = _import_name(name, plan.top)
            target = base / PROFILES_DIRNAME / canon
            if os.path.lexists(target):
                raise ProfileExistsError(f"profile {canon!r} already exists at {target}")
            folder = safeio.at(base, PROFILES_DIRNAME)
            safeio.makedirs(folder, 0o755)
            scratch = safeio.temp_folder(folder, f".importing-{canon}-")
            try:
                staged = scratch / canon
                _extract(tar, plan, staged, progress)
                if os.path.lexists(target):
                    raise ProfileExistsError(f"profile {canon!r} already exists at {target}")
                safeio.move(staged, safeio.home_file(target))
            finally:
                with suppress(OSError):
                    safetree.remove_tree(scratch)
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile, lzma.LZMAError) as exc:
        raise UnsafeArchiveError(f"cannot read archive {source}: {exc}") from exc
    return ImportResult(canon, target, len(plan.members))
