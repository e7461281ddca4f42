"""The real ``hermes gateway run`` under each mechanism: it reaches ``running`` through the shim.

Only what this module provides is checked (the daemon wiring is the lead's): the gateway is
started exactly as hermesd starts it (contract argv and environment, own session, output to a
log file), wrapped by ``wrap_argv``; it must write its PID record with the shim's PID, reach
``running``, keep its kanban dispatcher working on the shared board, and stop cleanly.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from supervisor.isolation.shim_argv import wrap_argv
from tests.isolation.conftest import MECHANISMS, Tree, alive, need, wait_for
from tests.isolation.model_stub import ModelStub

pytestmark = [pytest.mark.slow, pytest.mark.real_gateway]

HERMES = Path(os.environ.get("HERMESD_TEST_HERMES") or Path(sys.executable).parent / "hermes")
GATEWAY_ARGS = ["gateway", "run", "--external-supervisor"]


def contract_env(tree: Tree, profile: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HERMES", "PYTEST", "TELEGRAM_"))}
    env.update(HERMES_HOME=str(tree.home(profile)), HERMES_S6_SUPERVISED_CHILD="1", HERMES_GATEWAY_MAX_STARTS="0",
               GATEWAY_MULTIPLEX_PROFILES="false", HERMES_DISABLE_LAZY_INSTALLS="1", HERMESD_ROOT=str(tree.root),
               HERMESD_PROFILE=profile, PYTHONUNBUFFERED="1")
    return env


def start_gateway(tree: Tree, profile: str, argv_wrapped: list[str]) -> tuple[subprocess.Popen, float]:
    log = open(tree.base / f"{profile}.log", "ab")  # noqa: SIM115 - handed to the child
    t0 = time.monotonic()
    proc = subprocess.Popen(argv_wrapped, env=contract_env(tree, profile), stdin=subprocess.DEVNULL, stdout=log,
                            stderr=log, start_new_session=True, cwd="/")
    log.close()
    tree.procs.append(proc)
    return proc, t0


def state_of(home: Path) -> dict:
    try:
        return json.loads((home / "gateway_state.json").read_text())
    except (OSError, ValueError):
        return {}


@pytest.mark.parametrize("mechanism", ["off", *MECHANISMS])
def test_real_gateway_reaches_running(tree: Tree, facts, mechanism: str) -> None:
    if not HERMES.exists():
        pytest.skip(f"{HERMES} missing")
    if mechanism != "off":
        need(facts, mechanism)
    home = tree.home("a")
    (home / ".env").write_text("")  # offline: no platform to connect (each attempt may take 30 s)
    (home / "config.yaml").write_text("kanban:\n  dispatch_interval_seconds: 1\n")
    argv = [str(HERMES), "-p", "a", *GATEWAY_ARGS]
    wrapped = argv if mechanism == "off" else wrap_argv(tree.plan(facts, "a", mechanism), argv)
    proc, t0 = start_gateway(tree, "a", wrapped)
    wait_for(lambda: state_of(home).get("gateway_state") == "running" or proc.poll() is not None,
             timeout=90, what="gateway_state running")
    elapsed = time.monotonic() - t0
    log = (tree.base / "a.log").read_text(errors="replace")
    assert proc.poll() is None, log
    st = state_of(home)
    assert st["gateway_state"] == "running" and st["pid"] == proc.pid
    cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes().decode().split("\0")[:-1]
    assert cmdline[-3:] == GATEWAY_ARGS and "-p" in cmdline and str(HERMES) in cmdline
    print(f"\n[{mechanism}] gateway running {elapsed:.2f}s after spawn")
    if mechanism != "off":
        status = Path(f"/proc/{proc.pid}/status").read_text()
        assert "NoNewPrivs:\t1" in status
        if mechanism == "namespace+landlock":
            assert os.readlink(f"/proc/{proc.pid}/ns/mnt") != os.readlink("/proc/self/ns/mnt")
    # The embedded kanban dispatcher works on the shared board from inside the confinement.
    gateway_log = home / "logs" / "gateway.log"
    wait_for(lambda: "holding singleton dispatcher lock" in gateway_log.read_text(errors="replace")
             if gateway_log.exists() else False, timeout=60, what="the dispatcher lock")
    if mechanism != "off":
        wait_for(lambda: (tree.root / "kanban" / "default-board" / "kanban.db").exists(), timeout=60,
                 what="the dispatcher's first tick on the shared board")
        assert (tree.root / "kanban.db").is_symlink()
    errors = [ln for ln in gateway_log.read_text(errors="replace").splitlines()
              if "Permission denied" in ln or "Read-only file system" in ln]
    assert not errors, errors
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=90) == 0
    assert state_of(home)["gateway_state"] == "stopped"
    assert not alive(proc.pid)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("mechanism", ["off", *MECHANISMS])
def test_real_agents_terminal_tool_writes_home_and_tmp_only(tree: Tree, facts, mechanism: str) -> None:
    """A request to the real gateway's API server runs the real agent loop (its model a scripted
    stub) and the real terminal tool, inside the profile's confinement: the command it runs
    writes in the profile's home and its private /tmp, and cannot write anywhere else (``off``:
    the control, where the same command's write outside lands)."""
    if not HERMES.exists():
        pytest.skip(f"{HERMES} missing")
    if mechanism != "off":
        need(facts, mechanism)
    home = tree.home("a")
    notes = tree.elsewhere / "notes.txt"
    command = (
        f'echo agent > "$HERMES_HOME/agent-wrote.txt"; echo own_home=$?; '
        f't="${{TMPDIR:-/tmp}}/agent-$$"; echo tmp > "$t" && cat "$t" >/dev/null && rm "$t"; echo tmp=$?; '
        f"echo planted >> {notes}; echo outside=$?"
    )
    port, key = _free_port(), "walls-test-key-0123456789"
    with ModelStub(command) as model:
        (home / ".env").write_text(f"API_SERVER_ENABLED=true\nAPI_SERVER_HOST=127.0.0.1\nAPI_SERVER_PORT={port}\n"
                                   f"API_SERVER_KEY={key}\nOPENAI_API_KEY=stub\n")
        (home / "config.yaml").write_text(
            f"model: {{provider: custom, base_url: 'http://127.0.0.1:{model.port}/v1', default: stub-model}}\n")
        argv = [str(HERMES), "-p", "a", *GATEWAY_ARGS]
        proc, _ = start_gateway(tree, "a", argv if mechanism == "off" else wrap_argv(tree.plan(facts, "a", mechanism),
                                                                                     argv))
        wait_for(lambda: state_of(home).get("platforms", {}).get("api_server", {}).get("state") == "connected"
                 or proc.poll() is not None, timeout=90, what="the API server")
        assert proc.poll() is None, (tree.base / "a.log").read_text(errors="replace")
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/chat/completions", method="POST",
            data=json.dumps({"model": "hermes-agent", "messages": [{"role": "user", "content": "run it"}]}).encode(),
            headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=180) as answer:
            text = json.loads(answer.read())["choices"][0]["message"]["content"]
        assert any(m.get("role") == "tool" for r in model.requests for m in r.get("messages", [])), text
    rc = {k: int(v) for k, v in re.findall(r"(own_home|tmp|outside)=(\d+)", text)}
    assert rc["own_home"] == 0 and rc["tmp"] == 0, text
    assert (home / "agent-wrote.txt").read_text() == "agent\n"
    if mechanism == "off":
        assert rc["outside"] == 0 and notes.read_text() == "user notes\nplanted\n", text
    else:
        assert rc["outside"] != 0 and notes.read_text() == "user notes\n", text
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=90) == 0
