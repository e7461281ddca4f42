"""Other users (issue 15, security): hermesd runs as root here, and another uid may plant processes,
links and folders, or simply run the CLI.

* A process of another uid carrying the right environment tags in a profile is never adopted and
  never signalled, even when the state file names it.
* ``<root>/.hermesd`` as a symlink to a 1777 folder, or as a plain file: every command refuses or
  reports it clearly, nothing follows the link, nothing is chmod'ed.
* ``status``/``logs``/``stop``/``ping``/``restart``/``start`` run by another user, and ``doctor`` on a
  profile that user cannot read: one clear line each, never a traceback, never "not running".
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from profiles.upstream import files as gf
from supervisor.processes import identity
from tests.fakegw import FAKEGW, write_behaviour
from tests.faults.helpers import NOBODY, alive_exact, as_nobody, converged, lost_on_failure
from tests.harness import REPO, tagged_pids, wait_for, write_config

pytestmark = pytest.mark.skipif(os.getuid() != 0 or not shutil.which("setpriv"),
                                reason="needs root and setpriv to act as another user")


def nobody_cli(root: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/tmp", "LANG": "C.UTF-8",
           "PYTHONPATH": str(REPO)}
    return subprocess.run(as_nobody([sys.executable, "-m", "supervisor", *args, "--root", str(root)]),
                          capture_output=True, text=True, env=env, cwd="/", timeout=timeout)


def said(out: subprocess.CompletedProcess[str]) -> str:
    return (out.stdout + out.stderr).strip()


# --------------------------------------------------------------------------- a tagged impostor


@pytest.fixture
def impostor(open_root) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """A fake gateway run by uid 65534 in profile ``victim``, with hermesd's tags for this root."""
    home = open_root / "profiles" / "victim"
    home.mkdir()
    write_behaviour(home, heartbeat_interval=1.0)
    os.chmod(home, 0o777)  # so that its gateway can write its files: the profile is that user's too
    env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8", "HERMES_HOME": str(home),
           "HERMESD_ROOT": str(open_root), "HERMESD_PROFILE": "victim", "HERMES_S6_SUPERVISED_CHILD": "1",
           "HERMES_GATEWAY_MAX_STARTS": "0", "GATEWAY_MULTIPLEX_PROFILES": "false"}
    proc = subprocess.Popen(as_nobody([sys.executable, str(FAKEGW), "-p", "victim", "gateway", "run",
                                       "--external-supervisor"]),
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=env, cwd="/", start_new_session=True)
    try:
        rec = wait_for(lambda: (r := gf.read_pid_record(home)) and r.pid == proc.pid and r, 15,
                       what="the impostor's gateway.pid")
        assert os.stat(f"/proc/{proc.pid}").st_uid == NOBODY
        yield proc, rec.start_time
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)


def test_tagged_process_of_another_user_is_never_adopted_or_signalled(open_root, impostor, hermesd_factory,
                                                                       faults):
    root = open_root
    proc, start_time = impostor
    # The state file even says hermesd started it (a previous daemon's record): still not ours.
    (root / ".hermesd").mkdir(mode=0o700)
    (root / ".hermesd" / "state.json").write_text(json.dumps({
        "version": 1, "boot_id": identity.boot_id(), "daemon_pid": 1, "saved_at": time.time(),
        "profiles": {"victim": {"home": str(root / "profiles" / "victim"), "restarts": 2, "failures": 0,
                                "pid": proc.pid, "start_time": start_time, "started_at": time.time(),
                                "stopping": True, "then_restart": True}},
    }))
    faults.inject()
    d = hermesd_factory(root)
    d.wait_running("default", "coder", "writer")
    row = wait_for(lambda: (r := d.row("victim"))["state"] in ("held", "stopped") and r, 10,
                   what="victim held or stopped")
    ok = (row["pid"] != proc.pid and not row["adopted"] and alive_exact(proc.pid, start_time)
          and proc.pid not in tagged_pids(root))
    faults.check(ok, f"victim row with another user's tagged gateway: {row['state']} pid {row['pid']} "
                     f"adopted {row['adopted']} ({row['reason']}); impostor alive {alive_exact(proc.pid, start_time)}")
    assert ok, row

    # Every kind of stop: of the profile, then of everything (with its final sweep of tagged processes).
    faults.inject()
    d.cli("stop", "victim")
    out = d.cli("stop")
    with lost_on_failure(faults, "daemon did not stop"):
        assert out.returncode == 0 and d.proc.wait(30) == 0, out
    ok = alive_exact(proc.pid, start_time) and proc.poll() is None
    faults.check(ok, f"the other user's process after hermesd stop: {'alive' if ok else 'signalled'}")
    assert ok


# --------------------------------------------------------------------------- .hermesd that is not ours

COMMANDS = [("start",), ("run",), ("status",), ("status", "--json"), ("ping",), ("stop",), ("doctor",), ("logs",)]


@pytest.mark.parametrize("kind", ["symlink_to_1777", "plain_file"])
def test_hermesd_folder_that_is_not_ours_is_refused(fake_root, hermesd_factory, faults, tmp_path, kind):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    dot = fake_root / ".hermesd"
    if kind == "symlink_to_1777":
        dot.symlink_to(shared)
    else:
        dot.write_text("not a folder\n")
    d = hermesd_factory(fake_root, start=False)
    outs = {}
    for cmd in COMMANDS:
        faults.inject()
        out = d.cli(*cmd, timeout=30)
        outs[" ".join(cmd)] = out
        text = said(out)
        ok = "Traceback" not in out.stderr and out.returncode != 0 and ".hermesd" in text
        faults.check(ok, f"hermesd {' '.join(cmd)}: exit {out.returncode}: {text[-200:]!r}")
    after = os.lstat(dot)
    untouched = stat.S_IMODE(os.stat(shared).st_mode) == 0o1777 and os.listdir(shared) == [] and (
        stat.S_ISLNK(after.st_mode) if kind == "symlink_to_1777" else stat.S_ISREG(after.st_mode))
    faults.inject()
    faults.check(untouched, f"{shared}: mode {stat.S_IMODE(os.stat(shared).st_mode):04o}, "
                            f"contents {os.listdir(shared)}; .hermesd is still a {kind}: {untouched}")
    assert untouched
    assert tagged_pids(fake_root) == []
    bad = {c: (o.returncode, said(o)[-300:]) for c, o in outs.items()
           if "Traceback" in o.stderr or o.returncode == 0 or ".hermesd" not in said(o)}
    assert not bad, bad


# --------------------------------------------------------------------------- the CLI run by another user


def test_cli_run_by_another_user_gets_clear_messages(open_root, hermesd_factory, faults):
    root = open_root
    d = hermesd_factory(root)
    before = d.wait_running("default", "coder", "writer")
    results = {}
    for cmd in (("status",), ("status", "--json"), ("logs",), ("logs", "coder"), ("stop",), ("stop", "coder"),
                ("restart", "coder"), ("ping",), ("start",)):
        faults.inject()
        out = nobody_cli(root, *cmd)
        text = said(out)
        ok = (out.returncode not in (0, 3) and "Traceback" not in out.stderr and "not running" not in text
              and ("permission" in text.lower() or f"uid {os.getuid()}" in text) and len(text.splitlines()) <= 3)
        results[" ".join(cmd)] = (out.returncode, text[-300:])
        faults.check(ok, f"hermesd {' '.join(cmd)} as uid {NOBODY}: exit {out.returncode}: {text[-200:]!r}")
    converged(d, root, set(before), faults)
    assert d.status()["profiles"] and {r["name"]: r["pid"] for r in d.status()["profiles"]} == before
    assert faults.lost == 0, results


def test_doctor_on_a_profile_another_user_cannot_read(open_root, faults):
    """``doctor`` run by uid 65534 on a root with a profile only root may read (the gateway command is
    one that user can run, so the unreadable profile is the only obstacle)."""
    root = open_root
    write_config(root, command=["/usr/bin/python3", str(FAKEGW)])
    secret = root / "profiles" / "secret"
    secret.mkdir()
    (secret / ".env").write_text("OPENAI_API_KEY=sk-not-for-you\n")
    os.chmod(secret / ".env", 0o600)
    os.chmod(secret, 0o700)
    for cmd in (("doctor",), ("doctor", "--json")):
        faults.inject()
        out = nobody_cli(root, *cmd)
        text = said(out)
        ok = (out.returncode != 0 and "Traceback" not in out.stderr and "sk-not-for-you" not in text
              and ("secret" in text and "ermission" in text))
        faults.check(ok, f"hermesd {' '.join(cmd)} as uid {NOBODY} with an unreadable profile: exit "
                         f"{out.returncode}: {text[-300:]!r}")
        assert ok, (cmd, out.returncode, out.stdout, out.stderr)


# --------------------------------------------------------------------------- a hostile archive, imported by root


def _archive(path: Path, members: list[tuple[str, int, bytes | None]]) -> Path:
    """A .tar.gz of (name, mode, data) entries; ``data`` None is a folder."""
    import io
    import tarfile

    with tarfile.open(path, "w:gz", format=tarfile.GNU_FORMAT) as tar:
        for name, mode, data in members:
            info = tarfile.TarInfo(name)
            info.mode = mode
            if data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return path


def test_hostile_archive_imported_under_a_running_daemon(open_root, hermesd_factory, faults, tmp_path):
    """``profile import`` run by root, under a running daemon, of an archive that makes everything
    world-writable: the profile starts with group/other write masked (``.env`` 0600), so another
    user cannot change what root runs; an archive with a 4 MiB GNU long name is refused in a short
    message, unread, and the running gateways are untouched."""
    root = open_root
    d = hermesd_factory(root)
    before = d.wait_running("default", "coder", "writer")
    archive = _archive(tmp_path / "open.tar.gz", [
        ("open", 0o777, None), ("open/skills", 0o777, None), ("open/config.yaml", 0o666, b"model: x\n"),
        ("open/.env", 0o666, b"OPENAI_API_KEY=sk-imported\n"), ("open/skills/tool.sh", 0o4777, b"#!/bin/sh\n"),
    ])
    faults.inject()
    out = d.cli("profile", "import", str(archive), "--no-alias", "--root", str(root))
    home = root / "profiles" / "open"
    with lost_on_failure(faults, "the imported profile never ran"):
        assert out.returncode == 0 and "Traceback" not in out.stderr, out
        d.wait_running("open")
    modes = {str(p.relative_to(root)): stat.S_IMODE(p.lstat().st_mode) for p in [home, *home.rglob("*")]}
    writable = {p: f"{m:04o}" for p, m in modes.items() if m & (stat.S_IWGRP | stat.S_IWOTH | stat.S_ISUID)}
    probe = subprocess.run(as_nobody(["sh", "-c", f"echo x >> {home / 'config.yaml'}"]), capture_output=True)
    ok = not writable and modes["profiles/open/.env"] == 0o600 and probe.returncode != 0
    faults.check(ok, f"imported modes {dict((p, f'{m:04o}') for p, m in modes.items())}; uid {NOBODY} could "
                     f"{'not ' if probe.returncode else ''}append to config.yaml")
    assert ok, (writable, modes, probe)

    long_name = "big/" + "a" * (4 * 1024 * 1024)
    archive = _archive(tmp_path / "long.tar.gz", [("big", 0o755, None), (long_name, 0o644, b"x")])
    faults.inject()
    out = d.cli("profile", "import", str(archive), "--no-alias", "--root", str(root))
    text = said(out)
    ok = (out.returncode != 0 and "Traceback" not in out.stderr and len(text) < 1000 and "aaaaaaaaaaaa" not in text
          and not (root / "profiles" / "big").exists())
    faults.check(ok, f"4 MiB long name: exit {out.returncode}, {len(text)} characters: {text[:200]!r}")
    assert ok, (out.returncode, text[:500])
    converged(d, root, {*before, "open"}, faults)
    assert {n: p for n, p in d.wait_running(*before).items()} == before
