"""The phase watcher notes each milestone of the next gateway when its file or port shows it, and the
breakdown turns milestones into the parts of the wait."""

from __future__ import annotations

import json
import os
import socket
import time

from tests.harness import wait_for
from tests.traffic.phases import PHASES, Watcher, breakdown
from tests.traffic.served import free_port


def test_milestones_are_noted_as_the_gateway_shows_them(tmp_path):
    me = os.getpid()
    current: list[int | None] = [111]  # the old gateway's PID, then none, then "the new one" (this process)
    port = free_port()
    w = Watcher(lambda: current[0], tmp_path, port, old_pid=111, interval=0.01).start()
    try:
        time.sleep(0.1)
        assert w.seen == {}  # the old gateway is not a new one
        current[0] = None
        (tmp_path / "gateway.pid").write_text(json.dumps({"pid": 111}))  # the old one's file
        time.sleep(0.1)
        assert w.seen == {}
        current[0] = me
        wait_for(lambda: "spawned" in w.seen, 5, what="spawned")
        (tmp_path / "gateway.pid").write_text(json.dumps({"pid": me, "kind": "hermes-gateway"}))
        wait_for(lambda: "pid_file" in w.seen, 5, what="pid_file")
        state = {"pid": me, "gateway_state": "running", "platforms": {"api_server": {"state": "connecting"}}}
        (tmp_path / "gateway_state.json").write_text(json.dumps(state))
        wait_for(lambda: "running" in w.seen, 5, what="running")
        assert "connected" not in w.seen and "port_open" not in w.seen
        state["platforms"]["api_server"]["state"] = "connected"
        (tmp_path / "gateway_state.json").write_text(json.dumps(state))
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", port))
            listener.listen()
            wait_for(lambda: {"connected", "port_open"} <= set(w.seen), 5, what="connected and port_open")
    finally:
        seen = w.stop()
    order = sorted(seen, key=seen.get)
    assert order == ["spawned", "pid_file", "running", "connected", "port_open"], seen


def test_breakdown_is_consecutive_parts_and_times_after_the_fault():
    marks = {"fault": 100.0, "spawned": 100.01, "pid_file": 100.8, "running": 101.0, "connected": 101.0,
             "port_open": 101.2, "first_call": 105.0, "first_completion": 106.0, "first_answer": 106.5}
    out = breakdown(marks)
    assert set(out["phases_s"]) == set(PHASES)
    assert round(out["phases_s"]["respawn"], 3) == 0.01
    assert round(out["phases_s"]["first_request_setup"], 3) == 4.8
    assert round(sum(out["phases_s"].values()), 3) == 6.5  # the parts add up to the whole wait
    assert round(out["after_fault_s"]["first_answer"], 3) == 6.5
    partial = breakdown({"fault": 1.0, "spawned": 2.0})
    assert partial["phases_s"]["respawn"] == 1.0 and partial["phases_s"]["answer"] is None
    assert partial["after_fault_s"]["port_open"] is None
