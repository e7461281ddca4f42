"""Process-control scoping: a seccomp filter that lets a confined process tune only itself.

Why a filter: the kernel lets a process change the resource limits (``prlimit64``), nice value
(``setpriority``), CPU affinity and scheduling policy (``sched_set*``) and I/O priority
(``ioprio_set``) of *any* process of the same account. Landlock does not scope these calls, so
without a filter a confined profile can starve hermesd of descriptors (``prlimit --pid``), slow
every other gateway of its account to a crawl, or pin them to one CPU.

What the filter allows, on the pid argument alone (seccomp sees register values, never what a
pointer points to): the caller itself (pid 0, or ``PRIO_PROCESS``/``IOPRIO_WHO_PROCESS`` with
who 0), and ``prlimit64`` that only *reads* (``new_limit`` NULL). Everything else fails with
``EPERM``, as the kernel answers for another account's process. What a confined process loses:
naming itself or its own children by PID number (``renice -p $$``, ``taskset -p``,
``pthread_setaffinity_np`` of another thread); ``nice``, ``ionice -c3 CMD``, ``taskset MASK CMD``,
``ulimit`` and ``prlimit CMD`` all pass 0 and keep working. hermes-agent 0.19.0 makes none of
these calls.

Each architecture the kernel may run a process under is covered (a 64-bit kernel runs 32-bit
binaries: ``int 0x80`` would reach the i386 numbers), and x32's syscall bit is cleared before the
numbers are compared. The program is built here, pure, so the tests read it; :func:`install`
loads it (``prctl(PR_SET_SECCOMP)``, after ``no_new_privs``). Stdlib only (``os``, ``sys``,
``ctypes``): the confinement shim imports it under ``python -S``.
"""

from __future__ import annotations

import ctypes
import os
import sys

# struct seccomp_data: nr (u32), arch (u32), instruction_pointer (u64), args[6] (u64 each).
_OFF_NR, _OFF_ARCH, _OFF_ARGS = 0, 4, 16
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
_EPERM, _ENOSYS = 1, 38
_X32_BIT = 0x40000000
# Classic BPF opcodes (linux/filter.h).
_LD_W_ABS = 0x20
_ALU_AND_K = 0x54
_JEQ_K = 0x15
_RET_K = 0x06

AUDIT_ARCH_X86_64 = 0xC000003E
AUDIT_ARCH_I386 = 0x40000003
AUDIT_ARCH_AARCH64 = 0xC00000B7
AUDIT_ARCH_ARM = 0x40000028

# The calls this filter governs, per system-call table (arch/*/entry/syscalls, include/uapi/asm-generic/unistd.h).
_X86_64 = {"setpriority": 141, "sched_setparam": 142, "sched_setscheduler": 144, "sched_setaffinity": 203,
           "ioprio_set": 251, "prlimit64": 302, "sched_setattr": 314}
_I386 = {"setpriority": 97, "sched_setparam": 154, "sched_setscheduler": 156, "sched_setaffinity": 241,
         "ioprio_set": 289, "prlimit64": 340, "sched_setattr": 351}
_GENERIC = {"setpriority": 140, "sched_setparam": 118, "sched_setscheduler": 119, "sched_setaffinity": 122,
            "ioprio_set": 30, "prlimit64": 261, "sched_setattr": 274}
_ARM = {"setpriority": 97, "sched_setparam": 154, "sched_setscheduler": 156, "sched_setaffinity": 241,
        "ioprio_set": 314, "prlimit64": 369, "sched_setattr": 380}

# machine (os.uname) -> every (audit arch, table, clear the x32 bit) a process there may use.
ARCHES: dict[str, tuple[tuple[int, dict[str, int], bool], ...]] = {
    "x86_64": ((AUDIT_ARCH_X86_64, _X86_64, True), (AUDIT_ARCH_I386, _I386, False)),
    "aarch64": ((AUDIT_ARCH_AARCH64, _GENERIC, False), (AUDIT_ARCH_ARM, _ARM, False)),
}

# A call is allowed when one of its alternatives holds; an alternative is a list of
# (argument index, which 32-bit half, required value). Integer arguments are compared on their
# low half only: the kernel truncates them to int, so the high half cannot change the target.
_SELF = [[(0, "lo", 0)]]
_RULES: dict[str, list[list[tuple[int, str, int]]]] = {
    "prlimit64": [[(0, "lo", 0)], [(2, "lo", 0), (2, "hi", 0)]],  # itself, or only reading (new_limit NULL)
    "setpriority": [[(0, "lo", 0), (1, "lo", 0)]],  # PRIO_PROCESS, who 0
    "ioprio_set": [[(0, "lo", 1), (1, "lo", 0)]],  # IOPRIO_WHO_PROCESS, who 0
    "sched_setaffinity": _SELF,
    "sched_setscheduler": _SELF,
    "sched_setparam": _SELF,
    "sched_setattr": _SELF,
}
DENIED = tuple(_RULES)


def supported(machine: str | None = None) -> bool:
    """Whether a filter can be built for this machine's architectures."""
    return (machine or os.uname().machine) in ARCHES


def _arg_offset(index: int, half: str) -> int:
    lo_first = sys.byteorder == "little"
    return _OFF_ARGS + 8 * index + (0 if (half == "lo") == lo_first else 4)


def build_program(machine: str | None = None) -> bytes:
    """The filter as ``struct sock_filter`` array bytes (8 bytes per instruction)."""
    arches = ARCHES.get(machine or os.uname().machine)
    if arches is None:
        raise ValueError(f"no process-control filter for architecture {machine or os.uname().machine!r}")
    # Assemble with symbolic labels, then resolve the (forward, relative) jumps.
    ops: list[tuple] = [("ld", _OFF_ARCH)]
    for i, (audit, _table, _x32) in enumerate(arches):
        ops.append(("jeq", audit, f"arch{i}", None))
    ops.append(("ret", _RET_ERRNO | _ENOSYS))  # an architecture this kernel cannot run us under
    for i, (_audit, table, x32) in enumerate(arches):
        ops.append(("label", f"arch{i}"))
        ops.append(("ld", _OFF_NR))
        if x32:
            ops.append(("and", ~_X32_BIT & 0xFFFFFFFF))
        for name in _RULES:
            ops.append(("jeq", table[name], f"a{i}.{name}", None))
        ops.append(("ret", _RET_ALLOW))
        for name, alternatives in _RULES.items():
            ops.append(("label", f"a{i}.{name}"))
            for j, conds in enumerate(alternatives):
                nxt = f"a{i}.{name}.alt{j + 1}"
                for index, half, value in conds:
                    ops.append(("ld", _arg_offset(index, half)))
                    ops.append(("jeq", value, None, nxt))
                ops.append(("ret", _RET_ALLOW))
                ops.append(("label", nxt))
            ops.append(("ret", _RET_ERRNO | _EPERM))
    where: dict[str, int] = {}
    n = 0
    for op in ops:
        if op[0] == "label":
            where[op[1]] = n
        else:
            n += 1
    out = bytearray()
    pc = 0
    for op in ops:
        kind = op[0]
        if kind == "label":
            continue
        if kind == "ld":
            out += _insn(_LD_W_ABS, 0, 0, op[1])
        elif kind == "and":
            out += _insn(_ALU_AND_K, 0, 0, op[1])
        elif kind == "ret":
            out += _insn(_RET_K, 0, 0, op[1])
        else:
            _, value, on_true, on_false = op
            jt = 0 if on_true is None else where[on_true] - pc - 1
            jf = 0 if on_false is None else where[on_false] - pc - 1
            if not (0 <= jt <= 255 and 0 <= jf <= 255):
                raise ValueError("filter too long for a classic BPF jump")
            out += _insn(_JEQ_K, jt, jf, value)
        pc += 1
    return bytes(out)


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return (code.to_bytes(2, sys.byteorder) + jt.to_bytes(1, sys.byteorder) + jf.to_bytes(1, sys.byteorder)
            + (k & 0xFFFFFFFF).to_bytes(4, sys.byteorder))


class _Fprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2


def install(program: bytes | None = None) -> None:
    """Load the filter into this process (inherited by everything it starts; cannot be removed).

    Needs ``no_new_privs`` (or CAP_SYS_ADMIN). Raises ``OSError`` naming the call.
    """
    try:
        code = program if program is not None else build_program()
    except ValueError as exc:
        raise OSError(38, str(exc)) from None  # ENOSYS: the shim then refuses to run unscoped
    buf = ctypes.create_string_buffer(code, len(code))
    prog = _Fprog(len(code) // 8, ctypes.addressof(buf))
    lib = ctypes.CDLL(None, use_errno=True)
    lib.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]
    if lib.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"seccomp filter: {os.strerror(err)}")
