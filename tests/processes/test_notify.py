"""supervisor.processes.notify against real AF_UNIX datagram sockets: a bound path and an abstract name."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from pathlib import Path

import pytest

from supervisor.processes.notify import SERVICE_MANAGER_VARIABLES, Notifier


@pytest.fixture
def receiver(tmp_path: Path):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    path = tmp_path / "notify.sock"
    sock.bind(str(path))
    sock.settimeout(2)
    yield sock, str(path)
    sock.close()


def recv(sock: socket.socket) -> str:
    return sock.recv(4096).decode()


def test_unset_socket_is_a_silent_no_op():
    n = Notifier.from_env({})
    assert not n.enabled
    assert n.ready("up") is False
    assert n.watchdog() is False
    assert n.watchdog_interval() is None


def test_messages_reach_a_path_socket(receiver):
    sock, path = receiver
    n = Notifier.from_env({"NOTIFY_SOCKET": path})
    assert n.enabled
    assert n.ready("3 running,\n1 held")
    assert recv(sock) == "READY=1\nSTATUS=3 running, 1 held"
    assert n.status("2 running")
    assert recv(sock) == "STATUS=2 running"
    assert n.status("2 running")  # unchanged: not resent
    assert n.watchdog()
    assert recv(sock) == "WATCHDOG=1"
    assert n.stopping()
    assert recv(sock) == "STOPPING=1"
    n.close()


def test_messages_reach_an_abstract_socket():
    name = f"hermesd-test-{uuid.uuid4().hex}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(b"\0" + name.encode())
    sock.settimeout(2)
    try:
        n = Notifier.from_env({"NOTIFY_SOCKET": "@" + name})
        assert n.ready()
        assert recv(sock) == "READY=1"
        n.close()
    finally:
        sock.close()


def test_send_failure_never_raises_and_is_logged_once(tmp_path: Path, caplog):
    n = Notifier.from_env({"NOTIFY_SOCKET": str(tmp_path / "gone.sock")})
    with caplog.at_level(logging.DEBUG, logger="hermesd"):
        assert n.ready() is False
        assert n.watchdog() is False
        assert n.stopping() is False
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "gone.sock" in warnings[0].getMessage()


def test_unusable_address_disables_notifications(caplog):
    with caplog.at_level(logging.WARNING, logger="hermesd"):
        n = Notifier.from_env({"NOTIFY_SOCKET": "vsock:2:1234"})
    assert not n.enabled
    assert "vsock" in caplog.text


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"WATCHDOG_USEC": "30000000"}, 15.0),
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": str(os.getpid())}, 15.0),
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "1"}, None),  # meant for another process
        ({"WATCHDOG_USEC": "0"}, None),
        ({"WATCHDOG_USEC": "soon"}, None),
        ({}, None),
    ],
)
def test_watchdog_interval(receiver, env, expected):
    _sock, path = receiver
    assert Notifier.from_env({"NOTIFY_SOCKET": path, **env}).watchdog_interval() == expected


def test_watchdog_interval_needs_a_socket():
    assert Notifier.from_env({"WATCHDOG_USEC": "30000000"}).watchdog_interval() is None


def test_scheduled_watchdog_pings_from_the_loop(receiver):
    sock, path = receiver
    sock.setblocking(False)
    n = Notifier.from_env({"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "20000"})  # ping every 10 ms

    pings: list[str] = []

    async def main() -> None:
        """Until three pings have come (a deadline, not a fixed sleep: a loaded machine runs the loop late)."""
        loop = asyncio.get_running_loop()
        cancel = n.schedule_watchdog(loop)
        deadline = loop.time() + 30
        while len(pings) < 3 and loop.time() < deadline:
            await asyncio.sleep(0.01)
            try:
                pings.append(recv(sock))
            except BlockingIOError:
                continue
        cancel()

    asyncio.run(main())
    assert len(pings) >= 3
    assert set(pings) == {"WATCHDOG=1"}


def test_service_manager_variables_name_the_notify_socket():
    assert {"NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"} <= set(SERVICE_MANAGER_VARIABLES)
