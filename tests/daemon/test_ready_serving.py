"""Ready means serving, under a real daemon with the fake gateway (``api_server`` knob: an HTTP health
route on a port): ``status`` shows whether each profile serves, ``start``/``restart`` wait for it, the
rolling restart's gate holds a canary to it, and another process's listener never counts.

The same with the real gateway is ``test_real_gateway.py::test_real_gateway_serving``.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from tests.fakegw import write_behaviour
from tests.harness import make_root, wait_for, write_config
from tests.upgrade.support import events

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def enable_api(home: Path, port: int) -> None:
    """The profile's files enable upstream's API server on ``port`` (a key of 32 characters)."""
    env = home / ".env"
    env.write_text(f"API_SERVER_ENABLED=true\nAPI_SERVER_PORT={port}\nAPI_SERVER_KEY={secrets.token_hex(16)}\n")
    env.chmod(0o600)


def fake_api(home: Path, port: int, health: str = "ok", after: float = 0.0, **knobs: Any) -> None:
    write_behaviour(home, platforms={"api_server": {"state": "connected"}},
                    api_server={"port": port, "health": health, "after": after}, **knobs)


def serving(d: Any, name: str) -> dict[str, Any]:
    return d.row(name)["serving"]


def wait_serving(d: Any, name: str, ready: bool, timeout: float = 20.0) -> dict[str, Any]:
    return wait_for(lambda: (r := d.row(name))["serving"]["ready"] is ready and r, timeout,
                    what=f"{name} serving={ready}")


def test_status_shows_serving_and_a_stopped_gateway_stops_serving(tmp_path, hermesd_factory):
    root = make_root(tmp_path, ("coder", "writer"))
    write_config(root)
    coder = root / "profiles" / "coder"
    port = free_port()
    enable_api(coder, port)
    fake_api(coder, port)
    d = hermesd_factory(root)
    pids = d.wait_running("default", "coder", "writer", timeout=30)
    row = wait_serving(d, "coder", True)
    assert row["api"]["outcome"] == "answered" and row["api"]["pid"] == pids["coder"]
    assert row["serving"]["why"] == "serving: api_server"
    # no platform configured: it serves scheduled jobs, and that is ready, not a false red
    assert serving(d, "writer") == {"ready": True, "word": "yes", "settled": True, "channels": [],
                                    "why": "running, no platform configured (it runs scheduled jobs only)"}
    out = d.cli("status")
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout.splitlines()
    first = next(i for i, ln in enumerate(text) if ln.startswith("PROFILE"))
    header, lines = text[first], text[first + 1:first + 4]
    at = header.index("SERVING")
    assert {ln.split()[0]: ln[at:].split()[0] for ln in lines} == {"default": "yes", "coder": "yes", "writer": "yes"}

    os.kill(pids["coder"], signal.SIGSTOP)
    try:
        row = wait_serving(d, "coder", False)
        assert row["state"] == "running" and row["pid"] == pids["coder"]
        assert row["api"]["outcome"] == "timeout" and row["serving"]["word"] == "no"
        assert row["serving"]["why"] == f"api_server (127.0.0.1:{port} did not answer /v1/health within 2s)"
        out = d.cli("status")
        assert out.returncode == 1
        assert f"  coder: api_server: 127.0.0.1:{port} did not answer /v1/health within 2s" in out.stdout.splitlines()
        assert serving(d, "writer")["ready"] and serving(d, "default")["ready"]
    finally:
        os.kill(pids["coder"], signal.SIGCONT)
    wait_serving(d, "coder", True)
    assert d.row("coder")["pid"] == pids["coder"]

    # hermesd gone: status checks the API server itself, from the files and /proc
    d.kill9()
    out = d.cli("status", "--json")
    assert out.returncode == 3
    offline = {r["name"]: r for r in json.loads(out.stdout)["profiles"]}
    assert offline["coder"]["api"]["outcome"] == "answered" and offline["coder"]["serving"]["ready"]
    # the next hermesd adopts the gateway and checks it again
    d2 = hermesd_factory(root)
    row = wait_serving(d2, "coder", True)
    assert row["pid"] == pids["coder"] and row["adopted"] and row["api"]["pid"] == pids["coder"]


def test_start_and_restart_wait_until_the_profile_serves(tmp_path, hermesd_factory):
    root = make_root(tmp_path, ("coder",))
    write_config(root)
    coder = root / "profiles" / "coder"
    port = free_port()
    enable_api(coder, port)
    fake_api(coder, port, after=3.0)  # its API server answers 3 s after the gateway reports "running"
    d = hermesd_factory(root)
    old = d.wait_running("coder", timeout=30)["coder"]
    began = time.monotonic()
    out = d.cli("restart", "coder")
    took = time.monotonic() - began
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip() == "coder: serving: api_server"
    assert took >= 3.0  # it returned only once the new gateway answered, not when it reported "running"
    row = d.row("coder")
    assert row["pid"] != old and row["serving"]["ready"] and row["api"]["pid"] == row["pid"]
    with socket.create_connection(("127.0.0.1", port), timeout=2):
        pass

    # a gateway that runs but never answers: the wait ends at its timeout, and says why
    fake_api(coder, port, health="hang")
    out = d.cli("restart", "coder", "--timeout", "6")
    assert out.returncode == 1
    assert "coder: running, but not serving after" in out.stderr
    assert f"api_server (127.0.0.1:{port} did not answer /v1/health within 2s)" in out.stderr
    assert "restart: coder did not reach serving" in out.stderr

    # stop, then start: the same wait
    fake_api(coder, port, after=2.0)
    assert d.cli("stop", "coder").returncode == 0
    began = time.monotonic()
    out = d.cli("start", "coder")
    assert out.returncode == 0 and out.stdout.strip() == "coder: serving: api_server"
    assert time.monotonic() - began >= 2.0


def test_a_settled_failure_ends_the_wait_at_once(tmp_path, hermesd_factory):
    """A platform that will not connect without someone acting (fatal) is not waited for."""
    root = make_root(tmp_path, ("coder",))
    write_config(root)
    coder = root / "profiles" / "coder"
    write_behaviour(coder, platforms={"telegram": {"state": "fatal", "error_code": "telegram_token_invalid",
                                                   "error_message": "Unauthorized"}})
    d = hermesd_factory(root)
    d.wait_running("coder", timeout=30)
    began = time.monotonic()
    out = d.cli("restart", "coder", "--timeout", "60")
    assert out.returncode == 1 and time.monotonic() - began < 30
    assert "coder: running, but not serving after" in out.stderr and "telegram (fatal: Unauthorized)" in out.stderr


def test_another_process_s_listener_never_makes_a_profile_serve(tmp_path, hermesd_factory):
    """coder's files point its API server at a port that writer's gateway listens on (writer's agent
    opened it; writer's files claim nothing, so there is no port conflict to hold): coder is not
    serving, and hermesd never connected to writer's listener."""
    root = make_root(tmp_path, ("coder", "writer"))
    write_config(root)
    coder, writer = root / "profiles" / "coder", root / "profiles" / "writer"
    port = free_port()
    enable_api(coder, port)
    write_behaviour(coder, platforms={"api_server": {"state": "connected"}})  # says connected, listens nowhere
    write_behaviour(writer, api_server={"port": port, "health": "ok"})
    d = hermesd_factory(root)
    d.wait_running("coder", "writer", timeout=30)
    wait_for(lambda: "api_server listening" in (root / ".hermesd" / "logs" / "writer.log").read_text(), 20,
             what="writer's listener")
    row = wait_for(lambda: (r := d.row("coder"))["api"]["outcome"] == "not_its_own" and r, 20,
                   what="coder's check refused to connect")
    assert not row["serving"]["ready"]
    assert row["serving"]["why"] == (f"api_server (another process listens on 127.0.0.1:{port}; hermesd does "
                                     "not connect to it)")
    # checked again (every second while it does not serve), and again never connected
    wait_for(lambda: d.row("coder")["api"]["at"] > row["api"]["at"], 10, what="coder checked again")
    assert "api_server connection" not in (root / ".hermesd" / "logs" / "writer.log").read_text()
    assert d.row("writer")["serving"]["ready"]  # writer's files enable no platform


def test_rolling_restart_stops_at_a_canary_that_runs_but_does_not_answer(tmp_path, hermesd_factory):
    root = make_root(tmp_path, ("alpha", "beta"))
    write_config(root, profiles={"default": {"enabled": False}})
    ports = {}
    for name in ("alpha", "beta"):
        ports[name] = free_port()
        enable_api(root / "profiles" / name, ports[name])
        fake_api(root / "profiles" / name, ports[name])
    d = hermesd_factory(root)
    pids = d.wait_running("alpha", "beta", timeout=30)
    for name in ("alpha", "beta"):
        wait_serving(d, name, True)
    fake_api(root / "profiles" / "alpha", ports["alpha"], health="hang")  # the canary's next start will not answer
    out = d.cli("restart", "--all", "--rolling", "--canary", "alpha", "--gate-timeout", "8", "--settle", "0.2",
                "--canary-settle", "0.4", "--json", timeout=120)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "stopped at its first failure" in json.loads(out.stdout)["error"]
    (gated,) = [e for e in events(root) if e["type"] == "upgrade_gate"]
    assert gated["profile"] == "alpha" and gated["passed"] is False
    # the canary's timeout is --gate-timeout plus its settle time
    assert gated["reason"].startswith("not healthy within 8.4s: ")
    assert gated["reason"].endswith(f": not serving yet: api_server (127.0.0.1:{ports['alpha']} did not answer "
                                    "/v1/health within 2s)")
    rows = {r["name"]: r for r in d.status()["profiles"]}
    assert rows["alpha"]["state"] == "running" and rows["alpha"]["pid"] != pids["alpha"]
    assert rows["beta"]["pid"] == pids["beta"]  # the rollout never moved on
    # the same canary answering: the roll goes through
    fake_api(root / "profiles" / "alpha", ports["alpha"])
    out = d.cli("restart", "--all", "--rolling", "--canary", "alpha", "--gate-timeout", "30", "--settle", "0.2",
                "--canary-settle", "0.4", "--json", timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert [s["reason"] for s in json.loads(out.stdout)["steps"]] == ["serving: api_server"] * 2
    assert [e["profile"] for e in events(root) if e["type"] == "upgrade_gate" and e["passed"]] == ["alpha", "beta"]
