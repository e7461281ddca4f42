"""The load generator: steady chat requests to every profile, each one recorded.

Each profile gets a request every ``period`` seconds on a fixed schedule (open loop: a slow or
hung profile does not slow the schedule down, so an outage costs the requests a user would have
sent; the profiles' schedules are offset so they do not fire together). Each request is a
``POST …/v1/chat/completions`` with the profile's Bearer key and a prompt of its own, sent from a
thread of its own and recorded as a :class:`Record`: the profile, when it started, how long it took,
and its outcome:

- ``ok``: HTTP 200 with the stub's answer to this very prompt as this profile's model
  (:func:`tests.traffic.llm.reply_for`);
- ``wrong``: HTTP 200 with any other text (another profile's model answered, or the agent failed
  and said so in its reply);
- ``http_error``: any other HTTP status;
- ``refused``: nothing listens on the port;
- ``timeout``: no complete answer within ``timeout`` seconds;
- ``broken``: the connection failed otherwise (reset, closed mid-answer, not JSON).
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from dataclasses import dataclass

from tests.traffic.llm import reply_for
from tests.traffic.served import Endpoint

OUTCOMES = ("ok", "wrong", "http_error", "refused", "timeout", "broken")


@dataclass(frozen=True)
class Record:
    profile: str
    start: float  # time.monotonic() when the request was sent
    latency: float  # seconds until the outcome was known
    outcome: str  # one of OUTCOMES
    detail: str = ""  # the HTTP status, the error, or the start of a wrong answer


def ask(endpoint: Endpoint, prompt: str, timeout: float) -> tuple[str, str]:
    """One chat request: its outcome and detail (see the module docstring)."""
    deadline = time.monotonic() + timeout
    conn = http.client.HTTPConnection(endpoint.host, endpoint.port, timeout=timeout)
    body = json.dumps({"model": "traffic", "messages": [{"role": "user", "content": prompt}]})
    try:
        conn.request("POST", endpoint.path, body=body, headers={
            "Authorization": f"Bearer {endpoint.key}", "Content-Type": "application/json"})
        # The gateway answers only when the agent is done: one wait, bounded by what is left.
        if conn.sock is not None:
            conn.sock.settimeout(max(0.01, deadline - time.monotonic()))
        resp = conn.getresponse()
        data = resp.read()
    except ConnectionRefusedError:
        return "refused", ""
    except TimeoutError:
        return "timeout", ""
    except (OSError, http.client.HTTPException) as e:
        return "broken", type(e).__name__
    finally:
        conn.close()
    if resp.status != 200:
        return "http_error", str(resp.status)
    try:
        text = json.loads(data)["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError):
        return "broken", "not a chat completion"
    if text == reply_for(endpoint.profile, prompt):
        return "ok", ""
    return "wrong", repr(str(text)[:80])


class Load:
    """Steady requests to ``endpoints`` until :meth:`stop`; :meth:`records` at any time."""

    def __init__(self, endpoints: list[Endpoint], period: float = 2.0, timeout: float = 30.0) -> None:
        self.endpoints = list(endpoints)
        self.period = period
        self.timeout = timeout
        self._records: list[Record] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._inflight: dict[threading.Thread, tuple[str, float]] = {}  # a request's thread -> (profile, sent)
        self._seq = 0

    def start(self) -> Load:
        for i, ep in enumerate(self.endpoints):
            offset = self.period * i / max(1, len(self.endpoints))
            t = threading.Thread(target=self._schedule, args=(ep, offset), name=f"load-{ep.profile}", daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def _schedule(self, ep: Endpoint, offset: float) -> None:
        due = time.monotonic() + offset
        while not self._stop.wait(max(0.0, due - time.monotonic())):
            with self._lock:
                self._seq += 1
                seq = self._seq
                self._inflight = {t: sent for t, sent in self._inflight.items() if t.is_alive()}
            t = threading.Thread(target=self._one, args=(ep, f"traffic {ep.profile} #{seq}"), daemon=True)
            with self._lock:
                self._inflight[t] = (ep.profile, time.monotonic())
            t.start()
            due += self.period

    def _one(self, ep: Endpoint, prompt: str) -> None:
        start = time.monotonic()
        outcome, detail = ask(ep, prompt, self.timeout)
        rec = Record(ep.profile, start, time.monotonic() - start, outcome, detail)
        with self._lock:
            self._records.append(rec)

    def settle(self, before: float) -> None:
        """Wait until every request sent before ``before`` has its outcome (each within its timeout)."""
        with self._lock:
            waiting = [t for t, (_p, at) in self._inflight.items() if at < before]
        for t in waiting:
            t.join(self.timeout + 5)

    def pending(self, profile: str) -> list[float]:
        """When each of ``profile``'s requests still waiting for its outcome was sent."""
        with self._lock:
            return sorted(at for t, (p, at) in self._inflight.items() if p == profile and t.is_alive())

    def records(self, since: float = 0.0) -> list[Record]:
        with self._lock:
            return sorted((r for r in self._records if r.start >= since), key=lambda r: r.start)

    def stop(self, wait: bool = True) -> list[Record]:
        """Send nothing more; with ``wait``, let every request in flight end (each within its timeout)."""
        self._stop.set()
        for t in self._threads:
            t.join()
        if wait:
            self.settle(float("inf"))
        return self.records()


def first_ok(records: list[Record], profile: str, after: float) -> Record | None:
    """The first request of ``profile`` sent at or after ``after`` that was answered right."""
    return next((r for r in records if r.profile == profile and r.start >= after and r.outcome == "ok"), None)
