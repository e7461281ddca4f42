"""A gateway started outside hermesd for a supervised profile (issue #9): upstream's own
``hermes -p alpha gateway restart`` stops the supervised gateway and runs one in the foreground.
hermesd holds the profile for it (``foreign_gateway``), and when it exits takes the profile back
instead of leaving it "stopped outside hermesd" for good. Real gateways: the outside command is upstream's."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness import wait_for, write_config

pytestmark = [pytest.mark.slow, pytest.mark.real_gateway]

HERMES = Path(sys.executable).parent / "hermes"


@pytest.mark.parametrize("argv", [("gateway", "restart"), ("gateway", "run", "--replace")], ids=["restart", "replace"])
def test_an_outside_gateway_is_held_for_then_taken_back(fake_root: Path, hermesd_factory, argv: tuple[str, ...]):
    """Upstream's ``gateway restart`` stops the supervised gateway and runs its own; ``gateway run --replace``
    ends it with its takeover marker and SIGTERM. Either way the clean exit hermesd did not ask for holds
    the profile for the gateway that now runs it, named by its PID (never "stays down until started");
    hermesd does not fight it, and runs the profile again itself once it ends."""
    write_config(fake_root, command=[str(HERMES)], stop_timeout=60,
                 profiles={"default": {"enabled": False}, "writer": {"enabled": False}})
    d = hermesd_factory(fake_root)
    first = d.wait_running("coder", timeout=120)["coder"]
    env = {**d.env, "HERMES_HOME": str(fake_root)}
    outside = subprocess.Popen([str(HERMES), "-p", "coder", *argv], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        row = wait_for(lambda: (r := d.row("coder"))["state"] == "held" and f"PID {outside.pid}" in r["reason"] and r,
                       120, what="coder held for the outside gateway, named")
        assert row["hold"]["kind"] == "foreign_gateway" and not _alive(first), row
        if "--replace" in argv:
            assert row["last_exit"]["reason"] == f"replaced by a gateway hermesd did not start (PID {outside.pid})", row
        assert "stays down until started" not in d.cli("events", "coder").stdout
        assert d.row("coder")["state"] == "held"  # hermesd does not fight the outside gateway
        # The outside gateway ends (its user pressed Ctrl-C): hermesd runs the profile again itself.
        os.killpg(outside.pid, signal.SIGTERM)
        outside.wait(90)
        back = wait_for(lambda: (r := d.row("coder"))["state"] == "running" and not r["adopted"] and r, 120,
                        what="coder taken back by hermesd")
        assert back["pid"] not in (first, outside.pid)
    finally:
        if outside.poll() is None:
            os.killpg(outside.pid, signal.SIGKILL)
            outside.wait(10)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
