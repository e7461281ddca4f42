"""hermesd supervising the real ``hermes gateway run`` from hermes-agent (offline, no platform).

Slow (each gateway takes about a second to start and 84 MiB of memory), but this is the proof
that the contract hermesd follows is the one upstream implements.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from profiles.upstream import files as gf
from profiles.upstream.process import proc_start_time
from supervisor.hermes.requirements import interpreter_facts, release_contract
from tests.harness import pid_alive, tagged_pids, wait_for, write_config

pytestmark = [pytest.mark.slow, pytest.mark.real_gateway]

# HERMESD_TEST_HERMES=/path/to/venv/bin/hermes runs these tests against another hermes-agent release
# (scripts/test-releases.sh sets it per cached release); default: the hermes of the test venv.
HERMES = Path(os.environ.get("HERMESD_TEST_HERMES") or Path(sys.executable).parent / "hermes")


@pytest.fixture
def real_root(fake_root: Path) -> Path:
    """A root as its owner has it for this release: on the multiplex-default line each named profile's
    config.yaml says ``gateway.standalone: true`` (what ``hermesd standalone`` writes; without it hermesd
    holds them, see tests/releases/test_fleet.py)."""
    if not HERMES.exists():
        pytest.fail(f"hermes-agent is a test dependency but {HERMES} is missing: install '.[test]'")
    write_config(fake_root, command=[str(HERMES)], stop_timeout=60)
    contract = release_contract(interpreter_facts([str(HERMES)]))
    if getattr(contract, "standalone_key", False):
        for name in ("coder", "writer"):
            (fake_root / "profiles" / name / "config.yaml").write_text("gateway:\n  standalone: true\n")
    return fake_root


def test_real_gateways_end_to_end(real_root, hermesd_factory):
    root = real_root
    homes = {"default": root, "coder": root / "profiles" / "coder", "writer": root / "profiles" / "writer"}
    d = hermesd_factory(root)
    pids = d.wait_running(*homes, timeout=60)
    assert len(set(pids.values())) == 3
    for name, home in homes.items():
        rec = wait_for(lambda home=home: gf.read_pid_record(home), 30)
        assert rec.pid == pids[name] and rec.start_time == proc_start_time(rec.pid)
        assert gf.read_gateway_state(home)["gateway_state"] == "running"
    # the sticky active profile must not turn the default child into another profile
    (root / "active_profile").write_text("coder\n")

    # SIGKILL one child: it alone comes back
    os.kill(pids["coder"], signal.SIGKILL)
    row = wait_for(lambda: (r := d.row("coder"))["state"] == "running" and r["pid"] != pids["coder"] and r, 60)
    assert d.row("writer")["pid"] == pids["writer"] and d.row("default")["pid"] == pids["default"]
    pids["coder"] = row["pid"]

    # hermesd restart writer: only writer's PID changes
    assert d.cli("restart", "writer").returncode == 0
    row = wait_for(lambda: (r := d.row("writer"))["state"] == "running" and r["pid"] != pids["writer"] and r, 60)
    assert row["last_exit"]["code"] == 0  # planned stop: marker + SIGTERM → clean exit
    assert d.row("coder")["pid"] == pids["coder"] and d.row("default")["pid"] == pids["default"]
    pids["writer"] = row["pid"]
    args = release_contract(interpreter_facts([str(HERMES)])).gateway_args  # no --external-supervisor before 0.19.0
    assert gf.read_pid_record(homes["default"]).argv[-len(args):] == args

    # SIGKILL hermesd, start a new one: every child adopted, none duplicated
    d.kill9()
    assert all(pid_alive(p) for p in pids.values())
    d2 = hermesd_factory(root)
    assert d2.wait_running(*homes, timeout=30) == pids
    assert sorted(p for p in tagged_pids(root) if p in pids.values()) == sorted(pids.values())

    # hermesd stop: no gateway left, every state file "stopped"
    assert d2.cli("stop", timeout=180).returncode == 0
    assert d2.proc.wait(30) == 0
    wait_for(lambda: not tagged_pids(root), 10, what="no tagged process left")
    for home in homes.values():
        assert gf.read_gateway_state(home)["gateway_state"] == "stopped"


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_real_gateways_port_conflict_and_live_fix(real_root, hermesd_factory):
    """Two profiles enable the API server on one port (127.0.0.1 only): the second is held before it
    starts; giving it its own port in .env starts it, with no restart of hermesd or of the holder."""
    import secrets
    import socket

    root = real_root
    port, other = _free_port(), _free_port()
    keys = {name: secrets.token_hex(24) for name in ("coder", "writer")}  # upstream refuses short keys
    for name, key in keys.items():
        env = root / "profiles" / name / ".env"
        env.write_text(f"API_SERVER_ENABLED=true\nAPI_SERVER_HOST=127.0.0.1\nAPI_SERVER_PORT={port}\n"
                       f"API_SERVER_KEY={key}\n")
        env.chmod(0o600)
    d = hermesd_factory(root)
    coder_pid = d.wait_running("coder", timeout=60)["coder"]
    row = d.wait_state("writer", "held", timeout=30)
    assert row["hold"]["kind"] == "port_conflict" and str(port) in row["reason"] and "'coder'" in row["reason"]
    text = d.cli("status").stdout
    assert "writer" in text and "coder" in text and "port_conflict" in text
    # the holder really serves on that port
    wait_for(lambda: socket.create_connection(("127.0.0.1", port), timeout=1).close() or True, 60,
             what="coder's API server listening")
    env = root / "profiles" / "writer" / ".env"
    env.write_text(env.read_text().replace(f"API_SERVER_PORT={port}", f"API_SERVER_PORT={other}"))
    d.wait_running("writer", timeout=60)
    wait_for(lambda: socket.create_connection(("127.0.0.1", other), timeout=1).close() or True, 60,
             what="writer's API server listening")
    assert d.row("coder")["pid"] == coder_pid
    for key in keys.values():
        assert key not in d.cli("status", "--json").stdout and key not in d.log_text()


def test_real_gateway_serving(real_root, hermesd_factory):
    """Ready means serving, on upstream's own gateway with its API server on: ``status`` says it serves
    once ``GET /v1/health`` answered from the gateway's own socket; SIGSTOPped (PID alive, state file
    still "running", api_server still "connected") it does not; ``hermesd restart`` returns when the
    new gateway serves, and its API server answers at that moment."""
    import json
    import secrets
    import time
    import urllib.request

    root = real_root
    write_config(root, command=[str(HERMES)], stop_timeout=60,
                 profiles={"default": {"enabled": False}, "writer": {"enabled": False}})
    coder = root / "profiles" / "coder"
    port = _free_port()
    (coder / ".env").write_text(f"API_SERVER_ENABLED=true\nAPI_SERVER_HOST=127.0.0.1\nAPI_SERVER_PORT={port}\n"
                                f"API_SERVER_KEY={secrets.token_hex(16)}\n")
    (coder / ".env").chmod(0o600)
    d = hermesd_factory(root)
    pid = d.wait_running("coder", timeout=60)["coder"]
    row = wait_for(lambda: (r := d.row("coder"))["serving"]["ready"] and r, 60, what="coder serving")
    assert row["api"]["outcome"] == "answered" and row["api"]["pid"] == pid
    assert row["platforms"]["api_server"]["state"] == "connected"
    assert d.cli("status").returncode == 0

    os.kill(pid, signal.SIGSTOP)
    try:
        row = wait_for(lambda: not (r := d.row("coder"))["serving"]["ready"] and r, 30, what="coder not serving")
        assert row["state"] == "running" and row["pid"] == pid and row["gateway_state"] == "running"
        assert row["platforms"]["api_server"]["state"] == "connected"  # what the gateway's own file still says
        assert row["api"]["outcome"] == "timeout"
        assert d.cli("status").returncode == 1
    finally:
        os.kill(pid, signal.SIGCONT)
    wait_for(lambda: d.row("coder")["serving"]["ready"], 30, what="coder serving again")

    began = time.monotonic()
    out = d.cli("restart", "coder", timeout=180)
    took = time.monotonic() - began
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip() == "coder: serving: api_server"
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/health", timeout=2) as answer:
        assert json.loads(answer.read())["status"] == "ok"
    row = d.row("coder")
    assert row["pid"] != pid and row["serving"]["ready"] and row["api"]["pid"] == row["pid"]
    print(f"restart until serving: {took:.1f}s")
