"""The control protocol: small JSON requests over a private unix socket, declared once.

One request per connection: a JSON object on one line, answered by one JSON line. Every request
the daemon accepts is a row of :data:`REQUESTS` with its arguments and their types; the server
checks a request against its row before any handler sees it, and names what is wrong (unknown
request, unknown or missing argument, wrong type). No request runs a command: every verb maps to
one fixed daemon handler.
"""

from __future__ import annotations

import json
import os
import struct
import time
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    import socket

MAX_REQUEST = 64 * 1024
READ_TIMEOUT = 5.0

# request -> {argument: (type, required)}
REQUESTS: dict[str, dict[str, tuple[type, bool]]] = {
    "ping": {},
    "status": {},
    "start": {"profile": (str, True)},
    "stop": {"profile": (str, True)},
    "restart": {"profile": (str, True), "graceful": (bool, False), "force": (bool, False)},
    "check": {"profile": (str, True)},
    "shutdown": {"keep_children": (bool, False)},
    "reload": {},
    "metrics": {},
    # HERMES_BIN of a dispatching gateway (supervisor.kanban.worker): run a kanban worker in its assignee's domain
    "kanban_worker": {"assignee": (str, True), "argv": (list, True), "env": (dict, True), "log": (str, True)},
    "kanban_wait": {"pid": (int, True)},
    # a fleet operation's step (hermesd upgrade): one of observe.events.CLIENT_EVENTS, into the journal
    "record": {"event": (str, True), "profile": (str, False), "fields": (dict, False)},
}


class RequestError(ValueError):
    """A request the daemon refuses before acting; the message is the reply's error."""


# Linux 6.5+: a pidfd of the process that connected, taken by the kernel at connect(); later
# kernels refuse the option (ENOPROTOOPT) and the peer's start time stands in (see Peer).
SO_PEERPIDFD = 77


class Peer(NamedTuple):
    """Who is on the other end of a connection, as far as the kernel can say (a named tuple, not a
    frozen dataclass: the status client imports this module, and making that class cost it ~1 ms).

    ``pid`` (``SO_PEERCRED``) is the PID at ``connect()``: by the time it is checked that process
    may have exited and the PID been reused. ``pidfd`` (``SO_PEERPIDFD``) pins the process itself;
    without it, ``accepted_ticks`` (the boot clock when the connection was accepted, in the clock
    ticks of ``/proc/<pid>/stat``) lets a check refuse a process that started after it.
    """

    pid: int | None
    uid: int | None
    pidfd: int | None = None
    accepted_ticks: int | None = None


def peer_pidfd(sock: socket.socket) -> int | None:
    """``SO_PEERPIDFD`` (the caller closes it), or ``None`` where the kernel has no such option."""
    import socket  # the daemon's side only: the status client talks through _socket (control.client)

    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, SO_PEERPIDFD, 4)
    except OSError:
        return None
    fd = struct.unpack("i", raw)[0]
    return fd if fd >= 0 else None


def boot_ticks() -> int:
    """Now, in the unit of ``/proc/<pid>/stat``'s start time (clock ticks since boot)."""
    return int(time.clock_gettime(time.CLOCK_BOOTTIME) * os.sysconf("SC_CLK_TCK"))


def peer_pid_uid(sock: socket.socket) -> tuple[int | None, int | None]:
    """The connecting process's PID (in our PID namespace) and uid, from ``SO_PEERCRED``."""
    import socket  # the daemon's side only: the status client talks through _socket (control.client)

    try:
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return None, None
    pid, uid, _gid = struct.unpack("3i", creds)
    return (pid or None), uid


def decode_request(line: bytes) -> tuple[str, dict[str, Any]]:
    """Parse and check one request line: ``(verb, arguments)``; :class:`RequestError` says what is wrong."""
    if len(line) > MAX_REQUEST:
        raise RequestError(f"request too large (limit {MAX_REQUEST} bytes)")
    try:
        obj = json.loads(line)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise RequestError("malformed request: expected one JSON object per line") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("cmd"), str):
        raise RequestError("malformed request: expected an object with a string 'cmd'")
    verb = obj.pop("cmd")
    spec = REQUESTS.get(verb)
    if spec is None:
        raise RequestError(f"unknown request {verb[:40]!r} (known: {', '.join(REQUESTS)})")
    for key, value in obj.items():
        if key not in spec:
            raise RequestError(f"{verb}: unknown argument {str(key)[:40]!r}")
        kind = spec[key][0]
        if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
            raise RequestError(f"{verb}: {key!r} must be a {kind.__name__}")
    missing = [k for k, (_t, required) in spec.items() if required and k not in obj]
    if missing:
        raise RequestError(f"{verb}: missing {', '.join(repr(k) for k in missing)}")
    return verb, obj


def encode(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj).encode() + b"\n"
