"""The gateway interpreter's facts, end to end: release contract, missing libraries, install-deps.

Every daemon here is a real ``hermesd run`` whose gateway command is ``python -m hermes_cli.main``
with a fake ``hermes_cli`` package first on ``PYTHONPATH``: its ``__version__`` is the release under
test and its ``main`` runs the fake gateway. So the interpreter hermesd probes is real, the version
it reads is the one the test chose, and the children are real processes (``tests/fakegw``).
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from profiles.upstream.platforms import View, requirement_of
from supervisor.hermes import requirements
from supervisor.layout import Layout
from supervisor.processes import identity
from tests.fakegw import fake_install, write_behaviour
from tests.harness import REPO, Hermesd, make_root, wait_for, write_config

TEAMS_ENV = 'TEAMS_CLIENT_ID="c-1"\nTEAMS_CLIENT_SECRET="s-1"\nTEAMS_TENANT_ID="t-1"\n'


def fake_hermes(base: Path, version: str) -> Path:
    """A folder holding a ``hermes_cli`` package of ``version`` whose ``main`` is the fake gateway."""
    return fake_install(base, version)


@pytest.fixture
def daemon_for(tmp_path: Path) -> Iterator[object]:
    started: list[Hermesd] = []

    def make(version: str, *, names: tuple[str, ...] = ("coder",), **config: object) -> Hermesd:
        root = make_root(tmp_path, names)
        write_config(root, command=[sys.executable, "-m", "hermes_cli.main"], **config)
        path = f"{fake_hermes(tmp_path, version)}{os.pathsep}{REPO}"
        d = Hermesd(root, env={"PYTHONPATH": path})
        started.append(d)
        return d

    yield make
    for d in started:
        d.close()


def _cmdline(pid: int) -> list[str]:
    return identity.proc_cmdline(pid)


@pytest.mark.live
def test_release_without_the_flag_runs_without_it_and_is_never_judged_hung(daemon_for) -> None:
    d = daemon_for("0.18.2", hung_after=1)
    write_behaviour(d.root / "profiles" / "coder", heartbeat_interval=3600)
    d.start()
    pid = d.wait_running("coder", timeout=20)["coder"]
    argv = _cmdline(pid)
    assert argv[-2:] == ["gateway", "run"] and "--external-supervisor" not in argv, argv
    # hung_after 1 s with a heartbeat that never renews: 0.19.0 would be killed (see the next test);
    # 0.18.2 writes no heartbeat, so hung detection is off for it.
    time.sleep(3.0)
    row = d.row("coder")
    assert (row["state"], row["pid"], row["restarts"]) == ("running", pid, 0), row
    # After hermesd's own crash, the next one still recognises (adopts) the gateway started without it.
    d.kill9()
    d.start()
    row = d.wait_state("coder", "running", timeout=15)
    assert (row["pid"], row["adopted"]) == (pid, True), row


@pytest.mark.live
def test_release_with_a_heartbeat_is_still_judged_hung(daemon_for) -> None:
    d = daemon_for("0.19.0", hung_after=1)
    write_behaviour(d.root / "profiles" / "coder", heartbeat_interval=3600)
    d.start()
    pid = d.wait_running("coder", timeout=20)["coder"]
    assert _cmdline(pid)[-3:] == ["gateway", "run", "--external-supervisor"]
    wait_for(lambda: d.row("coder")["restarts"] >= 1, 15, what="the hung gateway killed and restarted")


@pytest.mark.live
def test_unsupported_release_holds_every_profile_and_spawns_nothing(daemon_for) -> None:
    d = daemon_for("0.16.0", names=("coder", "writer"))
    d.start()
    for name in ("coder", "writer"):
        row = d.wait_state(name, "held", timeout=15)
        assert "0.16.0 is older than 0.18.1" in row["reason"], row
        assert row["hold"]["kind"] == "unsupported_release", row
    time.sleep(1.0)
    assert all(r["restarts"] == 0 and r["pid"] is None for r in d.status()["profiles"])
    assert not (d.root / "profiles" / "coder" / "gateway.pid").exists()
    out = d.cli("status")
    assert out.returncode == 1 and "older than 0.18.1" in out.stdout, out.stdout


@pytest.mark.live
def test_missing_library_and_platform_reason_show_in_status(daemon_for) -> None:
    d = daemon_for("0.19.0")
    home = d.root / "profiles" / "coder"
    (home / ".env").write_text(TEAMS_ENV)
    (home / ".env").chmod(0o600)
    write_behaviour(home, platforms={"telegram": {"state": "retrying", "error_code": "connect_timeout",
                                                  "error_message": "connect timed out after 30s"}})
    d.start()
    d.wait_running("coder", timeout=20)
    row = wait_for(lambda: (r := d.row("coder"))["requirements_missing"] and r["platforms"] and r, 15,
                   what="requirements_missing and platforms in the row")
    (teams,) = row["requirements_missing"]
    assert teams["platform"] == "teams" and teams["missing"] == ["microsoft_teams"]
    assert teams["install"].startswith(f"{sys.executable} -m pip install ")
    assert "microsoft-teams-apps==" in teams["install"]
    table = d.cli("status").stdout
    assert "!req" in table, table
    assert "coder: telegram: retrying: connect timed out after 30s" in table, table
    assert "coder: teams: cannot start, missing microsoft_teams; install with: " in table, table
    # The probe judges the same facts from the files alone.
    probe = d.cli("probe", "coder", "--ready")
    assert probe.returncode == 1 and "teams cannot start" in probe.stderr, probe.stderr
    assert d.cli("probe", "coder", "--ready", "--no-requirements").returncode == 0
    assert d.cli("probe", "coder", "--live").returncode == 0


@pytest.mark.live
def test_probe_ready_fails_on_a_fatal_platform(daemon_for) -> None:
    d = daemon_for("0.19.0")
    write_behaviour(d.root / "profiles" / "coder",
                    platforms={"api_server": {"state": "fatal", "error_code": "port_in_use",
                                              "error_message": "port 8642 already in use"}})
    d.start()
    d.wait_running("coder", timeout=20)
    wait_for(lambda: d.row("coder")["platforms"], 10, what="platforms reported")
    probe = d.cli("probe", "coder", "--ready")
    assert probe.returncode == 1 and "api_server is fatal: port 8642 already in use" in probe.stderr
    assert d.cli("probe", "coder", "--live").returncode == 0


# ----------------------------------------------------------------------------- without a daemon


def test_facts_are_asked_once_and_again_after_an_install(tmp_path: Path) -> None:
    """The cache holds while site-packages is unchanged; a new dist-info folder invalidates it."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    first = requirements.interpreter_facts([python, "-m", "hermes_cli.main"])
    assert first.ok and first.version is None and first.executable == python
    assert requirements.interpreter_facts([python, "-m", "hermes_cli.main"]) is first
    site = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "aiohttp").mkdir()
    (site / "aiohttp" / "__init__.py").write_text("")
    (site / "aiohttp" / "web.py").write_text("raise SystemExit('never imported by the probe')\n")
    again = requirements.interpreter_facts([python, "-m", "hermes_cli.main"])
    assert again is not first and again.modules["aiohttp.web"] is True and first.modules["aiohttp.web"] is False


def test_a_missing_submodule_never_imports_its_package_unless_it_builds_its_path(tmp_path: Path) -> None:
    """Below a plain package the level-by-level walk is final: a missing marker module
    (``gateway.host_attach`` on 0.19) must not import ``gateway`` (140 ms, and code the probe never
    runs). A pkgutil-style package extends its ``__path__`` when imported, so there the probe still
    asks the real import system."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    site = Path(site_of(python))
    (site / "gateway").mkdir()
    imported = tmp_path / "gateway-was-imported"
    (site / "gateway" / "__init__.py").write_text(f"open({str(imported)!r}, 'w').close()\n")
    (site / "gateway" / "run.py").write_text("")
    extra = tmp_path / "extra"
    (extra / "nsp").mkdir(parents=True)
    (extra / "nsp" / "sub.py").write_text("")
    (site / "nsp").mkdir()
    (site / "nsp" / "__init__.py").write_text(
        "from pkgutil import extend_path\n__path__ = extend_path(__path__, __name__)\n")
    (site / "extra.pth").write_text(f"{extra}\n")
    facts = requirements.interpreter_facts([python, "-m", "hermes_cli.main"],
                                           modules=["gateway.host_attach", "gateway.run", "nsp.sub", "nsp.none"])
    assert facts.ok, facts.error
    assert {m: facts.modules[m] for m in ("gateway.host_attach", "gateway.run", "nsp.sub", "nsp.none")} == {
        "gateway.host_attach": False, "gateway.run": True, "nsp.sub": True, "nsp.none": False}
    assert not imported.exists()


def test_check_names_the_pinned_specs_for_that_interpreter(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    view = View(tmp_path, {}, {})
    report = requirements.check_requirements([python, "-m", "hermes_cli.main"],
                                             [requirement_of(view, "telegram"), requirement_of(view, "email")])
    tg = report.platforms["telegram"]
    assert tg.state == "missing" and "telegram" in tg.missing
    assert tg.install == f"{python} -m pip install 'python-telegram-bot[webhooks]==22.6'"
    assert report.platforms["email"].state == "ok"
    assert report.install == tg.install


def test_install_deps_dry_run_and_a_real_local_install(tmp_path: Path) -> None:
    """``install-deps`` on a throwaway venv: the dry run prints the one command; a real install of a
    tiny local ``aiohttp`` stand-in (no network) makes the webhook platform's check pass."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=180)
    python = str(venv / "bin" / "python")
    root = make_root(tmp_path, ("coder",))
    write_config(root, command=[python, "-m", "hermes_cli.main"])
    (root / "profiles" / "coder" / ".env").write_text("WEBHOOK_ENABLED=true\n")
    env = {**os.environ, "PYTHONPATH": str(REPO), "HOME": str(tmp_path)}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "supervisor", "install-deps", "--root", str(root), *args],
                              capture_output=True, text=True, env=env, cwd=str(REPO), timeout=300)

    dry = cli("--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "coder: webhook (missing: aiohttp)\n" in dry.stdout
    assert f"{python} -m pip install aiohttp==3.14.1" in dry.stdout
    assert cli("nosuch").returncode == 2
    # A real install, offline: point pip at a local stand-in through the interpreter's own config.
    stand_in = tmp_path / "aiohttp-src"
    (stand_in / "aiohttp").mkdir(parents=True)
    (stand_in / "aiohttp" / "__init__.py").write_text("")
    (stand_in / "aiohttp" / "web.py").write_text("")
    (stand_in / "pyproject.toml").write_text(
        '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n')
    (stand_in / "backend.py").write_text(_BACKEND)
    wheels = tmp_path / "wheels"
    built = subprocess.run([python, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(wheels),
                            str(stand_in)], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    env["PIP_NO_INDEX"] = "1"
    env["PIP_FIND_LINKS"] = str(wheels)
    # Another install-deps holds the lock: this one waits for it, installing nothing meanwhile.
    Layout(root).ensure()
    lock = os.open(root / ".hermesd" / "install-deps.lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(lock, fcntl.LOCK_EX)
    os.write(lock, b"4242\n")
    err = tmp_path / "install.err"
    with err.open("w") as errf:
        proc = subprocess.Popen([sys.executable, "-m", "supervisor", "install-deps", "--root", str(root)],
                                stdout=subprocess.PIPE, stderr=errf, text=True, env=env, cwd=str(REPO))
    try:
        wait_for(lambda: "waiting for another 'hermesd install-deps' (PID 4242)" in err.read_text(), 60,
                 what="install-deps waiting for the lock")
        time.sleep(0.5)
        assert proc.poll() is None and not (Path(site_of(python)) / "aiohttp").exists()
        os.close(lock)  # releases it
        stdout, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, stdout + err.read_text()
    assert "installed" in stdout and "hermesd restart coder" in stdout
    assert json.loads(subprocess.run([python, "-c", "import json, aiohttp.web; print(json.dumps(1))"],
                                     capture_output=True, text=True).stdout) == 1
    assert cli("--dry-run").stdout.startswith("nothing to install")


def site_of(python: str) -> str:
    return subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()


_BACKEND = '''
import base64, hashlib, os, zipfile
NAME, VERSION = "aiohttp", "3.14.1"
DIST = f"{NAME}-{VERSION}.dist-info"
def _record(zf, entries):
    lines = []
    for path, data in entries:
        zf.writestr(path, data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        lines.append(f"{path},sha256={digest},{len(data)}")
    lines.append(f"{DIST}/RECORD,,")
    zf.writestr(f"{DIST}/RECORD", "\\n".join(lines) + "\\n")
def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    name = f"{NAME}-{VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w") as zf:
        _record(zf, [
            ("aiohttp/__init__.py", b""), ("aiohttp/web.py", b""),
            (f"{DIST}/METADATA", f"Metadata-Version: 2.1\\nName: {NAME}\\nVersion: {VERSION}\\n".encode()),
            (f"{DIST}/WHEEL", b"Wheel-Version: 1.0\\nGenerator: test\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"),
        ])
    return name
'''


@pytest.mark.live
def test_a_new_gateway_command_is_asked_again(daemon_for, tmp_path: Path) -> None:
    """hermesd.yaml's command changes to an interpreter with an unsupported release: the running
    gateway keeps running on its last good command (as for any change that cannot start), a restart
    is refused with the message, and once it dies the profile is held instead of crash-looping."""
    d = daemon_for("0.19.0")
    d.start()
    pid = d.wait_running("coder", timeout=20)["coder"]
    old = fake_hermes(tmp_path, "0.15.2")
    staging = tmp_path / "staging"  # write hermesd.yaml atomically: a half-written one is another config
    staging.mkdir()
    write_config(staging, command=["/usr/bin/env", f"PYTHONPATH={old}{os.pathsep}{REPO}", sys.executable,
                                   "-m", "hermes_cli.main"])
    os.replace(staging / "hermesd.yaml", d.root / "hermesd.yaml")

    hold = wait_for(lambda: d.request({"cmd": "check", "profile": "coder"})["hold"], 20, interval=0.1,
                    what="the new command's release judged")
    assert hold["kind"] == "unsupported_release" and "0.15.2 is older than 0.18.1" in hold["message"], hold
    out = d.cli("restart", "coder", "--no-wait")
    assert out.returncode != 0 and "0.15.2 is older than 0.18.1" in out.stderr, out.stderr
    assert d.row("coder")["pid"] == pid
    os.kill(pid, signal.SIGKILL)
    row = d.wait_state("coder", "held", timeout=20)
    assert "0.15.2 is older than 0.18.1" in row["reason"] and row["hold"]["kind"] == "unsupported_release", row
    time.sleep(1.0)
    assert d.row("coder")["pid"] is None


def test_status_without_a_daemon_asks_the_interpreter_itself(tmp_path: Path) -> None:
    root = make_root(tmp_path, ("coder",))
    write_config(root, command=[sys.executable, "-m", "hermes_cli.main"])
    (root / "profiles" / "coder" / ".env").write_text(TEAMS_ENV)
    out = subprocess.run([sys.executable, "-m", "supervisor", "status", "--json", "--root", str(root)],
                         capture_output=True, text=True, cwd=str(REPO), timeout=60,
                         env={**os.environ, "PYTHONPATH": str(REPO), "HOME": str(tmp_path)})
    assert out.returncode == 3, out.stderr
    rows = {r["name"]: r for r in json.loads(out.stdout)["profiles"]}
    assert rows["default"]["requirements_missing"] == []
    (teams,) = rows["coder"]["requirements_missing"]
    assert teams["platform"] == "teams" and "microsoft-teams-apps==" in teams["install"]


@pytest.mark.live
def test_probe_status_and_doctor_ask_the_same_interpreter_in_a_venv_install(tmp_path: Path) -> None:
    """The README's venv install: the gateway runs ``<venv>/bin/python3 <venv>/bin/hermes``, and
    ``/proc/PID/exe`` resolves to the base interpreter, which lacks the venv's libraries. The probe
    must judge the interpreter the gateway really runs in, as status and doctor do."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python3"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    base = fake_hermes(tmp_path, "0.19.0")
    os.replace(base / "hermes_cli", site / "hermes_cli")
    (site / "telegram").mkdir()
    for module in ("__init__", "ext", "constants", "request"):
        (site / "telegram" / f"{module}.py").write_text("")
    hermes = venv / "bin" / "hermes"
    hermes.write_text(f"#!{python}\nimport hermes_cli.main\n")
    hermes.chmod(0o755)
    assert os.path.realpath(python) != str(python)  # the venv's python is a link to the base one
    root = make_root(tmp_path, ("coder",))
    write_config(root, command=[str(hermes)])
    (root / "profiles" / "coder" / ".env").write_text("TELEGRAM_BOT_TOKEN=123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PAL\n")
    d = Hermesd(root)
    try:
        d.start()
        pid = d.wait_running("coder", timeout=20)["coder"]
        assert _cmdline(pid)[:2] == [str(python), str(hermes)]
        wait_for(lambda: d.status()["supervisor"]["hermes_release"], 15, what="the daemon asked the interpreter")
        assert d.row("coder")["requirements_missing"] == []
        doctor = d.cli("doctor", "--json")
        assert "telegram" not in json.dumps([f for f in json.loads(doctor.stdout)["findings"]
                                             if f["code"].startswith("platform_requirements")]), doctor.stdout
        probe = d.cli("probe", "coder", "--ready")
        assert probe.returncode == 0, probe.stderr
        (site / "telegram" / "ext.py").unlink()  # now it does lack something, in the venv: all three see it
        probe = d.cli("probe", "coder", "--ready")
        assert probe.returncode == 1 and "telegram" in probe.stderr and f"{python} -m pip install" in probe.stderr
    finally:
        d.close()


@pytest.mark.live
def test_the_daemon_asks_the_interpreter_once_at_start_up(daemon_for, tmp_path: Path) -> None:
    """``hermesd run`` asks the interpreter while the daemon's code is still loading; the daemon's own
    question, queued behind it in the reader thread, is answered from that answer, never asked again."""
    d = daemon_for("0.19.0")
    asked = tmp_path / "asked"
    init = tmp_path / "fake-0.19.0" / "hermes_cli" / "__init__.py"  # the probe imports it last, run as -c
    count = f"import sys\nif sys.argv[0] == '-c':\n    open({str(asked)!r}, 'a').write('probe\\n')\n"
    init.write_text(init.read_text() + count)
    d.start()
    d.wait_running("coder", timeout=20)
    assert d.status()["supervisor"]["hermes_release"] == "0.19.0"
    assert asked.read_text().splitlines() == ["probe"]


def test_pins_met_exactly_and_otherwise_are_judged_as_pip_would(tmp_path: Path) -> None:
    """A pin met to the letter is judged without ``packaging``; any other goes through it, so
    ``==1.2.0`` is met by 1.2 (PEP 440) and a wrong version or range is not."""
    site = tmp_path / "site"
    (site / "fakepin-1.2.dist-info").mkdir(parents=True)
    (site / "fakepin-1.2.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: fakepin\nVersion: 1.2\n")
    pins = ["fakepin==1.2", "fakepin==1.2.0", "fakepin==1.3", "fakepin>=1.0,<2", "fakepin<1", "absentpin==1.0"]
    env = {**os.environ, "PYTHONPATH": str(site)}
    facts = requirements.interpreter_facts([sys.executable, "-m", "hermes_cli.main"], env=env, specs=pins)
    assert {p: facts.satisfied[p] for p in pins} == {
        "fakepin==1.2": True, "fakepin==1.2.0": True, "fakepin==1.3": False, "fakepin>=1.0,<2": True,
        "fakepin<1": False, "absentpin==1.0": False,
    }, facts.error
