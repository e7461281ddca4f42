"""Runaway profiles stay in their own failure domain (issue #12): a memory hog, a fork bomb, a hung
event loop and a stopped gateway are each killed as a tree and restarted through the backoff with
an exit record that names why, while the neighbours keep their PIDs.

The fake gateway plays the gateway; the hogs are real processes in its tree, started by a
``sitecustomize`` on the victim's ``PYTHONPATH`` (per-profile ``environment`` in hermesd.yaml), as
an agent's tool would start them. This machine has cgroup v1 controllers only, so the limits are
enforced by the ``watch`` mechanism (status says so; the test checks it). Every process is bounded
(the bomb stops at 300) so a failing test cannot take the machine down.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.fakegw import write_behaviour
from tests.faults.helpers import tagged_by_profile
from tests.harness import pid_alive, wait_for, write_config

# Every Python process of the victim's tree imports this sitecustomize, the hog included: only the
# first (the gateway) starts one, or each hog would start the next.
MEMORY_HOG = """
import os, subprocess, sys
if not os.environ.get("RUNAWAY_STARTED"):
    os.environ["RUNAWAY_STARTED"] = "1"
    subprocess.Popen([sys.executable, "-c",
    "import time\\nb = bytearray(300 * 2**20)\\nfor i in range(0, len(b), 4096): b[i] = 1\\ntime.sleep(600)"])
"""
FORK_BOMB = """
import os, subprocess, sys
if not os.environ.get("RUNAWAY_STARTED"):
    os.environ["RUNAWAY_STARTED"] = "1"
    subprocess.Popen([sys.executable, "-c",
    "import os, time\\nfor _ in range(300):\\n    if os.fork() == 0:\\n        time.sleep(600)\\n        os._exit(0)\\n"
    "    time.sleep(0.005)\\ntime.sleep(600)"])
"""


def _hog(tmp: Path, name: str, code: str) -> dict[str, str]:
    folder = tmp / f"site-{name}"
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(code)
    return {"PYTHONPATH": str(folder)}


def _kind(row: dict) -> str | None:
    return (row.get("last_exit") or {}).get("kind")


@pytest.mark.slow
@pytest.mark.parametrize("scenario", ["memory_hog", "fork_bomb", "hung_loop", "stopped_gateway"])
def test_runaway_profile_is_contained(fake_root, tmp_path, hermesd_factory, faults, scenario):
    homes = {"default": fake_root, "coder": fake_root / "profiles" / "coder",
             "writer": fake_root / "profiles" / "writer"}
    for home in homes.values():
        write_behaviour(home, heartbeat_interval=0.5)
    victim: dict = {"hung_after": 3, "startup_grace": 10}
    expect = {"memory_hog": "memory_limit", "fork_bomb": "tasks_limit", "hung_loop": "hung",
              "stopped_gateway": "hung"}[scenario]
    if scenario == "memory_hog":
        victim.update(limits={"memory_max": "150M"}, environment=_hog(tmp_path, "coder", MEMORY_HOG))
    elif scenario == "fork_bomb":
        victim.update(limits={"tasks_max": 64}, environment=_hog(tmp_path, "coder", FORK_BOMB))
    elif scenario == "hung_loop":
        write_behaviour(homes["coder"], heartbeat_interval=1000.0)  # one beat at "running", then silence
    write_config(fake_root, profiles={"coder": victim})
    d = hermesd_factory(fake_root)
    before = d.wait_running("default", "coder", "writer")
    if scenario == "stopped_gateway":
        os.kill(before["coder"], signal.SIGSTOP)
    faults.inject()
    row = wait_for(lambda: (r := d.row("coder"))["restarts"] >= 1 and r, 30, what=f"coder restarted ({scenario})")
    got = _kind(row)
    faults.check(got == expect, f"{scenario}: exit record {got!r}, expected {expect!r} ({row.get('last_exit')})")
    assert got == expect, row
    assert not pid_alive(before["coder"])
    # Only the victim's tree went: the neighbours kept their gateways, and no process of the old tree
    # (the hog, every bomb child) outlives it.
    faults.inject(2)
    for name in ("default", "writer"):
        faults.check(d.row(name)["pid"] == before[name], f"{scenario}: neighbour {name} was touched")
        assert d.row(name)["pid"] == before[name]
    if scenario in ("memory_hog", "fork_bomb"):
        assert d.row("coder")["limit_mechanisms"], row
        leftovers = wait_for(lambda: len(tagged_by_profile(fake_root).get("coder", [])) <= 2 or None, 10,
                             what="the old tree gone")
        assert leftovers
    faults.note(f"{scenario}: {row.get('last_exit', {}).get('reason') or row.get('last_exit')}")
