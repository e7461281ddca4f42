"""Ask a gateway over its ``gateway.sock`` who it is and what it serves (``identify``).

The socket lives in the profile's home, which the profile controls: a planted symlink there could
send hermesd (root) to any socket on the machine. So the socket is opened ``O_PATH`` through
:mod:`profiles.safeio` (no link followed from the root down; a link is refused), the descriptor must be a
socket, and hermesd connects to ``/proc/self/fd/N`` of that descriptor: the kernel resolves that
to the very inode checked, whatever is renamed meanwhile. The reply is bounded in size and time
(a gateway that never answers costs ``timeout`` seconds, in the daemon's reader pool, never on its
loop). The protocol facts are :mod:`profiles.upstream.control_socket`.
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat
import time
from pathlib import Path

from profiles import safeio
from profiles.upstream.control_socket import (
    IDENTIFY,
    MAX_REPLY_BYTES,
    POINTER_NAME,
    SOCKET_NAME,
    Identity,
    ProtocolError,
)
from profiles.upstream.control_socket import parse_identify as _parse
from profiles.upstream.control_socket import request as _request


class GatewaySockError(OSError):
    """No ``identify`` answer; the message says why in one line (for status and logs)."""


def _open_socket_path(home: Path) -> int:
    """An ``O_PATH`` descriptor of ``<home>/gateway.sock`` reached without a link, checked to be a socket."""
    where = safeio.home_file(home, SOCKET_NAME)
    try:
        fd = safeio.open_beneath(where, os.O_PATH | os.O_NOFOLLOW)
    except FileNotFoundError:
        if safeio.lstat(where.sibling(POINTER_NAME)) is not None:
            raise GatewaySockError(f"{where}: the gateway put its control socket elsewhere "
                                   f"({POINTER_NAME}: the home's path is too long for a unix socket); hermesd "
                                   "does not follow that pointer") from None
        raise GatewaySockError(f"{where}: no control socket") from None
    except safeio.LinkRefusedError:
        raise GatewaySockError(f"{where}: is a symlink (not followed)") from None
    except OSError as exc:
        raise GatewaySockError(f"{where}: cannot open: {exc.strerror}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISSOCK(mode):
        os.close(fd)
        what = "a symlink (not followed)" if stat.S_ISLNK(mode) else "not a socket"
        raise GatewaySockError(f"{where}: is {what}")
    return fd


def ask(home: Path, verb: str = IDENTIFY, timeout: float = 1.0) -> bytes:
    """The raw reply of the gateway behind ``<home>/gateway.sock`` to ``verb`` (at most MAX_REPLY_BYTES)."""
    fd = _open_socket_path(home)
    deadline = time.monotonic() + timeout
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC) as sock:
            sock.settimeout(timeout)
            try:
                sock.connect(f"/proc/self/fd/{fd}")
                sock.sendall(_request(verb))
                chunks: list[bytes] = []
                size = 0
                while b"\n" not in b"".join(chunks[-2:]):
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise GatewaySockError(f"{home / SOCKET_NAME}: no answer within {timeout:g} s")
                    sock.settimeout(left)
                    chunk = sock.recv(min(65536, MAX_REPLY_BYTES + 1 - size))
                    if not chunk:
                        break
                    chunks.append(chunk)
                    size += len(chunk)
                    if size > MAX_REPLY_BYTES:
                        raise GatewaySockError(f"{home / SOCKET_NAME}: answer over {MAX_REPLY_BYTES} bytes")
                return b"".join(chunks)
            except TimeoutError:
                raise GatewaySockError(f"{home / SOCKET_NAME}: no answer within {timeout:g} s") from None
            except OSError as exc:
                if isinstance(exc, GatewaySockError):
                    raise
                raise GatewaySockError(f"{home / SOCKET_NAME}: {exc.strerror or exc}") from None
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)


def identify(home: Path, timeout: float = 1.0) -> Identity:
    """Who answers on ``<home>/gateway.sock``; :class:`GatewaySockError` when nobody does (or nonsense)."""
    raw = ask(home, IDENTIFY, timeout)
    try:
        return _parse(raw)
    except ProtocolError as exc:
        raise GatewaySockError(f"{home / SOCKET_NAME}: {exc}") from None
