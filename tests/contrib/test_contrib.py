"""contrib/: systemd units verified by systemd-analyze, the launchd plist parsed, s6 scripts run."""

from __future__ import annotations

import plistlib
import shutil
import subprocess
from pathlib import Path

import pytest

from supervisor.ops import service

CONTRIB = Path(__file__).resolve().parents[2] / "contrib"


def systemd_verify(units: list[Path], instance: dict[str, str] | None = None) -> None:
    """``systemd-analyze verify`` must say nothing: it exits 0 even for unknown keys and bad values."""
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze is not installed (Debian package: systemd)")
    names = [str(u.parent / (instance or {}).get(u.name, u.name)) for u in units]
    done = subprocess.run([tool, "verify", "--man=no", *names], capture_output=True, text=True, timeout=60,
                          cwd=units[0].parent)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == "" and done.stderr.strip() == "", done.stdout + done.stderr


def runnable_copy(src: Path, dst_dir: Path, exe: str = "/bin/true") -> Path:
    """verify needs ExecStart's binary to exist: point the bare 'hermesd' at a real one."""
    text = src.read_text().replace("ExecStart=hermesd ", f"ExecStart={exe} ")
    dst = dst_dir / src.name
    dst.write_text(text)
    return dst


def test_contrib_is_generated_from_the_same_renderers():
    for rel, text in service.contrib_files().items():
        assert (CONTRIB / rel).read_text() == text, (
            f"contrib/{rel} is stale: python -c 'from supervisor.ops.service import write_contrib as w; w(\"contrib\")'"
        )


def test_systemd_units_verify(tmp_path):
    user = runnable_copy(CONTRIB / "systemd" / "hermesd.service", tmp_path)
    template = runnable_copy(CONTRIB / "systemd" / "hermesd@.service", tmp_path)
    systemd_verify([user])
    systemd_verify([template], {template.name: "hermesd@alice.service"})


@pytest.mark.parametrize("name", ["hermesd.service", "hermesd@.service"])
def test_systemd_units_keep_gateways_alive_across_a_hermesd_crash(name):
    text = (CONTRIB / "systemd" / name).read_text()
    directives = dict(line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#"))
    assert directives["KillMode"] == "process"  # control-group or mixed would kill every gateway with hermesd
    assert directives["Delegate"] == "yes"  # a cgroup v2 subtree for per-profile limits and cgroup.kill
    assert directives["Type"] == "notify" and directives["NotifyAccess"] == "main"
    assert directives["Restart"] == "on-failure" and directives["RestartPreventExitStatus"] == "2"
    assert int(directives["WatchdogSec"]) > 0 and int(directives["TimeoutStopSec"]) >= 90
    assert directives["ExecStart"] == "hermesd run"
    assert ("User" in directives) is (name == "hermesd@.service")
    assert "crashes" in text and "systemctl stop" in text and "systemctl restart" in text


def test_launchd_plist_parses():
    with (CONTRIB / "launchd" / "ai.hermesd.plist").open("rb") as fh:
        doc = plistlib.load(fh)
    assert doc["Label"] == "ai.hermesd"
    assert doc["ProgramArguments"][1:] == ["run"]
    assert doc["KeepAlive"] == {"SuccessfulExit": False}  # restart after a crash, not after a clean stop
    assert doc["AbandonProcessGroup"] is True
    assert doc["ExitTimeOut"] >= 90


S6 = CONTRIB / "s6" / "hermesd"


def test_s6_files():
    assert (S6 / "type").read_text() == "longrun\n"
    for script in ("run", "finish"):
        path = S6 / script
        assert path.stat().st_mode & 0o111, f"{script} must be executable"
        assert path.read_text().startswith("#!/bin/sh\n")
        done = subprocess.run(["sh", "-n", str(path)], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
    assert "exec hermesd run" in (S6 / "run").read_text()


@pytest.mark.parametrize(("code", "signal", "expected"), [
    ("0", "0", 0),  # clean stop: s6's own wanted state decides (down after -d, up again after -r)
    ("1", "0", 0),  # crash: restart
    ("2", "0", 125),  # usage/configuration error: stay down
    ("126", "0", 125),  # not executable
    ("127", "0", 125),  # not found
    ("130", "0", 0),
    ("256", "9", 0),  # killed by SIGKILL: restart
    ("256", "6", 0),  # SIGABRT
])
def test_s6_finish_honours_hermesd_exit_codes(code, signal, expected):
    done = subprocess.run(["sh", str(S6 / "finish"), code, signal], capture_output=True, text=True, cwd=S6)
    assert done.returncode == expected
    assert bool(done.stderr) is (expected == 125)
