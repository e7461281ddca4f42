"""hermesd probe: real files in a temporary root, a real short-lived process as the "gateway"."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from profiles.upstream import files as gf
from profiles.upstream.process import proc_start_time
from supervisor.cli import probe as probe_cli
from supervisor.cli.main import build_parser
from supervisor.ops import probe

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def gateway(home):
    """A live process that is coder's gateway by every proof the probe asks for (``-p coder gateway run``,
    ``HERMES_HOME`` the home), killed and reaped afterwards."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "-p", "coder", "gateway", "run"],
                            env={**os.environ, "HERMES_HOME": str(home)})
    yield proc
    if proc.poll() is None:
        proc.kill()
    proc.wait()


@pytest.fixture
def home(tmp_path: Path) -> Path:
    h = tmp_path / "root" / "profiles" / "coder"
    (h / "state").mkdir(parents=True)
    return h


def write_state(home: Path, pid: int, state: str = "running", start: int | str | None = "auto", **extra) -> None:
    start_time = proc_start_time(pid) if start == "auto" else start
    gf.write_json_atomic(home / gf.STATE_FILE, {"pid": pid, "start_time": start_time, "gateway_state": state,
                                                "kind": "hermes-gateway", **extra})


def write_beat(home: Path, pid: int, age: float = 0.0) -> None:
    when = datetime.now(UTC) - timedelta(seconds=age)
    gf.write_json_atomic(home / gf.HEARTBEAT_FILE, {"pid": pid, "updated_at": when.isoformat(), "monotonic": 1.0,
                                                    "start_time": time.time()})


def test_running_gateway_is_ready_and_live(home, gateway):
    write_state(home, gateway.pid)
    write_beat(home, gateway.pid, age=5)
    ok, why = probe.check(home, "ready")
    assert ok, why
    assert f"PID {gateway.pid}" in why and "heartbeat 5s ago" in why
    assert probe.check(home, "live")[0]


def test_running_without_a_first_heartbeat_yet(home, gateway):
    write_state(home, gateway.pid)
    ok, why = probe.check(home, "ready")
    assert ok and "no heartbeat yet" in why


@pytest.mark.parametrize(("state", "ready", "live"), [
    ("running", True, True),
    ("degraded", False, True),
    ("draining", False, True),
    ("starting", False, False),
    ("stopped", False, False),
    ("startup_failed", False, False),
])
def test_states(home, gateway, state, ready, live):
    write_state(home, gateway.pid, state, exit_reason="boom" if state == "startup_failed" else None)
    assert probe.check(home, "ready")[0] is ready
    ok, why = probe.check(home, "live")
    assert ok is live
    if not live:
        assert state in why


def test_stale_heartbeat_of_a_live_process_fails_both(home, gateway):
    write_state(home, gateway.pid)
    write_beat(home, gateway.pid, age=200)
    for mode in ("ready", "live"):
        ok, why = probe.check(home, mode)
        assert not ok and "heartbeat is 200s old" in why
    assert probe.check(home, "live", max_age=300)[0]


def test_heartbeat_of_another_process_is_ignored(home, gateway):
    write_state(home, gateway.pid)
    write_beat(home, gateway.pid + 1, age=500)
    assert probe.check(home, "ready")[0]


def test_recycled_pid_fails(home, gateway):
    write_state(home, gateway.pid, start=proc_start_time(gateway.pid) - 1)
    write_beat(home, gateway.pid)
    ok, why = probe.check(home, "live")
    assert not ok and "not running" in why


def test_zombie_is_not_running(home, gateway):
    write_state(home, gateway.pid)
    write_beat(home, gateway.pid)
    gateway.send_signal(signal.SIGKILL)
    deadline = time.monotonic() + 5
    while proc_start_time(gateway.pid) is not None and time.monotonic() < deadline:
        time.sleep(0.01)  # dead but not reaped: a zombie
    ok, why = probe.check(home, "live")
    assert not ok and "not running" in why


def test_vanished_pid_falls_back_to_the_heartbeat(home, gateway):
    """A PID that does not exist here may live in another PID namespace: the heartbeat decides."""
    write_state(home, gateway.pid)
    gateway.kill()
    gateway.wait()
    assert not probe.check(home, "live")[0]  # no heartbeat: nothing vouches for it
    write_beat(home, gateway.pid, age=200)
    ok, why = probe.check(home, "live")
    assert not ok and "200s old" in why
    write_beat(home, gateway.pid, age=3)
    assert probe.check(home, "live")[0]


def test_pid_file_alone_is_live_but_not_ready(home, gateway):
    record = {"pid": gateway.pid, "kind": "hermes-gateway", "argv": [], "start_time": proc_start_time(gateway.pid)}
    (home / gf.PID_FILE).write_text(json.dumps(record))
    assert probe.check(home, "live")[0]
    ok, why = probe.check(home, "ready")
    assert not ok and "not reported its state" in why


def test_a_new_gateway_known_only_by_its_pid_file(home, gateway):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    write_state(home, dead.pid, start=12345)  # the previous gateway's last words
    record = {"pid": gateway.pid, "kind": "hermes-gateway", "argv": [], "start_time": proc_start_time(gateway.pid)}
    (home / gf.PID_FILE).write_text(json.dumps(record))
    ok, why = probe.check(home, "live")
    assert ok and f"PID {gateway.pid}" in why
    assert not probe.check(home, "ready")[0]


def test_no_files_at_all(home):
    ok, why = probe.check(home, "live")
    assert not ok and "no gateway" in why


def test_bare_pid_without_start_time_needs_a_gateway_command_line(home, gateway):
    write_state(home, gateway.pid, start=None)
    assert probe.check(home, "ready")[0]
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        write_state(home, other.pid, start=None)
        assert not probe.check(home, "ready")[0]
    finally:
        other.kill()
        other.wait()


def run_probe(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    code = (
        "import sys\n"
        "from supervisor.cli.main import main\n"
        "rc = main(['probe', *sys.argv[1:]])\n"
        "heavy = [m for m in ('yaml', 'psutil', 'watchfiles', 'asyncio') if m in sys.modules]\n"
        "print('HEAVY', heavy, file=sys.stderr)\n"
        "sys.exit(rc)\n"
    )
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, **(env or {})}, timeout=30)


def test_command_line_exit_codes_and_cheap_imports(home, gateway):
    root = home.parent.parent
    write_state(home, gateway.pid)
    done = run_probe("coder", "--ready", "--root", str(root))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith("coder: running (PID")
    assert "HEAVY []" in done.stderr  # stdlib only: Kubernetes runs this every few seconds
    write_state(home, gateway.pid, "draining")
    done = run_probe("coder", "--ready", "--root", str(root))
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.splitlines()[0] == f"coder: gateway PID {gateway.pid} is draining"


def test_command_line_resolves_the_root_from_hermes_home(home, gateway):
    write_state(home, gateway.pid)
    done = run_probe("Coder", "--live", env={"HERMES_HOME": str(home)})
    assert done.returncode == 0, done.stderr


def test_unknown_or_invalid_profile(home):
    root = home.parent.parent
    done = run_probe("nope", "--live", "--root", str(root))
    assert done.returncode == 1 and "no such profile" in done.stderr
    done = run_probe("../x", "--live", "--root", str(root))
    assert done.returncode == 1 and "invalid profile name" in done.stderr
    done = run_probe("coder", "--root", str(root))
    assert done.returncode == 2  # --ready or --live is required


def test_register_adds_a_documented_subcommand():
    parser = build_parser(["probe"])
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert "example:\n  hermesd probe" in sub.choices["probe"].format_help()
    args = parser.parse_args(["probe", "default", "--live", "--max-age", "30"])
    assert args.func is probe_cli.cmd_probe and args.live and args.max_age == 30


@pytest.mark.real_gateway
def test_real_gateway_probe_and_planned_stop(tmp_path):
    """Against upstream's own gateway: ready once running, and the planned-stop helper makes SIGTERM a clean exit."""
    pytest.importorskip("hermes_cli.main", reason="hermes-agent is not installed")

    from profiles.upstream import process as contract
    from supervisor.processes import childspec

    root = tmp_path / "root"
    # A profile name no other test uses: upstream's own `hermes -p coder gateway restart` (another test, on
    # the same machine) SIGTERMs every gateway whose command line names that profile, whatever its root
    # (measured: this gateway exited 1 leaving "running" within 10 s of one run from another root).
    home = root / "profiles" / "probestop"
    home.mkdir(parents=True)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path / "home"), "HERMES_HOME": str(home),
           **contract.FIXED_ENV}
    argv = childspec.child_argv([sys.executable, "-m", "hermes_cli.main"], home.name)
    gw = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not probe.check(home, "ready")[0]:
            assert gw.poll() is None, "the gateway exited during start-up"
            assert time.monotonic() < deadline, probe.check(home, "ready")[1]
            time.sleep(0.1)
        assert probe.check(home, "live")[0]
        args = build_parser(["_planned-stop"]).parse_args(["_planned-stop", str(home)])
        assert args.func(args) == 0
        if gw.poll() is None:  # the service manager's SIGTERM once its stop hook has returned
            gw.send_signal(signal.SIGTERM)
        code = gw.wait(60)
        # A planned stop persists state "stopped"; an unexpected SIGTERM leaves "running" on purpose
        # (upstream-contract section 3). Upstream's own watcher polls for the marker every 0.5 s and
        # starts the same clean stop by itself once running; a SIGTERM landing inside that stop is
        # taken for an unexpected one ("running", exit 1). So the helper waits for that stop to end,
        # and the signal that follows finds no gateway: exit 0 and "stopped", every time.
        state = gf.read_gateway_state(home).get("gateway_state")
        assert (code, state) == (0, "stopped")
        assert not (home / gf.PLANNED_STOP_MARKER).exists()
        ok, why = probe.check(home, "live")
        assert not ok and "stopped" in why
    finally:
        if gw.poll() is None:
            os.killpg(gw.pid, signal.SIGKILL)
            gw.wait()
