"""hermesd install-service: the unit for this machine, written safely, verified by systemd-analyze."""

from __future__ import annotations

import os
import plistlib
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from supervisor.cli.main import build_parser
from supervisor.exits import UserError
from supervisor.ops import service
from supervisor.processes import program
from tests.contrib.test_contrib import systemd_verify


@pytest.fixture
def home(tmp_path: Path, monkeypatch) -> Path:
    """A private HOME, so no test looks at (or writes to) the real ~/.config or ~/Library."""
    h = tmp_path / "home"
    h.mkdir()
    monkeypatch.setenv("HOME", str(h))
    return h


@pytest.fixture
def slow_drain_root(tmp_path: Path) -> Path:
    """Profiles ``coder`` and ``slow``, the latter draining for 200 s (the unit's stop timeout follows it)."""
    r = tmp_path / "hroot"
    (r / "profiles" / "coder").mkdir(parents=True)
    (r / "profiles" / "slow").mkdir()
    (r / "profiles" / "slow" / "config.yaml").write_text("agent:\n  restart_drain_timeout: 200\n")
    return r


def run(*argv: str) -> int:
    args = build_parser(["install-service", *argv]).parse_args(["install-service", *argv])
    return args.func(args)


def directives(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#"))


def test_dry_run_prints_the_user_unit_and_changes_nothing(home, slow_drain_root, capsys):
    assert run("--dry-run", "--root", str(slow_drain_root)) == 0
    out, err = capsys.readouterr()
    target = home / ".config/systemd/user/hermesd.service"
    assert out.startswith(f"# would write {target}\n")
    assert "# would run: systemctl --user daemon-reload" in out
    assert "# would run: systemctl --user enable --now hermesd.service" in out
    assert not target.exists()
    unit = directives(out)
    assert unit["ExecStart"].endswith(f"run --root {slow_drain_root}")
    assert Path(unit["ExecStart"].split()[0]).is_absolute() or unit["ExecStart"].startswith(sys.executable)
    assert unit["KillMode"] == "process" and unit["Type"] == "notify"
    # the slowest profile drains 200 s: its stop timeout is 230 s, plus hermesd's margin
    assert unit["TimeoutStopSec"] == str(200 + 30 + service.STOP_MARGIN)
    assert unit["WantedBy"] == "default.target" and "User" not in unit
    assert f"PATH={os.environ['PATH']}" in out
    assert "loginctl enable-linger" in err


def test_written_unit_is_marked_and_verifies(tmp_path, home, slow_drain_root, capsys):
    dest = tmp_path / "units"
    assert run("--dest", str(dest), "--root", str(slow_drain_root)) == 0
    path = dest / "hermesd.service"
    text = path.read_text()
    assert text.startswith(f"# {service.MARK}")
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert "to start it: systemctl --user daemon-reload" in capsys.readouterr().out  # --dest: never enabled
    systemd_verify([path])
    assert run("--dest", str(dest), "--root", str(slow_drain_root)) == 0  # our own file: rewritten


def test_refuses_to_overwrite_a_unit_it_did_not_write(tmp_path, home, slow_drain_root):
    dest = tmp_path / "units"
    dest.mkdir()
    (dest / "hermesd.service").write_text("[Service]\nExecStart=/usr/bin/mine\n")
    with pytest.raises(UserError, match="refusing to overwrite"):
        run("--dest", str(dest), "--root", str(slow_drain_root))
    with pytest.raises(UserError, match="refusing to overwrite"):
        run("--dest", str(dest), "--root", str(slow_drain_root), "--dry-run")
    assert (dest / "hermesd.service").read_text() == "[Service]\nExecStart=/usr/bin/mine\n"


def test_system_unit_runs_as_the_given_account(tmp_path, home, slow_drain_root, capsys):
    dest = tmp_path / "system"
    assert run("--system", "--run-as", "alice", "--dest", str(dest), "--root", str(slow_drain_root)) == 0
    text = (dest / "hermesd.service").read_text()
    unit = directives(text)
    assert unit["User"] == "alice" and unit["WantedBy"] == "multi-user.target"
    assert "loginctl" not in capsys.readouterr().err
    capsys.readouterr()
    assert run("--system", "--dry-run", "--root", str(slow_drain_root)) == 0
    out = capsys.readouterr().out
    assert out.startswith("# would write /etc/systemd/system/hermesd.service")
    assert "# would run: systemctl daemon-reload" in out


def test_run_as_needs_system(home, slow_drain_root):
    with pytest.raises(UserError, match="--run-as"):
        run("--run-as", "alice", "--dry-run", "--root", str(slow_drain_root))


def test_enables_the_unit_with_systemctl_when_present(tmp_path, home, slow_drain_root, monkeypatch, capsys):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    fake = bin_dir / "systemctl"
    fake.write_text(f'#!/bin/sh\necho "$*" >> {calls}\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    assert run("--root", str(slow_drain_root)) == 0
    assert (home / ".config/systemd/user/hermesd.service").is_file()
    assert calls.read_text().splitlines() == ["--user show --property=Version",  # the manager answers: go on
                                              "--user daemon-reload", "--user enable --now hermesd.service"]
    assert "enabled and started" in capsys.readouterr().out


@pytest.fixture
def no_session(monkeypatch) -> None:
    """The environment after ``sudo -i``, ``su`` or in cron: no session's runtime folder, no session bus."""
    if shutil.which("systemctl") is None:
        pytest.skip("systemctl is not installed (Debian package: systemd)")
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.delenv("DBUS_SESSION_BUS_ADDRESS", raising=False)
    if service._unreachable(["systemctl", "--user"]) is None:
        pytest.skip("a systemd user manager answers here even without a session's variables")


def test_no_user_manager_names_the_next_step_and_writes_nothing(tmp_path, home, slow_drain_root, no_session,
                                                                 monkeypatch):
    """The real systemctl, which finds no user manager: refused before anything is written, with what
    happened and both ways on (a system unit, or lingering and a real login). On a machine systemd runs
    (its marker folder stands in for that here, where PID 1 may be something else)."""
    booted = tmp_path / "run-systemd-system"
    booted.mkdir()
    monkeypatch.setattr(service, "SYSTEMD_BOOTED", str(booted))
    monkeypatch.setenv("USER", "alice")
    with pytest.raises(UserError) as refused:
        run("--root", str(slow_drain_root))
    said = str(refused.value)
    assert "no systemd user manager answers for alice" in said and "Failed to connect to bus" in said
    assert "XDG_RUNTIME_DIR is not set here, as after 'sudo -i', 'su' or in cron" in said
    assert "nothing was written" in said and not (home / ".config").exists()
    assert f"hermesd install-service --system --run-as alice --root {slow_drain_root}" in said
    assert "loginctl enable-linger alice" in said and "log in as alice" in said


def test_no_systemd_at_all_says_so_and_writes_nothing(tmp_path, home, slow_drain_root, no_session, monkeypatch):
    """Where PID 1 is not systemd (a container), neither kind of unit can be enabled: said, nothing written."""
    if service._unreachable(["systemctl"]) is None:
        pytest.skip("systemd runs this machine: a --system unit would really be installed")
    monkeypatch.setattr(service, "SYSTEMD_BOOTED", str(tmp_path / "absent"))
    for argv in ((), ("--system", "--run-as", "alice")):
        with pytest.raises(UserError, match="this machine does not run systemd") as refused:
            run(*argv, "--root", str(slow_drain_root))
        assert "nothing was written" in str(refused.value) and "--dest DIR" in str(refused.value)
    assert not (home / ".config").exists()


def test_launchd_agent(tmp_path, home, slow_drain_root):
    dest = tmp_path / "agents"
    assert run("--manager", "launchd", "--dest", str(dest), "--root", str(slow_drain_root)) == 0
    raw = (dest / "ai.hermesd.plist").read_bytes()
    assert service.MARK.encode() in raw
    doc = plistlib.loads(raw)
    assert doc["ProgramArguments"][-3:] == ["run", "--root", str(slow_drain_root)]
    assert doc["ExitTimeOut"] == 200 + 30 + service.STOP_MARGIN
    assert doc["StandardErrorPath"] == str(home / "Library/Logs/hermesd.log")
    assert doc["KeepAlive"] == {"SuccessfulExit": False} and doc["AbandonProcessGroup"] is True
    with pytest.raises(UserError, match="--system is for systemd"):
        run("--manager", "launchd", "--system", "--dry-run", "--root", str(slow_drain_root))


def test_warns_about_upstream_units_for_the_same_profiles(tmp_path, home, slow_drain_root, capsys):
    units = home / ".config/systemd/user"
    units.mkdir(parents=True)
    (units / "hermes-gateway-coder.service").write_text(
        f'[Service]\nEnvironment="HERMES_HOME={slow_drain_root / "profiles" / "coder"}"\n'
        'ExecStart=/usr/bin/hermes gateway run\n')
    (units / "hermes-gateway-elsewhere.service").write_text(
        '[Service]\nEnvironment="HERMES_HOME=/srv/other/profiles/elsewhere"\n')
    agents = home / "Library/LaunchAgents"
    agents.mkdir(parents=True)
    plist = {"Label": "ai.hermes.gateway-slow",
             "EnvironmentVariables": {"HERMES_HOME": str(slow_drain_root / "profiles/slow")}}
    (agents / "ai.hermes.gateway-slow.plist").write_bytes(plistlib.dumps(plist))
    assert run("--dry-run", "--root", str(slow_drain_root)) == 0
    err = capsys.readouterr().err
    assert "hermes-gateway-coder.service" in err and "'coder'" in err
    assert "ai.hermes.gateway-slow.plist" in err and "'slow'" in err
    assert "elsewhere" not in err
    assert err.count("warning: ") == 2


def test_missing_root_is_a_user_error(tmp_path, home):
    with pytest.raises(UserError, match="does not exist"):
        run("--dry-run", "--root", str(tmp_path / "nope"))


def test_hermesd_command_is_absolute_and_runnable():
    command = program.hermesd_command()
    assert Path(command[0]).is_absolute() and Path(command[0]).exists()
    done = subprocess.run([*command, "--help"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and "hermesd" in done.stdout


def test_hermesd_command_prefers_the_script_being_run(tmp_path, monkeypatch):
    script = tmp_path / "bin" / "hermesd"
    script.parent.mkdir()
    script.write_text("#!/bin/sh\n")
    monkeypatch.setattr(sys, "argv", [str(script), "install-service"])
    assert program.hermesd_command() != [str(script)]  # not executable: no command can run it
    script.chmod(0o755)
    assert program.hermesd_command() == [str(script)]


@pytest.mark.parametrize(("arg", "word"), [
    ("/opt/hermes/bin/hermesd", "/opt/hermes/bin/hermesd"),
    ("/srv/my root", '"/srv/my root"'),
    ("/srv/100%", "/srv/100%%"),
    ("/srv/$HOME", "/srv/$$HOME"),
])
def test_systemd_quoting(arg, word):
    assert service.systemd_quote(arg) == word


def test_quoted_paths_survive_systemd_analyze(tmp_path):
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed (Debian package: systemd)")
    odd_root = tmp_path / "my root 100%"
    text = service.render_systemd_unit([sys.executable, "-m", "supervisor"], root=odd_root, system=False,
                                       path_env="/usr/bin:/bin")
    unit = tmp_path / "hermesd.service"
    unit.write_text(text)
    systemd_verify([unit])
