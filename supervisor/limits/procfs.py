"""The few ``/proc`` files limits and hung detection read, each in one ``open``/``read``/``close``.

Cost matters here: the watch mechanism reads ``/proc/<pid>/stat`` of every process on the host
once per scan (measured ~15 µs each in Python on this machine), so the readers use raw
``os.open``/``os.read`` and parse bytes, with no ``Path`` objects, no text decoding and no regex.
Everything returns ``None`` for a process that is gone, a zombie where it matters, or unreadable
(another user's): a process disappearing between two reads is the normal case, never an error.

``/proc`` files are kernel-generated (not regular files a profile controls), so the
``profiles.safeio`` rules do not apply; sizes are still capped.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
PROC = "/proc"


def _read(path: str, limit: int = 1 << 16) -> bytes | None:
    """At most ``limit`` bytes; read in chunks of up to 64 KiB, because ``os.read(fd, n)`` allocates
    ``n`` bytes up front (a 2 MiB buffer per environ read would dominate a scan's cost)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        first = os.read(fd, min(limit, 1 << 16))
        if len(first) < min(limit, 1 << 16) or len(first) >= limit:
            return first
        chunks = [first]
        left = limit - len(first)
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 16))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    except OSError:  # ESRCH: the process died between open and read
        return None
    finally:
        os.close(fd)


@dataclass(frozen=True, slots=True)
class ProcStat:
    """The fields of ``/proc/<pid>/stat`` the tree logic needs."""

    pid: int
    ppid: int
    state: str  # R S D Z T t X I ...
    threads: int  # field 20: tasks of this process, what cgroup v2 pids.max counts
    start: int  # field 22: clock ticks since boot; with pid, the identity that survives PID reuse
    rss: int  # field 24 in bytes (the kernel's per-CPU counters: may lag by a few hundred KiB)


def _parse_stat(pid: int, raw: bytes) -> ProcStat | None:
    # The command name (field 2) may hold spaces and parentheses: count from the last ")".
    try:
        f = raw[raw.rindex(b")") + 2 :].split()
        return ProcStat(
            pid=pid,
            ppid=int(f[1]),
            state=chr(f[0][0]),
            threads=int(f[17]),
            start=int(f[19]),
            rss=int(f[21]) * PAGE_SIZE,
        )
    except (ValueError, IndexError):
        return None


def read_stat(pid: int, proc: str = PROC) -> ProcStat | None:
    raw = _read(f"{proc}/{pid}/stat", 4096)
    return None if raw is None else _parse_stat(pid, raw)


def scan(proc: str = PROC) -> dict[int, ProcStat]:
    """Every process on the host (this PID namespace), one ``stat`` read each."""
    out: dict[int, ProcStat] = {}
    with os.scandir(proc) as it:
        for entry in it:
            name = entry.name
            if not name.isdigit():
                continue
            raw = _read(f"{proc}/{name}/stat", 4096)
            if raw is not None:
                st = _parse_stat(int(name), raw)
                if st is not None:
                    out[st.pid] = st
    return out


def state_letter(pid: int, proc: str = PROC) -> str | None:
    """Field 3 of ``/proc/<pid>/stat``: ``T`` stopped by a signal, ``t`` stopped by a tracer, ``Z`` zombie."""
    st = read_stat(pid, proc)
    return None if st is None else st.state


def start_clock(pid: int, proc: str = PROC) -> tuple[float, float, int] | None:
    """When ``pid`` started, as ``(monotonic, wall, ticks)``.

    ``/proc`` gives ticks since boot on ``CLOCK_BOOTTIME``, which counts suspend;
    ``time.monotonic()`` (``CLOCK_MONOTONIC``) does not, so the offset between the two clocks,
    read now, converts one to the other. Resolution: one tick (10 ms).
    """
    st = read_stat(pid, proc)
    if st is None or st.state in ("Z", "X"):
        return None
    boot = time.clock_gettime(time.CLOCK_BOOTTIME)
    mono = time.monotonic()
    wall = time.time()
    since_boot = st.start / CLK_TCK
    return since_boot - (boot - mono), wall - (boot - since_boot), st.start


def thread_ids(pid: int, proc: str = PROC) -> list[int]:
    try:
        return [int(n) for n in os.listdir(f"{proc}/{pid}/task") if n.isdigit()]
    except OSError:
        return []


def rollup_bytes(pid: int, proc: str = PROC) -> int | None:
    """``Pss + SwapPss`` of ``pid`` in bytes, from ``smaps_rollup`` (Linux >= 4.14).

    Proportional set size: a page shared by k processes counts 1/k in each, so summing over a
    tree never counts a page twice (unlike RSS). It walks the process's page tables, so it costs
    about 0.15 ms for a small Python process and ~1 ms for an 80 MB one: read only when needed.
    ``None`` when the file is missing or unreadable (kernel thread, gone, other user).
    """
    raw = _read(f"{proc}/{pid}/smaps_rollup", 8192)
    if not raw:
        return None
    total = 0
    found = False
    for line in raw.split(b"\n"):
        if line.startswith(b"Pss:") or line.startswith(b"SwapPss:"):
            parts = line.split()
            if len(parts) >= 2 and parts[1].isdigit():
                total += int(parts[1]) * 1024
                found = True
    return total if found else None


def vm_swap_bytes(pid: int, proc: str = PROC) -> int:
    """``VmSwap`` of ``pid`` in bytes (0 when unknown): added to RSS for the cheap bound when the host swaps."""
    raw = _read(f"{proc}/{pid}/status", 1 << 14)
    if raw is None:
        return 0
    i = raw.find(b"\nVmSwap:")
    if i < 0:
        return 0
    parts = raw[i + 8 : raw.find(b"\n", i + 1)].split()
    return int(parts[0]) * 1024 if parts and parts[0].isdigit() else 0


def _meminfo(proc: str = PROC) -> dict[bytes, int]:
    raw = _read(f"{proc}/meminfo", 1 << 14) or b""
    out: dict[bytes, int] = {}
    for line in raw.split(b"\n"):
        key, _, rest = line.partition(b":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            out[key] = int(parts[0]) * 1024
    return out


def swap_in_use(proc: str = PROC) -> bool:
    """True when any swap is in use: only then can a tree hold memory that RSS does not show."""
    info = _meminfo(proc)
    return info.get(b"SwapTotal", 0) - info.get(b"SwapFree", 0) > 0


def host_memory_total(proc: str = PROC) -> int | None:
    """``MemTotal`` in bytes, for doctor's "unlimited profiles near the host's memory" check."""
    return _meminfo(proc).get(b"MemTotal")


def environ_has(pid: int, needles: tuple[bytes, ...], proc: str = PROC) -> bytes | None:
    """The initial environment of ``pid`` if it contains every needle, else ``None``.

    ``needles`` are ``b"NAME=value"`` items; a match must be a whole item (NUL-delimited).
    Unreadable (another user's process) or gone: ``None``.
    """
    raw = _read(f"{proc}/{pid}/environ", 1 << 21)
    if not raw:
        return None
    padded = b"\0" + raw if raw.endswith(b"\0") else b"\0" + raw + b"\0"
    for needle in needles:
        if b"\0" + needle + b"\0" not in padded:
            return None
    return raw
