"""The control socket's checks, without a daemon: the request parser, and the server in this process.

``decode_request`` is the whole rule for what a request may say; the server is run here on a real
unix socket with handlers of its own, to show what reaches a handler and what is answered before:
junk, a line without its newline, an oversized request, a handler's refusal and a handler's bug.
The same socket under floods, half-open clients and another user's connections, with a daemon
behind it, is ``tests/faults/test_control_socket.py``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import stat
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from supervisor.control.protocol import MAX_REQUEST, REQUESTS, Peer, RequestError, decode_request
from supervisor.control.server import ControlServer
from supervisor.daemon.pidlock import AlreadyRunning, PidLock
from supervisor.layout import Layout
from supervisor.processes.lockholder import holder, owner_pid


@pytest.mark.parametrize(("line", "error"), [
    (b"\x00\xff garbage", "malformed request: expected one JSON object per line"),
    (b"[" * 60_000, "malformed request: expected one JSON object per line"),  # too deep for the parser
    (b"[1,2]", "malformed request: expected an object with a string 'cmd'"),
    (b'{"cmd": 5}', "malformed request: expected an object with a string 'cmd'"),
    (b'{"cmd": "exec", "argv": ["rm"]}', "unknown request 'exec' (known: ping, status, "),
    (b'{"cmd": "' + b"x" * (MAX_REQUEST + 1) + b'"}', f"request too large (limit {MAX_REQUEST} bytes)"),
    (b'{"cmd": "stop"}', "stop: missing 'profile'"),
    (b'{"cmd": "stop", "profile": 7}', "stop: 'profile' must be a str"),
    (b'{"cmd": "restart", "profile": "a", "graceful": 1}', "restart: 'graceful' must be a bool"),
    (b'{"cmd": "kanban_wait", "pid": true}', "kanban_wait: 'pid' must be a int"),
    (b'{"cmd": "ping", "x": 1}', "ping: unknown argument 'x'"),
])
def test_a_request_is_refused_naming_what_is_wrong(line, error):
    with pytest.raises(RequestError) as err:
        decode_request(line)
    assert str(err.value).startswith(error), err.value


def test_a_well_formed_request_is_its_verb_and_arguments():
    assert decode_request(b'{"cmd": "restart", "profile": "coder", "graceful": true}') == (
        "restart", {"profile": "coder", "graceful": True})
    assert decode_request(b'{"cmd": "ping"}') == ("ping", {})


Handlers = dict[str, Callable[..., Awaitable[dict[str, Any]]]]


def handlers(seen: list[tuple[str, dict[str, Any]]]) -> Handlers:
    """A handler for every verb that records its call; ``stop`` refuses an unknown profile as the
    daemon's does (KeyError), ``status`` has a bug."""

    def make(verb: str) -> Callable[..., Awaitable[dict[str, Any]]]:
        async def handle(**args: Any) -> dict[str, Any]:
            seen.append((verb, args))
            if verb == "stop" and args["profile"] != "coder":
                raise KeyError(f"no such profile: {args['profile']!r}")
            if verb == "status":
                raise RuntimeError("a bug in a handler")
            return {"ok": True, "verb": verb}
        return handle

    return {verb: make(verb) for verb in REQUESTS}


async def ask(path: Path, data: bytes, *, close_write: bool = True) -> dict[str, Any] | None:
    reader, writer = await asyncio.open_unix_connection(str(path), limit=4 * MAX_REQUEST)
    writer.write(data)
    await writer.drain()
    if close_write:
        writer.write_eof()
    reply = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    return json.loads(reply) if reply else None


def serve(path: Path, table: Handlers, check: Callable[[ControlServer], Awaitable[None]], **kw: Any) -> None:
    async def main() -> None:
        server = ControlServer(path, table, **kw)
        await server.start()
        try:
            await check(server)
        finally:
            server.close()

    asyncio.run(main())


def test_only_checked_requests_reach_a_handler(tmp_path, caplog):
    path = tmp_path / "run" / "control.sock"
    seen: list[tuple[str, dict[str, Any]]] = []

    async def check(server: ControlServer) -> None:
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700
        assert (await ask(path, b"\x00\xff garbage\n"))["error"].startswith("malformed request")
        assert (await ask(path, b'{"cmd": "exec", "argv": ["rm"]}\n'))["error"].startswith("unknown request")
        assert (await ask(path, b'{"cmd": "ping"}')) == {
            "ok": False, "error": "malformed request: no newline before end of input"}
        assert await ask(path, b"") is None  # connected and said nothing: closed without a word
        assert (await ask(path, b'{"cmd": "' + b"x" * (2 * MAX_REQUEST) + b'"}\n')) == {
            "ok": False, "error": f"request too large (limit {MAX_REQUEST} bytes)"}
        assert seen == []
        assert (await ask(path, b'{"cmd": "stop", "profile": "nope"}\n')) == {
            "ok": False, "error": "no such profile: 'nope'"}
        assert await ask(path, b'{"cmd": "status"}\n') is None  # the bug: logged, the connection closed
        assert (await ask(path, b'{"cmd": "ping"}\n')) == {"ok": True, "verb": "ping"}  # still serving
        assert seen == [("stop", {"profile": "nope"}), ("status", {}), ("ping", {})]

    with caplog.at_level(logging.ERROR, logger="hermesd"):
        serve(path, handlers(seen), check)
    assert "control request" in caplog.text and "RuntimeError: a bug in a handler" in caplog.text
    assert not path.exists()  # removed on close


def test_a_refused_client_that_writes_late_still_reads_why(tmp_path):
    """A refusal waits for the client's line before it answers: a client whose write comes after the
    peer check (a loaded machine) must not find the socket closed (EPIPE) and lose the reason."""
    import select
    import socket

    path = tmp_path / "handoff.sock"
    checked: list[int] = []

    def peer_check(peer: Peer) -> str | None:
        checked.append(peer.pid)
        return "not a dispatcher of this root"

    def late_client() -> dict[str, Any]:
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(10)
            s.connect(str(path))
            deadline = time.monotonic() + 10
            while not checked and time.monotonic() < deadline:
                select.select([s], [], [], 0.01)
            assert checked, "the peer check never ran"
            # Write only once the server has had every chance to answer and close without it.
            select.select([s], [], [], 0.5)
            s.sendall(b'{"cmd": "kanban_wait", "pid": 5}\n')
            return json.loads(s.makefile("rb").readline())

    async def check(server: ControlServer) -> None:
        assert await asyncio.to_thread(late_client) == {
            "ok": False, "error": "permission denied: not a dispatcher of this root"}

    serve(path, {"kanban_wait": handlers([])["kanban_wait"]}, check, peer_check=peer_check)


def test_a_restricted_socket_serves_only_its_verbs_to_the_peers_it_accepts(tmp_path):
    """The kanban hand-off socket's shape: a peer check instead of the same-user rule, few verbs."""
    path = tmp_path / "handoff.sock"
    seen: list[tuple[str, dict[str, Any]]] = []
    table = {"kanban_wait": handlers(seen)["kanban_wait"]}
    peers: list[tuple[int, int]] = []

    def peer_check(peer: Peer) -> str | None:
        peers.append((peer.pid, peer.uid))
        return None if len(peers) == 1 else "not a dispatcher of this root"

    async def check(server: ControlServer) -> None:
        assert (await ask(path, b'{"cmd": "ping"}\n')) == {
            "ok": False, "error": "request 'ping' is not served on this socket"}
        assert (await ask(path, b'{"cmd": "kanban_wait", "pid": 5}\n')) == {
            "ok": False, "error": "permission denied: not a dispatcher of this root"}

    serve(path, table, check, peer_check=peer_check)
    assert peers == [(os.getpid(), os.getuid())] * 2  # SO_PEERCRED: this very process
    assert seen == []


def test_a_server_without_a_handler_for_every_verb_is_refused(tmp_path):
    with pytest.raises(ValueError, match="no handler for"):
        ControlServer(tmp_path / "s", {"ping": handlers([])["ping"]})


def test_one_daemon_per_root_and_the_second_is_told_the_first(tmp_path):
    """The root's lock: a second taker fails at once, and ``holder`` names the PID holding it."""
    layout = Layout(tmp_path)
    first, second = PidLock(layout), PidLock(layout)
    first.acquire()
    try:
        assert holder(layout) == os.getpid() and owner_pid(layout) == os.getpid()
        with pytest.raises(AlreadyRunning) as err:
            second.acquire()
        assert str(err.value) == f"hermesd is already running for {layout.root} (PID {os.getpid()})"
    finally:
        first.release()
    second.acquire()  # free again once released
    second.release()
