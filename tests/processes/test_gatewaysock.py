"""The gateway.sock client: identify over a real unix socket, and everything a profile could plant instead."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from profiles.upstream.control_socket import MAX_REPLY_BYTES, ProtocolError, parse_identify
from supervisor.processes.gatewaysock import GatewaySockError, identify

GOOD = {"ok": True, "protocol": 1, "id": 1, "result": {
    "protocol": 1, "kind": "hermes-gateway", "pid": 4242, "start_time": 777, "hermes_home": "/r/profiles/coder",
    "profile": "coder", "supervisor": "external", "served_profiles": ["default", "coder"]}}


class Server:
    """A one-thread unix socket server answering each connection with ``reply(request_line)``."""

    def __init__(self, path: Path, reply: Callable[[bytes], bytes | None]) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(path))
        self.sock.listen(4)
        self.requests: list[bytes] = []
        self.reply = reply
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        with contextlib.suppress(OSError):  # closed before this thread began: nothing to serve
            self._loop()

    def _loop(self) -> None:
        self.sock.settimeout(0.1)
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with conn, contextlib.suppress(OSError):  # the client may hang up first: that is its right
                conn.settimeout(5)
                data = b""
                while b"\n" not in data:
                    chunk = conn.recv(4096)
                    if not chunk:
                        break
                    data += chunk
                self.requests.append(data)
                out = self.reply(data)
                if out is None:
                    self.stop.wait(3)  # never answers (the client's deadline must end the wait)
                    continue
                conn.sendall(out)

    def close(self) -> None:
        self.stop.set()
        self.sock.close()
        self.thread.join(5)


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., Server]]:
    made: list[Server] = []

    def make(reply: Callable[[bytes], bytes | None], path: Path | None = None) -> Server:
        s = Server(path or tmp_path / "gateway.sock", reply)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


def test_identify_asks_one_line_and_parses_the_answer(tmp_path, serve):
    srv = serve(lambda _req: json.dumps(GOOD).encode() + b"\n")
    ident = identify(tmp_path)
    assert (ident.pid, ident.start_time, ident.hermes_home, ident.profile) == (4242, 777, "/r/profiles/coder", "coder")
    assert ident.served == ("default", "coder") and ident.serves_others("coder") == ("default",)
    request = json.loads(srv.requests[0])
    assert request["verb"] == "identify" and request["protocol"] == 1


def test_a_planted_link_is_never_followed(tmp_path, serve):
    """gateway.sock -> another socket (anyone's): refused without connecting to it."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    srv = serve(lambda _req: json.dumps(GOOD).encode() + b"\n", elsewhere / "real.sock")
    home = tmp_path / "home"
    home.mkdir()
    os.symlink(elsewhere / "real.sock", home / "gateway.sock")
    with pytest.raises(GatewaySockError, match="symlink"):
        identify(home)
    assert srv.requests == []


@pytest.mark.parametrize("plant", ["file", "fifo", "dir", "missing"])
def test_anything_but_a_socket_is_refused(tmp_path, plant):
    path = tmp_path / "gateway.sock"
    if plant == "file":
        path.write_text(json.dumps(GOOD))
    elif plant == "fifo":
        os.mkfifo(path)
    elif plant == "dir":
        path.mkdir()
    with pytest.raises(GatewaySockError):
        identify(tmp_path, timeout=1)


def test_a_home_that_is_a_link_is_refused(tmp_path, serve):
    """A named home is reached from the root: ``profiles/linked -> ../real`` is never entered."""
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "profiles").mkdir()
    serve(lambda _req: json.dumps(GOOD).encode() + b"\n", real / "gateway.sock")
    os.symlink(real, tmp_path / "profiles" / "linked")
    with pytest.raises(GatewaySockError, match="symlink"):
        identify(tmp_path / "profiles" / "linked")


def test_silence_costs_the_timeout_and_no_more(tmp_path, serve):
    import time

    serve(lambda _req: None)
    t0 = time.monotonic()
    with pytest.raises(GatewaySockError, match="no answer within"):
        identify(tmp_path, timeout=0.5)
    assert time.monotonic() - t0 < 2.5


def test_an_endless_answer_is_cut_at_the_cap(tmp_path, serve):
    serve(lambda _req: b"x" * (MAX_REPLY_BYTES + 10))
    with pytest.raises(GatewaySockError, match="over"):
        identify(tmp_path)


@pytest.mark.parametrize("raw", [
    b"not json\n", b"[]\n", b'{"ok": false, "error": "unknown verb"}\n', b'{"ok": true, "result": {"pid": "1"}}\n',
    b'{"ok": true, "result": {"pid": true}}\n', b'{"ok": true, "result": {"pid": -4}}\n', b"\xff\xfe\n", b"",
])
def test_junk_answers_are_one_clear_error(tmp_path, serve, raw):
    serve(lambda _req: raw)
    with pytest.raises(GatewaySockError) as err:
        identify(tmp_path)
    assert "\n" not in str(err.value)


def test_parse_keeps_only_typed_fields():
    reply = {"ok": True, "result": {"pid": 9, "start_time": "x", "served_profiles": ["a", 3, None, "b"],
                                    "hermes_home": 5, "multiplex": "yes"}}
    ident = parse_identify(json.dumps(reply).encode())
    assert ident.start_time is None and ident.served == ("a", "b") and ident.hermes_home is None
    assert ident.multiplex is None
    with pytest.raises(ProtocolError):
        parse_identify(b'{"ok": true}')


def test_a_pointer_to_a_socket_elsewhere_is_named_and_not_followed(tmp_path, serve):
    """Upstream's fallback for a home too long for a unix socket: gateway.sock.path names a socket in /tmp."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    srv = serve(lambda _req: json.dumps(GOOD).encode() + b"\n", elsewhere / "hermes-gw-0123.sock")
    home = tmp_path / "home"
    home.mkdir()
    (home / "gateway.sock.path").write_text(str(elsewhere / "hermes-gw-0123.sock"))
    with pytest.raises(GatewaySockError, match="does not follow that pointer"):
        identify(home)
    assert srv.requests == []
