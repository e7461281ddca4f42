"""Process control that is not a signal: a confined profile tunes only its own processes.

Without the filter and the read-only ``/proc`` a confined process of the same account could run
``prlimit --pid <hermesd> --nofile=4:20000`` (hermesd can then accept no request), ``renice``,
``taskset``, ``ionice``, ``chrt`` and write ``/proc/<pid>/oom_score_adj`` or ``autogroup`` of other
profiles' gateways and of hermesd. Each test makes the real calls from a really confined process
against real victims, and checks the victims afterwards; the controls run the same calls with the
scoping taken out of the plan, so a test that could not see the harm would fail there.
"""

from __future__ import annotations

import ctypes
import dataclasses
import mmap
import os
import pwd
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from supervisor.isolation import shared_board as kb
from supervisor.isolation import syscalls
from supervisor.isolation.install import discover_install_paths
from supervisor.isolation.planning import Plan, PlanInputs, UserIds, make_plan
from supervisor.isolation.probing import probe
from supervisor.isolation.shim_argv import wrap_argv
from supervisor.settings import IsolationSettings
from tests.isolation.conftest import HERMES, Tree, make_tree, need
from tests.isolation.test_confinement import rc_lines
from tests.isolation.test_exec import Root

NOBODY = pwd.getpwnam("nobody")
ATTACKS = ("prlimit", "renice", "taskset", "ionice", "chrt", "oom", "autogroup")


def renice_to(pid: int) -> int:
    """The nice value the attack sets on ``pid``: 7 steps less favoured than it runs now (at most 19),
    the starving kind of renice, which the process's own account may always do, at any niceness the
    test started with (a lower value would need CAP_SYS_NICE, and its refusal would prove nothing)."""
    return min(19, os.getpriority(os.PRIO_PROCESS, pid) + 7)


def attack_script(pid: int) -> str:
    """Every kind of process control on ``pid``, one ``name=rc`` line each (the kernel throttles
    autogroup changes host-wide, EAGAIN within 100 ms of another one: retried)."""
    return f"""
prlimit --pid {pid} --nofile=4:20000 2>/dev/null; echo prlimit=$?
renice -n {renice_to(pid)} -p {pid} >/dev/null 2>&1; echo renice=$?
taskset -p 1 {pid} >/dev/null 2>&1; echo taskset=$?
ionice -c3 -p {pid} 2>/dev/null; echo ionice=$?
chrt -b -p 0 {pid} 2>/dev/null; echo chrt=$?
(echo 900 > /proc/{pid}/oom_score_adj) 2>/dev/null; echo oom=$?
autogroup() {{ for i in 1 2 3 4 5 6 7 8; do (echo 9 > /proc/{pid}/autogroup) 2>/dev/null && return 0; sleep 0.15; done
              return 1; }}
autogroup; echo autogroup=$?
"""


OWN_SCRIPT = """
nice -n 3 true; echo nice_cmd=$?
ulimit -n 512; echo ulimit=$?
ionice -c3 true; echo ionice_cmd=$?
taskset 1 true; echo taskset_cmd=$?
prlimit --nofile=256 true; echo prlimit_cmd=$?
prlimit --pid $$ --nofile 2>/dev/null >/dev/null; echo prlimit_read_own=$?
"""


@dataclasses.dataclass
class Victim:
    """A long-lived process whose every tunable the tests compare before and after."""

    proc: subprocess.Popen[bytes]

    @property
    def pid(self) -> int:
        return self.proc.pid

    def snapshot(self) -> dict[str, object]:
        return snapshot(self.pid)


def nofile(pid: int) -> tuple[int, int]:
    """Soft and hard RLIMIT_NOFILE of ``pid`` (from /proc: prlimit(2) needs CAP_SYS_RESOURCE for another uid)."""
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            soft, hard = line.split()[3:5]
            return int(soft), int(hard)
    raise AssertionError(f"no open-files line in /proc/{pid}/limits")


def snapshot(pid: int) -> dict[str, object]:
    return {
        "nofile": nofile(pid),
        "nice": os.getpriority(os.PRIO_PROCESS, pid),
        "affinity": os.sched_getaffinity(pid),
        "policy": os.sched_getscheduler(pid),
        "oom": Path(f"/proc/{pid}/oom_score_adj").read_text().strip(),
        "autogroup": Path(f"/proc/{pid}/autogroup").read_text().split()[-1] if Path(f"/proc/{pid}/autogroup").exists()
        else None,
        "ioprio": subprocess.run(["ionice", "-p", str(pid)], capture_output=True, text=True).stdout.strip(),
    }


@pytest.fixture
def tree() -> Iterator[Tree]:
    t = make_tree()
    os.chmod(t.base, 0o755)
    os.chmod(t.root, 0o755)
    try:
        yield t
    finally:
        t.close()


def _as_nobody() -> None:
    os.setgroups([])
    os.setgid(NOBODY.pw_gid)
    os.setuid(NOBODY.pw_uid)


def nobody_plan(tree: Tree, mechanism: str) -> Plan:
    """Profile ``a`` confined as the account ``nobody`` (what a non-root hermesd's profiles share)."""
    real = probe()
    need(real, mechanism)
    facts = real if mechanism == "namespace+landlock" else dataclasses.replace(
        real, mount_namespace=False, user_namespace=False)
    home = tree.home("a")
    os.chown(home, NOBODY.pw_uid, NOBODY.pw_gid)
    plan = make_plan(PlanInputs(
        root=tree.root, profile="a", home=home, probe=facts, settings=IsolationSettings(user="nobody"),
        other_homes=(tree.home("b"),), install_paths=discover_install_paths([str(HERMES)]),
        user_ids=UserIds("nobody", NOBODY.pw_uid, NOBODY.pw_gid), kanban_layout=kb.layout(tree.root)))
    assert plan.mechanism == mechanism, plan.reason
    return plan


def unscoped(plan: Plan) -> Plan:
    """``plan`` with process control open: no filter, and /proc writable (neither a read-only mount
    nor Landlock's deny-by-default writes)."""
    return dataclasses.replace(plan, syscall_filter=False, proc_read_only=False, writable=(*plan.writable, "/proc"))


@pytest.fixture
def same_account_victim() -> Iterator[Victim]:
    """Another process of the confined profile's own account (another profile's gateway, or a
    non-root hermesd, in a real deployment)."""
    proc = subprocess.Popen(["sleep", "120"], preexec_fn=_as_nobody, start_new_session=True)
    try:
        yield Victim(proc)
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a profile and its victim as nobody")
@pytest.mark.parametrize("mechanism", ["namespace+landlock", "landlock"])
def test_same_account_processes_cannot_be_tuned(tree: Tree, same_account_victim: Victim, mechanism: str) -> None:
    plan = nobody_plan(tree, mechanism)
    assert plan.syscall_filter
    before = same_account_victim.snapshot()
    res = tree.run(plan, attack_script(same_account_victim.pid))
    rc = rc_lines(res.stdout)
    assert set(rc) == set(ATTACKS), res.stderr
    syscall_attacks = {k: v for k, v in rc.items() if k not in ("oom", "autogroup")}
    assert all(v != 0 for v in syscall_attacks.values()), (rc, res.stderr)
    # /proc/<pid>/oom_score_adj and autogroup: a read-only mount in the namespace; under Landlock
    # alone, writes denied by default (no rule grants /proc).
    assert rc["oom"] != 0 and rc["autogroup"] != 0, rc
    assert same_account_victim.snapshot() == before
    assert not [g for g in plan.gaps if "OOM score" in g]
    own = rc_lines(tree.run(plan, OWN_SCRIPT).stdout)
    assert own == dict.fromkeys(own, 0) and len(own) == 6, own


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a profile and its victim as nobody")
def test_control_without_scoping_the_same_calls_do_harm(tree: Tree, same_account_victim: Victim) -> None:
    """The attack script is able to see harm: with the filter and the read-only /proc taken out
    of the plan, every call lands on the victim."""
    plan = unscoped(nobody_plan(tree, "namespace+landlock"))
    before = same_account_victim.snapshot()
    niced = renice_to(same_account_victim.pid)
    res = tree.run(plan, attack_script(same_account_victim.pid).replace("2>/dev/null", ""))
    rc = rc_lines(res.stdout)
    assert rc == dict.fromkeys(ATTACKS, 0), (rc, res.stderr)
    after = same_account_victim.snapshot()
    assert after["nofile"] == (4, 20000) and after["nice"] == niced and after["oom"] == "900"
    assert after != before


# --- the real daemon, through hermesd exec -------------------------------------------------------
@pytest.fixture
def running() -> Iterator[tuple[Root, dict[str, int]]]:
    facts = probe()
    if facts.landlock_abi < 1:
        pytest.skip("this kernel has no Landlock")
    r = Root()
    try:
        r.hermesd.start()
        pids = r.hermesd.wait_running("a", "b", timeout=30)
        yield r, pids
    finally:
        r.close()


@pytest.mark.live
def test_hermesd_exec_cannot_starve_hermesd_or_tune_another_gateway(running: tuple[Root, dict[str, int]]) -> None:
    r, pids = running
    assert r.hermesd.proc is not None
    daemon = r.hermesd.proc.pid
    before = {p: snapshot(p) for p in (daemon, pids["b"])}
    for target in (daemon, pids["b"]):
        res = r.exec("a", attack_script(target))
        rc = rc_lines(res.stdout)
        assert set(rc) == set(ATTACKS) and all(v != 0 for v in rc.values()), (target, rc, res.stderr)
    assert {p: snapshot(p) for p in before} == before
    status = r.hermesd.cli("status")
    assert status.returncode == 0, status.stderr
    assert r.hermesd.row("b")["pid"] == pids["b"]
    row = r.hermesd.row("a")
    assert row["isolation"]["process_control"] == "scoped" and row["isolation"]["proc"] == "read-only"


# --- 32-bit system calls from a 64-bit process ----------------------------------------------------
_I386_PRLIMIT64 = 340
_I386_GETPID = 20


def _int80(nr: int, ebx: int = 0, ecx: int = 0, edx: int = 0, esi: int = 0) -> int:
    """A system call through the i386 entry (``int 0x80``) of an x86-64 kernel, from this process.

    Machine code in a page mapped below 4 GiB (pointers must fit 32 bits): push rbx; mov eax..esi;
    int 0x80; pop rbx; ret.
    """
    code = (b"\x53" + b"\xb8" + nr.to_bytes(4, "little") + b"\xbb" + ebx.to_bytes(4, "little")
            + b"\xb9" + ecx.to_bytes(4, "little") + b"\xba" + edx.to_bytes(4, "little")
            + b"\xbe" + esi.to_bytes(4, "little") + b"\xcd\x80\x5b\xc3")
    page = mmap.mmap(-1, 4096, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | 0x40,  # MAP_32BIT
                     prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    page.write(code)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(page))
    fn = ctypes.CFUNCTYPE(ctypes.c_int)(addr)
    result = fn()
    del fn
    return result


I386_CHILD = f"""
import ctypes, mmap, sys
sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})
from tests.isolation.test_process_control import _int80
limits = mmap.mmap(-1, 4096, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | 0x40)
limits.write((4).to_bytes(8, "little") + (20000).to_bytes(8, "little"))
addr = ctypes.addressof(ctypes.c_char.from_buffer(limits))
print(_int80({_I386_PRLIMIT64}, int(sys.argv[1]), 7, addr, 0))
"""


@pytest.fixture
def root_victim() -> Iterator[Victim]:
    """A process of hermesd's own account (root here): prlimit(2) needs no capability for it."""
    proc = subprocess.Popen(["sleep", "120"], start_new_session=True)
    try:
        yield Victim(proc)
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the i386 entry exists on x86-64 kernels only")
def test_the_32_bit_entry_is_filtered_too(tree: Tree, root_victim: Victim) -> None:
    if _int80(_I386_GETPID) != os.getpid():
        pytest.skip("this kernel runs no 32-bit system calls (IA32 emulation off)")
    real = probe()
    need(real, "landlock")
    plan = tree.plan(real, "a", "namespace+landlock" if real.namespace_usable else "landlock")
    argv = [sys.executable, "-c", I386_CHILD, str(root_victim.pid)]
    denied = subprocess.run(wrap_argv(plan, argv), capture_output=True, text=True, timeout=30)
    assert denied.stdout.strip() == "-1", denied.stderr  # -EPERM
    assert root_victim.snapshot()["nofile"] != (4, 20000)
    allowed = subprocess.run(wrap_argv(unscoped(plan), argv), capture_output=True, text=True, timeout=30)
    assert allowed.stdout.strip() == "0", allowed.stderr
    assert root_victim.snapshot()["nofile"] == (4, 20000)


# --- the program itself, for every architecture (including those this machine cannot run) ---------
def run_bpf(program: bytes, nr: int, arch: int, args: tuple[int, ...] = (0, 0, 0, 0, 0, 0)) -> int:
    """Evaluate the classic-BPF subset the filter uses over one ``struct seccomp_data``."""
    data = nr.to_bytes(4, sys.byteorder) + arch.to_bytes(4, sys.byteorder) + bytes(8)
    for a in (*args, *([0] * (6 - len(args)))):
        data += (a & (2**64 - 1)).to_bytes(8, sys.byteorder)
    insns = [program[i:i + 8] for i in range(0, len(program), 8)]
    acc, pc = 0, 0
    for _ in range(len(insns) + 1):
        ins = insns[pc]
        code = int.from_bytes(ins[0:2], sys.byteorder)
        jt, jf, k = ins[2], ins[3], int.from_bytes(ins[4:8], sys.byteorder)
        if code == 0x20:
            acc = int.from_bytes(data[k:k + 4], sys.byteorder)
        elif code == 0x54:
            acc &= k
        elif code == 0x15:
            pc += jt if acc == k else jf
        elif code == 0x06:
            return k
        else:
            raise AssertionError(f"unexpected opcode {code:#x}")
        pc += 1
    raise AssertionError("the program ran off its end")


ALLOW, EPERM, ENOSYS = 0x7FFF0000, 0x00050001, 0x00050026


@pytest.mark.parametrize("machine", sorted(syscalls.ARCHES))
def test_filter_program_decisions(machine: str) -> None:
    prog = syscalls.build_program(machine)
    for audit, table, x32 in syscalls.ARCHES[machine]:
        for name in syscalls.DENIED:
            nr = table[name]
            variants = [nr, nr | 0x40000000] if x32 else [nr]
            for n in variants:
                if name == "setpriority":
                    assert run_bpf(prog, n, audit, (0, 0, 5)) == ALLOW
                    assert run_bpf(prog, n, audit, (0, 4242, 5)) == EPERM
                    assert run_bpf(prog, n, audit, (2, 0, 5)) == EPERM  # PRIO_USER 0: every process of the account
                elif name == "ioprio_set":
                    assert run_bpf(prog, n, audit, (1, 0, 0)) == ALLOW
                    assert run_bpf(prog, n, audit, (1, 4242, 0)) == EPERM
                    assert run_bpf(prog, n, audit, (3, 0, 0)) == EPERM  # IOPRIO_WHO_USER
                elif name == "prlimit64":
                    assert run_bpf(prog, n, audit, (0, 7, 0x7FFF0000, 0)) == ALLOW
                    assert run_bpf(prog, n, audit, (4242, 7, 0, 0x7FFF0000)) == ALLOW  # reading only
                    assert run_bpf(prog, n, audit, (4242, 7, 0x7FFF0000, 0)) == EPERM
                    assert run_bpf(prog, n, audit, (4242, 7, 1 << 32, 0)) == EPERM  # high half of the pointer
                else:
                    assert run_bpf(prog, n, audit, (0,)) == ALLOW
                    assert run_bpf(prog, n, audit, (4242,)) == EPERM
                    # the kernel truncates an int argument: 4242 with a high half set is still 4242,
                    # and a pid of 1 << 32 is pid 0 (itself)
                    assert run_bpf(prog, n, audit, (4242 | (1 << 40),)) == EPERM
                    assert run_bpf(prog, n, audit, (1 << 32,)) == ALLOW
        assert run_bpf(prog, table["prlimit64"] + 1000, audit, (4242,)) == ALLOW  # anything else passes
    assert run_bpf(prog, 1, 0x12345678) == ENOSYS


def test_filter_is_installed_by_the_shim(tree: Tree) -> None:
    real = probe()
    need(real, "landlock")
    plan = tree.plan(real, "a", "namespace+landlock" if real.namespace_usable else "landlock")
    assert plan.syscall_filter == real.seccomp
    res = tree.run(plan, "grep Seccomp: /proc/self/status")
    assert res.stdout.split()[-1] == ("2" if real.seccomp else "0"), res.stderr
