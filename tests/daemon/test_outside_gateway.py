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

from tests.harness import make_root, wait_for, write_config

pytestmark = [pytest.mark.slow, pytest.mark.real_gateway]

HERMES = Path(sys.executable).parent / "hermes"
# Upstream's ``gateway restart`` signals every gateway on the host whose command names this profile,
# whatever its root (measured): a name no other test runs keeps it off their gateways.
NAME = "outsider"


@pytest.mark.parametrize("argv", [("gateway", "restart"), ("gateway", "run", "--replace")], ids=["restart", "replace"])
def test_an_outside_gateway_is_held_for_then_taken_back(tmp_path: Path, hermesd_factory, argv: tuple[str, ...]):
    """Upstream's ``gateway restart`` stops the supervised gateway and runs its own; ``gateway run --replace``
    ends it with its takeover marker and SIGTERM. Either way the clean exit hermesd did not ask for holds
    the profile for the gateway that now runs it, named by its PID (never "stays down until started");
    hermesd does not fight it, and runs the profile again itself once it ends."""
    root = make_root(tmp_path, names=(NAME,))
    write_config(root, command=[str(HERMES)], stop_timeout=60, profiles={"default": {"enabled": False}})
    d = hermesd_factory(root)
    first = d.wait_running(NAME, timeout=120)[NAME]
    env = {**d.env, "HERMES_HOME": str(root)}
    outside = subprocess.Popen([str(HERMES), "-p", NAME, *argv], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        row = wait_for(lambda: (r := d.row(NAME))["state"] == "held" and f"PID {outside.pid}" in r["reason"] and r,
                       120, what=f"{NAME} held for the outside gateway, named")
        assert row["hold"]["kind"] == "foreign_gateway" and not _alive(first), row
        if "--replace" in argv:
            assert row["last_exit"]["reason"] == f"replaced by a gateway hermesd did not start (PID {outside.pid})", row
        assert "stays down until started" not in d.cli("events", NAME).stdout
        assert d.row(NAME)["state"] == "held"  # hermesd does not fight the outside gateway
        # The outside gateway ends (its user pressed Ctrl-C): hermesd runs the profile again itself.
        os.killpg(outside.pid, signal.SIGTERM)
        outside.wait(90)
        back = wait_for(lambda: (r := d.row(NAME))["state"] == "running" and not r["adopted"] and r, 120,
                        what=f"{NAME} taken back by hermesd")
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
