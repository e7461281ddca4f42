"""A per-profile fleet on each release, old and new: hermesd with real gateways and isolation on.

For every release under test (``HERMESD_FLEET_COMMANDS``: a JSON list of gateway commands, one per
release, which ``scripts/test.sh`` sets to its cached 0.20.1 and 0.22.2 environments; otherwise the
one ``HERMESD_TEST_HERMES`` or the test venv's hermes names), on a root with the default profile and
two named ones:

* after ``hermesd start`` every profile runs and each child serves only its own profile (its state
  file and, where the release has one, its ``gateway.sock`` ``identify`` agree);
* no child restarts more than once in the first 60 s; SIGKILL of one gateway restarts it alone;
* ``hermesd stop`` leaves nothing running.

On the multiplex-default line, before that: without consent the named profiles are held with the
message and the command that fixes it, the default runs, and the user's files are untouched;
``hermesd doctor`` names ``hermes update``'s auto-migration; ``hermesd adopt`` shows the diff, keeps a
backup, and ``--undo`` restores the files byte for byte.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from profiles.upstream import files as gf
from supervisor import gatewaysock, requirements
from supervisor.isolation import probe
from supervisor.isolation.probing import best_mechanism
from tests.harness import make_root, tagged_pids, wait_for, write_config

pytestmark = [pytest.mark.slow, pytest.mark.real_gateway]

NAMES = ("default", "coder", "writer")
WINDOW_S = 60.0


def _commands() -> list[list[str]]:
    raw = os.environ.get("HERMESD_FLEET_COMMANDS", "").strip()
    if raw:
        cmds = json.loads(raw)
        assert isinstance(cmds, list) and all(isinstance(c, list) and c for c in cmds), raw
        return cmds
    chosen = os.environ.get("HERMESD_TEST_HERMES", "").strip()
    return [[chosen or str(Path(sys.executable).parent / "hermes")]]


def _label(command: list[str]) -> str:
    facts = requirements.interpreter_facts(command)
    return f"{facts.version}" if facts.version else " ".join(command)


COMMANDS = _commands()


@pytest.fixture(scope="module", autouse=True)
def _confinement() -> None:
    if best_mechanism(probe()) != "namespace+landlock":
        pytest.skip("this kernel offers no private mount namespace with Landlock; the fleet is tested with "
                    "isolation on (see hermesd doctor)")


def _digests(root: Path) -> dict[str, str]:
    files = [root / "config.yaml", *(root / "profiles" / n / "config.yaml" for n in NAMES[1:])]
    return {str(f): hashlib.sha256(f.read_bytes()).hexdigest() for f in files}


def _fleet_root(tmp_path: Path, command: list[str]) -> Path:
    root = make_root(tmp_path)
    (root / "config.yaml").write_text("# the user's own settings\nmodel: {}\n")
    for name in NAMES[1:]:
        (root / "profiles" / name / "config.yaml").write_text(f"# {name}\nagent:\n  max_turns: 10\n")
    write_config(root, command=command, stop_timeout=60, isolation="required",
                 restart={"initial_delay": 1, "max_delay": 30, "healthy_after": 60, "jitter": 0.0})
    return root


@pytest.mark.parametrize("command", COMMANDS, ids=_label)
def test_per_profile_fleet(tmp_path, hermesd_factory, command):
    root = _fleet_root(tmp_path, command)
    contract = requirements.release_contract(requirements.interpreter_facts(command))
    assert contract is not None and hasattr(contract, "line"), contract
    homes = {"default": root, "coder": root / "profiles" / "coder", "writer": root / "profiles" / "writer"}

    if contract.standalone_key:
        _without_consent_then_adopt(root, hermesd_factory)

    d = hermesd_factory(root)
    t0 = time.monotonic()
    pids = d.wait_running(*NAMES, timeout=90)
    assert len(set(pids.values())) == 3
    # each child serves only its own profile: the state file and identify (where there is one) agree
    for name, home in homes.items():
        row = wait_for(lambda name=name: (r := d.row(name)).get("serves") is not None and r, 30,
                       what=f"{name}'s served set") if contract.control_socket else d.row(name)
        if contract.control_socket:
            assert row["serves"] == [name] and row["serves_source"] == "identify", row
            assert row["serves_agree"] is not False, row
            ident = gatewaysock.identify(home, timeout=5)
            assert ident.pid == pids[name] and ident.start_time == gf.proc_start_time(ident.pid), ident
            assert ident.served in (None, (name,)), ident
        state = gf.read_gateway_state(home)
        assert state["pid"] == pids[name] and not [p for p in state.get("served_profiles") or [] if p != name]
        assert row["isolation"]["mechanism"] == "namespace+landlock", row["isolation"]

    # SIGKILL of one gateway restarts it alone
    os.kill(pids["coder"], signal.SIGKILL)
    row = wait_for(lambda: (r := d.row("coder"))["state"] == "running" and r["pid"] != pids["coder"] and r, 60,
                   what="coder running again")
    assert {n: d.row(n)["pid"] for n in ("default", "writer")} == {n: pids[n] for n in ("default", "writer")}

    # no child restarts more than once in the first 60 s (the killed one exactly once)
    while time.monotonic() - t0 < WINDOW_S:
        restarts = {n: d.row(n)["restarts"] for n in NAMES}
        assert restarts["coder"] <= 1 and restarts["default"] == 0 and restarts["writer"] == 0, restarts
        time.sleep(1.0)  # sampling the window the test is about
    restarts = {n: d.row(n)["restarts"] for n in NAMES}
    assert restarts == {"default": 0, "coder": 1, "writer": 0}, restarts
    assert all(d.row(n)["state"] == "running" for n in NAMES)

    # hermesd stop leaves nothing running
    assert d.cli("stop", timeout=180).returncode == 0
    assert d.proc.wait(30) == 0
    wait_for(lambda: not tagged_pids(root), 15, what="no tagged process left")
    wait_for(lambda: not _gateways_of(root), 15, what="no gateway of this root left")


def _without_consent_then_adopt(root: Path, hermesd_factory) -> None:
    """The multiplex-default line before consent, then ``hermesd adopt`` and its undo."""
    before = _digests(root)
    d = hermesd_factory(root)
    d.wait_running("default", timeout=90)
    for name in NAMES[1:]:
        row = d.wait_state(name, "held", timeout=30)
        assert row["hold"]["kind"] == "standalone_required", row
        assert "gateway.standalone: true" in row["reason"] and f"hermesd adopt --root {root}" in row["reason"], row
    text = d.cli("status").stdout
    assert "hermesd adopt --root" in text, text
    doctor = json.loads(d.cli("doctor", "--json").stdout)
    codes = {f["code"] for f in doctor["findings"]}
    assert {"auto_multiplex_migration", "standalone_required"} <= codes, codes
    assert d.row("default")["serves"] in (None, ["default"])
    assert _digests(root) == before, "hermesd changed a user's file without consent"
    assert not (root / ".multiplex_opt_out_rewritten").exists()
    assert d.cli("stop", timeout=180).returncode == 0
    assert d.proc.wait(30) == 0

    dry = d.cli("adopt", "--dry-run")
    assert dry.returncode == 0 and "+  standalone: true" in dry.stdout and _digests(root) == before, dry
    done = d.cli("adopt")
    assert done.returncode == 0, done
    assert "+  auto_multiplex_migration: false" in done.stdout and "+  standalone: true" in done.stdout
    records = list((root / ".hermesd" / "adopt").iterdir())
    assert len(records) == 1 and (records[0] / "manifest.json").is_file()
    assert _digests(root) != before
    undone = d.cli("adopt", "--undo")
    assert undone.returncode == 0 and undone.stdout.count("restored byte for byte") == 3, undone
    assert _digests(root) == before
    assert d.cli("adopt").returncode == 0


def _gateways_of(root: Path) -> list[int]:
    """Any process at all whose command line runs a gateway for this root's homes (tagged or not)."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            env = Path(f"/proc/{entry.name}/environ").read_bytes()
        except OSError:
            continue
        if f"HERMES_HOME={root}".encode() in env:
            found.append(int(entry.name))
    return found


def test_commands_name_distinct_releases():
    """The releases the fleet runs on (what scripts/test.sh installs) are what they claim to be."""
    versions = [requirements.interpreter_facts(c).version for c in COMMANDS]
    assert all(versions) and len(set(versions)) == len(versions), versions
    subprocess.run([*COMMANDS[0], "--version"], capture_output=True, timeout=60, check=True)
