"""The load generator tells every outcome apart, keeps its schedule while a profile hangs, and the
figures drawn from its records (percentiles, a victim's outage) are the ones the records say.

A small threaded server on 127.0.0.1 plays the gateway's API server here: it answers as upstream's
does (an OpenAI chat completion) and misbehaves per path on demand.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from tests.harness import wait_for
from tests.traffic.llm import reply_for
from tests.traffic.load import Load, Record, ask
from tests.traffic.served import Endpoint, free_port
from tests.traffic.stats import in_window, percentile, ratio, recovery, summary

KEY = "k" * 20


class FakeApi(BaseHTTPRequestHandler):
    """``/ok/<profile>``: the right answer; ``/wrong``: another profile's; ``/500``; ``/slow``: 2 s;
    ``/junk``: not JSON; ``/cut``: the connection closed without an answer."""

    protocol_version = "HTTP/1.1"

    received: ClassVar[list[str]] = []  # paths, in the order the requests arrived

    def log_message(self, format, *args):
        pass

    def do_POST(self):
        FakeApi.received.append(self.path)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        prompt = body["messages"][-1]["content"]
        if self.headers.get("Authorization") != f"Bearer {KEY}":
            return self._send(401, b"{}")
        path = self.path
        if path == "/cut":
            self.close_connection = True
            return
        if path == "/slow":
            time.sleep(2)
        if path == "/500":
            return self._send(500, b'{"error": {}}')
        if path == "/junk":
            return self._send(200, b"<html>")
        profile = path.rsplit("/", 1)[-1] if path.startswith("/ok/") else "someone-else"
        if path == "/slow":
            profile = "p"
        answer = {"choices": [{"message": {"role": "assistant", "content": reply_for(profile, prompt)}}]}
        self._send(200, json.dumps(answer).encode())

    def _send(self, status: int, data: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        """A client that gave up (the timeout cases) leaves a broken pipe here: expected."""


@pytest.fixture
def api():
    server = QuietServer(("127.0.0.1", 0), FakeApi)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def test_every_outcome_is_told_apart(api):
    def ep(path: str, profile: str = "p", key: str = KEY, port: int = api) -> Endpoint:
        return Endpoint(profile, port, path, key)

    assert ask(ep("/ok/p"), "hi", 5) == ("ok", "")
    outcome, detail = ask(ep("/wrong"), "hi", 5)
    assert outcome == "wrong" and "someone-else" in detail
    assert ask(ep("/500"), "hi", 5) == ("http_error", "500")
    assert ask(ep("/ok/p", key="x" * 20), "hi", 5) == ("http_error", "401")
    assert ask(ep("/junk"), "hi", 5) == ("broken", "not a chat completion")
    assert ask(ep("/cut"), "hi", 5)[0] == "broken"
    assert ask(ep("/ok/p", port=free_port()), "hi", 5) == ("refused", "")
    t = time.monotonic()
    assert ask(ep("/slow"), "hi", 0.5) == ("timeout", "")
    assert time.monotonic() - t < 1.5


def test_the_schedule_holds_while_one_profile_is_slow(api):
    eps = [Endpoint("p", api, "/ok/p", KEY), Endpoint("slow", api, "/slow", KEY)]
    load = Load(eps, period=0.2, timeout=0.5).start()
    wait_for(lambda: len([r for r in load.records() if r.profile == "slow"]) >= 4, 20, what="4 slow requests")
    records = load.stop()
    fast = [r for r in records if r.profile == "p"]
    slow = [r for r in records if r.profile == "slow"]
    assert fast and all(r.outcome == "ok" for r in fast)
    assert {r.outcome for r in slow} == {"timeout"}
    # Open loop: the next request to the slow profile went out before the previous one gave up.
    assert any(b.start < a.start + a.latency for a, b in itertools.pairwise(slow)), slow


def test_settle_waits_for_what_was_sent_before(api):
    FakeApi.received.clear()
    load = Load([Endpoint("p", api, "/slow", KEY)], period=30.0, timeout=5).start()
    wait_for(lambda: FakeApi.received, 10, what="the first request")
    assert load.records() == [] and len(load.pending("p")) == 1 and load.pending("q") == []
    load.settle(time.monotonic())  # that request takes 2 s
    assert [r.outcome for r in load.records()] == ["ok"] and load.pending("p") == []
    load.stop()


def rec(profile: str, start: float, latency: float, outcome: str = "ok") -> Record:
    return Record(profile, start, latency, outcome)


def test_percentiles_are_nearest_rank():
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.0 and percentile(values, 99) == 99.0 and percentile(values, 100) == 100.0
    assert percentile([3.0, 1.0, 2.0], 99) == 3.0 and percentile([], 50) is None
    s = summary([rec("a", 0, 1.0), rec("a", 1, 3.0), rec("a", 2, 9.0, "timeout")])
    assert s["requests"] == 3 and s["ok"] == 2 and s["success"] == pytest.approx(2 / 3)
    assert s["p50_s"] == 1.0 and s["p99_s"] == 3.0  # failed requests never count in latencies
    assert s["outcomes"] == {"ok": 2, "timeout": 1}
    assert ratio(3.0, 2.0) == 1.5 and ratio(1.0, None) is None and ratio(1.0, 0.0) is None
    assert [r.start for r in in_window([rec("a", 0, 1), rec("b", 1, 1), rec("a", 5, 1)], ["a"], 0, 5)] == [0]


def test_recovery_is_the_first_right_answer_after_the_first_and_the_last_failure():
    records = [
        rec("v", 9.0, 0.5),  # before the fault: not counted
        rec("v", 10.5, 0.1, "refused"),
        rec("v", 12.0, 30.0, "timeout"),  # ends at 42, after later successes
        rec("v", 14.0, 6.0),  # ends at 20: the first right answer after the last failure's start
        rec("v", 16.0, 1.0),
        rec("o", 11.0, 0.1, "refused"),  # another profile's
    ]
    r = recovery(records, "v", 10.0)
    assert r == {"down": True, "first_failure_s": 0.5, "last_failure_s": 2.0, "again_s": 7.0, "back_s": 7.0,
                 "failed": 2, "answered": 2}
    # Answering again, then failing once more (swamped by what queued): again early, back late.
    flapping = [rec("v", 11, 0.1, "refused"), rec("v", 12, 1), rec("v", 14, 0.1, "http_error"), rec("v", 16, 1)]
    r = recovery(flapping, "v", 10.0)
    assert (r["again_s"], r["back_s"], r["failed"]) == (3.0, 7.0, 2)
    assert recovery([rec("v", 11, 1)], "v", 10.0) == {
        "down": False, "first_failure_s": None, "last_failure_s": None, "again_s": 0.0, "back_s": 0.0,
        "failed": 0, "answered": 1}
    none = recovery([rec("v", 11, 1, "http_error")], "v", 10.0)
    assert none["again_s"] is None and none["back_s"] is None
