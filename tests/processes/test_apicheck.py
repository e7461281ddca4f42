"""The API server's health check on real sockets: it counts only an answer from the gateway's own socket,
and never connects to a listener that is not the gateway's.

The "gateway" is this test process (its servers run in threads), so its PID owns their sockets; another
process's listener is a ``python -c`` child, which says on its stdout whether anyone ever connected.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from profiles.upstream.process import proc_start_time
from supervisor.plan.readiness import Outcome
from supervisor.processes import apicheck, sockdiag

ME = os.getpid()
START = proc_start_time(ME)


class Server:
    """An HTTP listener in this process answering ``GET /v1/health`` as upstream does (or not)."""

    def __init__(self, health: str = "ok", host: str = "127.0.0.1", family: int = socket.AF_INET) -> None:
        self.health = health
        self.sock = socket.socket(family)
        if family == socket.AF_INET6:
            self.sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        self.sock.bind((host, 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.conns: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            try:
                chunk = conn.recv(4096)
            except OSError:
                return
            if not chunk:
                return
            data += chunk
        if self.health == "hang":
            return
        body = json.dumps({"status": "ok" if self.health == "ok" else "sick"}).encode()
        status = "500 Internal Server Error" if self.health == "error" else "200 OK"
        conn.sendall(f"HTTP/1.1 {status}\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)

    def close(self) -> None:
        self.sock.close()
        for c in self.conns:
            c.close()


@pytest.fixture
def servers() -> Iterator[list[Server]]:
    made: list[Server] = []
    yield made
    for s in made:
        s.close()


def run(port: int, pid: int = ME, start: int | None = START, timeout: float = 2.0) -> apicheck.ApiCheck:
    return asyncio.run(apicheck.check(pid, start, port, timeout=timeout))


def test_an_answer_from_the_gateway_s_own_socket_is_serving(servers):
    s = Server()
    servers.append(s)
    found = run(s.port)
    assert found.outcome == Outcome.ANSWERED and found.answered
    assert found.detail == f"answers on 127.0.0.1:{s.port}" and found.took_ms < 2000
    assert found.to_json()["answered"] is True and found.to_json()["outcome"] == "answered"


def test_a_listener_on_all_addresses_and_a_dual_stack_one_are_reached(servers):
    s = Server(host="0.0.0.0")
    servers.append(s)
    assert run(s.port).outcome == Outcome.ANSWERED
    if not socket.has_ipv6:
        return
    try:
        s6 = Server(host="::", family=socket.AF_INET6)
    except OSError:
        return  # no IPv6 on this host
    servers.append(s6)
    assert run(s6.port).outcome == Outcome.ANSWERED  # the server's end is ::ffff:127.0.0.1 there


def test_a_gateway_that_accepts_and_never_answers_times_out(servers):
    s = Server("hang")
    servers.append(s)
    found = run(s.port, timeout=0.3)
    assert found.outcome == Outcome.TIMEOUT
    assert found.detail == f"127.0.0.1:{s.port} did not answer /v1/health within 0.3s"
    assert 250 <= found.took_ms < 2000


def test_a_wrong_answer_is_not_serving(servers):
    for health, said in (("error", "HTTP 500"), ("sick", "a status other than 'ok'")):
        s = Server(health)
        servers.append(s)
        found = run(s.port)
        assert found.outcome == Outcome.BAD_ANSWER and found.detail.endswith(said)


def test_nothing_listening_is_found_without_connecting():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    found = run(port)
    assert found.outcome == Outcome.NO_LISTENER and found.detail == f"nothing listens on 127.0.0.1:{port}"


_OTHER = """
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 0)); s.listen(8)
print(s.getsockname()[1], flush=True)
s.settimeout(float(sys.argv[1]))
try:
    c, _ = s.accept()
    c.recv(4096)
    c.sendall(b'HTTP/1.1 200 OK\\r\\nContent-Length: 16\\r\\n\\r\\n{"status": "ok"}')
    print("connected", flush=True)
    sys.stdin.read()
except socket.timeout:
    print("nobody", flush=True)
"""


def _other_listener(wait: float) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen([sys.executable, "-c", _OTHER, str(wait)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None
    return proc, int(proc.stdout.readline())


def test_another_process_s_listener_is_never_connected_to():
    """A profile's files may name any port (another profile's API server, any local service): its
    listener does not make this gateway serve, and hermesd does not even connect to it."""
    proc, port = _other_listener(wait=1.0)
    try:
        found = run(port)
        assert found.outcome == Outcome.NOT_ITS_OWN
        assert found.detail == f"another process listens on 127.0.0.1:{port}; hermesd does not connect to it"
        assert proc.communicate(timeout=10)[0].strip() == "nobody"
    finally:
        proc.kill()
        proc.wait(10)


def test_an_answer_is_traced_to_the_process_that_owns_the_server_s_end():
    """The check after the answer (the race where the gateway's port or PID changes hands): the server's
    end of the connection is a descriptor of the answering process, and of no other."""
    proc, port = _other_listener(wait=10.0)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
            c.sendall(b"GET /v1/health HTTP/1.1\r\n\r\n")
            assert c.recv(4096).startswith(b"HTTP/1.1 200")
            ours = c.getsockname()[1]
            assert apicheck.answered_by_gateway(proc.pid, proc_start_time(proc.pid), port, ours)
            assert not apicheck.answered_by_gateway(ME, START, port, ours)
            assert not apicheck.answered_by_gateway(proc.pid, (proc_start_time(proc.pid) or 0) + 1, port, ours)
            assert not apicheck.answered_by_gateway(proc.pid, None, port, ours + 1 if ours < 65535 else ours - 1)
    finally:
        proc.kill()
        proc.wait(10)


def test_a_gateway_listening_only_elsewhere_is_not_probed(servers):
    s = Server(host="127.0.0.2")
    servers.append(s)
    found = run(s.port)
    assert found.outcome == Outcome.ELSEWHERE
    assert found.detail == f"it listens on port {s.port} only on 127.0.0.2; hermesd checks 127.0.0.1 only"
    assert s.conns == []


def test_a_gateway_that_is_gone_or_another_process_is_unknown(servers):
    s = Server()
    servers.append(s)
    assert run(s.port, start=(START or 0) + 1).outcome == Outcome.UNKNOWN  # the PID now names another process
    assert s.conns == []


def test_sock_diag_finds_listeners_and_only_an_exact_connection(servers):
    s = Server()
    servers.append(s)
    lo = ipaddress.IPv4Address("127.0.0.1")
    (listener,) = sockdiag.listeners(s.port)
    assert listener.local == lo and listener.state == sockdiag.TCP_LISTEN and listener.inode > 0
    with socket.create_connection(("127.0.0.1", s.port), timeout=5) as c:
        ours = c.getsockname()[1]
        end = sockdiag.connection(lo, s.port, lo, ours)
        assert end is not None and end.rport == ours and end.state != sockdiag.TCP_LISTEN
        # the kernel's own lookup falls back to the listener for an unknown peer: not a connection
        assert sockdiag.connection(lo, s.port, lo, ours + 1 if ours < 65535 else ours - 1) is None
