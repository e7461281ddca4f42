"""The kanban pieces without gateways: the hermesd.yaml key, reading the lock, the worker gate."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from supervisor.config import Config, ConfigError, parse
from supervisor.daemon import effective
from supervisor.kanban.dispatch import DISPATCH_ENV, dispatcher_env, holder, lock_path, lock_pids
from supervisor.kanban.workers import WorkerError, check_argv, task_env
from tests.harness import wait_for


@pytest.mark.parametrize(("text", "expected"), [
    ("{}", "default"), ("kanban: {}", "default"), ("kanban: {dispatcher: p1}", "p1"),
    ("kanban: {dispatcher: off}", "off"), ("kanban: {dispatcher: 'OFF'}", "off"),
    ("kanban: {dispatcher: Default}", "default"),
])
def test_dispatcher_key(text: str, expected: str) -> None:
    assert parse(text, Path("hermesd.yaml")).kanban_dispatcher == expected


@pytest.mark.parametrize(("text", "where"), [
    ("kanban: {dispatcher: 3}", "kanban.dispatcher"), ("kanban: {dispatcher: 'no way'}", "kanban.dispatcher"),
    ("kanban: {dispatcher: test}", "kanban.dispatcher"), ("kanban: {other: 1}", "kanban.other"),
    ("kanban: off", "kanban"),
])
def test_dispatcher_key_errors_name_the_line_and_key(text: str, where: str) -> None:
    with pytest.raises(ConfigError, match=rf"hermesd.yaml:1: {where}: "):
        parse(text, Path("hermesd.yaml"))


def test_worker_bounds_keys() -> None:
    from supervisor.settings import Limits

    cfg = parse("limits: {memory_max: 1G}\nprofiles: {p2: {limits: {tasks_max: 50}}}\n"
                "kanban: {workers_per_profile: 2, requests_per_minute: 10, worker_limits: {memory_max: 300M}}",
                Path("hermesd.yaml"))
    assert cfg.kanban_workers_per_profile == 2 and cfg.kanban_requests_per_minute == 10
    assert cfg.worker_limits_for("p2") == Limits(memory_max=300 << 20, tasks_max=50)
    assert cfg.limits_for("p2") == Limits(memory_max=1 << 30, tasks_max=50)  # the gateway's own are untouched
    plain = parse("limits: {memory_max: 1G}", Path("hermesd.yaml"))
    assert plain.kanban_workers_per_profile == 4 and plain.worker_limits_for("p2") == Limits(memory_max=1 << 30)
    for bad, where in (("kanban: {workers_per_profile: 0}", "kanban.workers_per_profile"),
                       ("kanban: {requests_per_minute: x}", "kanban.requests_per_minute"),
                       ("kanban: {worker_limits: {memory_max: -1}}", "kanban.worker_limits.memory_max")):
        with pytest.raises(ConfigError, match=rf"hermesd.yaml:1: {where}"):
            parse(bad, Path("hermesd.yaml"))


def test_dispatcher_env() -> None:
    assert dispatcher_env("p1", "p1") == {DISPATCH_ENV: "true"}
    assert dispatcher_env("p1", "default") == {DISPATCH_ENV: "false"}
    assert dispatcher_env("off", "default") == {DISPATCH_ENV: "false"}


def test_lock_holder_is_read_from_proc_locks(tmp_path: Path) -> None:
    root = tmp_path / "root"
    path = lock_path(root)
    assert lock_pids(path) == [] and holder(root) is None  # no file yet
    path.parent.mkdir(parents=True)
    path.touch()
    assert holder(root) is None
    home = root / "profiles" / "p1"
    code = (f"import fcntl, sys; f = open({str(path)!r}, 'a+'); fcntl.flock(f, fcntl.LOCK_EX); "
            "print('held', flush=True); sys.stdin.read()")
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            env={"HERMES_HOME": str(home), "PATH": "/usr/bin:/bin"})
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"held\n"
        h = holder(root)
        assert h is not None and (h.pid, h.profile, h.supervised) == (proc.pid, "p1", False)
        # reading never takes the lock: the holder keeps it, and a waiter is not a holder
        with open(path) as fh, pytest.raises(BlockingIOError):
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        proc.kill()
        proc.wait()
    wait_for(lambda: holder(root) is None, 5, what="the lock released by the kernel")


def test_lock_pids_parses_waiters_and_other_files(tmp_path: Path) -> None:
    path = tmp_path / ".dispatcher.lock"
    path.touch()
    st = os.stat(path)
    dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    text = (f"1: FLOCK  ADVISORY  WRITE 111 {dev} 0 EOF\n"
            f"1: -> FLOCK  ADVISORY  WRITE 222 {dev} 0 EOF\n"
            f"2: POSIX  ADVISORY  WRITE 333 00:01:{st.st_ino + 1} 0 EOF\n")
    assert lock_pids(path, text) == [111]


def test_only_upstreams_worker_command_is_accepted() -> None:
    ok = ["-p", "p2", "--cli", "--accept-hooks", "--skills", "x", "-m", "m", "--toolsets", "a,b", "chat", "-q",
          "work kanban task t_1a2b", "-Q"]
    check_argv(ok, "p2", "t_1a2b")
    for bad, task in [
        (["-p", "p1", "chat", "-q", "work kanban task t_1"], "t_1"),  # another profile
        (["-p", "p2", "chat", "-q", "work kanban task t_2"], "t_1"),  # another task
        (["-p", "p2", "chat", "-q", "rm -rf ~"], "t_1"),  # a prompt of the caller's choice
        (["-p", "p2", "gateway", "run"], "t_1"),
        (["-p", "p2", "--yolo", "chat", "-q", "work kanban task t_1"], "t_1"),
        (["-p", "p2", "chat", "-q", "work kanban task t_1", "--extra"], "t_1"),
    ]:
        with pytest.raises(WorkerError):
            check_argv(bad, "p2", task)


def test_task_env_passes_only_the_task_variables() -> None:
    env = {"HERMES_KANBAN_TASK": "t_1", "HERMES_KANBAN_DB": "/r/kanban.db", "TERMINAL_CWD": "/w",
           "OPENAI_API_KEY": "k", "TELEGRAM_BOT_TOKEN": "t", "HERMES_HOME": "/r/profiles/p1", "PATH": "/bin"}
    assert task_env(env) == {"HERMES_KANBAN_TASK": "t_1", "HERMES_KANBAN_DB": "/r/kanban.db", "TERMINAL_CWD": "/w"}


def test_dispatcher_choice_is_in_the_child_environment_and_restarts_only_the_affected() -> None:
    """The daemon, `hermesd exec` and `export` read the choice from one place; a change of
    `kanban.dispatcher` changes the spec (hence restarts) of exactly the old and the new dispatcher."""
    old = parse("environment: {X: '1', HERMES_KANBAN_DISPATCH_IN_GATEWAY: 'true'}\nkanban: {dispatcher: p1}\n",
                Path("hermesd.yaml"))
    new = parse("environment: {X: '1', HERMES_KANBAN_DISPATCH_IN_GATEWAY: 'true'}\nkanban: {dispatcher: p2}\n",
                Path("hermesd.yaml"))
    assert old.child_environment("p1") == {"X": "1", DISPATCH_ENV: "true"}
    assert old.child_environment("p2")[DISPATCH_ENV] == "false"  # over the operator's own value
    assert "HERMES_BIN" not in old.child_environment("p1")  # only a running daemon can serve it

    def spec(cfg: Config, name: str) -> str:
        return effective.build(cfg).of(name).spec

    changed = {n for n in ("default", "p1", "p2", "p3") if spec(old, n) != spec(new, n)}
    assert changed == {"p1", "p2"}
    off = parse("kanban: {dispatcher: off}\n", Path("hermesd.yaml"))
    assert off.child_environment("default")[DISPATCH_ENV] == "false"


def test_kanban_findings(tmp_path: Path) -> None:
    from supervisor.kanban.dispatch import kanban_findings

    root = tmp_path / "root"
    (root / "profiles" / "p1").mkdir(parents=True)
    cfg = parse("kanban: {dispatcher: p1}\n", Path("hermesd.yaml"))
    assert kanban_findings(root, cfg) == []
    (root / "profiles" / "p1" / ".env").write_text("# x\nHERMES_KANBAN_DISPATCH_IN_GATEWAY='off'\n")
    (root / "profiles" / "p1" / "config.yaml").write_text("kanban:\n  dispatch_in_gateway: false\n")
    found = kanban_findings(root, cfg)
    assert [(f[0], f[1], f[2]) for f in found] == [("warning", "kanban_dispatcher_disabled", "p1")] * 2
    assert all(len(f) == 5 and f[3] and f[4] for f in found)
    assert [f[1] for f in kanban_findings(root, parse("kanban: {dispatcher: nope}\n", Path("y")))] == [
        "kanban_dispatcher_unknown_profile"]
    closed = parse("kanban: {dispatcher: p1}\nprofiles: {p1: {isolation: {kanban: false}}}\n", Path("y"))
    assert "kanban_dispatcher_closed" in [f[1] for f in kanban_findings(root, closed)]
    # a gateway outside hermesd holding the lock (the holder is read, never taken)
    path = lock_path(root)
    path.parent.mkdir(parents=True)
    path.touch()
    code = (f"import fcntl, sys; f = open({str(path)!r}, 'a+'); fcntl.flock(f, fcntl.LOCK_EX); "
            "print('held', flush=True); sys.stdin.read()")
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            env={"HERMES_HOME": str(root / "profiles" / "p1"), "PATH": "/usr/bin:/bin"})
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"held\n"
        codes = {(f[1], f[2]) for f in kanban_findings(root, parse("{}", Path("y")))}
        assert ("kanban_dispatcher_foreign", "p1") in codes
    finally:
        proc.kill()
        proc.wait()


def test_handoff_launcher_and_ancestry(tmp_path: Path) -> None:
    from supervisor.kanban.handoff import is_descendant, launcher_text

    assert is_descendant(os.getpid(), os.getppid()) and is_descendant(os.getpid(), os.getpid())
    assert not is_descendant(os.getppid(), os.getpid())
    launcher = tmp_path / "hermes"
    launcher.write_text(launcher_text())
    launcher.chmod(0o755)
    # no daemon, no task: the messenger runs upstream's hermes itself (here: --version of the real one)
    r = subprocess.run([str(launcher), "--version"], capture_output=True, text=True, timeout=60,
                       env={"PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin", "HOME": str(tmp_path)},
                       cwd="/")
    assert r.returncode == 0 and "ermes" in r.stdout + r.stderr


def test_handoff_socket_serves_only_the_dispatchers_tree(tmp_path: Path) -> None:
    """Only kanban_worker/kanban_wait, only from a descendant of the dispatcher's gateway, bounded."""
    import asyncio
    import json
    import socket

    from supervisor.kanban.handoff import MAX_REQUEST, Handoff

    calls: list[str] = []

    async def kanban_wait(pid: int) -> dict:
        calls.append(f"wait {pid}")
        return {"ok": True, "code": 7}

    async def kanban_worker(**_kw: object) -> dict:
        return {"ok": True, "pid": 1}

    gateway = {"p1": os.getpid()}  # this test process stands for p1's gateway

    def ask(path: str, line: bytes) -> dict:
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(10)
            s.connect(path)
            s.sendall(line)
            buf = b""
            while not buf.endswith(b"\n"):
                chunk = s.recv(65536)
                if not chunk:
                    break
                buf += chunk
        return json.loads(buf)

    async def main() -> None:
        h = Handoff(tmp_path / ".hermesd", {"kanban_worker": kanban_worker, "kanban_wait": kanban_wait},
                    gateway.get)
        await h.sync("p1")
        try:
            env = h.env_for("p1")
            assert h.env_for("p2") == {} and Path(env["HERMES_BIN"]).is_file()
            path = env["HERMESD_KANBAN_SOCKET"]
            run = lambda line: asyncio.to_thread(ask, path, line)  # noqa: E731
            assert await run(b'{"cmd": "kanban_wait", "pid": 5}\n') == {"ok": True, "code": 7}
            r = await run(b'{"cmd": "stop", "profile": "p1"}\n')
            assert not r["ok"] and "not served" in r["error"]
            r = await run(b'{"cmd": "kanban_wait", "pid": 5, "x": "' + b"a" * MAX_REQUEST + b'"}\n')
            assert not r["ok"] and "too large" in r["error"]
            gateway["p1"] = -5  # a gateway PID this test process does not descend from
            r = await run(b'{"cmd": "kanban_wait", "pid": 5}\n')
            assert not r["ok"] and "permission denied" in r["error"]
            gateway.pop("p1")
            r = await run(b'{"cmd": "kanban_wait", "pid": 5}\n')
            assert not r["ok"] and "not running" in r["error"]
            assert calls == ["wait 5"]
            await h.sync("off")
            assert not Path(path).exists() and h.env_for("p1") == {}
        finally:
            h.close()

    asyncio.run(main())


def test_handoff_peer_check_proves_the_pid_is_the_process_that_connected(tmp_path: Path) -> None:
    """The PID-reuse window of SO_PEERCRED is closed: with the peer's pidfd (Linux 6.5+) a process
    that has exited is refused even if its PID is (or looks) right; without one, a process that
    started after the connection was accepted is refused."""
    import signal
    import time

    from supervisor.control.protocol import Peer, boot_ticks
    from supervisor.kanban.handoff import Handoff

    h = Handoff(tmp_path / ".hermesd", {}, {"p1": os.getpid()}.get)
    h.profile = "p1"
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        fd = os.pidfd_open(child.pid)
        try:
            assert h._check(Peer(child.pid, 0, fd, boot_ticks())) is None  # our child: in p1's tree
            child.kill()
            child.wait()
            refused = h._check(Peer(child.pid, 0, fd, boot_ticks()))
            assert refused is not None and "exited" in refused
        finally:
            os.close(fd)
        before = boot_ticks()
        time.sleep(0.05)  # a tick (10 ms) or more: the new process starts strictly later
        late = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        try:
            refused = h._check(Peer(late.pid, 0, None, before))
            assert refused is not None and "started after the connection" in refused
            assert h._check(Peer(late.pid, 0, None, boot_ticks())) is None
        finally:
            late.send_signal(signal.SIGKILL)
            late.wait()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_handoff_rate_and_worker_bounds() -> None:
    from supervisor.kanban.bounds import RateLimit, too_many_workers

    now = [0.0]
    r = RateLimit(60, clock=lambda: now[0])
    assert r.burst == 15
    assert sum(r.take() for _ in range(40)) == 15  # a burst, then refused
    now[0] += 2.0  # one request a second comes back
    assert [r.take() for _ in range(3)] == [True, True, False]
    now[0] += 3600
    assert sum(r.take() for _ in range(40)) == 15  # never more than a burst saved up
    assert too_many_workers(3, 4, "p2") is None
    assert "already runs 4" in (too_many_workers(4, 4, "p2") or "")


def test_request_and_worker_fields_reach_no_terminal_raw(tmp_path: Path) -> None:
    """What a dispatcher (or any process posing as a worker) puts in a field is escaped before
    status or an error shows it: no escape sequence, no CR/LF that would forge a line."""
    from profiles.printable import printable
    from supervisor.kanban.running import scan_workers

    assert printable("t_1\x1b[2J\r\nhermesd: forged\u202e", 200) == "t_1\\x1b[2J\\r\\nhermesd: forged\\u202e"
    assert printable("x" * 300, 200).endswith("…") and len(printable("x" * 300, 200)) == 201
    assert printable("\x1b" * 300, 2) == "\\x1b\\x1b…"  # the cut counts characters of the text, not escapes
    with pytest.raises(WorkerError) as err:
        check_argv(["-p", "p2", "\x1b]0;owned\x07", "chat", "-q", "work kanban task t_1"], "p2", "t_1")
    assert "\x1b" not in str(err.value) and "\\x1b" in str(err.value)
    root = tmp_path / "root"
    env = {"PATH": os.environ.get("PATH", ""), "HERMES_KANBAN_TASK": "t_9\x1b[31m\nforged", "HERMES_PROFILE": "p2",
           "HERMES_KANBAN_DB": str(root / "kanban.db"), "HERMES_KANBAN_BOARD": "b\r\x1b[K"}
    fake = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "chat", "-q", "x"], env=env)
    try:
        found = wait_for(lambda: [w for w in scan_workers(root) if w.pid == fake.pid], 10, what="the fake worker")
        w = found[0]
        assert w.task == "t_9\\x1b[31m\\nforged" and w.board == "b\\r\\x1b[K"
    finally:
        fake.kill()
        fake.wait()


def test_the_worker_log_is_opened_beneath_the_board_without_a_link(tmp_path: Path) -> None:
    """A dispatcher (or any profile with the board) plants a link or a FIFO where a task's log goes, or
    swaps ``kanban/`` itself for a link: the keeper refuses to open it, and writes nothing through it."""
    from supervisor.kanban.worklog import LogError, log_parts, open_log

    root = tmp_path / "root"
    (root / "kanban" / "logs").mkdir(parents=True)
    victim = tmp_path / "MEMORY.md"
    victim.write_text("memory\n")
    base, rel = log_parts(root, None, "t_1")
    fd = open_log(base, rel)
    try:
        os.write(fd, b"worker output\n")
    finally:
        os.close(fd)
    assert (root / "kanban" / "logs" / "t_1.log").read_text() == "worker output\n"
    (root / "kanban" / "logs" / "t_2.log").symlink_to(victim)
    os.mkfifo(root / "kanban" / "logs" / "t_3.log")
    for task, why in (("t_2", "symbolic link"), ("t_3", "No such device")):  # FIFO, nobody reading: ENXIO
        with pytest.raises(LogError, match=why):
            open_log(*log_parts(root, None, task))
    (root / "elsewhere" / "logs").mkdir(parents=True)
    os.rename(root / "kanban", root / "kanban.real")
    (root / "kanban").symlink_to(root / "elsewhere")
    with pytest.raises(LogError, match="symbolic link"):
        open_log(*log_parts(root, None, "t_4"))
    assert victim.read_text() == "memory\n" and not list((root / "elsewhere" / "logs").iterdir())


def test_a_fifo_at_the_keepers_log_is_refused_at_once(tmp_path: Path) -> None:
    """The keeper's log lives in hermesd's folder; a FIFO planted there (with or without a reader) is a
    refused worker, never an open that blocks the daemon's loop."""
    from supervisor.kanban.workers import Workers

    root = tmp_path / "root"
    (root / ".hermesd" / "logs").mkdir(parents=True)
    log = root / ".hermesd" / "logs" / "p2.log"
    os.mkfifo(log)
    w = Workers(root, {}, keeper_log=lambda assignee: root / ".hermesd" / "logs" / f"{assignee}.log")
    with pytest.raises(WorkerError, match="cannot open the keeper's log"):
        w._keeper_fd("p2")
    reader = os.open(log, os.O_RDONLY | os.O_NONBLOCK)
    try:
        with pytest.raises(WorkerError, match="FIFO"):
            w._keeper_fd("p2")
    finally:
        os.close(reader)
    fd = w._keeper_fd("p3")
    os.close(fd)
    assert (root / ".hermesd" / "logs" / "p3.log").is_file()


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A temporary folder with a short path: the hand-off socket below it must fit a unix socket's
    107 bytes, which pytest's own folders (longer under parallel workers) can exceed."""
    with tempfile.TemporaryDirectory(prefix="hermesd-ho-") as d:
        yield Path(d)


def test_the_handoff_folder_is_written_without_following_a_link(short_tmp: Path) -> None:
    """A launcher planted as a link (``.hermesd`` is writable by the default profile under Landlock
    alone) is replaced, not written through; a linked hand-off folder is not served at all."""
    import asyncio
    import stat

    from supervisor.kanban.handoff import Handoff

    tmp_path = short_tmp
    hermesd = tmp_path / "root" / ".hermesd"
    (hermesd / "handoff" / "p1").mkdir(parents=True)
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    (hermesd / "handoff" / "p1" / "hermes").symlink_to(victim)
    (hermesd / "handoff" / "p1" / "hermes.tmp").symlink_to(victim)  # the temp name it once used

    async def serve(profile: str) -> str | None:
        h = Handoff(hermesd, {}, {"p1": os.getpid(), "p2": os.getpid()}.get)
        await h.sync(profile)
        served = h.profile
        h.close()
        return served

    assert asyncio.run(serve("p1")) == "p1"
    launcher = hermesd / "handoff" / "p1" / "hermes"
    assert not launcher.is_symlink() and stat.S_IMODE(launcher.stat().st_mode) == 0o755
    assert launcher.read_text().startswith("#!/bin/sh") and victim.read_text() == "keep\n"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (hermesd / "handoff" / "p2").symlink_to(elsewhere)
    assert asyncio.run(serve("p2")) is None  # refused, logged: the dispatcher's workers stay its own
    assert list(elsewhere.iterdir()) == []
