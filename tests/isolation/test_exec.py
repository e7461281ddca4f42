"""``hermesd exec PROFILE -- COMMAND``: the profile's confinement for any command (issue 13).

Every test runs the real CLI (``python -m supervisor exec``) against a real daemon supervising
fake gateways for profiles ``a`` and ``b`` (so there is a control socket, a hermesd PID and a
B gateway to aim at). The root lives under ``/var/tmp``, not pytest's ``/tmp``, so that "``/tmp``
keeps working" is a real check (see ``tests/isolation/conftest.py``). Processes the tests start
are waited for; the daemon and its gateways are stopped and swept by PID in ``close()``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from supervisor.isolation.probing import probe
from tests.harness import REPO, Hermesd, make_root, pid_alive, write_config
from tests.isolation.test_confinement import rc_lines

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/ns/mnt"), reason="Linux only")


@pytest.fixture(scope="module")
def confinable() -> None:
    facts = probe()
    if facts.landlock_abi < 1 and not facts.namespace_usable:
        pytest.skip("this machine offers no confinement mechanism")


class Root:
    """A daemon for profiles ``a`` and ``b`` (plus default) under /var/tmp, with secrets on disk."""

    def __init__(self, isolation: str | None = None) -> None:
        self.base = Path(tempfile.mkdtemp(prefix="hermesd-exec-", dir="/var/tmp"))
        self.root = make_root(self.base, ("a", "b"))
        for name in ("a", "b"):
            home = self.home(name)
            (home / ".env").write_text(f"SOME_KEY=secret-of-{name}\n")
            (home / "memories").mkdir()
            (home / "memories" / "MEMORY.md").write_text(f"memories of {name}\n")
        (self.root / ".env").write_text("OPENAI_API_KEY=secret-of-default\n")
        extra = {"isolation": isolation} if isolation is not None else {}
        write_config(self.root, **extra)
        self.hermesd = Hermesd(self.root)
        self.user_home = Path(self.hermesd.env["HOME"])
        (self.user_home / "notes.txt").write_text("user notes\n")

    def home(self, name: str) -> Path:
        return self.root if name == "default" else self.root / "profiles" / name

    def exec(self, profile: str, script: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """``hermesd exec PROFILE -- sh -c SCRIPT`` as a user would type it."""
        return subprocess.run(
            [sys.executable, "-m", "supervisor", "exec", "--root", str(self.root), profile, "--", "sh", "-c", script],
            capture_output=True, text=True, env=self.hermesd.env, cwd=str(REPO), timeout=timeout,
        )

    def close(self) -> None:
        self.hermesd.close()
        shutil.rmtree(self.base, ignore_errors=True)


@pytest.fixture
def running(confinable: None) -> Iterator[tuple[Root, dict[str, int]]]:
    r = Root()
    try:
        r.hermesd.start()
        pids = r.hermesd.wait_running("a", "b", timeout=30)
        yield r, pids
    finally:
        r.close()


@pytest.mark.live
def test_profile_a_cannot_reach_b_the_root_or_hermesd(running: tuple[Root, dict[str, int]]) -> None:
    r, pids = running
    b = r.home("b")
    daemon_pid = r.hermesd.proc.pid if r.hermesd.proc else 0
    sock = r.hermesd.layout.socket
    script = f"""
cat {b}/.env >/dev/null 2>&1; echo read={'$'}?
ls {b} >/dev/null 2>&1; echo list={'$'}?
touch {b}/planted 2>/dev/null; echo create={'$'}?
echo x >> {b}/.env 2>/dev/null; echo append={'$'}?
rm {b}/memories/MEMORY.md 2>/dev/null; echo delete={'$'}?
cat {r.root}/.env >/dev/null 2>&1; echo root_env={'$'}?
{sys.executable} -c "import socket; s = socket.socket(socket.AF_UNIX); s.connect('{sock}')" 2>/dev/null; \
echo socket={'$'}?
kill -TERM {pids['b']} 2>/dev/null; echo signal_b={'$'}?
kill -TERM {daemon_pid} 2>/dev/null; echo signal_hermesd={'$'}?
"""
    res = r.exec("a", script)
    assert res.returncode == 0, res.stderr
    rc = rc_lines(res.stdout)
    assert len(rc) == 9 and all(v != 0 for v in rc.values()), (rc, res.stderr)
    assert (b / ".env").read_text() == "SOME_KEY=secret-of-b\n"
    assert (b / "memories" / "MEMORY.md").exists() and not (b / "planted").exists()
    assert pid_alive(pids["b"]) and pid_alive(daemon_pid)
    assert r.hermesd.row("b")["pid"] == pids["b"]


@pytest.mark.live
def test_cloning_a_profile_never_copies_what_its_links_point_at(running: tuple[Root, dict[str, int]]) -> None:
    """A confined profile links its .env to another's; ``profile create --clone`` (root) must not follow it."""
    r, _ = running
    b_env = r.home("b") / ".env"
    res = r.exec("a", f"ln -s {b_env} $HERMES_HOME/.env.new && mv -f $HERMES_HOME/.env.new $HERMES_HOME/.env")
    assert res.returncode == 0, res.stderr
    assert (r.home("a") / ".env").is_symlink()
    for flag in ("--clone", "--clone-all"):
        name = "copy" + flag.replace("-", "")
        done = subprocess.run(
            [sys.executable, "-m", "supervisor", "profile", "create", name, flag, "--clone-from", "a", "--no-alias",
             "--root", str(r.root)],
            capture_output=True, text=True, env=r.hermesd.env, cwd=str(REPO), timeout=120,
        )
        assert done.returncode == 0, done.stderr
        env = r.home(name) / ".env"
        assert not env.is_symlink() and "secret-of-b" not in env.read_text()
        assert "'.env' is a link" in done.stderr
    assert b_env.read_text() == "SOME_KEY=secret-of-b\n"


@pytest.mark.live
def test_own_home_tmp_the_rest_read_only_and_grandchildren(running: tuple[Root, dict[str, int]]) -> None:
    r, _ = running
    a, b = r.home("a"), r.home("b")
    tmp_name = f"/tmp/hermesd-exec-{os.getpid()}"
    # The grandchild setsid()s and forks again, as upstream's detached restarters do. The command waits
    # for it (a polled deadline): what a command leaves running is killed when it ends, and under load
    # the grandchild's cat had not run yet when sh exited (a grandchild delayed 0.3 s never wrote gc.rc).
    script = f"""
cat {a}/.env >/dev/null; echo read_own={'$'}?
echo new > {a}/new.txt && rm {a}/new.txt; echo write_own={'$'}?
[ "$(pwd)" = "{a}" ]; echo cwd={'$'}?
echo t > {tmp_name} && cat {tmp_name} >/dev/null && rm {tmp_name}; echo tmp={'$'}?
cat {r.user_home}/notes.txt >/dev/null; echo read_elsewhere={'$'}?
echo more >> {r.user_home}/notes.txt 2>/dev/null; [ $? -ne 0 ]; echo write_elsewhere_denied={'$'}?
{sys.executable} -c "
import os
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        rc = os.system('cat {b}/.env > {a}/gc.out 2>&1')
        open('{a}/gc.tmp', 'w').write(str(rc))
        os.rename('{a}/gc.tmp', '{a}/gc.rc')
    os._exit(0)
os.wait()
"
echo grandchild_started={'$'}?
i=0; while [ ! -e {a}/gc.rc ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
[ -e {a}/gc.rc ]; echo grandchild_done={'$'}?
"""
    res = r.exec("a", script)
    assert res.returncode == 0, res.stderr
    rc = rc_lines(res.stdout)
    assert rc == {k: 0 for k in rc} and len(rc) == 8, (rc, res.stderr)
    assert (r.user_home / "notes.txt").read_text() == "user notes\n"
    assert (a / "gc.rc").read_text().strip() not in ("", "0")
    assert "secret-of-b" not in (a / "gc.out").read_text()


@pytest.mark.live
def test_default_profile_cannot_read_named_profiles_env(running: tuple[Root, dict[str, int]]) -> None:
    r, _ = running
    res = r.exec("default", f"cat {r.root}/profiles/a/.env; echo a={'$'}?; cat {r.root}/profiles/b/.env; "
                            f"echo b={'$'}?; cat {r.root}/.env >/dev/null; echo own={'$'}?")
    rc = rc_lines(res.stdout)
    assert rc["a"] != 0 and rc["b"] != 0 and rc["own"] == 0, (rc, res.stderr)
    assert "secret-of-a" not in res.stdout and "secret-of-b" not in res.stdout


@pytest.mark.live
def test_exit_status_environment_and_unknown_profile(running: tuple[Root, dict[str, int]]) -> None:
    r, _ = running
    assert r.exec("a", "exit 7").returncode == 7
    assert r.exec("a", "kill -TERM $$").returncode == 128 + 15
    res = r.exec("a", "env")
    env = dict(line.split("=", 1) for line in res.stdout.splitlines() if "=" in line)
    assert env["HERMES_HOME"] == str(r.home("a"))
    assert env["HERMES_S6_SUPERVISED_CHILD"] == "1"
    # not tagged as a gateway child of the daemon (it would be swept or killed with a's tree)
    assert "HERMESD_ROOT" not in env and "HERMESD_PROFILE" not in env
    res = r.exec("nosuch", "true")
    assert res.returncode == 2 and "no such profile: 'nosuch'" in res.stderr
    res = r.exec("a", "")  # still a command: sh -c ''
    assert res.returncode == 0


@pytest.mark.live
def test_isolation_off_is_unconfined(confinable: None) -> None:
    r = Root(isolation="off")
    try:
        r.hermesd.start()
        pids = r.hermesd.wait_running("a", "b", timeout=30)
        b = r.home("b")
        res = r.exec("a", f"cat {b}/.env; echo read={'$'}?; ls {b} >/dev/null; echo list={'$'}?; "
                          f"cat {r.root}/.env >/dev/null; echo root_env={'$'}?; "
                          f"kill -0 {pids['b']}; echo signal={'$'}?")
        rc = rc_lines(res.stdout)
        assert rc == {"read": 0, "list": 0, "root_env": 0, "signal": 0}, (rc, res.stderr)
        assert "secret-of-b" in res.stdout
    finally:
        r.close()


@pytest.mark.parametrize(("argv", "root", "command"), [
    (["exec", "a", "--root", "/x", "--", "ls", "-l"], "/x", ["ls", "-l"]),
    (["exec", "--root", "/x", "a", "--", "ls", "-l"], "/x", ["ls", "-l"]),
    (["exec", "a", "ls", "-l"], None, ["ls", "-l"]),
    (["exec", "a", "--", "--help"], None, ["--help"]),
    (["exec", "a", "ls", "--", "x"], None, ["ls", "--", "x"]),  # a `--` of the command's own
])
def test_options_before_the_double_dash_are_hermesds(argv: list[str], root: str | None, command: list[str]) -> None:
    from supervisor.cli.exec import _late_options
    from supervisor.cli.main import build_parser

    ns = build_parser().parse_args(argv)
    assert _late_options(ns, list(ns.command)) == command and ns.root == root
