"""The control socket under abuse: random bytes, 10 MB, half-open clients, a crowd, another uid."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import random
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from supervisor.control.protocol import MAX_REQUEST, READ_TIMEOUT
from tests.faults.helpers import fd_count
from tests.harness import wait_for

NOBODY = 65534


def connect(path: str, timeout: float = 20.0) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(path)
    return s


def read_reply(s: socket.socket) -> dict | None:
    data = b""
    try:
        while chunk := s.recv(65536):
            data += chunk
    except (ConnectionResetError, TimeoutError):
        pass
    finally:
        s.close()
    try:
        return json.loads(data) if data else None
    except ValueError:
        return None


def timed_ping(d) -> float:
    t0 = time.monotonic()
    assert d.request({"cmd": "ping"})["ok"]
    return time.monotonic() - t0


def untouched(d, before: dict[str, int]) -> bool:
    rows = {r["name"]: r for r in d.status()["profiles"]}
    return {n: r["pid"] for n, r in rows.items()} == before and all(r["restarts"] == 0 for r in rows.values())


@pytest.mark.slow
def test_junk_floods_and_crowds(fake_root, hermesd_factory, faults):
    """40 random-byte clients, a 10 MB request, 80 half-open clients held open, then 100 at once:
    every one gets its error or answer, pings stay fast, no gateway is touched, no descriptor leaks."""
    d = hermesd_factory(fake_root)
    before = d.wait_running("default", "coder", "writer")
    path = str(d.layout.socket)
    fds0 = fd_count(d.proc.pid)

    # 1. random bytes, with and without a final newline, with and without closing our side; all at
    # once, since those that neither end a line nor close wait out the read timeout
    rng = random.Random(7)
    clients = []
    for i in range(40):
        blob = rng.randbytes(rng.randint(1, 4096)).replace(b"\n", b"") + (b"\n" if i % 2 else b"")
        s = connect(path)
        s.sendall(blob)
        if i % 4 < 2:
            s.shutdown(socket.SHUT_WR)
        clients.append(s)
    for i, s in enumerate(clients):
        reply = read_reply(s)
        faults.inject()
        ok = reply is not None and reply["ok"] is False and ("malformed" in reply["error"]
                                                             or "not received" in reply["error"])
        faults.check(ok, f"random bytes #{i}: reply {reply!r}")
        assert ok, reply

    # 2. a 10 MB request: refused by size without reading it all; the sender may see EPIPE
    s = connect(path)
    got: list[dict | None] = []
    reader = threading.Thread(target=lambda: got.append(read_reply(s)))
    reader.start()
    with contextlib.suppress(OSError):  # EPIPE / ECONNRESET once the daemon has answered and closed
        s.sendall(b'{"cmd": "ping", "pad": "' + b"x" * (10 << 20) + b'"}\n')
    reader.join(30)
    faults.inject()
    ok = bool(got) and got[0] is not None and got[0]["error"] == f"request too large (limit {MAX_REQUEST} bytes)"
    faults.check(ok, f"10 MB request: {got!r}")
    assert ok

    # 3. half-open clients: 40 that send nothing, 40 that send half a line, all held open
    held = []
    for i in range(80):
        s = connect(path, timeout=READ_TIMEOUT + 20)
        if i % 2:
            s.sendall(b'{"cmd": "sta')
        held.append(s)
    faults.inject(80)
    # ...meanwhile the daemon answers others at once and supervises as before
    slowest = max(timed_ping(d) for _ in range(10))
    faults.note(f"slowest ping with 80 half-open clients: {slowest * 1000:.0f} ms")
    assert slowest < 2.0, slowest
    assert untouched(d, before)
    # ...and each held client gets its timeout error, none is left hanging
    replies = [read_reply(s) for s in held]
    timed_out = [r for r in replies if r and r["ok"] is False and "not received within" in r["error"]]
    faults.survive(len(timed_out))
    faults.lose(len(held) - len(timed_out), f"half-open clients without a timeout reply: {len(held) - len(timed_out)}")
    assert len(timed_out) == len(held), replies

    # 4. 100 concurrent clients, released together
    barrier = threading.Barrier(100)

    def client(i: int) -> bool:
        barrier.wait(30)
        reply = d.request({"cmd": "status"} if i % 2 else {"cmd": "ping"}, wait=30)
        return reply["ok"] and (reply.get("pid") == d.proc.pid or len(reply["status"]["profiles"]) == 3)

    t0 = time.monotonic()
    with ThreadPoolExecutor(100) as pool:
        results = list(pool.map(lambda i: _safe(client, i), range(100)))
    took = time.monotonic() - t0
    faults.inject(100)
    faults.survive(sum(results))
    faults.lose(100 - sum(results), f"{100 - sum(results)} of 100 concurrent clients failed")
    faults.note(f"100 concurrent clients answered in {took:.1f}s")
    assert all(results)

    # nothing leaked, nobody touched
    assert untouched(d, before)
    wait_for(lambda: fd_count(d.proc.pid) <= fds0, 15, what=f"daemon fds back to {fds0}")
    assert timed_ping(d) < 2.0


def _safe(fn, *args) -> bool:
    try:
        return bool(fn(*args))
    except Exception:
        return False


def as_nobody(sock: Path, cmd: str) -> dict:
    """Connect as uid/gid ``nobody`` from a forked child (no exec: no interpreter path to reach)."""
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: drop to nobody, try, report through the pipe, never return into pytest
        code = 0
        try:
            os.close(rfd)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            result: dict = {"uid": os.getuid()}
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(10)
            try:
                s.connect(str(sock))
            except OSError as exc:
                result["connect_errno"] = errno.errorcode.get(exc.errno, exc.errno)
            else:
                with contextlib.suppress(OSError):  # the daemon may refuse and close before we send
                    s.sendall(json.dumps({"cmd": cmd, "profile": "coder"}).encode() + b"\n")
                result["reply"] = read_reply(s)
            os.write(wfd, json.dumps(result).encode())
        except BaseException as exc:
            code = 1
            os.write(wfd, repr(exc).encode())
        finally:
            os._exit(code)
    os.close(wfd)
    with os.fdopen(rfd, "rb") as fh:
        data = fh.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0 and data, data
    return json.loads(data)


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to run a client as another user")
def test_another_uid_is_refused(open_root, hermesd_factory, faults):
    d = hermesd_factory(open_root)
    before = d.wait_running("default", "coder", "writer")
    sock = d.layout.socket
    assert oct(os.stat(sock).st_mode & 0o777) == "0o600" and oct(os.stat(sock.parent).st_mode & 0o777) == "0o700"

    # As hermesd leaves it: nobody cannot even connect.
    for cmd in ("ping", "shutdown"):
        got = as_nobody(sock, cmd)
        faults.inject()
        faults.check(got == {"uid": NOBODY, "connect_errno": "EACCES"}, f"nobody connecting: {got}")
        assert got == {"uid": NOBODY, "connect_errno": "EACCES"}, got

    # An operator loosens the modes by mistake: the daemon still checks the peer's uid (SO_PEERCRED).
    os.chmod(sock.parent, 0o755)
    os.chmod(sock, 0o666)
    for cmd in ("ping", "status", "stop", "shutdown"):
        got = as_nobody(sock, cmd)
        faults.inject()
        ok = got.get("reply") == {"ok": False, "error": "permission denied: not the daemon's user"}
        faults.check(ok, f"nobody sending {cmd} through an open socket: {got}")
        assert ok, got
    assert d.ping()["ready"] and untouched(d, before)
