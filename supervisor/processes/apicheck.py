"""``GET /v1/health`` on a gateway's API server, counted only when the gateway's own socket answered.

The port comes from the profile's files, which the profile's agent can write: it could name another
profile's API server, hermesd's metrics listener or any other local service, and a listener there
must never make this profile look served. So a check connects to 127.0.0.1 only, only to a port the
gateway process itself listens on, and counts an answer only when it can trace it to the gateway:

1. **Before connecting** (the kernel's listeners on that port, :mod:`supervisor.processes.sockdiag`; the
   gateway must share hermesd's network namespace): every listening socket on that port that a
   connection to 127.0.0.1 can reach (bound to 127.0.0.1, 0.0.0.0, ``::`` or ``::ffff:127.0.0.1``)
   must be an open descriptor of the gateway process (``/proc/PID/fd``), and there must be one.
   Another process's listener there: hermesd never connects. The gateway listening on that port
   only on another address (a LAN address): not probed, and the platform state decides
   (:mod:`supervisor.plan.readiness`).
2. **The request**: HTTP/1.1, keep-alive, no key (the route needs none); connect, request and answer
   within :data:`TIMEOUT_S` together, at most 16 KiB of headers and 4 KiB of body. A ``200`` whose
   JSON says ``"status": "ok"`` is an answer.
3. **With the connection still open**, the server's end of it (the socket whose peer is ours) must
   be a descriptor of the gateway, and the gateway's start time unchanged: that closes the race in
   which the gateway exits between 1 and 2 and another process takes its port or its PID.

The kernel lookups and the descriptor scan are bounded (a gateway with more than :data:`MAX_FDS`
descriptors is not traced; 1.4 ms in all for a real gateway's 26 here) and run in ``executor`` (the
daemon's reader thread); the request runs on the caller's event loop, so a gateway that accepts and never
answers costs a timer, not a thread.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import os
import time
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

from profiles.upstream.apiserver import API_HEALTH_PATH, API_HEALTH_STATUS
from profiles.upstream.process import proc_start_time
from supervisor.plan.readiness import Outcome
from supervisor.processes import sockdiag
from supervisor.processes.sockdiag import IPAddress

TIMEOUT_S = 2.0
MAX_FDS = 16384
MAX_HEAD = 16384
MAX_BODY = 4096
LOOPBACK = ipaddress.IPv4Address("127.0.0.1")
_MAPPED_LOOPBACK = ipaddress.IPv6Address("::ffff:127.0.0.1")
_ANY4 = ipaddress.IPv4Address("0.0.0.0")
_ANY6 = ipaddress.IPv6Address("::")


@dataclass(frozen=True, slots=True)
class ApiCheck:
    """One check of one gateway's API server (``at``: Unix time it was made)."""

    pid: int
    port: int
    outcome: Outcome
    detail: str
    at: float
    took_ms: float

    @property
    def answered(self) -> bool:
        return self.outcome == Outcome.ANSWERED

    def to_json(self) -> dict[str, Any]:
        return {"pid": self.pid, "port": self.port, "outcome": str(self.outcome), "answered": self.answered,
                "detail": self.detail, "at": self.at, "took_ms": self.took_ms}


def pending(pid: int, port: int) -> dict[str, Any]:
    """The row's ``api`` before the first check of this gateway has come back."""
    return {"pid": pid, "port": port, "outcome": str(Outcome.PENDING), "answered": False,
            "detail": f"127.0.0.1:{port} not checked yet", "at": None, "took_ms": None}


async def check(pid: int, start_time: int | None, port: int, *, executor: Executor | None = None,
                timeout: float = TIMEOUT_S) -> ApiCheck:
    """Check the API server of gateway ``pid`` (started at ``start_time``) on ``port`` (see the module docstring)."""
    loop = asyncio.get_running_loop()
    began, at = time.monotonic(), time.time()

    def done(outcome: Outcome, detail: str) -> ApiCheck:
        return ApiCheck(pid, port, outcome, detail, at, round((time.monotonic() - began) * 1000, 1))

    refused = await loop.run_in_executor(executor, listening_problem, pid, start_time, port)
    if refused is not None:
        return done(*refused)
    where = f"127.0.0.1:{port}"
    asked = time.monotonic()  # the request's own deadline: a busy reader thread is not the gateway's fault
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection(str(LOOPBACK), port, limit=MAX_HEAD)
    except TimeoutError:
        return done(Outcome.TIMEOUT, f"{where} did not accept a connection within {timeout:g}s")
    except OSError as exc:
        return done(Outcome.REFUSED, f"{where} refused the connection ({exc.strerror or exc})")
    try:
        try:
            async with asyncio.timeout(max(0.0, timeout - (time.monotonic() - asked))):
                answer = await _ask(reader, writer, port)
        except TimeoutError:
            return done(Outcome.TIMEOUT, f"{where} did not answer {API_HEALTH_PATH} within {timeout:g}s")
        except (OSError, EOFError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as exc:
            return done(Outcome.BAD_ANSWER, f"{where} gave no usable answer to {API_HEALTH_PATH} ({_short(exc)})")
        if answer is not None:
            return done(Outcome.BAD_ANSWER, f"{where} answered {API_HEALTH_PATH} with {answer}")
        mine = writer.get_extra_info("sockname")
        ours = mine[1] if isinstance(mine, tuple) and len(mine) >= 2 else None
        traced = await loop.run_in_executor(executor, answered_by_gateway, pid, start_time, port, ours)
        if not traced:
            return done(Outcome.UNTRACED, f"{where} answered, but not from this gateway's own socket")
        return done(Outcome.ANSWERED, f"answers on {where}")
    finally:
        writer.close()


async def _ask(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, port: int) -> str | None:
    """Send the request and read the answer: None when it is a healthy one, else what was wrong."""
    writer.write(f"GET {API_HEALTH_PATH} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUser-Agent: hermesd\r\n"
                 "Accept: application/json\r\n\r\n".encode("ascii"))
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/"):
        return "something that is not HTTP"
    if parts[1] != "200":
        return f"HTTP {parts[1][:3]}"
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
    length = int(headers.get("content-length", "-1"))
    if not 0 <= length <= MAX_BODY:
        return "a body of unknown or excessive length"
    body = await reader.readexactly(length)
    try:
        doc = json.loads(body)
    except ValueError:
        return "a body that is not JSON"
    if not isinstance(doc, dict) or doc.get("status") != API_HEALTH_STATUS:
        return f"a status other than {API_HEALTH_STATUS!r}"
    return None


def _short(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:120] or type(exc).__name__


# --------------------------------------------------------------------------- whose socket


def listening_problem(pid: int, start_time: int | None, port: int) -> tuple[Outcome, str] | None:
    """Why hermesd must not (or need not) connect to 127.0.0.1:``port`` for gateway ``pid``; None: go ahead."""
    fds = _socket_inodes(pid)
    if fds is None or not _same_process(pid, start_time):
        return Outcome.UNKNOWN, f"cannot read the descriptors of gateway PID {pid} (gone, or too many)"
    if not _same_network(pid):
        return Outcome.UNKNOWN, f"gateway PID {pid} runs in another network namespace; hermesd checks its own"
    try:
        found = sockdiag.listeners(port)
    except OSError as exc:
        return Outcome.UNKNOWN, f"cannot list the listeners on port {port} ({exc.strerror or exc})"
    reachable = [s for s in found if _reached_from_loopback(s.local)]
    if any(s.inode not in fds for s in reachable):
        return Outcome.NOT_ITS_OWN, f"another process listens on 127.0.0.1:{port}; hermesd does not connect to it"
    if reachable:
        return None
    elsewhere = sorted({str(s.local) for s in found if s.inode in fds})
    if elsewhere:
        return Outcome.ELSEWHERE, (f"it listens on port {port} only on {', '.join(elsewhere)}; hermesd checks "
                                   "127.0.0.1 only")
    return Outcome.NO_LISTENER, f"nothing listens on 127.0.0.1:{port}"


def answered_by_gateway(pid: int, start_time: int | None, port: int, ours: int | None) -> bool:
    """Whether the server's end of our connection (from 127.0.0.1:``ours`` to ``port``) is gateway ``pid``'s."""
    if ours is None:
        return False
    ends = []
    try:  # the server's socket is IPv4, or IPv6 with mapped addresses when it listens on "::"
        for addr in (LOOPBACK, _MAPPED_LOOPBACK):
            if (end := sockdiag.connection(addr, port, addr, ours)) is not None:
                ends.append(end)
    except OSError:
        return False
    fds = _socket_inodes(pid)
    return bool(ends) and fds is not None and all(e.inode in fds for e in ends) and _same_process(pid, start_time)


def _same_process(pid: int, start_time: int | None) -> bool:
    now = proc_start_time(pid)
    return now is not None and (start_time is None or now == start_time)


def _same_network(pid: int) -> bool:
    """127.0.0.1 is hermesd's: a gateway in another network namespace listens on another loopback."""
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino == os.stat("/proc/self/ns/net").st_ino
    except OSError:
        return False


def _reached_from_loopback(addr: IPAddress) -> bool:
    """A listener bound here accepts a connection to 127.0.0.1 (``::`` unless it is IPv6-only)."""
    if isinstance(addr, ipaddress.IPv6Address):
        return addr == _ANY6 or addr.ipv4_mapped in (LOOPBACK, _ANY4)
    return addr in (LOOPBACK, _ANY4)


def _socket_inodes(pid: int) -> set[int] | None:
    """The socket inodes among gateway ``pid``'s open descriptors; None when unreadable or too many."""
    found: set[int] = set()
    try:
        with os.scandir(f"/proc/{pid}/fd") as entries:
            for n, entry in enumerate(entries):
                if n >= MAX_FDS:
                    return None
                try:
                    target = os.readlink(entry.path)
                except OSError:
                    continue  # closed meanwhile
                if target.startswith("socket:["):
                    found.add(int(target[8:-1]))
    except (OSError, ValueError):
        return None
    return found
