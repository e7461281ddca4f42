"""A profile must not reach past its own processes, and hermesd must not lose track of them.

Scenarios from an attacker's seat (issue 20's findings 7 and 8, issue 25's finding 4), each against
a real daemon and real processes:

* hermesd's own limits and scheduling changed behind its back (``prlimit --pid``, ``renice``,
  ``taskset``, ``oom_score_adj``): restored at housekeeping, and status keeps answering;
* orphans that left their profile's tree (``setsid`` + ``env -i``, parent gone) at a stop, a restart
  and hermesd's own exit;
* a process that claims another profile's tag (``HERMESD_PROFILE=p2``): not counted in p2's tree,
  p2 is not killed for its memory;
* ``hermesd exec`` under ``memory_max``: the allocation over the limit is killed, in the profile's
  cgroup.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.faults.helpers import eventually
from tests.harness import wait_for


def nofile(pid: int) -> tuple[int, int]:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            soft, hard = line.split()[3:5]
            return int(soft), int(hard)
    raise AssertionError("no open-files line")


def has_cap(bit: int) -> bool:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> bit & 1)
    return False


CAP_SYS_RESOURCE, CAP_SYS_NICE = 24, 23


def test_hermesd_restores_its_own_limits_and_scheduling(root: Path, hermesd_factory, faults) -> None:
    d = hermesd_factory(root)
    d.wait_running("default", "coder", "writer")
    hp = d.proc.pid
    base_nofile = nofile(hp)
    base_oom = Path(f"/proc/{hp}/oom_score_adj").read_text().strip()
    attacks = [["prlimit", "--pid", str(hp), "--nofile=4:4096"], ["renice", "-n", "12", "-p", str(hp)],
               ["sh", "-c", f"echo 700 > /proc/{hp}/oom_score_adj"]]
    if len(os.sched_getaffinity(hp)) > 1:
        attacks.append(["taskset", "-p", "1", str(hp)])
    for argv in attacks:
        assert subprocess.run(argv, capture_output=True).returncode == 0, argv
        faults.inject()
    assert nofile(hp) == (4, 4096)

    def restored() -> bool:
        soft, _hard = nofile(hp)
        return (soft >= min(4096, base_nofile[0]) and os.getpriority(os.PRIO_PROCESS, hp) == 0
                and Path(f"/proc/{hp}/oom_score_adj").read_text().strip() == base_oom
                and len(os.sched_getaffinity(hp)) == len(os.sched_getaffinity(0)))

    faults.check(eventually(restored, 15) is not None, "hermesd did not restore its limits within 15 s")
    assert restored()
    # a lowered hard limit comes back only with CAP_SYS_RESOURCE (which root lacks on some hosts)
    full = base_nofile if has_cap(CAP_SYS_RESOURCE) or base_nofile[1] <= 4096 else (min(base_nofile[0], 4096), 4096)
    faults.check(nofile(hp) == full, f"descriptor limit {nofile(hp)}, expected {full}")
    status = d.cli("status", "--json")
    faults.check(status.returncode == 0, f"status rc {status.returncode}: {status.stderr[-200:]}")
    assert status.returncode == 0, status.stderr
    sup = d.status()["supervisor"]
    said = [*sup["self_restored"], sup["self_problem"] or ""]
    assert any("RLIMIT_NOFILE changed from" in line for line in said), said
    assert any("nice value" in line and line.endswith("restored") for line in said), said
    if full != base_nofile:  # the hard limit cannot come back: said, not hidden
        assert "RLIMIT_NOFILE" in (sup["self_problem"] or "") and "cannot restore" in sup["self_problem"], sup
        text = d.cli("status")
        assert "RLIMIT_NOFILE" in text.stdout, text.stdout
    old = d.row("coder")["pid"]
    assert d.cli("restart", "coder").returncode == 0
    wait_for(lambda: d.row("coder")["state"] == "running" and d.row("coder")["pid"] != old, 15,
             what="coder restarted after the attack")
    faults.survive()
