"""The /metrics listener: HTTP on the loop, bounded, answering junk with 4xx, on TCP or a unix socket."""

from __future__ import annotations

import asyncio
import os
import socket
import stat
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from supervisor.observe.metrics import Counters, MetricsServer, render
from supervisor.observe.observer import Observer
from supervisor.observe.sections import MetricsSettings, ObserveSettings, parse_metrics

ANY_PORT = MetricsSettings(listen="127.0.0.1:0", host="127.0.0.1", port=0)


def doc():
    return {"supervisor": {"running": True}, "profiles": [{"name": "coder", "state": "running", "pid": 1}]}


async def raw(server: MetricsServer, data: bytes, *, shut: bool = True, timeout: float = 5.0) -> bytes:
    """Send ``data`` as is and return everything the server answers."""
    if server.settings.unix_path:
        reader, writer = await asyncio.open_unix_connection(server.settings.unix_path)
    else:
        host, port = server.address.rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host.strip("[]"), int(port))
    writer.write(data)
    await writer.drain()
    if shut:
        writer.write_eof()
    try:
        return await asyncio.wait_for(reader.read(), timeout)
    finally:
        writer.close()


def status_of(reply: bytes) -> int:
    return int(reply.split(b" ", 2)[1])


def body_of(reply: bytes) -> str:
    return reply.split(b"\r\n\r\n", 1)[1].decode()


def serve(test, **kw):
    async def main():
        settings = kw.pop("settings", ANY_PORT)
        server = MetricsServer(settings, lambda: render(doc(), Counters(), version="t", now=1.0), **kw)
        await server.start()
        try:
            return await test(server)
        finally:
            await server.close()
    return asyncio.run(main())


def test_get_metrics_parses_and_other_requests_get_the_right_status():
    async def test(server):
        ok = await raw(server, b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\n\r\n")
        assert status_of(ok) == 200 and b"text/plain; version=0.0.4" in ok
        names = {f.name for f in text_string_to_metric_families(body_of(ok))}
        assert "hermesd_profile_up" in names
        head = await raw(server, b"HEAD /metrics?x=1 HTTP/1.0\r\n\r\n")
        assert status_of(head) == 200 and body_of(head) == ""
        assert status_of(await raw(server, b"GET / HTTP/1.1\r\n\r\n")) == 200
        assert status_of(await raw(server, b"GET /nope HTTP/1.1\r\n\r\n")) == 404
        post = await raw(server, b"POST /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc")
        assert status_of(post) == 405 and b"Allow: GET, HEAD" in post
        for junk in (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\n\n", b"GET\r\n\r\n", b"hello world\n\n",
                     b"GET metrics HTTP/1.1\r\n\r\n", b"GET /metrics SPDY/3\r\n\r\n", b"GET /metrics HTTP/1.1"):
            assert status_of(await raw(server, junk)) == 400, junk
        big = await raw(server, b"GET /metrics HTTP/1.1\r\n" + b"X-Pad: " + b"a" * 20000 + b"\r\n\r\n")
        assert status_of(big) == 431
        many = await raw(server, b"GET /metrics HTTP/1.1\r\n" + b"X: y\r\n" * 100 + b"\r\n")
        assert status_of(many) == 431
        assert await raw(server, b"") == b""  # connect and close: nothing to answer
        return server.requests

    counts = serve(test)
    assert counts[200] == 3 and counts[400] == 6


def test_a_slow_client_times_out_and_does_not_hold_up_others():
    async def test(server):
        loris = [asyncio.create_task(raw(server, b"GET /metr", shut=False)) for _ in range(3)]
        await asyncio.sleep(0.05)
        t0 = time.monotonic()
        ok = await raw(server, b"GET /metrics HTTP/1.1\r\n\r\n")
        fast = time.monotonic() - t0
        slow = await asyncio.gather(*loris)
        return ok, fast, slow

    ok, fast, slow = serve(test, timeout=0.5)
    assert status_of(ok) == 200 and fast < 0.3
    assert all(status_of(r) == 408 for r in slow)


def test_idle_connections_cannot_hold_the_slots():
    """Eight sockets that connect and send nothing (from inside a profile: the listener is on
    loopback) used to take every slot, so every scrape got 503 until they timed out, and again as
    soon as they reconnected. Now the oldest idle one makes room; scrapes succeed throughout."""
    async def test(server):
        host, port = server.address.rsplit(":", 1)
        idle = [await asyncio.open_connection(host, int(port)) for _ in range(server.max_clients)]
        await asyncio.sleep(0.1)  # every slot is now held by an idle connection
        scrapes = [await raw(server, b"GET /metrics HTTP/1.1\r\n\r\n") for _ in range(5)]
        closed = 0
        for reader, writer in idle:  # the five oldest were closed by the server, the rest still wait
            try:
                closed += await asyncio.wait_for(reader.read(), 0.5) == b""
            except ConnectionError:
                closed += 1
            except TimeoutError:
                pass
            writer.close()
        return scrapes, closed, server.evicted

    scrapes, closed, evicted = serve(test, timeout=30.0)  # a timeout far beyond the test: eviction does it
    assert [status_of(r) for r in scrapes] == [200] * 5
    assert evicted == 1 and closed == 1  # one eviction; each finished scrape frees its own slot again


def test_a_slow_loris_is_evicted_like_an_idle_connection():
    async def test(server):
        host, port = server.address.rsplit(":", 1)
        loris = []
        for _ in range(server.max_clients):
            reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(b"GET /met")  # a byte now and then, never the whole head
            await writer.drain()
            loris.append((reader, writer))
        await asyncio.sleep(0.1)
        ok = await raw(server, b"GET /metrics HTTP/1.1\r\n\r\n")
        for _, writer in loris:
            writer.close()
        return ok

    assert status_of(serve(test, max_clients=3, timeout=30.0)) == 200


def test_503_only_when_every_slot_is_busy_answering():
    """Connections that sent their request and are being answered are not evicted: with every slot
    busy writing a body the client does not read, a new one gets 503."""
    async def test(server):
        server.render = lambda: "x" * (8 << 20)  # far more than the socket buffers hold
        host, port = server.address.rsplit(":", 1)
        busy = []
        for _ in range(server.max_clients):
            reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(b"GET /metrics HTTP/1.1\r\n\r\n")
            await writer.drain()
            busy.append((reader, writer))
        await asyncio.sleep(0.3)  # each is now blocked in drain() with a full socket buffer
        third = await raw(server, b"GET /metrics HTTP/1.1\r\n\r\n")
        for _, writer in busy:
            writer.close()
        return third

    assert status_of(serve(test, max_clients=2, timeout=2.0)) == 503


def test_a_render_error_is_a_500_not_a_dead_listener():
    async def test(server):
        calls = {"n": 0}

        def flaky():
            calls["n"] += 1
            if calls["n"] == 1:
                raise RuntimeError("boom")
            return "# ok\n"

        server.render = flaky
        first = await raw(server, b"GET /metrics HTTP/1.1\r\n\r\n")
        second = await raw(server, b"GET /metrics HTTP/1.1\r\n\r\n")
        return first, second

    first, second = serve(test)
    assert status_of(first) == 500 and status_of(second) == 200


def test_unix_socket_listener_is_private_and_replaces_only_its_own_stale_socket(tmp_path):
    path = tmp_path / "m.sock"
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(path))
    stale.close()  # a leftover of a crashed hermesd

    async def test(server):
        mode = stat.S_IMODE(os.stat(path).st_mode)
        reply = await raw(server, b"GET /metrics HTTP/1.1\r\n\r\n")
        return mode, reply

    mode, reply = serve(test, settings=parse_metrics({"listen": f"unix:{path}"}))
    assert mode == 0o600 and status_of(reply) == 200
    assert not path.exists()  # removed on close
    path.write_text("not a socket")

    async def refused():
        with pytest.raises(OSError, match="not a socket of this user"):
            await MetricsServer(parse_metrics({"listen": str(path)}), lambda: "").start()

    asyncio.run(refused())
    assert path.read_text() == "not a socket"


def test_observer_serves_the_daemon_status_and_restarts_the_listener_on_reconfigure(events_root):
    async def main():
        obs = Observer(events_root, ObserveSettings(metrics=ANY_PORT))
        obs.open()
        obs.emit("started", "coder", pid=1, argv0="hermes")
        await obs.start(status=doc)
        first = obs.metrics_server
        reply = await raw(first, b"GET /metrics HTTP/1.1\r\n\r\n")
        await obs.reconfigure(ObserveSettings(metrics=MetricsSettings(listen="[::1]:0", host="::1", port=0)))
        assert obs.metrics_server is not first and obs.metrics_server is not None
        assert obs.metrics_server.address.startswith("[::1]:")
        await obs.reconfigure(ObserveSettings())
        assert obs.metrics_server is None
        await obs.aclose()
        return reply

    body = body_of(asyncio.run(main()))
    fams = {f.name: f for f in text_string_to_metric_families(body)}
    assert [s.value for s in fams["hermesd_profile_starts"].samples] == [1]
    assert fams["process_resident_memory_bytes"].samples[0].value > 0


def test_a_port_in_use_is_logged_not_fatal(events_root, caplog):
    async def main():
        blocker = socket.socket()
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        port = blocker.getsockname()[1]
        try:
            obs = Observer(events_root, ObserveSettings(metrics=parse_metrics({"listen": f"127.0.0.1:{port}"})))
            await obs.start(status=doc)
            assert obs.metrics_server is None
            await obs.aclose()
        finally:
            blocker.close()

    asyncio.run(main())
    assert any("metrics listener on 127.0.0.1:" in r.getMessage() for r in caplog.records)
