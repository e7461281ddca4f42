"""``gateway.sock``: the control socket a gateway of the multiplex-default line binds in its home.

Measured on upstream main after 0.21.3 (``gateway/control_socket.py``): a unix stream socket at
``$HERMES_HOME/gateway.sock``, one request per connection, one JSON line in and one out, then the
server closes. ``identify`` answers who the gateway is and what it serves; it is a stronger proof
than a PID file, because only the live process can answer on its own socket. Homes whose socket
path would exceed 100 bytes get a socket in the temp folder named by a ``gateway.sock.path``
pointer file; hermesd does not follow such a pointer (it names any path a profile likes), so those
gateways are read from their files only.

Pure: the request bytes and the parsing of an answer. The client that connects (through an
``O_PATH`` descriptor, never following a planted link) is ``supervisor.processes.gatewaysock``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from profiles.upstream.multiplex import others_served

SOCKET_NAME = "gateway.sock"
POINTER_NAME = "gateway.sock.path"  # names the socket in the temp folder when the home's path is too long
PROTOCOL = 1
MAX_REPLY_BYTES = 64 * 1024  # upstream caps replies at 512 KiB; an identify answer is a few hundred bytes
IDENTIFY = "identify"


def request(verb: str) -> bytes:
    """One request line, as upstream's own client sends it."""
    return json.dumps({"verb": verb, "id": 1, "protocol": PROTOCOL}).encode() + b"\n"


@dataclass(frozen=True, slots=True)
class Identity:
    """A live gateway's ``identify`` answer, checked for types (everything else is dropped)."""

    pid: int
    start_time: int | None
    hermes_home: str | None
    profile: str | None
    supervisor: str | None
    served: tuple[str, ...] | None  # None: the gateway published no served set (it serves its own profile)
    multiplex: bool | None

    def serves_others(self, profile: str) -> tuple[str, ...]:
        """Profiles besides ``profile`` this gateway says it serves."""
        return others_served(list(self.served or ()), profile) or ()

    def to_json(self) -> dict[str, Any]:
        return {"pid": self.pid, "start_time": self.start_time, "hermes_home": self.hermes_home,
                "profile": self.profile, "supervisor": self.supervisor,
                "served_profiles": list(self.served) if self.served is not None else None}


class ProtocolError(ValueError):
    """The answer is not an ``identify`` reply; the message says why in one line."""


def _text(value: object, limit: int = 4096) -> str | None:
    return value[:limit] if isinstance(value, str) else None


def parse_identify(raw: bytes) -> Identity:
    """The first line of ``raw`` as an ``identify`` answer; :class:`ProtocolError` when it is not one."""
    line = raw.split(b"\n", 1)[0]
    try:
        reply = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise ProtocolError("the answer is not one line of JSON") from None
    if not isinstance(reply, dict) or reply.get("ok") is not True or not isinstance(reply.get("result"), dict):
        err = reply.get("error") if isinstance(reply, dict) else None
        raise ProtocolError(f"the gateway refused identify: {_text(err, 200) or 'no result'}")
    result = reply["result"]
    pid = result.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        raise ProtocolError("identify names no PID")
    start = result.get("start_time")
    served = result.get("served_profiles")
    multiplex = result.get("multiplex")
    return Identity(
        pid=pid,
        start_time=start if isinstance(start, int) and not isinstance(start, bool) else None,
        hermes_home=_text(result.get("hermes_home")),
        profile=_text(result.get("profile"), 256),
        supervisor=_text(result.get("supervisor"), 64),
        served=tuple(s[:256] for s in served if isinstance(s, str))[:1000] if isinstance(served, list) else None,
        multiplex=multiplex if isinstance(multiplex, bool) else None,
    )
