"""The daemon's side of the control socket: one request per connection, checked, then one handler.

The server knows nothing of supervision: it reads at most :data:`MAX_REQUEST` bytes within
:data:`READ_TIMEOUT`, checks the peer (same user or root) and the request against
:data:`protocol.REQUESTS`, and hands the arguments to the handler registered for the verb. Junk,
oversized, slow or foreign requests get an error reply naming the problem and never reach a
handler; a bug in one handler is logged and answered, and never takes the daemon down.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from supervisor.control.protocol import (
    MAX_REQUEST,
    READ_TIMEOUT,
    REQUESTS,
    Peer,
    RequestError,
    boot_ticks,
    decode_request,
    encode,
    peer_pid_uid,
    peer_pidfd,
)

log = logging.getLogger("hermesd")

Handler = Callable[..., Awaitable[dict[str, Any]]]


class ControlServer:
    """Serve ``handlers`` (one per verb of :data:`REQUESTS`) on the unix socket ``path``."""

    def __init__(self, path: Path, handlers: Mapping[str, Handler],
                 on_request: Callable[[str, bool], None] | None = None, *,
                 peer_check: Callable[[Peer], str | None] | None = None,
                 max_request: int = MAX_REQUEST, mode: int = 0o600) -> None:
        """``peer_check(peer)`` (a restricted server, e.g. the kanban hand-off socket): returns
        why the peer is refused, or ``None``; it replaces the same-user check, and only the verbs
        in ``handlers`` are served. Without it every verb of :data:`REQUESTS` needs a handler.
        The check gets the peer's pidfd (Linux 6.5+) or the moment of the accept, so it can prove
        the PID it looks at is still the process that connected."""
        missing = set(REQUESTS) - set(handlers)
        if missing and peer_check is None:
            raise ValueError(f"no handler for {sorted(missing)}")
        self.path = path
        self.handlers = handlers
        self.on_request = on_request  # (verb, ok) for metrics
        self.peer_check = peer_check
        self.max_request = min(max_request, MAX_REQUEST)
        self.mode = mode
        self._server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()  # the caller holds the root lock, so a socket file here is stale
        # The mode comes from the umask at bind(): no chmod by path afterwards, which would follow a
        # link put in the socket's place in between.
        old = os.umask(0o777 & ~self.mode)
        try:
            self._server = await asyncio.start_unix_server(self._serve, path=str(self.path),
                                                           limit=self.max_request + 1)
        finally:
            os.umask(old)

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
        with contextlib.suppress(OSError):
            self.path.unlink()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        verb = "?"
        try:
            reply = await self._reply(reader, writer)
            verb = reply.pop("_verb", verb)
            if self.on_request is not None:
                self.on_request(verb, bool(reply.get("ok")))
            writer.write(encode(reply))
            await asyncio.wait_for(writer.drain(), READ_TIMEOUT)
        except (ConnectionError, TimeoutError, OSError, asyncio.CancelledError, _Silent):
            pass  # the client went away, or the daemon is shutting down mid-request
        except Exception:  # a bug in one request must not take down the daemon
            log.exception("control request %s failed", verb)
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _reply(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> dict[str, Any]:
        sock = writer.get_extra_info("socket")
        pid, uid = peer_pid_uid(sock) if sock is not None else (None, None)
        if self.peer_check is not None:
            accepted = boot_ticks()
            pidfd = peer_pidfd(sock) if sock is not None else None
            try:
                refused = "no peer credentials" if pid is None or uid is None else \
                    self.peer_check(Peer(pid, uid, pidfd, accepted))
            finally:
                if pidfd is not None:
                    os.close(pidfd)
            if refused:
                return await _refuse(reader, refused)
        elif uid is None or (uid != os.getuid() and uid != 0):
            return await _refuse(reader, "not the daemon's user")
        try:
            line = await asyncio.wait_for(reader.readuntil(b"\n"), READ_TIMEOUT)
            verb, args = decode_request(line.strip())
            if verb not in self.handlers:
                raise RequestError(f"request {verb!r} is not served on this socket")
        except (asyncio.LimitOverrunError, ValueError) as exc:
            if isinstance(exc, RequestError):
                return {"ok": False, "error": str(exc)}
            return {"ok": False, "error": f"request too large (limit {self.max_request} bytes)"}
        except asyncio.IncompleteReadError as exc:
            if not exc.partial.strip():
                raise _Silent from None
            return {"ok": False, "error": "malformed request: no newline before end of input"}
        except TimeoutError:
            return {"ok": False, "error": f"request not received within {READ_TIMEOUT:.0f}s"}
        try:
            reply = await self.handlers[verb](**args)
        except (KeyError, ValueError) as exc:
            reply = {"ok": False, "error": str(exc.args[0]) if exc.args else str(exc)}
        return {**reply, "_verb": verb}


async def _refuse(reader: asyncio.StreamReader, why: str) -> dict[str, Any]:
    """The refusal, once the client has sent its line: it is read to the newline (at most the
    socket's limit, within the read timeout) and dropped unparsed. Closing with it unread would make
    the client's write fail (EPIPE) before it ever reads why it was refused."""
    with contextlib.suppress(asyncio.LimitOverrunError, asyncio.IncompleteReadError, TimeoutError, OSError):
        await asyncio.wait_for(reader.readuntil(b"\n"), READ_TIMEOUT)
    return {"ok": False, "error": f"permission denied: {why}"}


class _Silent(Exception):
    """The client connected and sent nothing: close without a reply."""


def quiet_loop_errors(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """The event loop's error handler: asyncio's own noise around a closed listener is dropped.

    Out of descriptors, asyncio stops accepting and schedules a re-arm of the listener per failed
    ``accept`` (``ACCEPT_RETRY_DELAY`` later). A listener closed meanwhile (a stop while idle clients
    hold every descriptor) makes each of those timers raise ``ValueError: Invalid file descriptor:
    -1``, and each connection cancelled by the close makes Python 3.11's stream callback raise
    ``CancelledError``: measured, 200 tracebacks and 400 KiB of log for one stop under a limit of 64
    descriptors. Neither means anything once the listener is closed; everything else goes to
    asyncio's default handler.
    """
    exc = context.get("exception")
    callback = getattr(context.get("handle"), "_callback", None)
    name = getattr(callback, "__qualname__", "")
    if isinstance(exc, ValueError) and name.endswith("_start_serving"):
        return
    if isinstance(exc, asyncio.CancelledError) and name.startswith("StreamReaderProtocol.connection_made"):
        return
    loop.default_exception_handler(context)

