"""Prometheus metrics: counters fed by events, the text format, and a small ``/metrics`` listener.

Why no ``prometheus_client`` in the daemon: measured on this machine (Python 3.11, bare
interpreter with asyncio, json, logging and yaml loaded as the daemon has them), importing it and
registering hermesd's metrics for 20 profiles costs 4.9 MiB of RSS, over the 2 MiB budget; and it
imports ``ssl``, which the daemon deliberately blocks (0.9 MiB for nothing), so it would not even
import there. The 0.0.4 text format is small and stable, so it is written here and every test
parses it with ``prometheus_client.parser`` (the official parser) and lints it with
``promtool check metrics``.

Where the numbers come from:

- per-profile gauges from a status document shaped like ``hermesd status --json`` (rows with
  ``name, state, pid, uptime_s, restarts, last_exit, next_retry_at, should_run, hold, platforms,
  heartbeat_age_s, rss_bytes`` and, once resource limits land, ``memory_bytes, tasks, limits,
  isolation``): what is true at scrape time;
- counters from :class:`Counters`, which the daemon feeds with every event it emits (so the
  counters are exactly a replay of this run's journal) plus control requests and hook outcomes.

API (the daemon)::

    counters = Counters()
    counters.observe(event)                           # for every emitted event
    counters.control_request("restart", "ok")         # per control request: ok | error | denied
    counters.hook_outcome("timeout")                  # HookRunner(on_outcome=counters.hook_outcome)
    text = render(status_document, counters, version=__version__, now=time.time(), process=True)
    server = MetricsServer(settings, lambda: render(...)); await server.start(); ...; await server.close()
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import resource
import stat
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from supervisor.observe.events import EXIT_KINDS
from supervisor.observe.sections import MetricsSettings

log = logging.getLogger("hermesd")

STATES = ("starting", "running", "stopping", "stopped", "backoff", "held")
CONTROL_VERBS = frozenset({"ping", "status", "start", "stop", "restart", "shutdown", "reload", "metrics"})
CONTROL_OUTCOMES = ("ok", "error", "denied")
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


# --------------------------------------------------------------------------- counters


@dataclass(slots=True)
class Counters:
    """Counts since this daemon started. Event-derived ones are a pure fold over the journal."""

    events: Counter[str] = field(default_factory=Counter)
    exits: Counter[tuple[str, str]] = field(default_factory=Counter)  # (profile, kind)
    starts: Counter[str] = field(default_factory=Counter)
    holds: Counter[tuple[str, str]] = field(default_factory=Counter)  # (profile, kind)
    hung_kills: Counter[str] = field(default_factory=Counter)
    limit_kills: Counter[tuple[str, str]] = field(default_factory=Counter)  # (profile, limit)
    config: Counter[str] = field(default_factory=lambda: Counter({"applied": 0, "rejected": 0}))
    control: Counter[tuple[str, str]] = field(default_factory=Counter)  # (verb, outcome)
    hooks: Counter[str] = field(default_factory=Counter)
    journal_failed: int = 0

    def observe(self, event: Mapping[str, Any]) -> None:
        """Count one event (what the daemon emitted, or a line replayed from the journal)."""
        t = str(event.get("type"))
        self.events[t] += 1
        p = event.get("profile")
        if t in ("config_applied", "config_rejected"):
            self.config[t.removeprefix("config_")] += 1
        if not isinstance(p, str):
            return
        if t == "exited":
            self.exits[p, str(event.get("kind"))] += 1
        elif t == "started":
            self.starts[p] += 1
        elif t == "held":
            self.holds[p, str(event.get("kind"))] += 1
        elif t == "hung_kill":
            self.hung_kills[p] += 1
        elif t == "limit_kill":
            self.limit_kills[p, str(event.get("limit"))] += 1

    def control_request(self, verb: str, outcome: str) -> None:
        """One control request; unknown verbs count as ``other`` (a client cannot mint series)."""
        key = (verb if verb in CONTROL_VERBS else "other", outcome if outcome in CONTROL_OUTCOMES else "error")
        self.control[key] += 1

    def hook_outcome(self, outcome: str) -> None:
        self.hooks[outcome] += 1

    def event_counts(self) -> dict[str, Any]:
        """The event-derived part, for comparing a live daemon against a journal replay."""
        return {
            "events": dict(self.events), "exits": dict(self.exits), "starts": dict(self.starts),
            "holds": dict(self.holds), "hung_kills": dict(self.hung_kills),
            "limit_kills": dict(self.limit_kills), "config": dict(self.config),
        }

    @classmethod
    def replay(cls, events: Iterable[Mapping[str, Any]]) -> Counters:
        c = cls()
        for ev in events:
            c.observe(ev)
        return c


# --------------------------------------------------------------------------- text format


def _num(v: float | int | bool) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, int):
        return str(v)
    if v != v:
        return "NaN"
    if v in (float("inf"), float("-inf")):
        return "+Inf" if v > 0 else "-Inf"
    return repr(float(v))


def _esc(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _label_name(name: str) -> str:
    out = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    return ("_" + out if not out or out[0].isdigit() else out)[:64]


class _Writer:
    def __init__(self) -> None:
        self.parts: list[str] = []

    def family(self, name: str, kind: str, help_: str, samples: Iterable[tuple[Mapping[str, str], float]]) -> None:
        self.parts.append(f"# HELP {name} {help_.replace(chr(92), chr(92) * 2).replace(chr(10), ' ')}\n")
        self.parts.append(f"# TYPE {name} {kind}\n")
        for labels, value in samples:
            if labels:
                inner = ",".join(f'{k}="{_esc(str(v))}"' for k, v in labels.items())
                self.parts.append(f"{name}{{{inner}}} {_num(value)}\n")
            else:
                self.parts.append(f"{name} {_num(value)}\n")

    def text(self) -> str:
        return "".join(self.parts)


def _is_num(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and v == v


def render(
    doc: Mapping[str, Any],
    counters: Counters | None = None,
    *,
    version: str = "",
    now: float,
    process: bool = False,
) -> str:
    """The Prometheus text format (0.0.4) for one status document and the daemon's counters."""
    counters = counters or Counters()
    rows = [r for r in doc.get("profiles") or [] if isinstance(r, Mapping) and isinstance(r.get("name"), str)]
    sup = doc.get("supervisor") or {}
    w = _Writer()
    w.family("hermesd_build_info", "gauge", "hermesd's version (always 1).",
             [({"version": version, "python": ".".join(map(str, sys.version_info[:3]))}, 1)])
    w.family("hermesd_supervisor_running", "gauge", "1 when the daemon answered for these numbers, 0 when they come "
             "from the files on disk.", [({}, bool(sup.get("running")))])
    w.family("hermesd_ready", "gauge", "1 once the daemon has started every profile that should run.",
             [({}, bool(sup.get("ready")))])
    w.family("hermesd_config_problem", "gauge", "1 while hermesd.yaml is rejected (the previous one is in force).",
             [({}, bool(sup.get("config_problem") or sup.get("command_error")))])
    by_state = dict.fromkeys(STATES, 0)
    for r in rows:
        st = r.get("state")
        if isinstance(st, str):
            by_state[st] = by_state.get(st, 0) + 1
    w.family("hermesd_profiles", "gauge", "Profiles by state.", [({"state": s}, n) for s, n in by_state.items()])

    def per(getter: Callable[[Mapping[str, Any]], Any]) -> list[tuple[dict[str, str], float]]:
        out = []
        for r in rows:
            v = getter(r)
            if _is_num(v) or isinstance(v, bool):
                out.append(({"profile": r["name"]}, v))
        return out

    w.family("hermesd_profile_up", "gauge", "1 when the profile's gateway is running.",
             per(lambda r: r.get("state") == "running"))
    w.family("hermesd_profile_should_run", "gauge", "1 when hermesd wants the profile running (not stopped by "
             "the operator, not disabled).", per(lambda r: bool(r.get("should_run"))))
    w.family("hermesd_profile_state", "gauge", "The profile's state (one series per state, the current one is 1).",
             [({"profile": r["name"], "state": s}, r.get("state") == s) for r in rows for s in STATES])
    holds = []
    for r in rows:
        hold = r.get("hold")
        if r.get("state") == "held" and isinstance(hold, Mapping) and isinstance(hold.get("kind"), str):
            holds.append(({"profile": r["name"], "kind": hold["kind"]}, 1))
    w.family("hermesd_profile_hold_info", "gauge", "Why a held profile is held (1 per held profile).", holds)
    w.family("hermesd_profile_restarts_total", "counter", "Restarts of the profile's gateway, kept across hermesd "
             "restarts.", per(lambda r: r.get("restarts")))
    w.family("hermesd_profile_uptime_seconds", "gauge", "Seconds the current gateway process has been up.",
             per(lambda r: r.get("uptime_s") if r.get("pid") else None))
    w.family("hermesd_profile_last_exit_timestamp_seconds", "gauge", "Unix time of the gateway's last exit.",
             per(lambda r: (r.get("last_exit") or {}).get("at") if isinstance(r.get("last_exit"), Mapping) else None))
    w.family("hermesd_profile_next_retry_timestamp_seconds", "gauge", "Unix time of the next restart (backoff only).",
             per(lambda r: r.get("next_retry_at") if r.get("state") == "backoff" else None))
    w.family("hermesd_profile_heartbeat_age_seconds", "gauge", "Age of the gateway's own heartbeat file.",
             per(lambda r: r.get("heartbeat_age_s")))
    w.family("hermesd_profile_serving", "gauge", "1 when the profile serves: its platforms connected and its API "
             "server answering from the gateway's own socket (status's SERVING).",
             per(lambda r: v.get("ready") if isinstance(v := r.get("serving"), Mapping) else None))
    plats = []
    for r in rows:
        raw = r.get("platforms")
        for name, info in sorted(raw.items(), key=lambda kv: str(kv[0])) if isinstance(raw, Mapping) else ():
            if isinstance(info, Mapping):
                plats.append(({"profile": r["name"], "platform": str(name)}, info.get("state") == "connected"))
    w.family("hermesd_profile_platform_connected", "gauge", "1 when the gateway reports the platform connected.",
             plats)
    w.family("hermesd_profile_memory_bytes", "gauge", "Memory of the gateway's whole process tree, where known.",
             per(lambda r: r.get("memory_bytes")))
    w.family("hermesd_profile_resident_memory_bytes", "gauge", "Resident memory of the gateway process itself.",
             per(lambda r: r.get("rss_bytes")))
    w.family("hermesd_profile_tasks", "gauge", "Tasks (threads) in the gateway's process tree, where known.",
             per(lambda r: r.get("tasks")))
    limits, infos = [], []
    for r in rows:
        lim = r.get("limits")
        if isinstance(lim, Mapping):
            text_labels = {}
            for k, v in sorted(lim.items(), key=lambda kv: str(kv[0])):
                if _is_num(v):
                    limits.append(({"profile": r["name"], "limit": str(k)}, v))
                elif isinstance(v, str):
                    text_labels[_label_name(str(k))] = v
            if text_labels:
                infos.append(("limits", r["name"], text_labels))
        iso = r.get("isolation")
        if isinstance(iso, str):
            infos.append(("isolation", r["name"], {"mechanism": iso}))
        elif isinstance(iso, Mapping):
            labels = {_label_name(str(k)): str(v).lower() if isinstance(v, bool) else str(v)
                      for k, v in list(iso.items())[:8] if isinstance(v, str | bool | int)}
            infos.append(("isolation", r["name"], labels))
    w.family("hermesd_profile_limit", "gauge", "Resource limits in force (memory_max in bytes, tasks_max, …).", limits)
    w.family("hermesd_profile_limits_info", "gauge", "How the limits are enforced (cgroup or watch).",
             [({"profile": p, **lab}, 1) for kind, p, lab in infos if kind == "limits" and "profile" not in lab])
    w.family("hermesd_profile_isolation_info", "gauge", "The isolation in force for the profile.",
             [({"profile": p, **lab}, 1) for kind, p, lab in infos if kind == "isolation" and "profile" not in lab])

    names = [r["name"] for r in rows]
    present = set(names)
    w.family("hermesd_profile_exits_total", "counter", "Gateway exits since hermesd started, by classification.",
             [({"profile": p, "kind": k}, counters.exits.get((p, k), 0)) for p in names for k in EXIT_KINDS]
             + [({"profile": p, "kind": k}, n) for (p, k), n in sorted(counters.exits.items())
                if p in present and k not in EXIT_KINDS])
    w.family("hermesd_profile_starts_total", "counter", "Gateway processes started since hermesd started.",
             [({"profile": p}, counters.starts.get(p, 0)) for p in names])
    w.family("hermesd_profile_holds_total", "counter", "Times the profile was held, by kind, since hermesd started.",
             [({"profile": p, "kind": k}, n) for (p, k), n in sorted(counters.holds.items()) if p in present])
    w.family("hermesd_profile_hung_kills_total", "counter", "Gateways killed as hung since hermesd started.",
             [({"profile": p}, counters.hung_kills.get(p, 0)) for p in names])
    w.family("hermesd_profile_limit_kills_total", "counter", "Gateways killed for a resource limit, by limit.",
             [({"profile": p, "limit": lim}, n) for (p, lim), n in sorted(counters.limit_kills.items())
              if p in present])
    w.family("hermesd_events_total", "counter", "Events written to the journal since hermesd started, by type.",
             [({"type": t}, n) for t, n in sorted(counters.events.items())])
    w.family("hermesd_config_reloads_total", "counter", "hermesd.yaml loads, applied or rejected.",
             [({"outcome": o}, n) for o, n in sorted(counters.config.items())])
    w.family("hermesd_control_requests_total", "counter", "Control socket requests by verb and outcome.",
             [({"verb": v, "outcome": o}, n) for (v, o), n in sorted(counters.control.items())])
    w.family("hermesd_hook_runs_total", "counter", "Hook runs by outcome (ok, failed, timeout, spawn_error, dropped).",
             [({"outcome": o}, n) for o, n in sorted(counters.hooks.items())])
    w.family("hermesd_journal_write_errors_total", "counter", "Events that could not be written to the journal.",
             [({}, counters.journal_failed)])
    if process:
        _process_metrics(w)
    return w.text()


def _process_metrics(w: _Writer) -> None:
    """The standard ``process_*`` metrics for hermesd itself, from ``/proc/self`` (no psutil)."""
    try:
        raw = Path("/proc/self/stat").read_bytes()
        fields = raw[raw.rindex(b")") + 2 :].split()
        ticks = os.sysconf("SC_CLK_TCK")
        page = os.sysconf("SC_PAGE_SIZE")
        cpu = (int(fields[11]) + int(fields[12])) / ticks
        start_ticks = int(fields[19])
        boot = next(float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                    if line.startswith("btime "))
        rss = int(fields[21]) * page
        vsize = int(fields[20])
        fds = len(os.listdir("/proc/self/fd"))
    except (OSError, ValueError, IndexError, StopIteration):
        return

    w.family("process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.", [({}, cpu)])
    w.family("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.", [({}, rss)])
    w.family("process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.", [({}, vsize)])
    w.family("process_start_time_seconds", "gauge", "Start time of the process since unix epoch in seconds.",
             [({}, boot + start_ticks / ticks)])
    w.family("process_open_fds", "gauge", "Number of open file descriptors.", [({}, fds)])
    w.family("process_max_fds", "gauge", "Maximum number of open file descriptors.",
             [({}, resource.getrlimit(resource.RLIMIT_NOFILE)[0])])


# --------------------------------------------------------------------------- the listener


MAX_REQUEST_HEAD = 8192
MAX_HEADER_LINES = 64


@dataclass(eq=False, slots=True)
class _Conn:
    """One open connection: whether it is still waiting for its request head, and since when."""

    writer: asyncio.StreamWriter
    since: float
    reading: bool = True


@dataclass(slots=True)
class MetricsServer:
    """``GET /metrics`` over HTTP/1.x on the loop: one request per connection, bounded in every way.

    A request must arrive whole within ``timeout`` seconds and within 8 KiB of head; anything that
    is not ``GET``/``HEAD`` of a path gets 400/405/404. At most ``max_clients`` connections are open
    at once, and idle ones cannot hold the slots: when all are taken, a new connection closes the
    one that has waited longest without sending its request (a listener on loopback is reachable
    from inside every profile, and eight idle sockets must not make every scrape fail). Only when
    every slot is busy answering does a new one get 503. The body is rendered on the loop (a few ms
    at N = 20) by the ``render`` callable.
    """

    settings: MetricsSettings
    render: Callable[[], str]
    timeout: float = 5.0
    max_clients: int = 8
    requests: dict[int, int] = field(default_factory=dict)  # status code -> count
    evicted: int = 0  # idle connections closed to make room
    _server: asyncio.Server | None = None
    _conns: list[_Conn] = field(default_factory=list)

    @property
    def address(self) -> str:
        """Where it listens (the real port when 0 was asked for)."""
        if self.settings.unix_path:
            return f"unix:{self.settings.unix_path}"
        assert self._server is not None
        host, port = self._server.sockets[0].getsockname()[:2]
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    async def start(self) -> None:
        s = self.settings
        if s.unix_path:
            _clear_stale_socket(Path(s.unix_path))
            old = os.umask(0o177)
            try:
                self._server = await asyncio.start_unix_server(self._serve, path=s.unix_path,
                                                               limit=MAX_REQUEST_HEAD)
            finally:
                os.umask(old)
        else:
            self._server = await asyncio.start_server(self._serve, host=s.host, port=s.port, reuse_address=True,
                                                      limit=MAX_REQUEST_HEAD)
        log.info("metrics on %s/metrics", self.address if not s.unix_path else s.unix_path)

    async def close(self) -> None:
        if self._server is None:
            return
        self._server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._server.wait_closed(), 2.0)
        self._server = None
        if self.settings.unix_path:
            with contextlib.suppress(OSError):
                _clear_stale_socket(Path(self.settings.unix_path))

    def _admit(self, conn: _Conn) -> bool:
        """Room for ``conn``: a free slot, or the slot of the oldest connection still idle."""
        if len(self._conns) >= self.max_clients:
            idle = [c for c in self._conns if c.reading]
            if not idle:
                return False
            victim = min(idle, key=lambda c: c.since)
            self._conns.remove(victim)
            self.evicted += 1
            victim.writer.transport.abort()  # its reader sees the reset and the handler ends
        self._conns.append(conn)
        return True

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = _Conn(writer, time.monotonic())
        try:
            if not self._admit(conn):
                await self._respond(writer, 503, "too many connections\n")
                return
            try:
                async with asyncio.timeout(self.timeout):
                    code, body, head_only = await self._handle(reader)
                conn.reading = False
            except TimeoutError:
                code, body, head_only = 408, "request not received in time\n", False
            except (asyncio.LimitOverrunError, ValueError):
                code, body, head_only = 431, "request head too large\n", False
            except asyncio.IncompleteReadError as exc:
                if not exc.partial.strip():
                    return  # the client connected and went away: nothing to answer
                code, body, head_only = 400, "bad request: incomplete\n", False
            await self._respond(writer, code, body, head_only=head_only)
        except (ConnectionError, TimeoutError, OSError, asyncio.CancelledError):
            pass
        except Exception:  # a bug in one scrape must not take the daemon down
            log.exception("metrics request failed")
        finally:
            if conn in self._conns:
                self._conns.remove(conn)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader) -> tuple[int, str, bool]:
        first = await reader.readuntil(b"\n")
        total = len(first)
        for _ in range(MAX_HEADER_LINES):
            line = await reader.readuntil(b"\n")
            total += len(line)
            if total > MAX_REQUEST_HEAD:
                return 431, "request head too large\n", False
            if line in (b"\r\n", b"\n"):
                break
        else:
            return 431, "too many header lines\n", False
        try:
            method, target, version = first.decode("ascii").strip().split(" ")
        except (UnicodeDecodeError, ValueError):
            return 400, "bad request\n", False
        if not version.startswith("HTTP/1.") or not target.startswith("/") or not method.isalpha():
            return 400, "bad request\n", False
        if method not in ("GET", "HEAD"):
            return 405, "only GET and HEAD\n", False
        path = target.split("?", 1)[0]
        if path == "/metrics":
            try:
                return 200, self.render(), method == "HEAD"
            except Exception:
                log.exception("rendering metrics failed")
                return 500, "could not render metrics; see hermesd's log\n", False
        if path == "/":
            return 200, "hermesd: metrics are at /metrics\n", method == "HEAD"
        return 404, "not found: try /metrics\n", False

    async def _respond(self, writer: asyncio.StreamWriter, code: int, body: str, *, head_only: bool = False) -> None:
        self.requests[code] = self.requests.get(code, 0) + 1
        reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 408: "Request Timeout",
                  431: "Request Header Fields Too Large", 500: "Internal Server Error",
                  503: "Service Unavailable"}[code]
        data = body.encode("utf-8")
        head = (f"HTTP/1.1 {code} {reason}\r\nContent-Type: {CONTENT_TYPE if code == 200 else 'text/plain'}\r\n"
                f"Content-Length: {len(data)}\r\nConnection: close\r\n"
                + ("Allow: GET, HEAD\r\n" if code == 405 else "") + "\r\n").encode("ascii")
        writer.write(head if head_only else head + data)
        await asyncio.wait_for(writer.drain(), self.timeout)


def _clear_stale_socket(path: Path) -> None:
    """Remove a leftover socket of ours at ``path``; refuse to touch anything else."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode) or st.st_uid != os.getuid():
        raise OSError(f"{path} exists and is not a socket of this user; not replacing it")
    path.unlink()
