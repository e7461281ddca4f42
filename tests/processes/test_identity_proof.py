"""Identity before any action on a process: a PID from a profile's files is proven to be that
profile's gateway, by real processes with real command lines, environments and cgroups."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from profiles.upstream import files as gf
from profiles.upstream.process import proc_start_time
from supervisor.processes import identity
from tests.harness import wait_for

SLEEP = "import sys; sys.stdin.read()"


def gateway(procs, argv: list[str], env: dict[str, str]) -> int:
    p = subprocess.Popen([sys.executable, "-c", SLEEP, *argv], stdin=subprocess.PIPE,
                         env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/nonexistent", **env})
    procs.append(p)
    wait_for(lambda: "gateway" in gf.proc_argv(p.pid), 10, what="the child's exec")
    return p.pid


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "root"
    for name in ("alpha", "bravo"):
        (r / "profiles" / name).mkdir(parents=True)
    return r


def test_another_profiles_gateway_is_never_this_ones(root, procs):
    alpha, bravo = root / "profiles" / "alpha", root / "profiles" / "bravo"
    pid = gateway(procs, ["-p", "bravo", "gateway", "run"], {"HERMES_HOME": str(bravo)})
    start = proc_start_time(pid)
    assert identity.prove_gateway(pid, start, home=bravo, profile="bravo") == identity.Ident(pid, start)
    assert identity.prove_gateway(pid, start, home=alpha, profile="alpha") is None
    assert identity.prove_gateway(pid, start + 1, home=bravo, profile="bravo") is None  # recycled PID
    # alpha's gateway.pid forged to name it: neither the claim nor the proof accepts it.
    (alpha / "gateway.pid").write_text(json.dumps({"pid": pid, "start_time": start}))
    assert gf.live_gateway(alpha) is None and identity.gateway_of(alpha) is None


def test_the_home_comes_from_upstreams_rules(root, procs):
    alpha = root / "profiles" / "alpha"
    by_env = gateway(procs, ["gateway", "run"], {"HERMES_HOME": str(alpha)})
    by_flag = gateway(procs, ["-p", "alpha", "gateway", "restart"], {"HERMES_HOME": str(root)})
    wrong_flag = gateway(procs, ["-p", "bravo", "gateway", "run"], {"HERMES_HOME": str(alpha)})
    not_a_gateway = gateway(procs, ["gateway", "status"], {"HERMES_HOME": str(alpha)})
    no_env = gateway(procs, ["gateway", "run"], {})
    for pid, expected in ((by_env, True), (by_flag, True), (wrong_flag, False), (not_a_gateway, False),
                          (no_env, False)):
        assert (identity.prove_gateway(pid, None, home=alpha, profile="alpha") is not None) is expected, pid


def test_the_real_gateway_is_found_when_the_pid_file_lies(root, procs):
    alpha = root / "profiles" / "alpha"
    real = gateway(procs, ["-p", "alpha", "gateway", "run"], {"HERMES_HOME": str(alpha)})
    (alpha / "gateway.pid").write_text(json.dumps({"pid": os.getpid(), "start_time": proc_start_time(os.getpid())}))
    rec = gf.live_gateway(alpha)
    assert rec is not None and rec.pid == real
    (alpha / "gateway.pid").unlink()
    assert gf.live_gateway(alpha).pid == real


def test_a_member_of_another_profiles_cgroup_is_that_profiles(root, procs):
    """Where hermesd keeps profiles in cgroups, membership wins over every claim a process makes."""
    base = Path("/sys/fs/cgroup/unified") if Path("/sys/fs/cgroup/unified/cgroup.procs").exists() \
        else Path("/sys/fs/cgroup")
    if os.getuid() != 0 or not (base / "cgroup.procs").exists():
        pytest.skip("needs root and a cgroup v2 hierarchy")
    alpha = root / "profiles" / "alpha"
    pid = gateway(procs, ["-p", "alpha", "gateway", "run"], {"HERMES_HOME": str(alpha)})
    group = base / f"hermesd-test-{os.getpid()}"
    try:
        (group / "profile-bravo").mkdir(parents=True)
        (group / "profile-bravo" / "cgroup.procs").write_text(str(pid))
        assert identity.prove_gateway(pid, None, home=alpha, profile="alpha") is None
        (group / "profile-alpha").mkdir()
        (group / "profile-alpha" / "cgroup.procs").write_text(str(pid))
        assert identity.prove_gateway(pid, None, home=alpha, profile="alpha") is not None
    finally:
        procs[-1].stdin.close()
        procs[-1].wait(10)
        procs.pop()
        for sub in ("profile-alpha", "profile-bravo", ""):
            if (group / sub).exists():
                os.rmdir(group / sub)
