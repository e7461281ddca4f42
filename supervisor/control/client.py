"""The one client every hermesd command uses to talk to the daemon.

"Is the daemon there" is answered by the root's lock, not by the socket: a daemon that is starting
(not listening yet), busy or stopped still holds the lock, and a command must then wait for it (or
say it does not answer) rather than report "not running" and lose what the operator asked for.
Only a free lock means no daemon. Every call checks that the socket's folder is private to the
user first, so nobody else can stand in for the daemon.

A request that was sent and got no answer is never sent again (the daemon may still carry it out);
only a request that could not be delivered (nobody listening yet) is retried.

The socket is CPython's ``_socket`` (what ``socket.socket`` wraps): the wrapper module turns every
constant into an enum and imports ``selectors`` at import, ~4 ms of every ``hermesd status``
(measured), for nothing a one-request client uses.
"""

from __future__ import annotations

import _socket
import json
import time
from collections.abc import Callable
from typing import Any

from supervisor.control.protocol import encode
from supervisor.layout import Layout
from supervisor.processes.lockholder import holder, owner_pid

Progress = Callable[[float], None]


class DaemonNotRunning(ConnectionError):
    """No hermesd holds the root's lock."""


class DaemonNotAnswering(TimeoutError):
    """A hermesd holds the root's lock but did not answer in time."""


class ControlError(RuntimeError):
    """The daemon answered with an error."""


class Client:
    """Requests to the daemon of one root."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout

    def held(self) -> bool:
        """Whether a daemon holds the root (possibly still starting, or not answering)."""
        return holder(self.layout) is not None

    def call(self, cmd: str, *, wait: float = 30.0, progress: Progress | None = None, **args: Any) -> dict[str, Any]:
        """Send one request and return the reply, waiting up to ``wait`` s for a daemon that holds the root.

        Raises :class:`DaemonNotRunning` when the lock is free, :class:`DaemonNotAnswering` when
        the daemon holds it but does not answer within ``wait``, :class:`ControlError` when it
        answers with an error.
        """
        deadline = time.monotonic() + wait
        started = time.monotonic()
        while True:
            try:
                return self._once(cmd, args, max(0.5, deadline - time.monotonic()))
            except _NotListening:
                if not self.held():
                    raise DaemonNotRunning(str(self.layout.root)) from None
            except TimeoutError:
                raise DaemonNotAnswering(self._silence(time.monotonic() - started, sent=True)) from None
            if time.monotonic() >= deadline:
                raise DaemonNotAnswering(self._silence(time.monotonic() - started, sent=False))
            if progress is not None:
                progress(time.monotonic() - started)
            time.sleep(0.05)

    def ping(self, wait: float = 30.0, progress: Progress | None = None) -> dict[str, Any] | None:
        """The daemon's ping reply, or ``None`` when no daemon holds the root."""
        try:
            return self.call("ping", wait=wait, progress=progress)
        except DaemonNotRunning:
            return None

    def _silence(self, seconds: float, *, sent: bool) -> str:
        pid = owner_pid(self.layout)
        who = f"hermesd (PID {pid})" if pid else "a hermesd"
        what = "did not answer" if sent else "is not accepting requests"
        tail = " (the request may still be carried out)" if sent else ""
        return (f"{who} holds {self.layout.root} but {what} within {seconds:.0f}s{tail}; it may be starting, "
                f"overloaded or stopped (see {self.layout.daemon_log})")

    def _once(self, cmd: str, args: dict[str, Any], timeout: float) -> dict[str, Any]:
        try:
            path = self.layout.socket_checked()
        except (FileNotFoundError, NotADirectoryError):
            raise _NotListening from None
        s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        s.settimeout(timeout)
        try:
            try:
                s.connect(str(path))
            except (FileNotFoundError, NotADirectoryError, ConnectionRefusedError) as exc:
                raise _NotListening from exc
            chunks = []
            try:
                s.sendall(encode({"cmd": cmd, **args}))
                while True:
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    chunks.append(chunk)
            except (ConnectionResetError, BrokenPipeError):
                # Reset without an answer: the daemon is going away (a stop got there first); the
                # same as a close without an answer below, never a traceback.
                raise _NotListening from None
        finally:
            s.close()
        raw = b"".join(chunks)
        if not raw:
            raise _NotListening  # closed without answering: the daemon is going away
        reply = json.loads(raw)
        if not reply.get("ok"):
            raise ControlError(reply.get("error") or "request failed")
        return reply


class _NotListening(Exception):
    """Nobody accepted the connection (yet)."""
