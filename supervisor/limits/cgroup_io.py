"""cgroup v2 I/O, thin: read the facts :func:`~supervisor.limits.cgroup.detect` decides from, execute
plans, attach a process, kill a cgroup, read its counters, remove it.

Every function takes absolute directory paths, so the tests run the same code against a fake
hierarchy in a temporary directory (plain files) and against the real cgroup2 mount. Every write is
one ``write(2)`` of the whole value, as cgroup files require. Errors a user can cause or fix
(permissions, a read-only mount) raise :class:`CgroupError` with one line naming the file.

Kill (:func:`kill`), in order of preference:

- ``cgroup.kill`` (Linux >= 5.14): the kernel SIGKILLs every process of the cgroup and its
  descendants atomically, forks in flight included; escaped ``setsid`` processes and processes
  that cleared their environment are in the cgroup all the same.
- ``cgroup.freeze`` (>= 5.2): freeze, wait for ``frozen 1``, SIGKILL every listed PID (frozen
  processes can neither fork nor exit, so no PID is recycled under us), thaw (a frozen cgroup
  would freeze the next gateway attached to it).
- neither: SIGKILL each listed PID through a pidfd, re-checking membership after pinning, until the
  cgroup is empty or the budget runs out.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import time
from collections.abc import Iterable

from supervisor.limits.cgroup import (
    DirFacts,
    Events,
    HostFacts,
    MigrateAll,
    Mkdir,
    Step,
    Write,
    locate,
    parse_events,
    parse_proc_cgroup,
)

_CAP = 1 << 20


class CgroupError(OSError):
    """A cgroup file could not be read or written; the message names it."""


def _read_text(path: str) -> str | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        chunks, left = [], _CAP
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 16))  # os.read allocates its size up front: small chunks
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks).decode("utf-8", "replace")
    except OSError:
        return None
    finally:
        os.close(fd)


def _write(path: str, value: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def _owner(path: str) -> int | None:
    try:
        return os.stat(path).st_uid
    except OSError:
        return None


def _xattr_delegate(path: str) -> bool:
    for name in ("trusted.delegate", "user.delegate"):
        with contextlib.suppress(OSError, AttributeError):
            if os.getxattr(path, name).strip() in (b"1", b"yes", b"true"):
                return True
    return False


def dir_facts(path: str) -> DirFacts:
    """What :func:`detect` needs to know about one cgroup directory (a missing one: ``exists=False``)."""
    try:
        files = frozenset(os.listdir(path))
    except OSError:
        return DirFacts(path=path, exists=False)
    j = os.path.join

    def words(name: str) -> frozenset[str]:
        return frozenset((_read_text(j(path, name)) or "").split())

    procs_text = _read_text(j(path, "cgroup.procs")) or ""
    return DirFacts(
        path=path,
        exists=True,
        files=files,
        controllers=words("cgroup.controllers"),
        subtree_control=words("cgroup.subtree_control"),
        procs=tuple(int(x) for x in procs_text.split() if x.isdigit()),
        owner=_owner(path),
        procs_owner=_owner(j(path, "cgroup.procs")),
        subtree_owner=_owner(j(path, "cgroup.subtree_control")),
        delegate_xattr=_xattr_delegate(path),
        type=(_read_text(j(path, "cgroup.type")) or "").strip() or None,
    )


def gather_facts(
    instance: str,
    *,
    mountinfo: str | None = None,
    self_cgroup: str | None = None,
    euid: int | None = None,
) -> HostFacts:
    """Read this process's view (or the given texts, for tests) into :class:`HostFacts`. Cheap:
    two /proc files and at most four directories; run it at start-up and for doctor."""
    if mountinfo is None:
        mountinfo = _read_text("/proc/self/mountinfo") or ""
    if self_cgroup is None:
        self_cgroup = _read_text("/proc/self/cgroup") or ""
    lay = locate(mountinfo, self_cgroup)
    own = parent = top = base = None
    if lay.mount is not None:
        top = dir_facts(lay.mount.mount_point)
        base = dir_facts(os.path.join(lay.mount.mount_point, instance))
        if lay.own_dir is not None:
            own = dir_facts(lay.own_dir)
            if lay.own_dir.rstrip("/") != lay.mount.mount_point.rstrip("/"):
                parent = dir_facts(os.path.dirname(lay.own_dir.rstrip("/")))
    return HostFacts(
        layout=lay,
        euid=os.geteuid() if euid is None else euid,
        kernel=os.uname().release,
        own=own,
        parent=parent,
        top=top,
        base=base if base is not None and base.exists else None,
    )


def apply(steps: Iterable[Step], *, migrate_rounds: int = 20) -> None:
    """Execute a plan. Idempotent: existing directories and already-set values are fine."""
    for step in steps:
        if isinstance(step, Mkdir):
            try:
                os.mkdir(step.path)
            except FileExistsError:
                if not os.path.isdir(step.path):
                    raise CgroupError(errno.EEXIST, f"{step.path}: cannot create cgroup: not a directory") from None
            except OSError as exc:
                raise CgroupError(exc.errno, f"{step.path}: cannot create cgroup: {exc.strerror}") from None
        elif isinstance(step, Write):
            try:
                _write(step.path, step.value)
            except OSError as exc:
                if step.optional and exc.errno == errno.ENOENT:
                    continue
                raise CgroupError(exc.errno, f"{step.path}: cannot write {step.value!r}: {exc.strerror}") from None
        elif isinstance(step, MigrateAll):
            _migrate(step.src, step.dst, migrate_rounds)


def _migrate(src: str, dst: str, rounds: int) -> None:
    """Move every process of ``src`` to ``dst``; processes may appear meanwhile, so repeat."""
    for _ in range(rounds):
        pids = procs(src)
        if not pids:
            return
        attach_all(dst, pids)
    left = procs(src)
    if left:
        raise CgroupError(errno.EBUSY, f"{src}/cgroup.procs: processes keep appearing ({len(left)} left)")


def attach(cgdir: str, pid: int) -> None:
    """Move ``pid`` (the whole process) into ``cgdir``. Call it right after spawning the gateway,
    before the loop yields: what the gateway forks before the move stays behind (python needs
    tens of milliseconds before it could fork). The move takes ~50 us, but the first one after an
    idle spell waits for an RCU grace period in the kernel (cgroup_threadgroup_rwsem): ~12-17 ms
    measured here, so each respawn holds the loop that long."""
    path = os.path.join(cgdir, "cgroup.procs")
    try:
        _write(path, str(pid))
    except ProcessLookupError:
        raise
    except OSError as exc:
        raise CgroupError(exc.errno, f"{path}: cannot move PID {pid}: {exc.strerror}") from None


def attach_all(cgdir: str, pids: Iterable[int]) -> list[int]:
    """Move every process of an adopted tree (e.g. ``TreeWatcher.members``) into ``cgdir``: a write
    to ``cgroup.procs`` moves one process, never its children. Returns the PIDs moved (gone ones are
    skipped). For a gateway adopted from a hermesd that ran without cgroups."""
    moved = []
    for pid in pids:
        try:
            attach(cgdir, pid)
        except ProcessLookupError:
            continue
        moved.append(pid)
    return moved


def procs(cgdir: str) -> list[int]:
    """PIDs of the processes directly in ``cgdir``."""
    text = _read_text(os.path.join(cgdir, "cgroup.procs")) or ""
    return [int(x) for x in text.split() if x.isdigit()]


def current_cgroup(pid: int) -> str | None:
    """The cgroup v2 path of ``pid`` (``0::`` line of ``/proc/<pid>/cgroup``)."""
    return parse_proc_cgroup(_read_text(f"/proc/{pid}/cgroup") or "")


def populated(cgdir: str) -> bool | None:
    """``cgroup.events`` ``populated``: any live process in the subtree. ``None`` when unreadable."""
    text = _read_text(os.path.join(cgdir, "cgroup.events"))
    if text is None:
        return None
    value = parse_events(text).get("populated")
    return None if value is None else bool(value)


def _pinned_kill(cgdir: str, pid: int) -> bool:
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return False
    try:
        if pid not in procs(cgdir):  # the PID was recycled before we pinned it
            return False
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(fd, signal.SIGKILL)
        return True
    finally:
        os.close(fd)


def kill(cgdir: str, *, method: str = "auto", budget: float = 2.0) -> str:
    """SIGKILL every process in ``cgdir``; returns the method used (``cgroup.kill``, ``freeze``,
    ``signal``). ``method`` forces one (tests). Returns once the signals are sent; use
    :func:`populated` (or an inotify watch on ``cgroup.events``) to see the cgroup empty."""
    j = os.path.join
    if method in ("auto", "cgroup.kill") and os.path.exists(j(cgdir, "cgroup.kill")):
        try:
            _write(j(cgdir, "cgroup.kill"), "1")
            return "cgroup.kill"
        except OSError as exc:
            if method == "cgroup.kill":
                raise CgroupError(exc.errno, f"{cgdir}/cgroup.kill: {exc.strerror}") from None
    deadline = time.monotonic() + budget
    if method in ("auto", "freeze") and os.path.exists(j(cgdir, "cgroup.freeze")):
        try:
            _write(j(cgdir, "cgroup.freeze"), "1")
            try:
                while time.monotonic() < deadline:
                    if parse_events(_read_text(j(cgdir, "cgroup.events")) or "").get("frozen") == 1:
                        break
                    time.sleep(0.001)
                for pid in procs(cgdir):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)  # frozen: cannot exit, so cannot be recycled
            finally:
                _write(j(cgdir, "cgroup.freeze"), "0")
            return "freeze"
        except OSError as exc:
            if method == "freeze":
                raise CgroupError(exc.errno, f"{cgdir}/cgroup.freeze: {exc.strerror}") from None
    while time.monotonic() < deadline:
        left = procs(cgdir)
        if not left:
            break
        for pid in left:
            _pinned_kill(cgdir, pid)
        time.sleep(0.005)
    return "signal"


def read_events(cgdir: str) -> Events:
    """``memory.events`` and ``pids.events`` (empty mappings where the controller is not enabled)."""
    j = os.path.join
    return Events(
        memory=parse_events(_read_text(j(cgdir, "memory.events")) or ""),
        pids=parse_events(_read_text(j(cgdir, "pids.events")) or ""),
    )


def usage(cgdir: str) -> tuple[int, int] | None:
    """``(memory.current, pids.current)``, or ``None`` unless both controllers are enabled (then
    ``pids.current`` is not read: ``status`` asks for every profile on every request)."""
    j = os.path.join

    def number(name: str) -> int | None:
        text = (_read_text(j(cgdir, name)) or "").strip()
        return int(text) if text.isdigit() else None

    mem = number("memory.current")
    tasks = number("pids.current") if mem is not None else None
    return (mem, tasks) if mem is not None and tasks is not None else None


def remove(cgdir: str, *, timeout: float = 1.0) -> bool:
    """``rmdir`` the cgroup once its processes are gone (killed processes take a moment to exit).
    True when it is gone; False when it still holds processes at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            os.rmdir(cgdir)
            return True
        except FileNotFoundError:
            return True
        except OSError as exc:
            if exc.errno != errno.EBUSY:
                raise CgroupError(exc.errno, f"{cgdir}: cannot remove cgroup: {exc.strerror}") from None
            if time.monotonic() > deadline:
                return False
        time.sleep(0.005)
