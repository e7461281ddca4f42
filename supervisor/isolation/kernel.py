"""The Linux system calls confinement needs, through ctypes: no compiled code, stdlib only.

This module is imported by the ``enter`` shim, which runs as ``python -E -s -S`` (no site
packages) on every confined spawn, so it must stay cheap: ``os``, ``ctypes`` and nothing else.
Every wrapper raises ``OSError`` with the errno and the path or call it was about, so the shim
can print one clear line.

Numbers are Linux UAPI values. The Landlock, ``mount_setattr`` and ``close_range`` syscall
numbers are the same on every architecture (they were allocated after the tables were unified);
only x86-64 and aarch64 have been exercised.
"""

from __future__ import annotations

import ctypes
import os

# --- namespaces and mounts -------------------------------------------------------------
CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_NOATIME = 1024
MS_NODIRATIME = 2048
MS_BIND = 4096
MS_REC = 16384
MS_SLAVE = 1 << 19
MS_RELATIME = 1 << 21

# statvfs f_flag bits that mirror per-mount flags: a read-only remount of a bind mount must
# repeat them, or the kernel refuses (EPERM) to clear a flag that was locked by a less
# privileged user namespace.
ST_NOSUID = 2
ST_NODEV = 4
ST_NOEXEC = 8
ST_NOATIME = 1024
ST_NODIRATIME = 2048
ST_RELATIME = 4096

SYS_MOUNT_SETATTR = 442
SYS_CLOSE_RANGE = 436
AT_RECURSIVE = 0x8000
MOUNT_ATTR_RDONLY = 0x1

# --- prctl / capabilities -----------------------------------------------------------------
PR_SET_NO_NEW_PRIVS = 38
PR_CAPBSET_DROP = 24
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
_LINUX_CAPABILITY_VERSION_3 = 0x20080522

CAP_NAMES = (
    "chown", "dac_override", "dac_read_search", "fowner", "fsetid", "kill", "setgid", "setuid",
    "setpcap", "linux_immutable", "net_bind_service", "net_broadcast", "net_admin", "net_raw",
    "ipc_lock", "ipc_owner", "sys_module", "sys_rawio", "sys_chroot", "sys_ptrace", "sys_pacct",
    "sys_admin", "sys_boot", "sys_nice", "sys_resource", "sys_time", "sys_tty_config", "mknod",
    "lease", "audit_write", "audit_control", "setfcap", "mac_override", "mac_admin", "syslog",
    "wake_alarm", "block_suspend", "audit_read", "perfmon", "bpf", "checkpoint_restore",
)

# --- Landlock ----------------------------------------------------------------------------
SYS_LANDLOCK_CREATE_RULESET = 444
SYS_LANDLOCK_ADD_RULE = 445
SYS_LANDLOCK_RESTRICT_SELF = 446
LANDLOCK_CREATE_RULESET_VERSION = 1
LANDLOCK_RULE_PATH_BENEATH = 1

FS_EXECUTE = 1 << 0
FS_WRITE_FILE = 1 << 1
FS_READ_FILE = 1 << 2
FS_READ_DIR = 1 << 3
FS_MAKE_CHAR = 1 << 6
FS_MAKE_BLOCK = 1 << 11
FS_REFER = 1 << 13  # ABI 2
FS_TRUNCATE = 1 << 14  # ABI 3
FS_IOCTL_DEV = 1 << 15  # ABI 5

SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1  # ABI 6

# Rights that may be attached to a rule on a non-directory.
FS_FILE_RIGHTS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV


def fs_rights_for_abi(abi: int) -> int:
    """Every file-system right the kernel's Landlock ABI knows (all of them are then handled)."""
    if abi < 1:
        return 0
    rights = (1 << 13) - 1  # ABI 1: EXECUTE .. MAKE_SYM
    if abi >= 2:
        rights |= FS_REFER
    if abi >= 3:
        rights |= FS_TRUNCATE
    if abi >= 5:
        rights |= FS_IOCTL_DEV
    return rights


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


_libc: ctypes.CDLL | None = None


def libc() -> ctypes.CDLL:
    """The C library, loaded once (use_errno so failures carry their errno)."""
    global _libc
    if _libc is None:
        lib = ctypes.CDLL(None, use_errno=True)
        lib.syscall.restype = ctypes.c_long
        lib.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
        lib.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
        lib.unshare.argtypes = [ctypes.c_int]
        lib.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
        _libc = lib
    return _libc


def _fail(what: str) -> OSError:
    err = ctypes.get_errno()
    return OSError(err, f"{what}: {os.strerror(err)}")


def _b(path: str | None) -> bytes | None:
    return None if path is None else os.fsencode(path)


def unshare(flags: int) -> None:
    if libc().unshare(flags) != 0:
        names = [n for f, n in ((CLONE_NEWUSER, "user"), (CLONE_NEWNS, "mount")) if flags & f]
        raise _fail(f"unshare({'+'.join(names)} namespace)")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    if libc().mount(_b(source), _b(target), _b(fstype), flags, _b(data)) != 0:
        raise _fail(f"mount {fstype or ('bind' if flags & MS_BIND else 'remount')} on {target}")


def mount_setattr_rdonly_recursive(path: str) -> bool:
    """Make a mount and all mounts below it read-only (Linux 5.12+). False when unsupported."""

    class _Attr(ctypes.Structure):
        _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                    ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]

    attr = _Attr(MOUNT_ATTR_RDONLY, 0, 0, 0)
    r = libc().syscall(SYS_MOUNT_SETATTR, -100, _b(path), AT_RECURSIVE, ctypes.byref(attr), ctypes.sizeof(attr))
    if r == 0:
        return True
    if ctypes.get_errno() in (38, 22):  # ENOSYS, EINVAL (old kernel or struct)
        return False
    raise _fail(f"read-only remount of {path}")


def prctl(option: int, arg2: int = 0, what: str = "prctl") -> None:
    if libc().prctl(option, arg2, 0, 0, 0) != 0:
        raise _fail(what)


def set_no_new_privs() -> None:
    prctl(PR_SET_NO_NEW_PRIVS, 1, "prctl(PR_SET_NO_NEW_PRIVS)")


def last_cap() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap", "rb") as fh:
            return int(fh.read().strip())
    except (OSError, ValueError):
        return len(CAP_NAMES) - 1


def limit_capabilities(keep: frozenset[int]) -> None:
    """Drop every capability not in ``keep`` from the bounding, ambient, inheritable, permitted
    and effective sets, so neither this process nor anything it executes can get them back."""
    top = last_cap()
    for cap in range(top + 1):
        if cap not in keep and libc().prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            err = ctypes.get_errno()
            if err != 22:  # EINVAL: the kernel does not know this capability
                raise _fail(f"drop capability {cap}")
    libc().prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)  # EINVAL on old kernels: fine
    hdr = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    if libc().capget(ctypes.byref(hdr), data) != 0:
        raise _fail("capget")
    for i in range(2):
        mask = 0
        for cap in keep:
            if cap // 32 == i:
                mask |= 1 << (cap % 32)
        data[i].effective &= mask
        data[i].permitted &= mask
        data[i].inheritable &= mask
    if libc().capset(ctypes.byref(hdr), data) != 0:
        raise _fail("capset")


def landlock_abi() -> tuple[int, int]:
    """(ABI version, errno): version 0 with ENOSYS (not built in) or EOPNOTSUPP (not enabled)."""
    r = libc().syscall(SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0),
                       ctypes.c_uint32(LANDLOCK_CREATE_RULESET_VERSION))
    if r < 0:
        return 0, ctypes.get_errno()
    return int(r), 0


def landlock_create_ruleset(abi: int, handled_fs: int, scoped: int) -> int:
    attr = _RulesetAttr(handled_fs, 0, scoped)
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    fd = libc().syscall(SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if fd < 0:
        raise _fail("landlock_create_ruleset")
    return int(fd)


def landlock_add_path_rule(ruleset_fd: int, path_fd: int, allowed: int, path: str) -> None:
    attr = _PathBeneathAttr(allowed, path_fd)
    r = libc().syscall(SYS_LANDLOCK_ADD_RULE, ctypes.c_int(ruleset_fd), ctypes.c_int(LANDLOCK_RULE_PATH_BENEATH),
                       ctypes.byref(attr), ctypes.c_uint32(0))
    if r != 0:
        raise _fail(f"landlock rule for {path}")


def landlock_restrict_self(ruleset_fd: int) -> None:
    r = libc().syscall(SYS_LANDLOCK_RESTRICT_SELF, ctypes.c_int(ruleset_fd), ctypes.c_uint32(0))
    if r != 0:
        raise _fail("landlock_restrict_self")


def close_fds_from(first: int) -> None:
    """Close every descriptor >= ``first`` (close_range, falling back to a /proc walk)."""
    if libc().syscall(SYS_CLOSE_RANGE, ctypes.c_uint(first), ctypes.c_uint(0xFFFFFFFF), ctypes.c_uint(0)) == 0:
        return
    try:
        fds = [int(n) for n in os.listdir("/proc/self/fd")]
    except OSError:
        fds = list(range(first, 1024))
    for fd in fds:
        if fd >= first:
            try:  # noqa: SIM105 - contextlib costs the shim an import
                os.close(fd)
            except OSError:
                pass
