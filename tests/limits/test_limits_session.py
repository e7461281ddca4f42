"""A session without any cgroup (hermesd not root, nothing delegated): the waiting command watches
its own process tree, orphans included, and kills it on a breach. Run in a child interpreter:
becoming a child subreaper would change the test process itself."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

KEEPER = r"""
import json, os, sys, time
sys.path.insert(0, sys.argv[1])
from supervisor.processes.prctl import become_subreaper
from supervisor.limits.session import Session
from supervisor.settings import Limits

become_subreaper()
s = Session("coder", "exec", Limits(memory_max=100 << 20), problem="cgroup v2 is not delegated")  # tree watched
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    # the command: starts an orphan (its parent exits at once) that holds 150 MiB, then waits
    os.close(r)
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            b = b"x" * (150 << 20)
            os.write(w, str(os.getpid()).encode())
            time.sleep(60)
        os._exit(0)
    time.sleep(60)
    os._exit(0)
os.close(w)
orphan = int(os.read(r, 32))
t0 = time.monotonic()
status, breach = s.wait(pid)
took = time.monotonic() - t0
s.close()
alive = os.path.exists(f"/proc/{orphan}") and open(f"/proc/{orphan}/stat").read().split(") ")[1][0] not in "ZX"
print(json.dumps({"signaled": os.WIFSIGNALED(status), "breach": breach and breach.describe(), "took": took,
                  "orphan_alive": alive, "note": s.note}))
"""


def test_a_session_without_cgroup_watches_its_tree_orphans_included() -> None:
    out = subprocess.run([sys.executable, "-c", KEEPER, str(REPO)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    assert res["signaled"] and res["breach"].startswith("memory_limit: tree uses"), res
    assert not res["orphan_alive"], res
    assert "no cgroup: cgroup v2 is not delegated" in res["note"] and "memory_max 100M" in res["note"], res
