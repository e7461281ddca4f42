"""The guarantee of issue 13, checked with real processes inside real confinement.

Each test runs plain commands (cat, ls, touch, rm, kill, python -c) as profile ``a`` under every
mechanism this machine offers: a private mount namespace plus Landlock, and Landlock alone
(the namespace taken away through the probe, exactly what the planner sees on a machine
without one). Where Landlock alone cannot give a property, the test checks that the plan says
so in its gaps, and that the claim is true.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from supervisor.isolation.install import discover_install_paths
from supervisor.isolation.shim_argv import EXIT_CANNOT_CONFINE
from tests.isolation.conftest import MECHANISMS, PY, Outside, Tree, alive, need, wait_for

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/ns/mnt"), reason="Linux only")


def rc_lines(out: str) -> dict[str, int]:
    """``name=rc`` lines printed by the scripts below."""
    res = {}
    for line in out.splitlines():
        name, sep, rc = line.partition("=")
        if sep and rc.strip().lstrip("-").isdigit():
            res[name.strip()] = int(rc)
    return res


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_other_profile_home_is_out_of_reach(tree: Tree, facts, mechanism: str) -> None:
    need(facts, mechanism)
    b = tree.home("b")
    script = f"""
cat {b}/.env >/dev/null 2>&1; echo read={'$'}?
cat {b}/memories/MEMORY.md >/dev/null 2>&1; echo read_memory={'$'}?
ls {b} >/dev/null 2>&1; echo list={'$'}?
touch {b}/planted 2>/dev/null; echo create={'$'}?
echo x >> {b}/.env 2>/dev/null; echo append={'$'}?
rm {b}/memories/MEMORY.md 2>/dev/null; echo delete={'$'}?
mkdir {b}/dir 2>/dev/null; echo mkdir={'$'}?
mv {b}/.env /tmp/stolen-{os.getpid()} 2>/dev/null; echo move={'$'}?
cat {tree.root}/.env >/dev/null 2>&1; echo root_env={'$'}?
cat {tree.root}/auth.json >/dev/null 2>&1; echo root_auth={'$'}?
cat {tree.root}/.hermesd/state.json >/dev/null 2>&1; echo hermesd_state={'$'}?
touch {tree.root}/.hermesd/x 2>/dev/null; echo hermesd_write={'$'}?
cat {tree.root}/hermesd.yaml >/dev/null 2>&1; echo hermesd_yaml={'$'}?
"""
    outside = Outside(Path(f"/tmp/stolen-{os.getpid()}"))
    try:
        r = tree.run(tree.plan(facts, "a", mechanism), script)
        assert outside.created() == []
    finally:
        outside.remove()
    assert r.returncode == 0, r.stderr
    rc = rc_lines(r.stdout)
    assert rc and all(v != 0 for v in rc.values()), rc
    # and nothing changed on disk
    assert (b / ".env").read_text() == "TELEGRAM_BOT_TOKEN=secret-of-b\n"
    assert (b / "memories" / "MEMORY.md").exists()
    assert not (b / "planted").exists() and not (tree.root / ".hermesd" / "x").exists()


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_own_home_tmp_and_reading_the_rest_keep_working(tree: Tree, facts, mechanism: str) -> None:
    need(facts, mechanism)
    a = tree.home("a")
    tmp_name = f"hermesd-iso-{os.getpid()}-{mechanism}"
    script = f"""
cat {a}/.env >/dev/null; echo read_own={'$'}?
ls {a} >/dev/null; echo list_own={'$'}?
echo new > {a}/new.txt && mv {a}/new.txt {a}/memories/moved.txt && rm {a}/memories/moved.txt; echo write_own={'$'}?
mkdir -p {a}/sessions/x && rmdir {a}/sessions/x; echo dirs_own={'$'}?
t="${{TMPDIR:-/tmp}}/{tmp_name}"; echo t > "$t" && cat "$t" >/dev/null && rm "$t"; echo tmp={'$'}?
{PY} -c "import tempfile; tempfile.NamedTemporaryFile().write(b'x')"; echo tempfile={'$'}?
cat {tree.elsewhere}/notes.txt >/dev/null; echo read_elsewhere={'$'}?
[ "$(pwd)" = "{a}" ]; echo cwd={'$'}?
{PY} -c "import sqlite3; c = sqlite3.connect('{a}/state.db'); c.execute('pragma journal_mode=wal'); \
c.execute('create table t(x)'); c.commit()"; echo sqlite_own={'$'}?
echo to-stderr >> /dev/stderr; echo dev_stderr={'$'}?
echo x > /dev/null; echo dev_null={'$'}?
"""
    plan = tree.plan(facts, "a", mechanism)
    log = tree.base / "output.log"  # stdout and stderr a file, as a gateway's log is
    with open(log, "a") as out:
        r = tree.run(plan, script, cwd="/", stdout=out, stderr=out)
    assert r.returncode == 0, log.read_text()
    rc = rc_lines(log.read_text())
    assert rc == {k: 0 for k in rc} and len(rc) == 11, (rc, log.read_text())
    assert "to-stderr" in log.read_text()


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_writes_elsewhere_are_denied(tree: Tree, facts, mechanism: str) -> None:
    """Deny-by-default: outside its home, the channels and its private temporary folder a profile
    changes nothing, even where the account itself may write."""
    need(facts, mechanism)
    notes = tree.elsewhere / "notes.txt"
    script = f"""
echo more >> {notes}; echo append_elsewhere={'$'}?
touch {tree.elsewhere}/new; echo create_elsewhere={'$'}?
rm {notes}; echo delete_elsewhere={'$'}?
mkdir {tree.user_home}/planted; echo mkdir_home={'$'}?
echo 1000 > /proc/self/oom_score_adj; echo proc_self={'$'}?
"""
    r = tree.run(tree.plan(facts, "a", mechanism), script)
    rc = rc_lines(r.stdout)
    assert len(rc) == 5 and all(v != 0 for v in rc.values()), (rc, r.stderr)
    assert notes.read_text() == "user notes\n" and not (tree.elsewhere / "new").exists()
    assert not (tree.user_home / "planted").exists()


def test_namespace_tmp_is_private(tree: Tree, facts) -> None:
    """In the namespace /tmp and /dev/shm are the profile's own: what it writes there is not on the
    host's, and what is on the host's is not in its."""
    need(facts, "namespace+landlock")
    name = f"hermesd-iso-private-{os.getpid()}"
    host_file = Path("/tmp") / f"{name}-host"
    host_file.write_text("host\n")
    try:
        script = (f"echo p > /tmp/{name}; echo tmp={'$'}?; echo s > /dev/shm/{name}; echo shm={'$'}?; "
                  f"cat {host_file} >/dev/null 2>&1; echo see_host={'$'}?")
        rc = rc_lines(tree.run(tree.plan(facts, "a"), script).stdout)
        assert rc == {"tmp": 0, "shm": 0, "see_host": 1}, rc
        assert not Path(f"/tmp/{name}").exists() and not Path(f"/dev/shm/{name}").exists()
    finally:
        host_file.unlink()
        for leaked in (Path(f"/tmp/{name}"), Path(f"/dev/shm/{name}")):  # only if the test failed
            leaked.unlink(missing_ok=True)


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_grandchildren_are_confined_too(tree: Tree, facts, mechanism: str) -> None:
    need(facts, mechanism)
    b = tree.home("b")
    a = tree.home("a")
    # A shell child that starts a background grandchild, and a python grandchild that setsid()s
    # and forks again (escaping the process group, as upstream's restarters do).
    script = f"""
( sh -c 'cat {b}/.env > {a}/gc1.out 2>&1; echo $? > {a}/gc1.rc' ) &
{PY} -c "
import os, sys
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        rc = os.system('cat {b}/.env > {a}/gc2.out 2>&1')
        open('{a}/gc2.rc', 'w').write(str(rc))
    os._exit(0)
os.wait()
"
wait
"""
    r = tree.run(tree.plan(facts, "a", mechanism), script)
    assert r.returncode == 0, r.stderr
    wait_for(lambda: (a / "gc1.rc").exists() and (a / "gc2.rc").exists(), what="grandchildren")
    assert (a / "gc1.rc").read_text().strip() != "0"
    assert (a / "gc2.rc").read_text().strip() != "0"
    assert "secret-of-b" not in (a / "gc1.out").read_text() + (a / "gc2.out").read_text()


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_signals_and_ptrace_cannot_reach_other_domains(tree: Tree, facts, mechanism: str) -> None:
    need(facts, mechanism)
    if facts.landlock_abi < 6:
        pytest.skip("signal scoping needs Landlock ABI 6")
    # stand-in for hermesd: an unconfined process; and profile b's "gateway": confined as b.
    hermesd = tree.spawn(["sleep", "60"])
    from supervisor.isolation.shim_argv import wrap_argv

    b_gateway = tree.spawn(wrap_argv(tree.plan(facts, "b", mechanism), ["sleep", "60"]))
    wait_for(lambda: Path(f"/proc/{b_gateway.pid}/cmdline").read_bytes().startswith(b"sleep"), what="b's exec")
    probe_code = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
for pid in map(int, sys.argv[1:]):
    for sig in (0, 15):
        try:
            os.kill(pid, sig); print(f"kill{sig}_{pid}=0")
        except OSError as e:
            print(f"kill{sig}_{pid}={e.errno}")
    r = libc.ptrace(16, pid, None, None)  # PTRACE_ATTACH
    print(f"ptrace_{pid}={0 if r == 0 else ctypes.get_errno()}")
    for f in ("environ", "mem", "root/etc/hostname"):
        try:
            open(f"/proc/{pid}/{f}", "rb").read(1); print(f"proc_{f.split('/')[0]}_{pid}=0")
        except OSError as e:
            print(f"proc_{f.split('/')[0]}_{pid}={e.errno}")
"""
    script = tree.elsewhere / "probe_signals.py"
    script.write_text(probe_code)
    r = tree.run(tree.plan(facts, "a", mechanism), f"{PY} {script} {hermesd.pid} {b_gateway.pid}")
    assert r.returncode == 0, r.stderr
    rc = rc_lines(r.stdout)
    assert len(rc) == 12 and all(v != 0 for v in rc.values()), rc
    assert alive(hermesd.pid) and alive(b_gateway.pid)
    # Its own children stay reachable: the domain covers the whole tree.
    own = tree.run(tree.plan(facts, "a", mechanism), "sleep 30 & p=$!; kill -TERM $p; echo own_kill=$?; wait")
    assert rc_lines(own.stdout) == {"own_kill": 0}, own.stderr


def _serve_unix(path: str | bytes, stop: threading.Event) -> socket.socket:
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(4)
    srv.settimeout(0.1)

    def loop() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
                conn.close()
            except (TimeoutError, OSError):
                continue

    threading.Thread(target=loop, daemon=True).start()
    return srv


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_hermesd_control_socket(tree: Tree, facts, mechanism: str) -> None:
    need(facts, mechanism)
    sock_path = str(tree.root / ".hermesd" / "control.sock")
    abstract = f"\0hermesd-iso-test-{os.getpid()}-{mechanism}".encode()
    stop = threading.Event()
    servers = [_serve_unix(sock_path, stop), _serve_unix(abstract, stop)]
    try:
        code = (
            "import socket, sys\n"
            "for name, addr in (('path', sys.argv[1]), ('abstract', b'\\0' + sys.argv[2].encode())):\n"
            "    s = socket.socket(socket.AF_UNIX)\n"
            "    try:\n"
            "        s.connect(addr); print(f'{name}=0')\n"
            "    except OSError as e:\n"
            "        print(f'{name}={e.errno}')\n"
        )
        plan = tree.plan(facts, "a", mechanism)
        script = tree.elsewhere / "connect.py"
        script.write_text(code)
        r = tree.run(plan, f"{PY} {script} {sock_path} {abstract[1:].decode()}")
        rc = rc_lines(r.stdout)
        assert set(rc) == {"path", "abstract"}, r.stderr
        if facts.landlock_abi >= 6:
            assert rc["abstract"] != 0  # abstract unix sockets scoped to the domain
        if mechanism == "namespace+landlock":
            assert rc["path"] != 0
        else:
            # Landlock alone cannot restrict connect(2) to a socket path: the plan must say so,
            # and the claim must be true (if a future kernel closes it, update the plan's gap).
            assert any("control socket is reachable" in g for g in plan.gaps)
            assert rc["path"] == 0
    finally:
        stop.set()
        for s in servers:
            s.close()


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_profile_created_after_start_stays_invisible(tree: Tree, facts, mechanism: str) -> None:
    need(facts, mechanism)
    a = tree.home("a")
    late = tree.root / "profiles" / "late"
    script = f"""
touch {a}/ready
while [ ! -e {a}/go ]; do sleep 0.02; done
cat {late}/.env >/dev/null 2>&1; echo read_late={'$'}?
ls {late} >/dev/null 2>&1; echo list_late={'$'}?
touch {late}/x 2>/dev/null; echo write_late={'$'}?
"""
    from supervisor.isolation.shim_argv import wrap_argv

    proc = subprocess.Popen(wrap_argv(tree.plan(facts, "a", mechanism), ["/bin/sh", "-c", script]),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    tree.procs.append(proc)
    wait_for(lambda: (a / "ready").exists(), what="the confined process to start")
    late.mkdir()
    (late / ".env").write_text("TELEGRAM_BOT_TOKEN=late\n")
    (a / "go").touch()
    out, err = proc.communicate(timeout=20)
    rc = rc_lines(out)
    assert len(rc) == 3 and all(v != 0 for v in rc.values()), (rc, err)


@pytest.mark.parametrize("profile", ["a", "default"])
def test_a_root_under_tmp_is_put_back_into_the_private_tmp(facts, profile: str) -> None:
    """A root (a clone, a test's folder) below /tmp: the private /tmp still shows it, hidden and
    put back exactly as elsewhere, and nothing else of the host's /tmp."""
    need(facts, "namespace+landlock")
    from tests.isolation.conftest import make_tree

    t = make_tree("/tmp")
    neighbour = Path(tempfile.mkdtemp(prefix="hermesd-iso-neighbour-", dir="/tmp"))
    try:
        (neighbour / "note").write_text("someone else's\n")
        plan = t.plan(facts, profile)
        assert str(t.root) in dict(plan.private)["/tmp"]
        home = t.home(profile)
        script = f"""
echo ok > {home}/written; echo write_own={'$'}?
cat {home}/.env >/dev/null; echo read_own={'$'}?
echo p > /tmp/private-{os.getpid()}; echo tmp={'$'}?
cat {t.root}/profiles/b/.env >/dev/null 2>&1; echo read_b={'$'}?
ls {neighbour} >/dev/null 2>&1; echo see_neighbour={'$'}?
touch {t.root}/.hermesd/x 2>/dev/null; echo hermesd_write={'$'}?
"""
        rc = rc_lines(t.run(plan, script).stdout)
        assert rc == {"write_own": 0, "read_own": 0, "tmp": 0, "read_b": rc["read_b"], "see_neighbour": 2,
                      "hermesd_write": rc["hermesd_write"]}, rc
        assert rc["read_b"] != 0 and rc["hermesd_write"] != 0
        assert (home / "written").read_text() == "ok\n" and not Path(f"/tmp/private-{os.getpid()}").exists()
    finally:
        t.close()
        shutil.rmtree(neighbour, ignore_errors=True)
        Path(f"/tmp/private-{os.getpid()}").unlink(missing_ok=True)  # only there if the test failed


def test_default_profile_cannot_see_named_profiles(tree: Tree, facts) -> None:
    need(facts, "namespace+landlock")
    plan = tree.plan(facts, "default", "namespace+landlock")
    r = tree.root
    script = f"""
cat {r}/profiles/a/.env >/dev/null 2>&1; echo read_a={'$'}?
cat {r}/profiles/b/memories/MEMORY.md >/dev/null 2>&1; echo read_b={'$'}?
[ -z "$(ls -A {r}/profiles)" ]; echo profiles_empty={'$'}?
[ -z "$(ls -A {r}/.hermesd)" ]; echo hermesd_empty={'$'}?
touch {r}/.hermesd/x 2>/dev/null; echo hermesd_write={'$'}?
cat {r}/hermesd.yaml >/dev/null 2>&1; echo read_yaml={'$'}?
echo 'command: [/tmp/evil]' > {r}/hermesd.yaml 2>/dev/null; echo write_yaml={'$'}?
rm -f {r}/hermesd.yaml 2>/dev/null; echo rm_yaml={'$'}?
mkdir {r}/profiles/planted 2>/dev/null; echo plant_profile={'$'}?
"""
    res = tree.run(plan, script)
    rc = rc_lines(res.stdout)
    assert rc["profiles_empty"] == 0 and rc["hermesd_empty"] == 0, res.stdout
    assert all(v != 0 for k, v in rc.items() if not k.endswith("_empty")), rc
    assert (r / "hermesd.yaml").read_text() == "environment: {}\n"
    # its own root stays fully usable (gateway files, atomic rewrites, its .env)
    own = f"""
cat {r}/.env >/dev/null; echo own_env={'$'}?
echo '{{}}' > {r}/gateway_state.json.tmp && mv {r}/gateway_state.json.tmp {r}/gateway_state.json; echo atomic={'$'}?
mkdir -p {r}/sessions && touch {r}/sessions/s1; echo sessions={'$'}?
"""
    rc = rc_lines(tree.run(plan, own).stdout)
    assert rc == {"own_env": 0, "atomic": 0, "sessions": 0}


def test_default_profile_under_landlock_alone_states_its_gaps(tree: Tree, facts) -> None:
    """Landlock cannot exclude profiles/ from a root the default profile must write: the plan
    says so, and the statement is true."""
    need(facts, "landlock")
    plan = tree.plan(facts, "default", "landlock")
    text = " ".join(plan.gaps)
    assert f"{tree.root}/profiles stays visible" in text and "hermesd.yaml stays writable" in text
    rc = rc_lines(tree.run(plan, f"cat {tree.root}/profiles/a/.env >/dev/null; echo read_a=$?").stdout)
    assert rc == {"read_a": 0}
    # what it does still hold: other homes elsewhere, signals, the install
    target = Path(PY).resolve().parent / f"hermesd-iso-{os.getpid()}-default"
    outside = Outside(target)
    try:
        rc = rc_lines(tree.run(plan, "kill -0 1 2>/dev/null; echo kill_init=$?; "
                                     f"touch {target} 2>/dev/null; echo write_install=$?").stdout)
        assert all(v != 0 for v in rc.values()) and len(rc) == 2
        assert outside.created() == []
    finally:
        outside.remove()


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_install_is_read_only(tree: Tree, facts, mechanism: str) -> None:
    need(facts, mechanism)
    plan = tree.plan(facts, "a", mechanism)
    target = Path(PY).resolve().parent / f"hermesd-iso-{os.getpid()}-{mechanism.replace('+', '-')}"
    outside = Outside(target)
    try:
        r = tree.run(plan, f"touch {target} 2>/dev/null; echo write_install=$?; {PY} -c 'import json'; "
                           "echo run_python=$?")
        assert rc_lines(r.stdout) == {"write_install": 1, "run_python": 0}, r.stderr
        assert outside.created() == []
    finally:
        outside.remove()


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_exec_is_transparent(tree: Tree, facts, mechanism: str) -> None:
    """After the exec: the same PID, the command line of a direct spawn, the environment exactly
    as passed (but TMPDIR under Landlock alone), the profile's home as cwd, no inherited descriptor
    beyond 0-2."""
    need(facts, mechanism)
    from supervisor.isolation.shim_argv import wrap_argv

    argv = [PY, "-c", "import sys, time; sys.stdin.read()", "gateway", "run", "--external-supervisor"]
    env = {"HERMES_HOME": str(tree.home("a")), "HOME": str(Path.home()), "PATH": os.environ["PATH"],
           "HERMESD_PROFILE": "a", "LANG": "C", "WEIRD": "a=b=c", "EMPTY": ""}
    rfd, wfd = os.pipe()
    os.set_inheritable(rfd, True)
    direct = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, cwd="/")
    shim = subprocess.Popen(wrap_argv(tree.plan(facts, "a", mechanism), argv), env=env, stdin=subprocess.PIPE,
                            cwd="/", pass_fds=(rfd,))
    tree.procs.extend((direct, shim))
    leaked = f"pipe:[{os.fstat(rfd).st_ino}]"
    os.close(rfd)
    os.close(wfd)
    try:
        want = Path(f"/proc/{direct.pid}/cmdline").read_bytes()
        wait_for(lambda: Path(f"/proc/{shim.pid}/cmdline").read_bytes() == want, what="the shim's exec")
        raw_env = Path(f"/proc/{shim.pid}/environ").read_bytes()
        got = dict(item.split("=", 1) for item in raw_env.decode().split("\0") if item)
        # Landlock alone has no private /tmp: TMPDIR names the profile's own temporary folder instead.
        assert got == (env if mechanism != "landlock" else {**env, "TMPDIR": f"{tree.home('a')}/cache/tmp"})
        assert os.readlink(f"/proc/{shim.pid}/cwd") == str(tree.home("a"))
        # The exec'd interpreter is still starting and opens and closes files of its own: a descriptor
        # listed a moment ago may be gone when it is read (that one cannot be the leaked pipe).
        targets = set()
        for x in os.listdir(f"/proc/{shim.pid}/fd"):
            with contextlib.suppress(FileNotFoundError):
                targets.add(os.readlink(f"/proc/{shim.pid}/fd/{x}"))
        assert leaked not in targets  # the descriptor hermesd let slip is closed before the exec
    finally:
        for p in (direct, shim):
            p.stdin.close()
            p.wait(timeout=10)


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_signal_dispositions_are_not_inherited_from_the_shim(tree: Tree, facts, mechanism: str) -> None:
    """Python ignores SIGPIPE at start-up and ignored signals survive execve: the shim resets it."""
    need(facts, mechanism)
    from supervisor.isolation.shim_argv import wrap_argv

    procs = [tree.spawn(["sleep", "30"]), tree.spawn(wrap_argv(tree.plan(facts, "a", mechanism), ["sleep", "30"]))]
    wait_for(lambda: all(Path(f"/proc/{p.pid}/cmdline").read_bytes().startswith(b"sleep") for p in procs),
             what="exec")

    def ignored(pid: int) -> str:
        return next(ln for ln in Path(f"/proc/{pid}/status").read_text().splitlines() if ln.startswith("SigIgn"))

    assert ignored(procs[0].pid) == ignored(procs[1].pid)


def test_failure_exits_125_with_one_line(tree: Tree, facts) -> None:
    need(facts, "namespace+landlock")
    plan = tree.plan(facts, "a", "namespace+landlock")
    data = plan.to_json()
    data["home"] = data["expose"][0]["path"] = str(tree.root / "profiles" / "gone")
    from supervisor.isolation.shim_argv import wrap_argv

    r = subprocess.run(wrap_argv(data, ["/bin/echo", "RAN"]), capture_output=True, text=True, timeout=20)
    assert r.returncode == EXIT_CANNOT_CONFINE and "RAN" not in r.stdout
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hermesd: isolation (profile a): "), r.stderr
    assert "gone" in lines[0]
    bad = subprocess.run([*wrap_argv(data, ["/bin/echo"])[:5], "{not json", "--", "/bin/echo", "RAN"],
                         capture_output=True, text=True, timeout=20)
    assert bad.returncode == EXIT_CANNOT_CONFINE and "RAN" not in bad.stdout and len(bad.stderr.splitlines()) == 1
    missing = subprocess.run(wrap_argv(plan, ["/nonexistent/cmd"]), capture_output=True, text=True, timeout=20)
    assert missing.returncode == 127 and "not found" in missing.stderr


def test_unavailable_plan_is_never_wrapped(tree: Tree, facts) -> None:
    from supervisor.isolation.planning import PlanInputs, make_plan
    from supervisor.isolation.shim_argv import wrap_argv
    from supervisor.settings import IsolationSettings

    plan = make_plan(PlanInputs(root=tree.root, profile="a", home=tree.home("a"),
                                probe=replace(facts, landlock_abi=0, landlock_error="none"),
                                settings=IsolationSettings(mode="required")))
    assert plan.mechanism == "unavailable" and not plan.runnable
    with pytest.raises(ValueError, match="cannot be started"):
        wrap_argv(plan, ["/bin/true"])
    off = make_plan(PlanInputs(root=tree.root, profile="a", home=tree.home("a"), probe=facts,
                               settings=IsolationSettings(mode="off")))
    assert wrap_argv(off, ["/bin/true"]) == ["/bin/true"]


def test_root_without_an_account_is_hardened(tree: Tree, facts) -> None:
    need(facts, "namespace+landlock")
    if not facts.is_root:
        pytest.skip("needs root")
    plan = tree.plan(facts, "a", "namespace+landlock")
    assert plan.private_dev and plan.keep_caps
    disks = [d for d in os.listdir("/dev") if d.startswith(("sd", "vd", "nvme", "xvd", "loop", "mem", "kmem"))]
    code = (
        "import os\n"
        f"print('disks=' + str(len([d for d in os.listdir('/dev') if d in {disks!r}])))\n"
        "eff = int([l for l in open('/proc/self/status') if l.startswith('CapEff')][0].split()[1], 16)\n"
        "print('sys_admin=' + str(eff >> 21 & 1)); print('dac_read_search=' + str(eff >> 2 & 1))\n"
        "print('sys_ptrace=' + str(eff >> 19 & 1))\n"
        "try:\n"
        "    open('/proc/sys/kernel/core_pattern', 'w').write('|/tmp/x'); print('core_pattern=0')\n"
        "except OSError as e:\n"
        "    print(f'core_pattern={e.errno}')\n"
    )
    script = tree.elsewhere / "hardening.py"
    script.write_text(code)
    r = tree.run(plan, f"{PY} {script}; umount {tree.root} 2>/dev/null; echo umount=$?; "
                       f"unshare -m true 2>/dev/null; echo unshare=$?")
    rc = rc_lines(r.stdout)
    assert rc == {"disks": 0, "sys_admin": 0, "dac_read_search": 0, "sys_ptrace": 0,
                  "core_pattern": rc["core_pattern"], "umount": rc["umount"], "unshare": rc["unshare"]}, r.stderr
    assert rc["core_pattern"] != 0 and rc["umount"] != 0 and rc["unshare"] != 0


def test_dedicated_account(tree: Tree, facts) -> None:
    """As root with ``user: nobody``: the profile runs as that account, in the same confinement."""
    need(facts, "namespace+landlock")
    if not facts.is_root:
        pytest.skip("needs root")
    from supervisor.isolation.install import resolve_user
    from supervisor.isolation.planning import PlanInputs, make_plan
    from supervisor.settings import IsolationSettings

    nobody = resolve_user("nobody")
    a = tree.home("a")
    os.chmod(tree.base, 0o755)
    for p in (a, *a.rglob("*")):
        os.chown(p, nobody.uid, nobody.gid)
    private = tree.elsewhere / "root-only.txt"
    private.write_text("root only\n")
    private.chmod(0o600)
    plan = make_plan(PlanInputs(root=tree.root, profile="a", home=a, probe=facts,
                                settings=IsolationSettings(user="nobody"), user_ids=nobody,
                                kanban_layout="absent"))
    assert plan.user == nobody and plan.keep_caps is None and not plan.private_dev
    script = (f"id -u; cat {private} >/dev/null 2>&1; echo read_private=$?; touch {a}/x; echo write_own=$?; "
              f"cat {tree.home('b')}/.env >/dev/null 2>&1; echo read_b=$?; kill -0 1 2>/dev/null; echo kill=$?")
    r = tree.run(plan, script, python="/usr/bin/python3" if os.path.exists("/usr/bin/python3") else None)
    assert r.stdout.splitlines()[:1] == [str(nobody.uid)], (r.returncode, r.stderr)
    rc = rc_lines(r.stdout)
    assert rc["write_own"] == 0 and rc["read_private"] != 0 and rc["read_b"] != 0 and rc["kill"] != 0


def test_unprivileged_hermesd_uses_a_user_namespace(facts) -> None:
    """hermesd not running as root: the same confinement through an unprivileged user namespace
    (run here by dropping to nobody before the shim, as a non-root hermesd would be)."""
    if facts.landlock_abi < 1 or not facts.user_namespace:
        pytest.skip("needs Landlock and unprivileged user namespaces")
    if not facts.is_root or not os.path.exists("/usr/bin/python3"):
        pytest.skip("needs root to become nobody, and a system python nobody can run")
    from supervisor.isolation.planning import PlanInputs, make_plan
    from tests.isolation.conftest import make_tree

    tree = make_tree()
    try:
        os.chmod(tree.base, 0o755)
        for p in (tree.base, *tree.base.rglob("*")):
            os.chown(p, 65534, 65534, follow_symlinks=False)
        plan = make_plan(PlanInputs(root=tree.root, profile="a", home=tree.home("a"), probe=replace(facts, euid=65534),
                                    kanban_layout="absent"))
        assert plan.mechanism == "namespace+landlock" and plan.userns
        b = tree.home("b")
        script = (f"id -u; cat {b}/.env >/dev/null 2>&1; echo read_b=$?; ls {tree.root}/profiles; "
                  f"touch {tree.home('a')}/x; echo write_own=$?; kill -0 1 2>/dev/null; echo kill=$?")

        def drop() -> None:
            os.setgroups([])
            os.setresgid(65534, 65534, 65534)
            os.setresuid(65534, 65534, 65534)

        r = tree.run(plan, script, python="/usr/bin/python3", preexec_fn=drop, cwd="/")
        assert r.returncode == 0, r.stderr
        lines = r.stdout.splitlines()
        assert lines[0] == "65534" and "a" in lines and "b" not in lines, r.stdout
        rc = rc_lines(r.stdout)
        assert rc["read_b"] != 0 and rc["write_own"] == 0 and rc["kill"] != 0
    finally:
        tree.close()


def test_kill_from_outside_still_works(tree: Tree, facts) -> None:
    """hermesd (unconfined) keeps full control of a confined child: signals, /proc reads."""
    need(facts, "namespace+landlock")
    from supervisor.isolation.shim_argv import wrap_argv

    env = dict(os.environ, HERMESD_PROFILE="a")
    proc = tree.spawn(wrap_argv(tree.plan(facts, "a"), ["sleep", "60"]), env=env)
    wait_for(lambda: Path(f"/proc/{proc.pid}/cmdline").read_bytes().startswith(b"sleep"), what="exec")
    environ = Path(f"/proc/{proc.pid}/environ").read_bytes()
    assert b"HERMESD_PROFILE=a\0" in environ
    fd = os.pidfd_open(proc.pid)
    try:
        signal.pidfd_send_signal(fd, signal.SIGTERM)
    finally:
        os.close(fd)
    assert proc.wait(timeout=10) == -signal.SIGTERM


def test_granted_handoff_socket_is_the_only_way_in(tree: Tree, facts) -> None:
    """A per-profile folder under .hermesd/ granted by the daemon (issue 16's worker handoff)
    is reachable; the control socket and the other profile's folder are not."""
    need(facts, "namespace+landlock")
    from supervisor.isolation.planning import PlanInputs, make_plan

    stop = threading.Event()
    paths = {}
    servers = []
    for name in ("a", "b"):
        folder = tree.root / ".hermesd" / "handoff" / name
        folder.mkdir(parents=True)
        paths[name] = str(folder / "worker.sock")
        servers.append(_serve_unix(paths[name], stop))
    paths["control"] = str(tree.root / ".hermesd" / "control.sock")
    servers.append(_serve_unix(paths["control"], stop))
    try:
        # The script runs this interpreter inside the plan: its install is the profile's code (read-only,
        # and put back into the private /tmp when the checkout lies there).
        plan = make_plan(PlanInputs(root=tree.root, profile="a", home=tree.home("a"), probe=facts,
                                    grants=((tree.root / ".hermesd" / "handoff" / "a", "rw"),),
                                    install_paths=discover_install_paths([PY]), kanban_layout="absent"))
        code = ("import socket, sys\n"
                "for name, path in zip(sys.argv[1::2], sys.argv[2::2]):\n"
                "    s = socket.socket(socket.AF_UNIX)\n"
                "    try:\n"
                "        s.connect(path); print(f'{name}=0')\n"
                "    except OSError as e:\n"
                "        print(f'{name}={e.errno}')\n")
        script = tree.elsewhere / "connect_many.py"
        script.write_text(code)
        args = " ".join(f"{k} {v}" for k, v in paths.items())
        rc = rc_lines(tree.run(plan, f"{PY} {script} {args}").stdout)
        assert rc["a"] == 0 and rc["b"] != 0 and rc["control"] != 0, rc
    finally:
        stop.set()
        for s in servers:
            s.close()


def test_placeholders_let_the_dispatcher_see_names_only(tree: Tree, facts) -> None:
    need(facts, "namespace+landlock")
    from supervisor.isolation.planning import PlanInputs, make_plan

    plan = make_plan(PlanInputs(root=tree.root, profile="default", home=tree.root, probe=facts,
                                placeholders=(tree.home("a"), tree.home("b")), kanban_layout="absent"))
    b = tree.home("b")
    script = (f"[ -d {b} ]; echo exists=$?; [ -z \"$(ls -A {b})\" ]; echo empty=$?; "
              f"cat {b}/.env 2>/dev/null; echo read=$?; touch {b}/x 2>/dev/null; echo write=$?")
    rc = rc_lines(tree.run(plan, script).stdout)
    assert rc == {"exists": 0, "empty": 0, "read": 1, "write": 1}


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_stat_of_hidden_names(tree: Tree, facts, mechanism: str) -> None:
    """Landlock does not restrict path lookups: a guessed name's metadata stays visible (the plan
    says so); in the private namespace the name does not exist."""
    need(facts, mechanism)
    plan = tree.plan(facts, "a", mechanism)
    rc = rc_lines(tree.run(plan, f"stat {tree.home('b')}/.env >/dev/null 2>&1; echo stat=$?").stdout)
    if mechanism == "landlock":
        assert rc == {"stat": 0} and any("stat()" in g for g in plan.gaps)
    else:
        assert rc == {"stat": 1}
