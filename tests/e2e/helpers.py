"""Helpers for the real-gateway end-to-end tests: events, /metrics, /proc readings, cleanup by PID.

Every process these tests start themselves (hooks, fork bombs) writes its PID to a file the test
names; :class:`PidFiles` SIGKILLs each one still alive at the end (checked against its start time,
so a recycled PID is never hit). Gateways and their trees carry hermesd's tag and are killed by
``Hermesd.close()``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Any

from profiles.upstream.process import proc_start_time
from tests.harness import Hermesd, wait_for

HERMES = Path(os.environ.get("HERMESD_TEST_HERMES") or Path(sys.executable).parent / "hermes")


def events(d: Hermesd, *profiles: str) -> list[dict[str, Any]]:
    """The journal read back through ``hermesd events --json`` (as a user would)."""
    out = d.cli("events", "--json", *profiles)
    assert out.returncode == 0 and "Traceback" not in out.stderr, out
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


def types_of(evs: list[dict[str, Any]], profile: str, after_seq: int = 0) -> list[str]:
    return [e["type"] for e in evs if e.get("profile") == profile and e["seq"] > after_seq]


def last_seq(d: Hermesd) -> int:
    evs = events(d)
    return max((e["seq"] for e in evs if e.get("daemon") == d.proc.pid), default=0)


def wait_events(d: Hermesd, profile: str, want: list[str], after_seq: int, timeout: float,
                only: set[str] | None = None) -> list[dict[str, Any]]:
    """Wait until ``profile``'s events after ``after_seq`` (this daemon's; of the types in ``only``
    when given) start with the types ``want``; fail at once when they have gone another way."""
    def current():
        return [e for e in events(d, profile) if e.get("daemon") == d.proc.pid and e["seq"] > after_seq
                and (only is None or e["type"] in only)]

    def check():
        evs = current()
        types = [e["type"] for e in evs]
        if types[: len(want)] == want:
            return evs[: len(want)]
        if types != want[: len(types)]:
            raise _Diverged()
        return None

    try:
        return wait_for(check, timeout, 0.2, what=f"{profile} events {want}")
    except (AssertionError, _Diverged):
        got = [(e["type"], e.get("kind") or e.get("by") or e.get("limit") or "") for e in current()]
        raise AssertionError(f"{profile}: expected events {want} after seq {after_seq}, got {got}") from None


class _Diverged(Exception):
    pass


def scrape_unix(path: str, timeout: float = 5.0) -> tuple[int, str, str]:
    """GET /metrics over a unix socket: (status code, content type, body)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(path)
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    raw = b"".join(chunks)
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    code = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])}
    if headers.get("transfer-encoding", "").lower() == "chunked":
        out, rest = b"", body
        while rest:
            size_text, _, rest = rest.partition(b"\r\n")
            size = int(size_text.split(b";")[0], 16)
            if size == 0:
                break
            out, rest = out + rest[:size], rest[size + 2:]
        body = out
    return code, headers.get("content-type", ""), body.decode()


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a Prometheus text exposition, parsed by prometheus_client's own parser."""
    from prometheus_client.parser import text_string_to_metric_families

    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def proc_status(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/status") as fh:
        return {k: v.strip() for k, _, v in (line.partition(":") for line in fh)}


def rss_bytes(pid: int) -> int:
    """RSS as ``ps`` and ``top`` show it: ``/proc/PID/stat`` field 24 (the kernel's per-CPU counter).

    Since Linux 6.16 ``VmRSS`` in ``/proc/PID/status`` is the exact sum of those counters and can be a
    few hundred KiB above it; hermesd reads ``stat``, like ``ps``.
    """
    with open(f"/proc/{pid}/stat", "rb") as fh:
        raw = fh.read()
    return int(raw[raw.rindex(b")") + 2:].split()[21]) * os.sysconf("SC_PAGE_SIZE")


def threads(pid: int) -> int:
    return int(proc_status(pid)["Threads"])


def state_letter(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read()
    except OSError:
        return None
    return raw[raw.rindex(b")") + 2:].split()[0].decode()


def alive(pid: int) -> bool:
    return state_letter(pid) not in (None, "Z", "X")


def heartbeat_age(home: Path, pid: int) -> float | None:
    """Age in seconds of ``pid``'s own heartbeat (None before its first)."""
    import time

    try:
        beat = json.loads((home / "state" / "gateway.heartbeat").read_text())
    except (OSError, ValueError):
        return None
    if beat.get("pid") != pid or not isinstance(beat.get("monotonic"), int | float):
        return None
    return time.monotonic() - beat["monotonic"]


class PidFiles:
    """PIDs written by processes a test started outside hermesd's tag; all SIGKILLed at the end."""

    def __init__(self) -> None:
        self.files: list[Path] = []
        self.seen: dict[int, int | None] = {}

    def add(self, path: Path) -> Path:
        self.files.append(path)
        return path

    def pids(self, path: Path) -> list[int]:
        try:
            text = path.read_text()
        except FileNotFoundError:
            return []
        out = [int(x) for x in text.split() if x.isdigit()]
        for pid in out:
            self.seen.setdefault(pid, proc_start_time(pid))
        return out

    def kill_all(self) -> list[int]:
        for path in self.files:
            self.pids(path)
        killed = []
        for pid, start in self.seen.items():
            if start is not None and proc_start_time(pid) == start and alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                killed.append(pid)
        return killed
