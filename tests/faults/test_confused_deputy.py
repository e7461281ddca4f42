"""A compromised profile turning hermesd (root, unconfined) into its tool: each way found by attacking
a real hermesd with real gateways and ``hermesd exec``, now without effect.

Every attack is made from inside a profile, the way a prompt-injected agent would make it: a
``hermesd exec PROFILE -- sh -c …`` runs in that profile's own confinement (the same plan and shim
as its gateway) and plants links, forges files or holds sockets. Then hermesd is asked to do its
ordinary work (a restart, a status, a delete, a scrape) and the test checks what the attack was
after: another profile's secrets, a root-only file outside the root, another profile's gateway,
the operator's terminal, the metrics.

* **planned-stop marker** (real gateway; and a profile with its own account): links planted at the
  marker's temp name and at the marker itself, aimed at another profile's ``.env`` and at a
  root-only file outside the root; ``hermesd restart`` writes the marker without following them;
* **mount sources**: the default profile replaces ``shared/`` by a link to another home and
  ``kanban/`` by a link to ``.hermesd``; named profiles get neither mounted;
* **linked ``.env``**: a profile links its ``.env`` to another's; the linker is held, the victim runs;
* **forged ``gateway.pid``** (real gateways): it names another profile's gateway; with hermesd down,
  ``profile delete --stop`` stops the real gateway and never signals the other one;
* **terminal escapes** (real gateways): a platform error with ``\\r\\x1b[2K`` and ``\\n`` cannot fake
  another profile's row in ``status``, ``events`` or ``doctor``;
* **metrics slots**: eight idle connections held from inside a profile; scrapes still succeed.

Roots live under ``/var/tmp`` (as in ``tests/isolation``). Every process a test starts is stopped
by PID: the daemon and its tagged children by ``Hermesd.close()``, the ``exec`` helpers here.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from profiles.upstream.process import proc_start_time
from supervisor.isolation.probing import probe
from tests.fakegw import FAKEGW
from tests.faults.helpers import NOBODY, alive_exact, lost_on_failure
from tests.harness import REPO, Hermesd, make_root, wait_for, write_config

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/ns/mnt"), reason="Linux only")

HERMES = Path(os.environ.get("HERMESD_TEST_HERMES") or Path(sys.executable).parent / "hermes")
TOKEN = "7123456789:AAE-very-secret-telegram-token-DO-NOT-LEAK"


@pytest.fixture(scope="module")
def confinable() -> None:
    facts = probe()
    if facts.landlock_abi < 1 or not facts.namespace_usable:
        pytest.skip("needs Landlock and a private mount namespace (the attacks come from a confined profile)")


@pytest.fixture
def hermes() -> Path:
    if not HERMES.exists():
        pytest.fail(f"hermes-agent is a test dependency but {HERMES} is missing: install '.[test]'")
    return HERMES


class Root:
    """A root under /var/tmp with profiles alpha and bravo, the default profile disabled."""

    def __init__(self, *, command: list[str] | None = None, **config: Any) -> None:
        self.base = Path(tempfile.mkdtemp(prefix="hermesd-deputy-", dir="/var/tmp"))
        self.root = make_root(self.base, ("alpha", "bravo"))
        profiles = {"default": {"enabled": False}, **config.pop("profiles", {})}
        write_config(self.root, command=command, profiles=profiles, **config)
        self.d = Hermesd(self.root)
        self.helpers: list[subprocess.Popen[str]] = []

    def home(self, name: str) -> Path:
        return self.root if name == "default" else self.root / "profiles" / name

    def exec_argv(self, profile: str, script: str) -> list[str]:
        return [sys.executable, "-m", "supervisor", "exec", "--root", str(self.root), profile, "--", "sh", "-c",
                script]

    def exec(self, profile: str, script: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """``hermesd exec PROFILE -- sh -c SCRIPT``: the attacker, in that profile's confinement."""
        return subprocess.run(self.exec_argv(profile, script), capture_output=True, text=True, env=self.d.env,
                              cwd=str(REPO), timeout=timeout)

    def exec_background(self, profile: str, script: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen(self.exec_argv(profile, script), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=self.d.env, cwd=str(REPO))
        self.helpers.append(proc)
        return proc

    def cli(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return self.d.cli(*args, timeout=timeout)

    def close(self) -> None:
        for proc in self.helpers:
            if proc.poll() is None:
                proc.terminate()  # hermesd exec forwards SIGTERM to the command it runs
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(10)
        self.d.close()
        shutil.rmtree(self.base, ignore_errors=True)


@pytest.fixture
def make(confinable: None) -> Iterator[Any]:
    made: list[Root] = []

    def factory(**kw: Any) -> Root:
        r = Root(**kw)
        made.append(r)
        return r

    yield factory
    for r in reversed(made):
        r.close()


def _secret(path: Path, text: str) -> bytes:
    path.write_text(text)
    path.chmod(0o600)
    return path.read_bytes()


# --------------------------------------------------------------------------- 1. planned-stop marker


def _plant_marker_links(r: Root, targets: list[Path]) -> None:
    """From inside alpha: the old temp name (``..gateway-planned-stop.json.<hermesd PID>.tmp``) and the
    marker itself, linked to what the attacker wants root to overwrite."""
    hp = r.d.proc.pid
    script = (f'ln -s {targets[0]} "$HERMES_HOME/..gateway-planned-stop.json.{hp}.tmp" && '
              f'ln -s {targets[1]} "$HERMES_HOME/.gateway-planned-stop.json" && id -u && echo planted')
    out = r.exec("alpha", script)
    assert "planted" in out.stdout, out


def _restart_and_check(r: Root, faults: Any, before: dict[Path, bytes], pids: dict[str, int],
                       timeout: float) -> None:
    out = r.cli("restart", "alpha", "--timeout", str(timeout))
    assert out.returncode == 0, out
    row = r.d.wait_state("alpha", "running", timeout)
    for path, data in before.items():
        faults.check(path.read_bytes() == data and path.stat().st_mode & 0o777 == 0o600,
                     f"{path} overwritten through a link alpha planted")
    assert all(path.read_bytes() == data for path, data in before.items())
    # The marker was still written (a planned stop, exit 0), beside the links, not through them.
    assert row["pid"] != pids["alpha"] and (row["last_exit"] or {}).get("kind") == "planned", row["last_exit"]
    assert r.d.row("bravo")["pid"] == pids["bravo"]
    # The temp-name link is left alone; the marker link was replaced by the marker (then consumed).
    assert os.path.islink(r.home("alpha") / f"..gateway-planned-stop.json.{r.d.proc.pid}.tmp")
    assert not os.path.islink(r.home("alpha") / ".gateway-planned-stop.json")


@pytest.mark.slow
@pytest.mark.real_gateway
def test_planned_stop_marker_never_follows_a_planted_link(make, hermes, faults):
    r = make(command=[str(hermes)], stop_timeout=60)
    bravo_env = r.home("bravo") / ".env"
    outside = r.base / "outside-root-only.txt"
    before = {bravo_env: _secret(bravo_env, "OPENAI_API_KEY=secret-of-bravo\n"),
              outside: _secret(outside, "root only\n")}
    (r.home("alpha") / ".env").write_text("")  # offline: no platform to connect
    r.d.start()
    pids = r.d.wait_running("alpha", "bravo", timeout=120)
    with lost_on_failure(faults, "planted marker links"):
        _plant_marker_links(r, [bravo_env, outside])
        faults.inject(2)
        _restart_and_check(r, faults, before, pids, timeout=120)


def test_planned_stop_marker_with_a_dedicated_account(make, faults):
    """``isolation: {user: nobody}``: an unprivileged account must not make root overwrite a root-only file."""
    if os.getuid() != 0 or not os.path.exists("/usr/bin/python3"):
        pytest.skip("needs root (to run a profile as nobody) and a system python nobody can run")
    r = make(command=["/usr/bin/python3", str(FAKEGW)], profiles={"alpha": {"isolation": {"user": "nobody"}}})
    os.chmod(r.base, 0o755)
    for p in (r.home("alpha"), *r.home("alpha").rglob("*")):
        os.chown(p, NOBODY, NOBODY)
    outside = r.base / "outside-root-only.txt"
    bravo_env = r.home("bravo") / ".env"
    before = {bravo_env: _secret(bravo_env, "OPENAI_API_KEY=secret-of-bravo\n"),
              outside: _secret(outside, "root only\n")}
    r.d.start()
    pids = r.d.wait_running("alpha", "bravo", timeout=30)
    with lost_on_failure(faults, "planted marker links (as nobody)"):
        assert os.stat(f"/proc/{pids['alpha']}").st_uid == NOBODY
        _plant_marker_links(r, [outside, bravo_env])
        faults.inject(2)
        _restart_and_check(r, faults, before, pids, timeout=30)


# --------------------------------------------------------------------------- 2. mount sources


def test_shared_channels_replaced_by_links_are_never_mounted(make, faults):
    r = make()
    bravo_env = r.home("bravo") / ".env"
    _secret(bravo_env, "OPENAI_API_KEY=secret-of-bravo\n")
    r.d.start()
    pids = r.d.wait_running("alpha", "bravo", timeout=30)
    with lost_on_failure(faults, "linked shared/ and kanban/"):
        # The default profile owns the root folder: it swaps both channels for links.
        out = r.exec("default", 'cd "$HERMES_HOME" && mkdir -p shared kanban && mv shared shared.real && '
                                'mv kanban kanban.real && ln -s profiles/bravo shared && ln -s .hermesd kanban && '
                                'echo swapped')
        assert "swapped" in out.stdout, out
        faults.inject(2)
        root = r.root
        seen = r.exec("alpha", f"cat {root}/shared/.env 2>&1; echo; ls -a {root}/kanban/ 2>&1; echo; "
                               f"ls -a {root}/shared/ 2>&1; echo done")
        assert "done" in seen.stdout, seen
        faults.check("secret-of-bravo" not in seen.stdout and "OPENAI" not in seen.stdout,
                     "bravo's .env reached through <root>/shared")
        faults.check(not any(x in seen.stdout for x in ("control.sock", "state.json", "hermesd.log")),
                     "hermesd's folder reached through <root>/kanban")
        assert "secret-of-bravo" not in seen.stdout and "control.sock" not in seen.stdout, seen.stdout
        # The gateway's own confinement (the daemon's plan and shim): alpha still starts, channels closed.
        assert r.cli("restart", "alpha", "--timeout", "30").returncode == 0
        row = r.d.wait_state("alpha", "running", 30)
        iso = row["isolation"]
        assert iso["shared_auth"].startswith("closed") and iso["kanban"].startswith("closed"), iso
        assert row["pid"] != pids["alpha"]
        assert any("symbolic link" in g for g in iso["gaps"]), iso["gaps"]
        doctor = r.cli("doctor", "--json")
        codes = [f["code"] for f in json.loads(doctor.stdout)["findings"]]
        assert codes.count("linked_channel") == 2, doctor.stdout
        assert bravo_env.read_text() == "OPENAI_API_KEY=secret-of-bravo\n"


# --------------------------------------------------------------------------- 3. a linked .env


def test_env_linked_to_another_profile_holds_only_the_linker(make, faults):
    r = make()
    (r.home("bravo") / ".env").write_text(f"TELEGRAM_BOT_TOKEN={TOKEN}\n")
    r.d.start()
    pids = r.d.wait_running("alpha", "bravo", timeout=30)
    with lost_on_failure(faults, "alpha's .env linked to bravo's"):
        out = r.exec("alpha", 'ln -sf ../bravo/.env "$HERMES_HOME/.env" && echo linked')
        assert "linked" in out.stdout, out
        faults.inject()
        # The victim's next start: before, alpha read bravo's token through the link, kept it (first in
        # serving order) and bravo was held for a credential conflict.
        assert r.cli("restart", "bravo", "--timeout", "30").returncode == 0
        bravo = r.d.wait_state("bravo", "running", 30)
        faults.check(bravo["hold"] is None and bravo["pid"] != pids["bravo"], f"bravo held: {bravo['hold']}")
        # The linker: its running gateway keeps its last good files; its own next start is held. hermesd
        # learns of the link from the tree watch, which need not have fired by the time bravo's restart
        # (a fake gateway's: under a second) is done.
        wait_for(lambda: any("symbolic link" in p for p in r.d.row("alpha")["file_problems"]), 15,
                 what="alpha's file problem naming the link")
        r.cli("restart", "alpha", "--force", "--timeout", "30")
        alpha = r.d.wait_state("alpha", "held", 30)
        assert alpha["hold"]["kind"] == "config_error" and "symbolic link" in alpha["reason"], alpha
        doctor = json.loads(r.cli("doctor", "--json").stdout)
        assert any(f["code"] == "linked_profile_file" and f["profile"] == "alpha" for f in doctor["findings"])
        assert not any(f["code"] == "duplicate_credential" for f in doctor["findings"]), doctor
        assert TOKEN not in json.dumps(doctor)


# --------------------------------------------------------------------------- 4. a forged gateway.pid


@pytest.mark.slow
@pytest.mark.real_gateway
def test_forged_gateway_pid_never_stops_another_profile(make, hermes, faults):
    r = make(command=[str(hermes)], stop_timeout=60)
    for name in ("alpha", "bravo"):
        (r.home(name) / ".env").write_text("")
    r.d.start()
    pids = r.d.wait_running("alpha", "bravo", timeout=120)
    bravo_start = proc_start_time(pids["bravo"])
    alpha_start = proc_start_time(pids["alpha"])
    with lost_on_failure(faults, "alpha's gateway.pid naming bravo's gateway"):
        forged = json.dumps({"pid": pids["bravo"], "start_time": bravo_start, "kind": "hermes-gateway",
                             "argv": [str(hermes), "-p", "alpha", "gateway", "run"]})
        out = r.exec("alpha", f"printf '%s' '{forged}' > \"$HERMES_HOME/gateway.pid\" && echo forged")
        assert "forged" in out.stdout, out
        faults.inject()
        doctor = json.loads(r.cli("doctor", "--json").stdout)
        assert any(f["code"] == "pid_file_not_this_profile" and f["profile"] == "alpha" for f in doctor["findings"])
        # hermesd down, the gateways left running: the stop must find alpha's real gateway, never bravo's.
        assert r.cli("stop", "--keep-children").returncode == 0
        wait_for(lambda: not r.d.ping(), 30, what="hermesd gone")
        status = r.cli("status", "--json")
        rows = {row["name"]: row for row in json.loads(status.stdout)["profiles"]}
        assert rows["alpha"]["pid"] == pids["alpha"], rows["alpha"]
        env = {**r.d.env}
        delete = subprocess.run([sys.executable, "-m", "supervisor", "profile", "delete", "alpha", "-y", "--stop",
                                 "--root", str(r.root)], capture_output=True, text=True, env=env, cwd=str(REPO),
                                timeout=180)
        kept = faults.check(alive_exact(pids["bravo"], bravo_start) and not alive_exact(pids["alpha"], alpha_start),
                            "bravo's gateway signalled for alpha's delete, or alpha's real gateway left running")
        assert kept, (delete.stdout, delete.stderr)
        assert delete.returncode == 0, delete
        assert not r.home("alpha").exists()


# --------------------------------------------------------------------------- 5. terminal escapes


FORGED_LINE = "bad token\r\x1b[2K\nbravo     running    4242    3m      0         -"


@pytest.mark.slow
@pytest.mark.real_gateway
def test_forged_platform_message_cannot_fake_a_row(make, hermes, faults):
    r = make(command=[str(hermes)], stop_timeout=60)
    for name in ("alpha", "bravo"):
        (r.home(name) / ".env").write_text("")
    r.d.start()
    pids = r.d.wait_running("alpha", "bravo", timeout=120)
    with lost_on_failure(faults, "a platform error with escapes and line breaks"):
        state = {"pid": pids["alpha"], "kind": "hermes-gateway", "gateway_state": "running",
                 "platforms": {"telegram": {"state": "fatal", "error_code": "auth",
                                            "error_message": FORGED_LINE}}}
        script = f"cat > \"$HERMES_HOME/gateway_state.json\" <<'EOF'\n{json.dumps(state)}\nEOF\necho written"
        assert "written" in r.exec("alpha", script).stdout
        faults.inject(4)  # shown by status, status PROFILE, events and doctor
        wait_for(lambda: "telegram" in (r.d.row("alpha").get("platforms") or {}), 30,
                 what="the daemon reading alpha's forged state")
        shown = {
            "status": r.cli("status").stdout,
            "status alpha": r.cli("status", "alpha").stdout,
            "events": r.cli("events", "alpha").stdout,
            "doctor": r.cli("doctor").stdout,
        }
        clean = []
        for what, text in shown.items():
            raw = "\x1b" in text or "\r" in text
            rows = [ln for ln in text.splitlines() if ln.startswith("bravo ")]
            clean.append(faults.check(not raw and len(rows) <= 1, f"{what}: a raw escape or a forged bravo row"))
        assert all(clean), shown
        assert "\\r\\x1b[2K\\nbravo" in shown["status"], shown["status"]
        assert "\\x1b[2K" in shown["events"], shown["events"]
        assert json.loads(r.cli("events", "alpha", "--json").stdout.splitlines()[-1]) is not None


# --------------------------------------------------------------------------- 6. metrics slots


HOLD = """
import socket, sys, time
held = [socket.create_connection(("127.0.0.1", int(sys.argv[1]))) for _ in range(int(sys.argv[2]))]
print("held", len(held), flush=True)
time.sleep(120)
"""


def _scrape(port: int) -> int:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    return int(data.split(b" ", 2)[1])


def test_idle_connections_from_a_profile_cannot_starve_the_metrics(make, faults):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = make(metrics={"listen": f"127.0.0.1:{port}"})
    r.d.start()
    r.d.wait_running("alpha", "bravo", timeout=30)
    assert _scrape(port) == 200
    with lost_on_failure(faults, "eight idle connections from alpha"):
        holder = r.exec_background("alpha", f"exec {sys.executable} -c '{HOLD}' {port} 8")
        assert holder.stdout is not None
        assert holder.stdout.readline().split() == ["held", "8"], holder.stderr.read() if holder.stderr else ""
        faults.inject()
        codes = [_scrape(port) for _ in range(5)]
        assert faults.check(codes == [200] * 5, f"scrapes failed while alpha held 8 connections: {codes}"), codes
        holder.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            holder.wait(10)
