"""The log file system fills up: children keep running, hermesd keeps supervising, status says so."""

from __future__ import annotations

import errno
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakegw import write_behaviour
from tests.faults.helpers import eventually
from tests.harness import wait_for, write_config

MAX_BYTES = 64 * 1024


@pytest.fixture
def small_logs_fs(fake_root) -> Iterator[Path]:
    """A 1 MiB tmpfs mounted over ``<root>/.hermesd/logs``; unmounted after every process is gone.

    Requested before ``hermesd_factory`` by the test, so it is torn down after the daemons.
    """
    logs = fake_root / ".hermesd" / "logs"
    logs.parent.mkdir(mode=0o700, exist_ok=True)
    logs.mkdir(mode=0o700)
    out = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", str(logs)],
                         capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({out.stderr.strip() or out.returncode}); needs CAP_SYS_ADMIN")
    try:
        yield logs
    finally:
        if subprocess.run(["umount", str(logs)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(logs)], capture_output=True)


def fill(path: Path) -> int:
    """Append to ``path`` until the file system refuses (as a chatty gateway would); bytes written."""
    written = 0
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        chunk = b"chatty gateway line ........................................................\n" * 512
        while True:
            try:
                written += os.write(fd, chunk)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                if len(chunk) == 1:
                    return written
                chunk = chunk[: len(chunk) // 2]
    finally:
        os.close(fd)


def free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def start_and_fill(root, small_logs_fs, hermesd_factory):
    write_config(root, logs={"max_bytes": MAX_BYTES, "backups": 1}, restart={
        "initial_delay": 0.2, "max_delay": 1.0, "healthy_after": 3.0, "jitter": 0.0})
    h = {"default": root, "coder": root / "profiles" / "coder", "writer": root / "profiles" / "writer"}
    for home in h.values():
        write_behaviour(home, heartbeat_interval=0.5, write_counter=True)
    d = hermesd_factory(root)
    before = d.wait_running(*h)
    # coder's log is the chatty one; the others' last pages fill too, so no write anywhere succeeds.
    written = sum(fill(d.layout.child_log(n)) for n in ("coder", "default", "writer"))
    assert written > 0 and free_bytes(small_logs_fs) == 0
    return d, h, before


@pytest.mark.slow
def test_full_log_file_system_keeps_children_and_supervision(fake_root, small_logs_fs, hermesd_factory, faults):
    d, _h, before = start_and_fill(fake_root, small_logs_fs, hermesd_factory)
    faults.inject()

    # The gateways keep running (heartbeats fresh, same PIDs) and hermesd keeps answering.
    wait_for(lambda: all((r["heartbeat_age_s"] or 99) < 2 for r in d.status()["profiles"]), 10,
             what="fresh heartbeats on a full log file system")
    ok = {r["name"]: r["pid"] for r in d.status()["profiles"]} == before and d.ping()["ready"]
    faults.check(ok, "a gateway died or hermesd stopped answering when the log file system filled up")
    assert ok

    # A crash and an operator restart are still handled: noticed, counted, and the new gateways run
    # (hermesd sends their output to /dev/null while the log file system is full, and says so).
    os.kill(before["default"], 9)
    assert d.cli("restart", "writer").returncode == 0
    faults.inject(2)
    retried = eventually(lambda: all(
        (r := d.row(n))["state"] == "running" and r["pid"] != before[n] and r["restarts"] >= 1
        for n in ("default", "writer")), 15)
    rows = {r["name"]: r for r in d.status()["profiles"]}
    faults.note("status while the log disk is full: " + "; ".join(
        f"{n}: {r['state']} ({r['reason']}, last exit {(r['last_exit'] or {}).get('description')})"
        for n, r in rows.items()))
    assert retried, rows
    assert rows["coder"]["pid"] == before["coder"]

    # The operator frees space: everything is (still) running.
    os.truncate(d.layout.child_log("coder"), 0)
    back = eventually(lambda: all(r["state"] == "running" for r in d.status()["profiles"]), 15)
    for name in ("default", "writer"):
        row = d.row(name)
        faults.check(row["state"] == "running", f"{name} after freeing space: {row['state']} ({row['reason']})")
    assert back
    assert d.row("coder")["pid"] == before["coder"]


@pytest.mark.slow
def test_full_log_file_system_recovers_by_rotation(fake_root, small_logs_fs, hermesd_factory, faults):
    """coder's log is 16 times logs.max_bytes: rotation must bring it back under the limit, which frees
    the space a restarted gateway needs."""
    d, _h, before = start_and_fill(fake_root, small_logs_fs, hermesd_factory)
    os.kill(before["default"], 9)
    faults.inject()
    back = eventually(lambda: (r := d.row("default"))["state"] == "running" and r["pid"] != before["default"], 11)
    # housekeeping (every 5 s) rotates; on a full disk it truncates in place
    eventually(lambda: d.layout.child_log("coder").stat().st_size <= MAX_BYTES, 11)
    size = d.layout.child_log("coder").stat().st_size
    faults.check(bool(back) and size <= MAX_BYTES,
                 f"11 s later: coder.log {size} bytes (max_bytes {MAX_BYTES}), {free_bytes(small_logs_fs)} bytes free, "
                 f"default {d.row('default')['state']} after {d.row('default')['restarts']} restarts")
    assert size <= MAX_BYTES
    assert back


def test_full_log_file_system_is_reported_in_status(fake_root, small_logs_fs, hermesd_factory, faults):
    d, _h, _before = start_and_fill(fake_root, small_logs_fs, hermesd_factory)
    faults.inject()
    # One housekeeping pass (every 5 s) tries to rotate coder's oversized log and fails.
    wait_for(lambda: "log rotation failed" in d.log_text(), 10, what="a failed rotation in hermesd's log")
    doc = json.dumps(d.status()) + d.cli("status").stdout
    said = any(w in doc for w in ("No space", "ENOSPC", "rotation failed", "log file system"))
    faults.check(said, "status says nothing about the full log file system")
    assert said
