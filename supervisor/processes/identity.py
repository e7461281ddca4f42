"""Who a PID really is: the guard in front of every signal hermesd sends.

A PID from a file is only a claim: ``gateway.pid`` lives in a home the profile's agent can write,
and it may name another profile's gateway, or hermesd. Two proofs, one for each kind of claim:

* :func:`prove_gateway` (and :func:`gateway_of`, which reads ``gateway.pid``): the process is
  *this home's* gateway. Its start time equals the one recorded, its command line runs ``gateway
  run``, the home upstream would give that command line and environment (``-p NAME``, else
  ``HERMES_HOME``, else the sticky profile) is this home, and, where hermesd keeps profiles in
  cgroups, it is not a member of another profile's cgroup. Every verb that acts on a PID from a
  profile's files uses it, daemon up or down: a stop, a planned-stop marker, a foreign-gateway
  hold, the probe's "alive", status without the daemon.
* :func:`verify`: a gateway hermesd itself started (adoption after a restart): the same, plus
  the owner (the user hermesd runs as), hermesd's exact command line and its tags in the
  environment. The owner matters when hermesd runs as root: root can read every user's
  environment, and another user could start a process carrying the right tags.

Once proven, the process is pinned with a pidfd, so a recycled PID can never receive a signal
meant for the dead one.
"""

from __future__ import annotations

import os
import signal
import stat
from collections.abc import Iterator
from pathlib import Path

from profiles import safeio
from profiles.upstream import files as gf
from profiles.upstream.multiplex import FORCE_FLAG
from profiles.upstream.process import proc_start_time
from profiles.upstream.releases import EXTERNAL_SUPERVISOR_FLAG, GATEWAY_RUN
from supervisor.isolation.shim_argv import unwrap
from supervisor.plan.model import Ident
from supervisor.processes import lockholder
from supervisor.processes.tags import TAG_PROFILE, TAG_ROOT

CGROUP_PROFILE_PREFIX = "profile-"  # supervisor.limits.cgroup.PROFILE_PREFIX (a test keeps the two equal)


def boot_id() -> str:
    """Changes on every boot; start times from another boot mean nothing."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


proc_cmdline = gf.proc_argv
proc_environ = gf.proc_env


_CLK_TCK = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


def _stat_fields(pid: int) -> list[bytes] | None:
    """Fields 3.. of ``/proc/<pid>/stat`` (after the parenthesised command name)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
        return raw[raw.rindex(b")") + 2 :].split()
    except (OSError, ValueError):
        return None


def proc_usage(pid: int) -> tuple[float, int] | None:
    """(CPU seconds used, resident bytes) of a live process, straight from /proc (no psutil:
    the daemon would carry its memory for two numbers)."""
    f = _stat_fields(pid)
    try:
        return (int(f[11]) + int(f[12])) / _CLK_TCK, int(f[21]) * _PAGE  # type: ignore[index]
    except (TypeError, IndexError, ValueError):
        return None


def proc_start_wall(pid: int) -> float | None:
    """When the process started, as a Unix time (boot time + its start in clock ticks)."""
    start = proc_start_time(pid)
    if start is None:
        return None
    try:
        for line in Path("/proc/stat").read_text().splitlines():
            if line.startswith("btime "):
                return int(line.split()[1]) + start / _CLK_TCK
    except (OSError, ValueError):
        pass
    return None


def descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (children, their children, ...), from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            f = _stat_fields(int(entry.name))
            if f is not None and len(f) > 1 and f[1].isdigit():
                children.setdefault(int(f[1]), []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        for kid in children.get(todo.pop(), []):
            out.append(kid)
            todo.append(kid)
    return out


def owned_by_us(pid: int) -> bool:
    """The process belongs to the user hermesd runs as (the owner of its ``/proc`` entry)."""
    try:
        return os.stat(f"/proc/{pid}").st_uid == os.getuid()
    except OSError:
        return False


def session_id(pid: int) -> int | None:
    f = _stat_fields(pid)
    try:
        return int(f[3])  # type: ignore[index]
    except (TypeError, IndexError, ValueError):
        return None


def is_gateway_cmdline(cmdline: list[str]) -> bool:
    """The command line ends as hermesd starts a gateway: ``gateway run``, then the flags of some
    release's contract in their order (``--external-supervisor``, and ``--force`` on the
    multiplex-default line; :func:`supervisor.processes.childspec.child_argv` follows the release's contract).

    A gateway started under one release must still be recognised after hermesd restarts, whichever
    flags that release took. The hermesd tags in its environment, checked by the callers, keep a
    hand-started ``hermes gateway run`` out. A confinement shim that has not exec'd yet counts by the
    command it is about to become.
    """
    target = list(unwrap(cmdline) or cmdline)
    for flag in (FORCE_FLAG, EXTERNAL_SUPERVISOR_FLAG):  # trailing flags, last first
        if target and target[-1] == flag:
            target.pop()
    return len(target) >= len(GATEWAY_RUN) and tuple(target[-len(GATEWAY_RUN):]) == GATEWAY_RUN


def verify(ident: Ident, *, home: Path, root: Path, profile: str) -> bool:
    """True only if ``ident`` is still the gateway hermesd started for this profile."""
    if proc_start_time(ident.pid) != ident.start_time or not owned_by_us(ident.pid):
        return False
    if not is_gateway_cmdline(proc_cmdline(ident.pid)):
        return False
    if _in_other_profile_cgroup(ident.pid, profile):
        return False
    env = proc_environ(ident.pid)
    return (
        env.get("HERMES_HOME") == str(home)
        and env.get(TAG_ROOT) == str(root)
        and env.get(TAG_PROFILE) == profile
    )


def gateway_of(home: Path, profile: str | None = None) -> Ident | None:
    """The gateway ``home``'s ``gateway.pid`` names, if that process is proven to be this home's."""
    rec = gf.read_pid_record(home)
    if rec is None:
        return None
    return prove_gateway(rec.pid, rec.start_time, home=home, profile=profile or gf.home_profile(home))


def occupant(home: Path, profile: str) -> Ident | None:
    """The process serving ``home`` now, asked before hermesd starts a gateway there: the gateway its
    ``gateway.pid`` names if proven, else the live process holding its ``gateway.lock``.

    ``gateway.pid`` alone misses a gateway that runs: upstream takes the lock first and writes the file
    after (a window of seconds on a loaded host), and the profile may delete or garble the file. The lock
    is the kernel's word that a gateway runs there; a second gateway started beside its holder is at best
    refused by upstream's guard and at worst, where that guard fails, polls the same tokens. So a live
    holder occupies the profile even unproven: hermesd only waits for it to exit (a pidfd) and never
    signals it, and one that held it for an instant only (upstream's CLI probes it so) costs a moment.
    """
    found = gateway_of(home, profile)
    if found is not None:
        return found
    pid = gateway_lock_holder(home)
    start = proc_start_time(pid) if pid is not None else None
    return Ident(pid, start) if pid is not None and start is not None else None


def gateway_lock_holder(home: Path) -> int | None:
    """The live process holding ``<home>/gateway.lock``, from ``/proc/locks`` (never by taking the lock:
    that could make a gateway starting at that instant fail), or ``None``.

    The file is in the profile's home: reached through :mod:`profiles.safeio` (no link followed; a link,
    or anything but a regular file, names no holder). A PID the kernel names that is gone (the lock
    outlives its taker when a child inherited the descriptor) or not visible here (another PID
    namespace: 0) is not returned: there is nothing to wait for.
    """
    try:
        st = safeio.lstat(safeio.home_file(home, gf.LOCK_FILE))
    except OSError:
        return None
    if st is None or not stat.S_ISREG(st.st_mode):
        return None
    pid = lockholder.flock_holder(st)
    return pid if pid and pid != os.getpid() and proc_start_time(pid) is not None else None


def find_gateway(root: Path, home: Path, profile: str) -> Ident | None:
    """``profile``'s running gateway: the one its ``gateway.pid`` names if proven, else a session leader
    carrying this root's and profile's tags that proves to be it (a forged or stale ``gateway.pid``
    must neither aim a stop at another process nor hide the real gateway from it)."""
    found = gateway_of(home, profile)
    if found is not None:
        return found
    for pid, _name, _env in find_tagged(root, profile):
        if session_id(pid) == pid and (proven := prove_gateway(pid, None, home=home, profile=profile)) is not None:
            return proven
    return None


def prove_gateway(pid: int, start_time: int | None, *, home: Path, profile: str) -> Ident | None:
    """``pid`` pinned by its start time, if it is proven to be ``profile``'s gateway running in ``home``.

    ``start_time`` is what the claim recorded (``None``: a bare PID from an older writer, then the
    other checks decide alone). The process must serve ``home`` by upstream's rules
    (:func:`profiles.upstream.files.serves_home`: its ``-p``, ``HERMES_HOME`` or sticky profile)
    and, where hermesd keeps profiles in cgroups, not be a member of another profile's cgroup.
    ``None`` when anything does not match or cannot be read.
    """
    start = proc_start_time(pid)
    if start is None or (start_time is not None and start_time != start):
        return None

    cmdline = proc_cmdline(pid)
    if not gf.serves_home(pid, home, profile, argv=unwrap(cmdline) or cmdline):
        return None
    if _in_other_profile_cgroup(pid, profile):
        return None
    if proc_start_time(pid) != start:  # the PID was recycled while we read
        return None
    return Ident(pid, start)


def proc_cgroup(pid: int) -> str | None:
    """The cgroup v2 path of ``pid`` (the ``0::`` line of ``/proc/<pid>/cgroup``), or ``None``."""
    try:
        text = Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("0::"):
            return line[3:]
    return None


def _in_other_profile_cgroup(pid: int, profile: str) -> bool:
    """Membership is exact where hermesd keeps profiles in cgroups (``…/profile-NAME``): a process in
    another profile's cgroup is that profile's, whatever its files or environment claim."""
    path = proc_cgroup(pid) or ""
    for part in reversed(path.split("/")):
        if part.startswith(CGROUP_PROFILE_PREFIX):
            return part[len(CGROUP_PROFILE_PREFIX):] != profile
    return False



def find_tagged(root: Path, profile: str | None = None) -> Iterator[tuple[int, str, dict[str, str]]]:
    """Every live process carrying this root's hermesd tag (and ``profile``'s, if given).

    Yields (pid, profile, environment). Reads ``/proc/*/environ``, cheaply: a byte search rules
    out nearly every process before anything is parsed. Processes of other users never match
    (unreadable, or, when hermesd runs as root, refused by owner).
    """
    want = str(root)
    needles = [f"{TAG_ROOT}={want}\0".encode()]
    if profile is not None:
        needles.append(f"{TAG_PROFILE}={profile}\0".encode())
    me = os.getpid()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        if pid == me:
            continue
        try:
            raw = _read_all(os.open(f"/proc/{pid}/environ", os.O_RDONLY | os.O_CLOEXEC))
        except OSError:
            continue
        if not all(n in raw or raw.endswith(n[:-1]) for n in needles):
            continue
        if not owned_by_us(pid):
            continue
        env = gf.parse_environ(raw)
        name = env.get(TAG_PROFILE)
        if env.get(TAG_ROOT) == want and name and (profile is None or name == profile):
            yield pid, name, env


def _read_all(fd: int) -> bytes:
    """A small kernel file's bytes (``fd``, closed here) without ``pathlib`` and a buffered file object:
    :func:`find_tagged` reads one per process on the host after every exit, and this halves the scan
    (1.0 against 2.4 ms CPU for 124 processes)."""
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def open_pidfd(ident: Ident) -> int | None:
    """A pidfd for ``ident``, or ``None`` when that exact process is gone.

    The start time is re-read after opening: the pidfd pins whatever process owned the PID at
    that moment, so matching afterwards proves it pins the right one.
    """
    try:
        fd = os.pidfd_open(ident.pid)
    except (ProcessLookupError, OSError):
        return None
    if proc_start_time(ident.pid) != ident.start_time:
        os.close(fd)
        return None
    return fd


def send_signal(pidfd: int, sig: int) -> bool:
    """Signal through a pidfd (never a bare PID); False when the process is already gone."""
    try:
        signal.pidfd_send_signal(pidfd, sig)
    except ProcessLookupError:
        return False
    return True
