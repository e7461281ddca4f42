"""A profile created as root, then run as its own account (``isolation.user``): the daemon holds it
with the command that cures it, doctor says the same, and ``hermesd isolate-user`` gives the home to
the account (showing what changes, asking first) without following a link, touching a file with
another hard link, giving away a device node, or changing anything outside the home."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from supervisor.isolation import ownership
from supervisor.isolation.planning import UserIds
from tests.fakegw import FAKEGW
from tests.harness import REPO, Hermesd, make_root, wait_for, write_config

NOBODY = 65534
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="changing owners needs root")


@pytest.fixture
def base() -> Iterator[Path]:
    """A folder every account can pass through (a pytest tmp folder is closed to other accounts)."""
    b = Path(tempfile.mkdtemp(prefix="hermesd-own-", dir="/var/tmp"))
    os.chmod(b, 0o755)
    try:
        yield b
    finally:
        shutil.rmtree(b, ignore_errors=True)


def nobody() -> UserIds:
    from supervisor.isolation.install import resolve_user

    return resolve_user(str(NOBODY))


def hostile_home(base: Path, home: Path) -> dict[str, Path]:
    """A home as a gateway running as root could have left it, with traps pointing outside."""
    outside = base / "outside"
    outside.mkdir()
    for name in ("target", "linked", "dir-target"):
        (outside / name).write_text("root's\n") if name != "dir-target" else (outside / name).mkdir()
    (home / "sessions" / "deep").mkdir(parents=True)
    (home / ".env").write_text("SOME_KEY=1\n")
    (home / ".env").chmod(0o600)
    (home / "sessions" / "deep" / "s.json").write_text("{}")
    (home / "link-to-file").symlink_to(outside / "target")
    (home / "sessions" / "link-to-dir").symlink_to(outside / "dir-target")
    os.link(outside / "linked", home / "hardlink")
    os.mknod(home / "device", stat.S_IFCHR | 0o600, os.makedev(1, 3))
    return {"outside": outside}


def owners(path: Path) -> dict[str, int]:
    out = {}
    for p in [path, *path.rglob("*")]:
        out[str(p.relative_to(path))] = os.lstat(p).st_uid
    return out


def test_problems_and_a_safe_walk(base):
    home = base / "root" / "profiles" / "coder"
    home.mkdir(parents=True)
    traps = hostile_home(base, home)
    account = nobody()
    found = ownership.problems(home, account)
    assert found == [f"{home} belongs to root, not to nobody: its gateway cannot write its own files there"]
    dry = ownership.chown_home(home, NOBODY, account.gid, apply=False)
    assert dry.changed == 5 and dry.links == 2 and len(dry.hardlinked) == 1 and len(dry.devices) == 1
    assert set(owners(home).values()) == {0}  # a dry run changes nothing
    done = ownership.chown_home(home, NOBODY, account.gid, apply=True)
    assert done.changed == 5 and not done.errors
    now = owners(home)
    given = {k for k, v in now.items() if v == NOBODY}
    assert given == {".", ".env", "sessions", "sessions/deep", "sessions/deep/s.json"}
    assert now["link-to-file"] == now["sessions/link-to-dir"] == now["hardlink"] == now["device"] == 0
    assert set(owners(traps["outside"]).values()) == {0}  # nothing outside the home changed hands
    assert ownership.problems(home, account) == []  # what is left is not the gateway's to write
    os.chown(home / ".env", 0, 0)
    assert ownership.problems(home, account) == [f"{home}: .env belongs to another account than nobody: its "
                                                 "gateway cannot read or write it"]
    closed = base / "closed"
    (closed / "home").mkdir(parents=True)
    closed.chmod(0o700)
    assert "is closed to nobody (mode 0700" in ownership.problems(closed / "home", account)[0]


def test_a_link_as_the_home_is_refused(base):
    (base / "real").mkdir()
    (base / "home").symlink_to(base / "real")
    with pytest.raises(OSError):
        ownership.chown_home(base / "home", NOBODY, NOBODY, apply=False)


def test_a_linked_profiles_folder_is_refused(base):
    """The home is resolved from the root: ``profiles/`` swapped for a link gives nothing away."""
    (base / "other" / "profiles" / "coder").mkdir(parents=True)
    (base / "root").mkdir()
    (base / "root" / "profiles").symlink_to(base / "other" / "profiles")
    with pytest.raises(OSError, match="symbolic link"):
        ownership.chown_home(base / "root" / "profiles" / "coder", NOBODY, NOBODY, apply=True)
    assert os.stat(base / "other" / "profiles" / "coder").st_uid == os.getuid()


@pytest.mark.live
def test_held_with_the_command_then_isolate_user_and_it_runs(base):
    if not os.path.exists("/usr/bin/python3"):
        pytest.skip("needs a system python the account can run")
    root = make_root(base, ("coder",))
    hostile_home(base, root / "profiles" / "coder")
    write_config(root, command=["/usr/bin/python3", str(FAKEGW)],
                 profiles={"coder": {"isolation": {"user": str(NOBODY)}}})
    d = Hermesd(root)
    try:
        d.start()
        d.wait_running("default")
        row = d.wait_state("coder", "held")
        fix = f"hermesd isolate-user coder nobody --root {root}"
        assert row["hold"]["kind"] == "isolation_unavailable" and fix in row["reason"], row["reason"]
        doctor = json.loads(d.cli("doctor", "--json").stdout)
        [finding] = [f for f in doctor["findings"] if f["code"] == "isolation_user_cannot_use_home"]
        assert finding["profile"] == "coder" and fix in finding["fix"]

        def isolate(*extra: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run([sys.executable, "-m", "supervisor", "isolate-user", "coder", "--root", str(root),
                                   *extra], capture_output=True, text=True, env=d.env, cwd=str(REPO), timeout=60,
                                  stdin=subprocess.DEVNULL)

        asked = isolate()
        assert asked.returncode == 1 and "nothing changed (not a terminal: rerun with --yes)" in asked.stdout
        assert "5 entries (0 already are)" in asked.stdout and "has another hard link" in asked.stdout, asked.stdout
        assert "a device node: left alone" in asked.stdout
        assert os.stat(root / "profiles" / "coder").st_uid == 0  # asking changed nothing
        done = isolate("--yes")
        assert done.returncode == 0, done.stdout + done.stderr
        assert "changed 5 entries" in done.stdout and "asked hermesd to start coder" in done.stdout
        pid = d.wait_running("coder", timeout=20)["coder"]
        assert os.stat(f"/proc/{pid}").st_uid == NOBODY
        assert os.stat(base / "outside" / "linked").st_uid == 0 and os.stat(base / "outside" / "target").st_uid == 0
        wait_for(lambda: not [f for f in json.loads(d.cli("doctor", "--json").stdout)["findings"]
                              if f["code"] == "isolation_user_cannot_use_home"], 10, what="doctor content")
    finally:
        d.close()
