"""The control socket: small JSON requests over a private unix socket.

One request per connection: a JSON object on one line, answered by one JSON line. The server
checks the peer's uid (same user or root), caps the request size and the time a client may take
to send it, and answers junk with an error instead of letting it near the daemon. No request
runs a command: every verb maps to one fixed daemon method.
"""

from __future__ import annotations

import json
import socket
import struct
from pathlib import Path
from typing import Any

MAX_REQUEST = 64 * 1024
READ_TIMEOUT = 5.0


class DaemonNotRunning(ConnectionError):
    """Nothing answers on the control socket."""


class ControlError(RuntimeError):
    """The daemon answered with an error."""


def peer_uid(sock: socket.socket) -> int | None:
    try:
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return None
    _pid, uid, _gid = struct.unpack("3i", creds)
    return uid


def decode_request(line: bytes) -> dict[str, Any]:
    """Parse one request line; raise ``ValueError`` with a message fit for the reply."""
    if len(line) > MAX_REQUEST:
        raise ValueError(f"request too large (limit {MAX_REQUEST} bytes)")
    try:
        obj = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        raise ValueError("malformed request: expected one JSON object per line") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("cmd"), str):
        raise ValueError("malformed request: expected an object with a string 'cmd'")
    return obj


def request(sock_path: Path, payload: dict[str, Any], timeout: float = 10.0) -> dict[str, Any]:
    """Send one request and return the reply; raise ``DaemonNotRunning`` when nobody listens."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        try:
            s.connect(str(sock_path))
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            raise DaemonNotRunning(str(sock_path)) from exc
        s.sendall(json.dumps(payload).encode() + b"\n")
        chunks = []
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        s.close()
    raw = b"".join(chunks)
    if not raw:
        raise DaemonNotRunning(f"{sock_path}: the daemon closed the connection without answering")
    reply = json.loads(raw)
    if not reply.get("ok"):
        raise ControlError(reply.get("error") or "request failed")
    return reply
