"""What this kernel and this user offer for confinement, measured cheaply and without side effects.

``probe()`` reads a few sysctls, asks the kernel for its Landlock ABI, and tries the namespace
calls in short-lived forked children (a private mount namespace dies with the child, so nothing
on the host changes). As root it also tries the *unprivileged* path in a child that first drops
to ``nobody``, so ``doctor`` can say what hermesd would get without root. Cost: two forks and a
handful of small reads, a few milliseconds (measured in the report); run it once at daemon
start and on ``doctor``, not per spawn.

The result is a frozen :class:`Probe` (``dataclasses.replace`` makes the "what if this were
missing" variants the planner tests use). ``doctor_lines`` turns it into text for ``hermesd
doctor``: what is available, what is missing and the exact setting that enables it.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from supervisor.isolation import confine, kernel, syscalls

if TYPE_CHECKING:
    from collections.abc import Callable

# What each Landlock ABI version adds (kernel version that introduced it).
LANDLOCK_FEATURES: tuple[tuple[int, str, str], ...] = (
    (1, "5.13", "file-system rules on whole hierarchies; ptrace of processes outside the domain denied"),
    (2, "5.19", "renames and links across folders (REFER)"),
    (3, "6.2", "truncate rights"),
    (4, "6.7", "TCP bind/connect rules (hermesd leaves the network alone)"),
    (5, "6.10", "ioctl rights on devices"),
    (6, "6.12", "signal scoping and abstract unix socket scoping"),
    (7, "6.15", "audit logging of denials"),
)

_SYSCTLS = (
    "kernel.unprivileged_userns_clone",  # Debian/Ubuntu patch: 0 blocks unprivileged user namespaces
    "user.max_user_namespaces",  # 0 blocks user namespaces for everyone
    "kernel.apparmor_restrict_unprivileged_userns",  # Ubuntu 23.10+: 1 strips capabilities in new userns
    "user.max_mnt_namespaces",
    "kernel.yama.ptrace_scope",
)
_NOBODY = 65534


def landlock_features(abi: int) -> list[str]:
    return [text for version, _kver, text in LANDLOCK_FEATURES if abi >= version]


@dataclass(frozen=True, slots=True)
class Probe:
    """Facts about this machine and user; every field is plain data (JSON-ready)."""

    euid: int
    kernel: str = ""
    landlock_abi: int = 0  # 0: no Landlock
    landlock_error: str = ""  # why not ("" when available)
    mount_namespace: bool = False  # this process may unshare(CLONE_NEWNS) (needs root / CAP_SYS_ADMIN)
    mount_namespace_error: str = ""
    user_namespace: bool = False  # an unprivileged user can unshare(USER|NS) and mount a tmpfs in it
    user_namespace_error: str = ""
    sysctls: tuple[tuple[str, str], ...] = ()  # (name, value); value "" when the sysctl does not exist
    seccomp: bool = False  # a seccomp filter can scope process control (see supervisor.isolation.syscalls)
    seccomp_error: str = ""

    @property
    def is_root(self) -> bool:
        return self.euid == 0

    @property
    def namespace_usable(self) -> bool:
        """A private mount namespace is available to hermesd as it runs now."""
        return self.mount_namespace if self.is_root else self.user_namespace

    def sysctl(self, name: str) -> str:
        return dict(self.sysctls).get(name, "")

    def to_json(self) -> dict[str, Any]:
        return {
            "euid": self.euid,
            "kernel": self.kernel,
            "landlock_abi": self.landlock_abi,
            "landlock_error": self.landlock_error,
            "landlock_features": landlock_features(self.landlock_abi),
            "mount_namespace": self.mount_namespace,
            "mount_namespace_error": self.mount_namespace_error,
            "user_namespace": self.user_namespace,
            "user_namespace_error": self.user_namespace_error,
            "sysctls": dict(self.sysctls),
            "seccomp": self.seccomp,
            "seccomp_error": self.seccomp_error,
        }


def _read_sysctl(name: str) -> str:
    try:
        with open("/proc/sys/" + name.replace(".", "/"), "rb") as fh:
            return fh.read(64).decode("ascii", "replace").strip()
    except OSError:
        return ""


def _in_child(steps: Callable[[], object]) -> str:
    """Run ``steps()`` in a forked child; "" on success, else the error text it reported.

    The child only makes system calls and leaves with ``os._exit``: no Python-level locks, no
    buffered I/O, no atexit handlers. Whatever namespace it created dies with it.
    """
    kernel.libc()  # resolve symbols before forking
    r, w = os.pipe()
    try:
        pid = os.fork()
    except OSError as exc:
        os.close(r)
        os.close(w)
        return f"fork: {exc.strerror}"
    if pid == 0:  # pragma: no cover - runs in the child
        os.close(r)
        try:
            steps()
            os._exit(0)
        except OSError as exc:
            try:
                os.write(w, str(exc.strerror or exc).encode()[:400])
            finally:
                os._exit(1)
        except BaseException:
            os._exit(2)
    os.close(w)
    try:
        chunks = []
        while chunk := os.read(r, 512):
            chunks.append(chunk)
    finally:
        os.close(r)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) == 0:
        return ""
    return b"".join(chunks).decode("utf-8", "replace") or f"probe child failed (status {status})"


def _namespace_steps(userns: bool) -> None:
    """The shim's namespace entry (:func:`confine.enter_namespace`), then a tmpfs mounted in it."""
    if userns and os.geteuid() == 0:  # as root, test what an unprivileged account would get
        os.setgroups([])
        os.setresgid(_NOBODY, _NOBODY, _NOBODY)
        os.setresuid(_NOBODY, _NOBODY, _NOBODY)
        kernel.prctl(4, 1, "prctl(PR_SET_DUMPABLE)")  # /proc/self/*_map must stay ours
    confine.enter_namespace(userns)
    # AppArmor's userns restriction lets unshare succeed but strips the capabilities: the
    # mount is what fails then.
    kernel.mount("tmpfs", "/tmp", "tmpfs", kernel.MS_NOSUID | kernel.MS_NODEV, "size=4k")


def _seccomp_error() -> str:
    """Why a process-control filter cannot be installed here ("" when it can).

    No fork: ``PR_GET_SECCOMP`` answers EINVAL only on a kernel built without seccomp, and the
    filter's architectures are known from ``uname``. A filter the kernel still refuses at spawn
    makes the shim exit 125, so nothing runs unscoped on a wrong answer here.
    """
    if not syscalls.supported():
        return f"no filter for the {os.uname().machine} architecture"
    if kernel.libc().prctl(21, 0, 0, 0, 0) < 0:  # PR_GET_SECCOMP
        return "the kernel has no seccomp (CONFIG_SECCOMP_FILTER)"
    return ""


def probe(*, try_namespaces: bool = True) -> Probe:
    """Measure this machine. ``try_namespaces=False`` skips the forks (sysctls and Landlock only)."""
    abi, err = kernel.landlock_abi()
    if abi:
        ll_error = ""
    elif err == errno.ENOSYS:
        ll_error = "the kernel has no Landlock (built without CONFIG_SECURITY_LANDLOCK, or older than 5.13)"
    elif err == errno.EOPNOTSUPP:
        ll_error = "Landlock is built in but not enabled at boot (missing from the lsm= list)"
    else:
        ll_error = f"landlock_create_ruleset failed: {os.strerror(err)}"
    euid = os.geteuid()
    if try_namespaces:
        mnt_err = _in_child(lambda: _namespace_steps(False)) if euid == 0 else "needs root (or a user namespace)"
        user_err = _in_child(lambda: _namespace_steps(True))
    else:
        mnt_err = user_err = "not probed"
    sc_error = _seccomp_error()
    return Probe(
        euid=euid,
        kernel=os.uname().release,
        landlock_abi=abi,
        landlock_error=ll_error,
        mount_namespace=euid == 0 and not mnt_err,
        mount_namespace_error=mnt_err,
        user_namespace=not user_err,
        user_namespace_error=user_err,
        sysctls=tuple(sorted((name, _read_sysctl(name)) for name in _SYSCTLS)),
        seccomp=not sc_error,
        seccomp_error=sc_error,
    )


# Sockets of services that run commands for whoever may connect (``systemd-run``, ``docker run``):
# Landlock (up to ABI 7) cannot stop a connect() by path, so a confined profile reaches them.
SERVICE_SOCKETS = ("/run/systemd/private", "/run/dbus/system_bus_socket", "/run/docker.sock", "/var/run/docker.sock",
                   "/run/containerd/containerd.sock", "/run/podman/podman.sock")
USER_SERVICE_SOCKETS = ("bus", "systemd/private", "docker.sock", "podman/podman.sock")


def service_sockets() -> list[str]:
    """The service sockets that exist here and that hermesd's own account may connect to (the
    account a profile without ``isolation.user`` runs as): the system's and ``/run/user/<uid>/``'s."""
    uid = os.geteuid()
    out: dict[str, str] = {}
    for path in (*SERVICE_SOCKETS, *(f"/run/user/{uid}/{name}" for name in USER_SERVICE_SOCKETS)):
        try:
            st = os.stat(path)
        except OSError:
            continue
        if stat.S_ISSOCK(st.st_mode) and (uid == 0 or os.access(path, os.W_OK)):
            out.setdefault(os.path.realpath(path), path)
    return sorted(out.values())


def best_mechanism(p: Probe) -> str:
    """The strongest mechanism this machine offers hermesd as it runs now."""
    if p.landlock_abi >= 1 and p.namespace_usable:
        return "namespace+landlock"
    if p.landlock_abi >= 1:
        return "landlock"
    return "off"


def _userns_fix(p: Probe) -> str:
    """The exact setting that blocks unprivileged user namespaces here, and how to lift it."""
    if p.sysctl("kernel.unprivileged_userns_clone") == "0":
        return ("kernel.unprivileged_userns_clone=0 blocks them: `sudo sysctl -w kernel.unprivileged_userns_clone=1`"
                " (persist: echo kernel.unprivileged_userns_clone=1 | sudo tee /etc/sysctl.d/60-hermesd.conf)")
    if p.sysctl("user.max_user_namespaces") == "0":
        return ("user.max_user_namespaces=0 blocks them: `sudo sysctl -w user.max_user_namespaces=15000`"
                " (persist in /etc/sysctl.d/60-hermesd.conf)")
    if p.sysctl("kernel.apparmor_restrict_unprivileged_userns") == "1":
        return ("AppArmor restricts them (kernel.apparmor_restrict_unprivileged_userns=1): either"
                " `sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`, or an AppArmor profile for"
                " hermesd's interpreter with the `userns,` rule (see /etc/apparmor.d/ and `man apparmor.d`)")
    if p.sysctl("user.max_mnt_namespaces") == "0":
        return "user.max_mnt_namespaces=0 blocks mount namespaces: `sudo sysctl -w user.max_mnt_namespaces=15000`"
    return "a seccomp filter or container runtime may block unshare(2); run hermesd where it is allowed"


def doctor_lines(p: Probe) -> list[tuple[str, str]]:
    """``(level, text)`` lines for ``hermesd doctor``; level is ``ok``, ``info`` or ``warning``."""
    out: list[tuple[str, str]] = []
    best = best_mechanism(p)
    who = "root" if p.is_root else f"uid {p.euid}"
    if best == "namespace+landlock":
        out.append(("ok", f"isolation: a private mount namespace plus Landlock ABI {p.landlock_abi} per profile"
                          f" (hermesd runs as {who}, kernel {p.kernel})"))
    elif best == "landlock":
        out.append(("warning", f"isolation: Landlock ABI {p.landlock_abi} only, no private mount namespace"
                               f" (hermesd runs as {who}): the root folder's own level cannot be shared safely,"
                               " the default profile can still read profiles/, and hermesd's control socket"
                               " stays reachable"))
    else:
        out.append(("warning", f"isolation: unavailable on this machine (kernel {p.kernel}); every profile can"
                               " read, change and signal every other one"))
    if p.landlock_abi:
        feats = "; ".join(landlock_features(p.landlock_abi))
        out.append(("ok", f"Landlock ABI {p.landlock_abi}: {feats}"))
        if p.landlock_abi < 6:
            out.append(("warning", f"Landlock ABI {p.landlock_abi} cannot scope signals: a confined profile can still"
                                   " kill or signal other profiles' gateways and hermesd (same user). ABI 6 needs"
                                   " Linux 6.12 or newer"))
    else:
        fix = ("boot with `lsm=landlock,` prepended to the current list (see /sys/kernel/security/lsm; on GRUB add"
               " it to GRUB_CMDLINE_LINUX and run update-grub)" if "not enabled" in p.landlock_error
               else "a kernel 5.13+ built with CONFIG_SECURITY_LANDLOCK=y (6.12+ for signal scoping)")
        out.append(("warning", f"Landlock missing: {p.landlock_error}. Fix: {fix}"))
    if p.seccomp:
        out.append(("ok", "process-control scoping: a seccomp filter per profile (no changing other processes'"
                          " resource limits, nice value, CPU affinity, scheduling or I/O priority)"))
    else:
        out.append(("warning", f"process-control scoping unavailable ({p.seccomp_error}): a confined profile can"
                               " still change the resource limits, nice value, CPU affinity and I/O priority of"
                               " every process of its account, hermesd's included"))
    if best != "off":
        out.append(("ok", "writes: a confined profile changes only its home, the shared channels (kanban/, shared/,"
                          " the credential-lock folder), a private /tmp and what isolation.writable lists; the rest"
                          " of the disk is read-only to it (shell start-up files, ~/.ssh, units, cron, interpreters)"))
    if best == "landlock":
        out.append(("warning", "no private /tmp without a mount namespace: /tmp is read-only to confined profiles"
                               " (TMPDIR names a folder in each home; a command that writes into /tmp by name"
                               " fails) and /dev/shm stays shared by every process of the account"))
    if p.is_root:
        if p.mount_namespace:
            out.append(("ok", "mount namespaces: available (root)"))
        else:
            out.append(("warning", f"mount namespaces: unshare(CLONE_NEWNS) failed as root: {p.mount_namespace_error}"
                                   " (a container without CAP_SYS_ADMIN or a seccomp filter?)"))
        out.append(("info", "hermesd runs as root: a profile without an account of its own (`isolation: {user:"
                            " NAME}`) runs as root too, which walls its writes but not what root's services do for"
                            " it; give each profile an account for a real trust boundary"))
    if p.user_namespace:
        out.append(("ok" if not p.is_root else "info",
                    "unprivileged user namespaces: available (hermesd without root can use a private mount"
                    " namespace)"))
    else:
        level = "info" if p.is_root else "warning"
        out.append((level, f"unprivileged user namespaces: not usable ({p.user_namespace_error}); "
                           f"{_userns_fix(p)}"))
    return out
