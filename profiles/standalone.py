"""Keep a per-profile fleet on upstream's multiplex-default line: the config.yaml edits, with their undo.

On that line (upstream main after 0.21.3) a named profile gets a gateway of its own only with
``gateway.standalone: true`` in its own config.yaml, and ``hermes update`` folds a per-profile fleet
into one process unless the default profile's config.yaml says ``gateway.auto_multiplex_migration:
false``. Those files are the user's: this module changes them only when asked (``hermesd standalone``),
shows each change as a diff first, keeps every original byte in a backup record, and undoes a
record byte for byte, as long as the file is still what it wrote (a file edited since is left
alone and named). Nothing here runs by itself: the daemon never calls it.

Files are read and written without following a link (a profile can plant ``config.yaml -> /etc/…``);
reads and writes go through :mod:`profiles.safeio` and keep the file's mode and owner.
"""

from __future__ import annotations

import difflib
import hashlib
import itertools
import json
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from profiles import safeio
from profiles.discovery import profiles_to_serve
from profiles.errors import ProfileConfigError
from profiles.fileio import MAX_PROFILE_FILE
from profiles.names import DEFAULT_PROFILE
from profiles.upstream.multiplex import AUTO_MIGRATION_KEY, IDENTITY_MARKERS, STANDALONE_KEY
from profiles.yamledit import EditRefused, set_key

CONFIG = "config.yaml"
MANIFEST = "manifest.json"


@dataclass(frozen=True, slots=True)
class Change:
    """One file to write: its bytes now (None: it does not exist) and the text it gets."""

    profile: str
    path: Path
    before: bytes | None
    after: str
    mode: int
    uid: int
    gid: int
    why: str

    def diff(self) -> str:
        old = (self.before or b"").decode("utf-8").splitlines(keepends=True)
        new = self.after.splitlines(keepends=True)
        label = str(self.path)
        return "".join(difflib.unified_diff(old, new, label if self.before is not None else "/dev/null", label))


@dataclass(frozen=True, slots=True)
class Refusal:
    profile: str
    path: Path
    reason: str


class AdoptError(OSError):
    """A record cannot be written or read; the message names the file."""


def _read_nofollow(where: safeio.Beneath) -> tuple[bytes | None, os.stat_result | None]:
    """The bytes and status of a regular file reached without a link, or (None, None) when it does not exist."""
    try:
        fd = safeio.open_beneath(where, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        return None, None
    except safeio.LinkRefusedError:
        raise ProfileConfigError(where.path, "is a symlink; hermesd never writes through a link") from None
    except OSError as exc:
        raise ProfileConfigError(where.path, f"cannot read: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ProfileConfigError(where.path, "is not a regular file")
        try:
            data = safeio.read_fd(fd, where, MAX_PROFILE_FILE)
        except safeio.UnsafeFileError:
            raise ProfileConfigError(where.path, "is too large to edit") from None
        return data, st
    finally:
        os.close(fd)


def _change(profile: str, home: Path, key: tuple[str, str], value: bool, why: str) -> Change | Refusal | None:
    path = home / CONFIG
    try:
        before, st = _read_nofollow(safeio.home_file(home, CONFIG))
        text = before.decode("utf-8") if before is not None else ""
        after = set_key(text, key[0], key[1], value, where=str(path))
    except UnicodeDecodeError:
        return Refusal(profile, path, f"{path}: not valid UTF-8; add '{key[0]}: {{{key[1]}: {value}}}' by hand")
    except (ProfileConfigError, EditRefused) as exc:
        return Refusal(profile, path, str(exc))
    if before is not None and after == text:
        return None
    home_st = safeio.lstat(safeio.beneath(home))
    if home_st is None:
        return Refusal(profile, path, f"{home}: cannot be reached without following a link")
    return Change(profile, path, before, after,
                  mode=stat.S_IMODE(st.st_mode) if st is not None else 0o644,
                  uid=st.st_uid if st is not None else home_st.st_uid,
                  gid=st.st_gid if st is not None else home_st.st_gid, why=why)


def plan(root: Path, names: list[str] | None = None) -> tuple[list[Change], list[Refusal]]:
    """What ``hermesd standalone`` would write for ``names`` (default: every named profile) and the root."""
    changes: list[Change] = []
    refusals: list[Refusal] = []
    served = profiles_to_serve(True, root=root, identity=IDENTITY_MARKERS)
    for name, home in served:
        if names is not None and name not in names:
            continue
        if name == DEFAULT_PROFILE:
            found = _change(name, Path(home), AUTO_MIGRATION_KEY, False,
                            "'hermes update' would otherwise fold every profile into one gateway")
        else:
            found = _change(name, Path(home), STANDALONE_KEY, True,
                            "its gateway serves only this profile (upstream's per-profile opt-out)")
        if isinstance(found, Change):
            changes.append(found)
        elif isinstance(found, Refusal):
            refusals.append(found)
    return changes, refusals


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def apply(changes: list[Change], backups: Path) -> Path:
    """Write ``changes``; every original is in a new record under ``backups`` first. Returns the record."""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    for n in itertools.count():
        record = backups / (stamp if n == 0 else f"{stamp}-{n}")
        try:
            safeio.mkdir(safeio.at(backups.parent, backups.name, record.name), 0o700)
            break
        except FileExistsError:
            continue
    entries: list[dict[str, Any]] = []
    for i, c in enumerate(changes):
        saved = None
        if c.before is not None:
            saved = f"{i}.orig"
            safeio.replace_bytes(safeio.at(record, saved), c.before, 0o600, exclusive=True)
        entries.append({"profile": c.profile, "path": str(c.path), "backup": saved, "mode": c.mode,
                        "uid": c.uid, "gid": c.gid,
                        "sha256_before": _sha(c.before) if c.before is not None else None,
                        "sha256_after": _sha(c.after.encode()), "why": c.why})
    _write_manifest(record, {"created_at": time.time(), "files": entries, "undone_at": None})
    for c in changes:
        safeio.replace_bytes(safeio.beneath(c.path), c.after.encode("utf-8"), c.mode, exact_mode=True,
                             owner=(c.uid, c.gid))
    return record


def _write_manifest(record: Path, data: dict[str, Any]) -> None:
    safeio.replace_bytes(safeio.at(record, MANIFEST), (json.dumps(data, indent=1) + "\n").encode(), 0o600)


def latest(*folders: Path) -> Path | None:
    """The newest record not undone yet in any of ``folders``, or None (records are named by their time)."""
    found: list[Path] = []
    for backups in folders:
        try:
            found += [p for p in backups.iterdir() if p.is_dir() and not p.is_symlink()]
        except FileNotFoundError:
            continue
    for record in sorted(found, key=lambda p: p.name, reverse=True):
        data = _manifest(record)
        if data.get("undone_at") is None:
            return record
    return None


def _manifest(record: Path) -> dict[str, Any]:
    raw, _ = _read_nofollow(safeio.at(record, MANIFEST))
    try:
        data = json.loads(raw or b"")
    except ValueError:
        raise AdoptError(f"{record / MANIFEST}: not a valid record") from None
    if not isinstance(data, dict) or not isinstance(data.get("files"), list):
        raise AdoptError(f"{record / MANIFEST}: not a valid record")
    return data


@dataclass(frozen=True, slots=True)
class Undone:
    path: Path
    restored: bool
    note: str


def undo(record: Path) -> list[Undone]:
    """Put back every file of ``record`` that is still exactly what ``apply`` wrote; name the others."""
    data = _manifest(record)
    out: list[Undone] = []
    for entry in data["files"]:
        path = Path(str(entry["path"]))
        try:
            now, _ = _read_nofollow(safeio.beneath(path))
        except ProfileConfigError as exc:
            out.append(Undone(path, False, f"left alone: {exc}"))
            continue
        if now is None or _sha(now) != entry.get("sha256_after"):
            where = f"; the original is {record / entry['backup']}" if entry.get("backup") else ""
            out.append(Undone(path, False, f"changed since 'hermesd standalone' wrote it: left alone{where}"))
            continue
        if entry.get("backup") is None:
            safeio.unlink(safeio.beneath(path))
            out.append(Undone(path, True, "removed (hermesd standalone had created it)"))
            continue
        original, _ = _read_nofollow(safeio.at(record, str(entry["backup"])))
        if original is None or _sha(original) != entry.get("sha256_before"):
            out.append(Undone(path, False, f"the backup {record / entry['backup']} is missing or altered: left alone"))
            continue
        safeio.replace_bytes(safeio.beneath(path), original, int(entry["mode"]), exact_mode=True,
                             owner=(int(entry["uid"]), int(entry["gid"])))
        out.append(Undone(path, True, "restored byte for byte"))
    data["undone_at"] = time.time()
    _write_manifest(record, data)
    return out


def mark_undone(record: Path, how: str) -> None:
    """Mark ``record`` undone by other means (``hermesd upgrade --rollback`` put its files back), so that
    ``hermesd standalone --undo`` does not offer it again."""
    data = _manifest(record)
    if data.get("undone_at") is None:
        data.update(undone_at=time.time(), undone_by=how)
        _write_manifest(record, data)
