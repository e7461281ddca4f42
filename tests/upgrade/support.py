"""What the upgrade tests share: checks on a running fleet, and small, real "hermes-agent" releases
(wheels pip installs into a real virtual environment, whose ``hermes`` runs the fake gateway).

A release is a wheel named ``hermes-agent`` with a ``hermes_cli`` package (its ``__version__`` is
the release, what hermesd's probe reads) and a ``hermes`` console script. ``sync_skills=True``
makes its gateway rewrite ``skills/.bundled_manifest`` at start, as upstream's gateway does;
``broken=True`` makes the gateway exit 1 before it starts (a release that cannot run here).
``helper`` adds a dependency ``hermes-test-helper==N`` (its own tiny wheel), so a release can
change a dependency too.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import importlib.util
import itertools
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

from profiles.upstream.files import MIGRATED_FILES
from supervisor.observe.journal import default_folder
from supervisor.observe.reader import iter_events
from tests.fakegw import FAKEGW

NAMES = ("default", "alpha", "beta", "gamma")

MAIN = '''import os, pathlib, runpy, sys

def main():
    home = pathlib.Path(os.environ.get("HERMES_HOME", "."))
    if {sync!r}:
        (home / "skills").mkdir(exist_ok=True)
        (home / "skills" / ".bundled_manifest").write_text("bundled by {version}\\n")
    if {soul!r}:
        (home / "SOUL.md").write_text("persona template of {version}\\n")
        (home / "cache").mkdir(exist_ok=True)
    if {broken!r}:
        sys.stderr.write("simulated broken release {version}: the gateway cannot start\\n")
        raise SystemExit(1)
    runpy.run_path({fakegw!r}, run_name="__main__")
'''


def _digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _wheel(out: Path, dist: str, version: str, files: dict[str, str], requires: list[str],
           scripts: dict[str, str]) -> Path:
    stem = dist.replace("-", "_")
    info = f"{stem}-{version}.dist-info"
    meta = f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n"
    meta += "".join(f"Requires-Dist: {r}\n" for r in requires)
    wheel = "Wheel-Version: 1.0\nGenerator: hermesd-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    files = {**files, f"{info}/METADATA": meta, f"{info}/WHEEL": wheel}
    if scripts:
        files[f"{info}/entry_points.txt"] = "[console_scripts]\n" + "".join(f"{k} = {v}\n" for k, v in scripts.items())
    record = "".join(f"{p},{_digest(t.encode())},{len(t.encode())}\n" for p, t in files.items()) + f"{info}/RECORD,,\n"
    path = out / f"{stem}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for p, t in files.items():
            z.writestr(p, t)
        z.writestr(f"{info}/RECORD", record)
    return path


def build_release(out: Path, version: str, *, broken: bool = False, sync_skills: bool = False,
                  helper: int | None = None, name: str | None = None, dist: str = "hermes-agent",
                  soul: bool = False) -> Path:
    """A ``hermes-agent`` wheel of ``version`` in ``out`` (``name``: a subfolder, for two builds of one
    version; ``dist``: another distribution of the same code, as the repackagings of upstream's newer
    releases are; ``soul``: its gateway rewrites SOUL.md and adds ``cache/`` at start, as 0.22's does)."""
    folder = out / name if name else out
    folder.mkdir(parents=True, exist_ok=True)
    main = MAIN.format(sync=sync_skills, broken=broken, version=version, fakegw=str(FAKEGW), soul=soul)
    files = {"hermes_cli/__init__.py": f"__version__ = {version!r}\n", "hermes_cli/main.py": main}
    requires = [f"hermes-test-helper=={helper}"] if helper is not None else []
    return _wheel(folder, dist, version, files, requires, {"hermes": "hermes_cli.main:main"})


def build_helper(out: Path, n: int) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    return _wheel(out, "hermes-test-helper", str(n), {"hermes_test_helper.py": f"N = {n}\n"}, [], {})


def make_venv(where: Path) -> Path:
    """A virtual environment with pip (copied from the test interpreter's: ``venv`` with pip takes ~10 s here)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True, timeout=120)
    site = next((where / "lib").glob("python3*/site-packages"))
    spec = importlib.util.find_spec("pip")
    assert spec is not None and spec.submodule_search_locations
    shutil.copytree(spec.submodule_search_locations[0], site / "pip")
    info = Path(str(importlib.metadata.distribution("pip")._path))  # type: ignore[attr-defined]
    shutil.copytree(info, site / info.name)
    return where / "bin" / "python"


def pip_env(wheels: Path) -> dict[str, str]:
    """pip offline, from ``wheels`` only."""
    return {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheels), "PIP_DISABLE_PIP_VERSION_CHECK": "1",
            "PIP_NO_CACHE_DIR": "1", "PIP_CONSTRAINT": "", "PIP_NO_COMPILE": "0"}


def pip_install(python: Path, wheels: Path, *requirements: str) -> None:
    subprocess.run([str(python), "-m", "pip", "install", "-q", *requirements], check=True, timeout=300,
                   env={**os.environ, **pip_env(wheels)})


def tree_digest(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` (relative path -> sha256 and mode): equal means byte for byte."""
    out = {}
    for dirpath, _dirs, names in os.walk(folder):
        for n in names:
            p = Path(dirpath) / n
            if p.is_symlink():
                out[str(p.relative_to(folder))] = "link:" + os.readlink(p)
                continue
            out[str(p.relative_to(folder))] = f"{hashlib.sha256(p.read_bytes()).hexdigest()}:{p.stat().st_mode:o}"
    return out


# ----------------------------------------------------------------------------- a running fleet


def run(d: Any, *args: str, timeout: float = 180) -> tuple[int, dict[str, Any]]:
    result = d.cli(*args, "--json", timeout=timeout)
    try:
        doc = json.loads(result.stdout)
    except ValueError:
        raise AssertionError(f"not JSON: {result.stdout[-2000:]}\n{result.stderr[-2000:]}") from None
    return result.returncode, doc


def rows(d: Any) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in d.status()["profiles"]}


def files(root: Path) -> dict[str, bytes | None]:
    out: dict[str, bytes | None] = {}
    for name in NAMES:
        home = root if name == "default" else root / "profiles" / name
        for rel in (*MIGRATED_FILES, "profile.yaml"):
            p = home / rel
            out[f"{name}/{rel}"] = p.read_bytes() if p.exists() else None
    return out


def events(root: Path) -> list[dict[str, Any]]:
    return list(iter_events(default_folder(root)))


def assert_one_at_a_time(root: Path, rid: str, order: list[str]) -> None:
    """Each profile's new gateway was running, and its gate passed, before the next was touched; the
    next one's old gateway ran until then (one daemon run: ``seq`` orders its events)."""
    evs = events(root)

    def mine(kind: str, profile: str) -> list[int]:
        return [e["seq"] for e in evs if e["type"] == kind and e.get("id") == rid and e["profile"] == profile]

    for a, b in itertools.pairwise(order):
        passed = next(e["seq"] for e in evs if e["type"] == "upgrade_gate" and e.get("id") == rid
                      and e["profile"] == a and e["passed"])
        touched = mine("upgrade_restarting", b)[0]
        ready_a = max(e["seq"] for e in evs if e["type"] == "ready" and e["profile"] == a and e["seq"] < passed)
        stopped_b = min(e["seq"] for e in evs if e["type"] == "exited" and e["profile"] == b and e["seq"] > touched)
        assert mine("upgrade_restarting", a)[0] < ready_a < passed < touched < stopped_b, (a, b)
