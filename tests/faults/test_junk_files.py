"""Junk, truncated and empty files where hermesd and the gateways keep their state; broken profile files."""

from __future__ import annotations

import json

import pytest

from supervisor.processes import identity
from tests.fakegw import write_behaviour
from tests.faults.helpers import converged, gateway_leaders
from tests.harness import pid_alive, wait_for


def homes(root):
    return {"default": root, "coder": root / "profiles" / "coder", "writer": root / "profiles" / "writer"}


VALID_PID = {"pid": 4242, "kind": "hermes-gateway", "argv": ["hermes", "gateway", "run"], "start_time": 99}
JUNK = {
    "empty": b"",
    "truncated": json.dumps(VALID_PID).encode()[:23],
    "binary": bytes(range(256)) * 8,
    "huge": b'{"pid": ' + b"9" * (3 << 20) + b"}",
    "wrong_types": json.dumps({"version": 1, "pid": "4242", "start_time": [1], "profiles": [],
                               "gateway_state": {"x": 1}, "updated_at": 12}).encode(),
    "nul_bytes": b"\x00" * 64,
}


def last_line(text: str) -> str:
    lines = [x for x in text.strip().splitlines() if x.strip()]
    return lines[-1] if lines else ""


def hermesd_files(root):
    d = root / ".hermesd"
    return [d / "state.json", d / "hermesd.pid", d / "hermesd.lock"]


def gateway_files(home):
    return [home / "gateway.pid", home / "gateway.lock", home / "gateway_state.json",
            home / "state" / "gateway.heartbeat"]


@pytest.mark.parametrize("kind", list(JUNK))
def test_junk_everywhere_before_start(fake_root, hermesd_factory, faults, kind):
    """Every state, PID, lock, gateway-state and heartbeat file of the root is junk at start-up."""
    junk = JUNK[kind]
    (fake_root / ".hermesd").mkdir(mode=0o700)
    targets = hermesd_files(fake_root) + [f for home in homes(fake_root).values() for f in gateway_files(home)]
    for path in targets:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(junk)
    faults.inject(len(targets))
    offline = hermesd_factory(fake_root, start=False).cli("status")
    if offline.returncode != 3 or "Traceback" in offline.stderr:
        faults.lose(1, f"offline status on junk: exit {offline.returncode}: {last_line(offline.stderr)}")
    assert offline.returncode == 3 and "Traceback" not in offline.stderr, offline.stderr
    d = hermesd_factory(fake_root)
    pids = converged(d, fake_root, set(homes(fake_root)), faults)
    doc = d.status()
    ok = all(r["restarts"] == 0 and r["gateway_state"] == "running" for r in doc["profiles"])
    faults.survive(len(targets) if ok else 0)
    faults.lose(0 if ok else len(targets), f"rows after junk: {doc['profiles']}")
    assert ok
    assert d.cli("status").returncode == 0
    # The daemon says which of its own files it ignored.
    assert f"{fake_root / '.hermesd' / 'state.json'}: unreadable or not hermesd state" in d.log_text()
    assert set(pids) == set(homes(fake_root))


def _status_both_ways(d, faults) -> list:
    outs = [d.cli("status"), d.cli("status", "--json")]
    for cli in outs:
        if "Traceback" in cli.stderr or cli.returncode not in (0, 1):
            faults.lose(1, f"hermesd {' '.join(cli.args[3:-2])}: exit {cli.returncode}: {last_line(cli.stderr)}")
    return outs


def test_junk_written_under_running_gateways(fake_root, hermesd_factory, faults):
    """Gateway files replaced with junk while the gateways run: status stays sane, nobody is touched."""
    h = homes(fake_root)
    for home in h.values():
        write_behaviour(home, heartbeat_interval=60)
    d = hermesd_factory(fake_root)
    before = d.wait_running(*h)
    cases = {
        "default": {"gateway_state.json": json.dumps({"pid": before["default"], "gateway_state": "running",
                                                      "platforms": {"telegram": "connected", "7": {"state": 5}},
                                                      "restart_requested": "yes"}),
                    "state/gateway.heartbeat": json.dumps({"pid": before["default"], "updated_at": 17})},
        "coder": {"gateway_state.json": '{"pid": ' + str(before["coder"]) + ', "gateway_st',
                  "state/gateway.heartbeat": "", "gateway.pid": "-1", "gateway.lock": "\x00\x01"},
        "writer": {"gateway_state.json": json.dumps([before["writer"]]),
                   "state/gateway.heartbeat": json.dumps({"pid": before["writer"], "updated_at": "2999-01-01"}),
                   "gateway.pid": json.dumps({"pid": before["writer"], "start_time": "soon"})},
    }
    for name, files in cases.items():
        for rel, text in files.items():
            (h[name] / rel).write_text(text)
            faults.inject()
    rows = {r["name"]: r for r in d.status()["profiles"]}
    assert {n: r["pid"] for n, r in rows.items()} == before
    assert rows["coder"]["gateway_state"] is None and rows["writer"]["gateway_state"] is None
    assert rows["coder"]["heartbeat_age_s"] is None and rows["default"]["heartbeat_age_s"] is None
    # a non-string platform state is dropped, not passed on to renderers
    assert rows["default"]["platforms"] == {"7": {"state": None, "error_code": None, "error_message": None,
                                                  "updated_at": None}}
    for out in _status_both_ways(d, faults):
        assert "Traceback" not in out.stderr and out.returncode in (0, 1), out.stderr
    faults.survive(faults.injected)
    assert {r["name"]: r["pid"] for r in d.status()["profiles"]} == before
    # The gateways' junk never made hermesd act: a real stop still works for each.
    assert d.cli("stop").returncode == 0 and d.proc.wait(20) == 0
    assert d.close() == []


def test_wrongly_typed_gateway_state_keeps_status_readable(fake_root, hermesd_factory, faults):
    d = hermesd_factory(fake_root)
    pid = d.wait_running("coder")["coder"]
    (fake_root / "profiles" / "coder" / "gateway_state.json").write_text(
        json.dumps({"pid": pid, "gateway_state": ["running"], "platforms": {}}))
    faults.inject()
    outs = _status_both_ways(d, faults)
    assert d.row("coder")["pid"] == pid
    if faults.lost == 0:
        faults.survive()
    for out in outs:
        assert "Traceback" not in out.stderr and out.returncode in (0, 1), out.stderr


def test_state_file_with_wrongly_typed_fields(fake_root, hermesd_factory, faults):
    """A valid state.json envelope whose fields are junk: history ignored field by field, status readable."""
    (fake_root / ".hermesd").mkdir(mode=0o700)
    (fake_root / ".hermesd" / "state.json").write_text(json.dumps({
        "version": 1, "boot_id": identity.boot_id(), "daemon_pid": "x", "saved_at": None,
        "profiles": {
            "coder": {"home": 12, "restarts": "many", "failures": -4, "down": 7, "pid": "p", "start_time": [],
                      "last_exit": {"at": "yesterday", "description": 5, "code": "x"}},
            "writer": {"restarts": 3, "last_exit": "crashed", "down": None},
            "ghost": {"home": "/etc", "restarts": 9},
        },
    }))
    faults.inject(3)
    offline = hermesd_factory(fake_root, start=False).cli("status")
    if "Traceback" in offline.stderr or offline.returncode != 3:
        faults.lose(1, f"offline status: exit {offline.returncode}: {last_line(offline.stderr)}")
    d = hermesd_factory(fake_root)
    pids = converged(d, fake_root, set(homes(fake_root)), faults)
    rows = {r["name"]: r for r in d.status()["profiles"]}
    assert set(rows) == set(homes(fake_root))  # the ghost of a profile that does not exist is not served
    assert rows["coder"]["restarts"] == 0 and rows["writer"]["restarts"] == 3
    assert rows["coder"]["home"] == str(fake_root / "profiles" / "coder")
    assert set(pids) == set(rows)
    outs = _status_both_ways(d, faults)
    if faults.lost == 0:
        faults.survive(3)
    assert "Traceback" not in offline.stderr and offline.returncode == 3, offline.stderr
    for out in outs:
        assert "Traceback" not in out.stderr and out.returncode in (0, 1), out.stderr


def test_broken_profile_files_hold_only_their_profile(fake_root, hermesd_factory, faults):
    """A malformed config.yaml in coder and a malformed .env in writer: each is held with an error
    naming its file and line; default runs untouched; fixing the files releases both."""
    h = homes(fake_root)
    (h["coder"] / "config.yaml").write_text("model:\n  name: x\n\tbad: [1, 2\n")
    (h["writer"] / ".env").write_text("GOOD=1\nthis line is not an assignment\n")
    faults.inject(2)
    d = hermesd_factory(fake_root)
    default_pid = d.wait_running("default")["default"]
    coder = d.wait_state("coder", "held")
    writer = d.wait_state("writer", "held")
    ok_c = coder["hold"]["kind"] == "config_error" and f"{h['coder'] / 'config.yaml'}:" in coder["reason"]
    ok_w = writer["hold"]["kind"] == "config_error" and f"{h['writer'] / '.env'}:2:" in writer["reason"]
    faults.check(ok_c, f"coder row {coder}")
    faults.check(ok_w, f"writer row {writer}")
    assert ok_c and ok_w, (coder, writer)
    text = d.cli("status")
    assert text.returncode == 1
    assert f"coder: held: config_error: {h['coder'] / 'config.yaml'}" in text.stdout
    assert f"writer: held: config_error: {h['writer'] / '.env'}:2" in text.stdout
    (h["coder"] / "config.yaml").write_text("model:\n  name: x\n")
    (h["writer"] / ".env").write_text("GOOD=1\n")
    d.wait_running("coder", "writer", timeout=10)
    assert d.row("default")["pid"] == default_pid

    # Broken again under a running gateway: the error names the file and line, nobody moves, and
    # the healthy gateway keeps running on its last good configuration.
    pids = d.wait_running("coder", "writer")
    (h["writer"] / ".env").write_text("GOOD=1\nBAD='unterminated\n")
    faults.inject()
    writer = wait_for(lambda: f"{h['writer'] / '.env'}:2" in str((r := d.row("writer"))["file_problems"]) and r, 10,
                      what="writer's .env error in status")
    assert f"writer: {h['writer'] / '.env'}:2" in d.cli("status").stdout
    ok = (
        "unterminated ' quote in the value of BAD" in " ".join(writer["file_problems"])
        and writer["pid"] == pids["writer"] and writer["state"] == "running"
        and d.row("coder")["pid"] == pids["coder"]
        and d.row("default")["pid"] == default_pid
        and len(gateway_leaders(fake_root).get("writer", [])) <= 1
    )
    faults.check(ok, f"after breaking .env under a running gateway: {writer}")
    faults.note(f"a malformed .env under a running gateway: writer {writer['state']}, its gateway "
                f"{'still running' if pid_alive(pids['writer']) else 'stopped'}")
    assert ok, writer
