"""Live reconfiguration and conflicts, end to end with fake gateways and watchfiles."""

from __future__ import annotations

import json
import os
import signal
import time

from tests.fakegw import write_behaviour
from tests.harness import make_root, wait_for, write_config

TOKEN_A = "123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw"
TOKEN_B = "987654321:BBHdqTcvCH1vGWJxfSeofSAs0K5PALDsbx"


def test_clone_with_same_token_is_held_and_released_by_fixing_env(fake_root, hermesd_factory):
    coder = fake_root / "profiles" / "coder"
    writer = fake_root / "profiles" / "writer"
    (coder / ".env").write_text(f"TELEGRAM_BOT_TOKEN={TOKEN_A}\n")
    (writer / ".env").write_text(f"TELEGRAM_BOT_TOKEN={TOKEN_A}\n")
    d = hermesd_factory(fake_root)
    d.wait_running("coder")
    row = d.wait_state("writer", "held")
    assert row["hold"]["kind"] == "credential_conflict"
    for word in ("telegram", "telegram-bot-token", "coder", "fingerprint"):
        assert word in row["reason"]
    status_text = d.cli("status").stdout + d.cli("status", "--json").stdout + d.log_text()
    assert TOKEN_A not in status_text and TOKEN_A.split(":")[1] not in status_text
    coder_pid = d.row("coder")["pid"]
    (writer / ".env").write_text(f"TELEGRAM_BOT_TOKEN={TOKEN_B}\n")
    d.wait_running("writer", timeout=5)
    assert d.row("coder")["pid"] == coder_pid


def test_running_holder_keeps_token_when_a_clone_appears(fake_root, hermesd_factory):
    (fake_root / "profiles" / "coder" / ".env").write_text(f"TELEGRAM_BOT_TOKEN={TOKEN_A}\n")
    d = hermesd_factory(fake_root)
    coder_pid = d.wait_running("coder")["coder"]
    clone = fake_root / "profiles" / "alpha"  # sorts before coder, but coder is already running
    clone.mkdir()
    (clone / ".env").write_text(f"TELEGRAM_BOT_TOKEN={TOKEN_A}\n")
    row = d.wait_state("alpha", "held", timeout=5)
    assert "'coder'" in row["reason"] and "running" in row["reason"]
    assert d.row("coder")["pid"] == coder_pid
    # deleting the clone's folder releases nothing wrongly and leaves coder alone
    (clone / ".env").unlink()
    clone.rmdir()
    wait_for(lambda: "alpha" not in {r["name"] for r in d.status()["profiles"]}, 5)
    assert d.row("coder")["pid"] == coder_pid


def test_port_conflict(fake_root, hermesd_factory):
    for name in ("coder", "writer"):
        (fake_root / "profiles" / name / ".env").write_text(
            "API_SERVER_ENABLED=true\nAPI_SERVER_KEY=k-0123456789abcdef\n")
    d = hermesd_factory(fake_root)
    d.wait_running("coder")
    row = d.wait_state("writer", "held")
    assert row["hold"]["kind"] == "port_conflict" and "8642" in row["reason"]


def test_new_folder_starts_within_two_seconds_and_removal_stops(fake_root, hermesd_factory):
    d = hermesd_factory(fake_root)
    d.wait_running("default", "coder", "writer")
    t0 = time.monotonic()
    (fake_root / "profiles" / "fresh").mkdir()
    d.wait_running("fresh", timeout=5)
    assert time.monotonic() - t0 < 2.0
    pid = d.row("fresh")["pid"]
    import shutil

    shutil.rmtree(fake_root / "profiles" / "fresh")
    wait_for(lambda: "fresh" not in {r["name"] for r in d.status()["profiles"]}, 10)
    wait_for(lambda: not __import__("tests.harness").harness.pid_alive(pid), 10)


def test_edit_env_restarts_that_profile_only_and_noise_restarts_nothing(fake_root, hermesd_factory):
    d = hermesd_factory(fake_root)
    before = d.wait_running("default", "coder", "writer")
    coder = fake_root / "profiles" / "coder"
    # noise: logs, state, pid-like files, databases, hermesd's own files
    (coder / "logs").mkdir(exist_ok=True)
    (coder / "logs" / "gateway.log").write_text("x\n")
    (coder / "gateway_state.json").write_text(json.dumps({"noise": True}))
    (coder / "state.db").write_bytes(b"x")
    (fake_root / ".hermesd" / "noise").write_text("x")
    (coder / "config.yaml").write_text("# a comment only\n")  # no effective change: empty config
    (coder / ".env").write_text("# nothing\n")  # parsed .env is still empty
    time.sleep(1.0)  # let the debounced watcher see the burst; nothing may restart
    assert {n: d.row(n)["pid"] for n in before} == before
    (coder / ".env").write_text("SOME_SETTING=1\n")
    wait_for(lambda: d.row("coder")["pid"] not in (None, before["coder"]), 5, what="coder restarted")
    d.wait_running("coder")
    assert d.row("writer")["pid"] == before["writer"] and d.row("default")["pid"] == before["default"]


def config_applied(d) -> list[dict]:
    out = d.cli("events", "--json")
    assert out.returncode == 0, out
    return [e for e in map(json.loads, out.stdout.splitlines()) if e["type"] == "config_applied"]


def test_hermesd_yaml_change_restarts_only_affected(fake_root, hermesd_factory):
    d = hermesd_factory(fake_root)
    before = d.wait_running("default", "coder", "writer")
    # a rewrite that changes no setting (a comment) is no reconfiguration: nothing applied or counted
    applied = config_applied(d)
    cfg = fake_root / "hermesd.yaml"
    cfg.write_text(cfg.read_text() + "# only a comment\n")
    wait_for(lambda: "hermesd.yaml rewritten: no setting changed" in d.log_text(), 5)
    assert config_applied(d) == applied and "hermesd.yaml changed" not in d.log_text()
    write_config(fake_root, profiles={"writer": {"environment": {"FOO": "1"}}, "coder": {"enabled": False}})
    d.wait_state("coder", "stopped")
    assert d.row("coder")["reason"] == "disabled in hermesd.yaml"
    wait_for(lambda: d.row("writer")["pid"] not in (None, before["writer"]), 5)
    assert d.row("default")["pid"] == before["default"]
    assert len(config_applied(d)) == len(applied) + 1 and "hermesd.yaml changed" in d.log_text()
    # a broken hermesd.yaml keeps the last good config and says so
    (fake_root / "hermesd.yaml").write_text("restart: [\n")
    wait_for(lambda: d.status()["supervisor"]["config_problem"], 5)
    assert "hermesd.yaml" in d.status()["supervisor"]["config_problem"]
    assert d.row("coder")["state"] == "stopped"


def test_reload_rescans(fake_root, hermesd_factory):
    d = hermesd_factory(fake_root)
    d.wait_running("coder")
    write_behaviour(fake_root / "profiles" / "writer")
    assert d.cli("reload").returncode == 0
    assert d.ping()["ready"]


def test_env_overriding_the_contract_is_held(fake_root, hermesd_factory):
    (fake_root / ".env").write_text("GATEWAY_MULTIPLEX_PROFILES=true\n")
    d = hermesd_factory(fake_root)
    d.wait_running("coder", "writer")
    row = d.wait_state("default", "held")
    assert "GATEWAY_MULTIPLEX_PROFILES" in row["reason"]
    (fake_root / ".env").write_text("GATEWAY_MULTIPLEX_PROFILES=false\n")  # same as hermesd's: fine
    d.wait_running("default", timeout=5)


def test_invalid_hermesd_yaml_at_start_holds_everything_until_fixed(fake_root, hermesd_factory):
    good = (fake_root / "hermesd.yaml").read_text()
    (fake_root / "hermesd.yaml").write_text(good + "bogus_key: 1\n")
    d = hermesd_factory(fake_root)
    row = d.wait_state("coder", "held")
    assert row["hold"]["kind"] == "hermesd_config_error" and "bogus_key" in row["reason"]
    assert "bogus_key" in d.status()["supervisor"]["config_problem"]
    (fake_root / "hermesd.yaml").write_text(good)
    d.wait_running("default", "coder", "writer", timeout=5)
    assert d.status()["supervisor"]["config_problem"] is None


def test_a_shared_token_stays_with_its_holder_through_its_restarts(tmp_path, hermesd_factory):
    """alpha (first in serving order) and beta share a token. alpha gives it up in its .env, beta
    takes it; alpha's .env names it again: alpha keeps running on its last good files. Then the
    holder, beta, restarts three ways (operator, crash after a healthy run, a hermesd.yaml edit that
    touches only beta): it keeps the token every time and alpha is never restarted into it. Only
    when beta stops for good does alpha take the token."""
    root = make_root(tmp_path, ("alpha", "beta"))
    write_config(root)
    alpha, beta = root / "profiles" / "alpha", root / "profiles" / "beta"
    (alpha / ".env").write_text(f"TELEGRAM_BOT_TOKEN={TOKEN_A}\n")
    (beta / ".env").write_text(f"TELEGRAM_BOT_TOKEN={TOKEN_A}\n")
    d = hermesd_factory(root)
    d.wait_running("alpha")
    assert "'alpha'" in d.wait_state("beta", "held")["reason"]

    first_alpha = d.row("alpha")["pid"]
    (alpha / ".env").write_text("SOME_SETTING=1\n")
    beta_pid = d.wait_running("beta")["beta"]
    alpha_pid = d.wait_running("alpha")["alpha"]
    assert alpha_pid != first_alpha  # restarted without the token

    (alpha / ".env").write_text(f"SOME_SETTING=1\nTELEGRAM_BOT_TOKEN={TOKEN_A}\n")
    row = wait_for(lambda: (r := d.row("alpha"))["pending"] and r, 5, what="alpha's change reported as not applied")
    assert row["pid"] == alpha_pid and row["state"] == "running"
    assert row["pending"]["kind"] == "credential_conflict" and "'beta'" in row["pending"]["message"]
    assert "a restart would be held" in d.cli("status").stdout
    refused = d.cli("restart", "alpha")
    assert refused.returncode == 1 and "credential_conflict" in refused.stdout + refused.stderr

    def operator_restart():
        assert d.cli("restart", "beta").returncode == 0

    def crash_after_a_healthy_run():
        wait_for(lambda: (d.row("beta")["uptime_s"] or 0) > 3.5, 10, what="a healthy run (healthy_after 3s)")
        os.kill(d.row("beta")["pid"], signal.SIGKILL)

    def hermesd_yaml_touches_only_beta():
        write_config(root, profiles={"beta": {"environment": {"FOO": "1"}}})

    for step in (operator_restart, crash_after_a_healthy_run, hermesd_yaml_touches_only_beta):
        step()
        wait_for(lambda before=beta_pid: d.row("beta")["pid"] not in (None, before), 10,
                 what=f"beta restarted ({step.__name__})")
        beta_pid = d.wait_running("beta")["beta"]
        row = d.row("alpha")
        assert (row["state"], row["pid"]) == ("running", alpha_pid), step.__name__
    events = [json.loads(line) for line in d.cli("events", "alpha", "--json").stdout.splitlines()]
    assert [e["type"] for e in events].count("started") == 2  # its first start and the edit that dropped the token

    assert d.cli("stop", "beta").returncode == 0
    wait_for(lambda: d.row("alpha")["pid"] not in (None, alpha_pid), 10, what="alpha restarted into the token")
    d.wait_running("alpha")
    assert d.row("alpha")["pending"] is None
