"""Apply a Plan (as its JSON dict) to the current process: the part of ``enter`` that does the work.

Stdlib only (``os``, ``ctypes`` through :mod:`kernel`): the shim runs this under ``python -E -s -S``.
Order matters and is the reason this module exists:

1. ``ensure``: create the board folder, links, ``profiles/``, an empty ``hermesd.yaml`` on the
   real file system (before anything is hidden; idempotent, never replaces a file).
2. Mount namespace (``namespace+landlock``): unshare (a user namespace too when not root), make
   every mount a slave (nothing we mount leaks out, host mounts still arrive), open every path to
   put back *before* covering it; first the private areas (a writable tmpfs over ``/tmp`` and
   ``/dev/shm``, with what the plan needs below them put back), then per hidden area: an empty
   tmpfs, a skeleton of folders with the real modes, the put-back paths bind-mounted from the open
   descriptors, the board links, and the tmpfs made read-only. Then read-only binds, blanked
   files, and (root without an account) a minimal ``/dev`` and read-only ``/proc/sys`` and ``/sys``.
3. ``chdir(home)``: after the mounts, so the working folder is the namespace's view, never an
   inode of the hidden root that hermesd's own cwd might pin.
4. Account switch (``user``), or capability drop (root without an account).
5. Under Landlock alone, the private temporary folder in the home (as the profile's account).
   ``PR_SET_NO_NEW_PRIVS`` and the Landlock domain: reads on ``/`` when the namespace did the
   hiding, or carved around the hidden areas (Landlock alone); writes only on the plan's writable
   paths, the read-write put-backs and the process's own output files (Landlock also forbids
   undoing the mounts, scopes signals and abstract sockets and blocks ptrace).
6. The process-control filter (:mod:`syscalls`): last, so nothing above runs under it.

Every failure raises :class:`ConfineError` with one line naming the step and path.
"""

from __future__ import annotations

import errno
import os
import stat

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing (and re) costs the shim 2 ms
if TYPE_CHECKING:
    from typing import Any

try:  # imported as supervisor.isolation.confine, or as a sibling by the -S shim
    from supervisor.isolation import kernel as k
    from supervisor.isolation import syscalls
except ImportError:  # pragma: no cover - exercised by the shim's script mode
    import kernel as k  # type: ignore[no-redef,import-not-found]
    import syscalls  # type: ignore[no-redef,import-not-found]
try:
    from profiles import beneath
except ImportError:  # pragma: no cover - the -S shim: `profiles` sits next to `supervisor` in the install
    import sys

    sys.path.append(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    from profiles import beneath

_TMPFS_FLAGS = k.MS_NOSUID | k.MS_NODEV | k.MS_NOEXEC
_DEV_NODES = ("null", "zero", "full", "random", "urandom", "tty", "ptmx")
_DEV_DIRS = ("pts", "shm", "mqueue")
_DEV_LINKS = (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
              ("stderr", "/proc/self/fd/2"))


class ConfineError(RuntimeError):
    """The plan could not be applied; the message is one line for the daemon to show."""


def _under(p: str, base: str) -> bool:
    return p == base or base == "/" or p.startswith(base.rstrip("/") + "/")


def _depth(p: str) -> int:
    return p.rstrip("/").count("/")


# --- 1. ensure ---------------------------------------------------------------------------------
def _ensure(plan: dict[str, Any]) -> None:
    root = plan.get("root", "/")
    for d in plan.get("ensure_dirs", ()):
        mode = 0o700 if os.path.basename(d) == ".hermesd" else 0o755
        try:
            if _under(d, root) and d != root:  # never through a link the default profile planted there
                beneath.makedirs_under(root, d[len(root):].lstrip("/"), mode)
            else:
                os.makedirs(d, mode=mode, exist_ok=True)
        except OSError:
            pass  # a read-only root, or a link: the step that needs it says so
    for f in plan.get("ensure_files", ()):
        try:
            fd = os.open(f, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError:
            continue
        try:
            os.write(fd, b"# hermesd settings (see hermesd's docs/guide.md). Created empty by hermesd so that a\n"
                         b"# confined default profile, which owns this folder, cannot plant one.\n")
        finally:
            os.close(fd)
    for path, target in plan.get("ensure_links", ()):
        try:  # noqa: SIM105 - contextlib costs the shim an import
            os.symlink(target, path)
        except FileExistsError:
            pass


def _warn(plan: dict[str, Any], message: str) -> None:
    """One line on stderr (the child's log) for a channel left out; the start goes on."""
    os.write(2, f"hermesd: isolation (profile {plan.get('profile', '?')}): {message}\n".encode("utf-8", "replace"))


# --- 2. the mount namespace --------------------------------------------------------------------
def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def enter_namespace(userns: bool) -> None:
    """A private mount namespace (in a user namespace of its own when ``userns``), every mount a slave."""
    if userns:
        uid, gid = os.geteuid(), os.getegid()
        k.unshare(k.CLONE_NEWUSER | k.CLONE_NEWNS)
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"{uid} {uid} 1")
        _write("/proc/self/gid_map", f"{gid} {gid} 1")
    else:
        k.unshare(k.CLONE_NEWNS)
    k.mount(None, "/", None, k.MS_REC | k.MS_SLAVE)


def _locked_flags(path: str) -> int:
    """Per-mount flags a remount must repeat (EPERM otherwise inside a user namespace)."""
    try:
        f = os.statvfs(path).f_flag
    except OSError:
        return 0
    out = 0
    for st_bit, ms_bit in ((k.ST_NOSUID, k.MS_NOSUID), (k.ST_NODEV, k.MS_NODEV), (k.ST_NOEXEC, k.MS_NOEXEC),
                           (k.ST_NOATIME, k.MS_NOATIME), (k.ST_NODIRATIME, k.MS_NODIRATIME),
                           (k.ST_RELATIME, k.MS_RELATIME)):
        if f & st_bit:
            out |= ms_bit
    return out


def _make_readonly(path: str) -> None:
    """Read-only for this mount and every mount below it."""
    if not k.mount_setattr_rdonly_recursive(path):
        k.mount(None, path, None, k.MS_REMOUNT | k.MS_BIND | k.MS_RDONLY | _locked_flags(path))


def _bind_fd(fd: int, target: str, readonly: bool) -> None:
    k.mount(f"/proc/self/fd/{fd}", target, None, k.MS_BIND | k.MS_REC)
    if readonly:
        _make_readonly(target)


class _Source:
    """A path to put back, opened before its hidden area is covered."""

    def __init__(self, path: str, access: str, fd: int, is_dir: bool,
                 parents: list[tuple[str, os.stat_result]]) -> None:
        self.path, self.access, self.fd, self.is_dir, self.parents = path, access, fd, is_dir, parents


def _open_source(path: str, area: str, root: str) -> tuple[int, bool, list[tuple[str, os.stat_result]]]:
    """Open a path to put back. Below the root (where profiles write) no link is followed: a
    ``shared/`` or ``kanban/`` replaced by a link to another home or to ``.hermesd`` is ``ELOOP``,
    never a mount of what it points at."""
    if _under(path, root) and path != root:
        fd = beneath.open_under(root, path[len(root):].lstrip("/"), os.O_PATH)
    else:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    is_dir = stat.S_ISDIR(os.fstat(fd).st_mode)
    parents = []
    cur = os.path.dirname(path)
    while _under(cur, area) and cur != area:
        parents.append((cur, os.stat(cur)))
        cur = os.path.dirname(cur)
    return fd, is_dir, list(reversed(parents))


def _mkdir_like(path: str, st: os.stat_result | None, as_root: bool) -> None:
    try:
        os.mkdir(path, 0o755 if st is None else stat.S_IMODE(st.st_mode))
    except FileExistsError:
        return
    if st is not None:
        os.chmod(path, stat.S_IMODE(st.st_mode))  # undo the umask
        if as_root:
            os.chown(path, st.st_uid, st.st_gid, follow_symlinks=False)


def _put_back(sources: list[_Source], as_root: bool) -> None:
    """Bind each source (opened before its area was covered) at its own path inside the new tmpfs,
    on a skeleton of folders with the real modes."""
    for src in sorted(sources, key=lambda s: _depth(s.path)):
        for parent, pst in src.parents:
            _mkdir_like(parent, pst, as_root)
        if src.is_dir:
            _mkdir_like(src.path, None, False)
        elif not os.path.lexists(src.path):
            os.close(os.open(src.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))
        _bind_fd(src.fd, src.path, src.access == "ro")


def _cover(area: str, st: os.stat_result, sources: list[_Source], links: list[tuple[str, str]],
           placeholders: list[str], as_root: bool) -> None:
    """An empty tmpfs over ``area`` with only ``sources``, ``links`` and empty ``placeholders``
    put back, then read-only."""
    opts = f"mode={stat.S_IMODE(st.st_mode):o},size=1m,nr_inodes=4096"
    if as_root:
        opts += f",uid={st.st_uid},gid={st.st_gid}"
    k.mount("tmpfs", area, "tmpfs", _TMPFS_FLAGS, opts)
    _put_back(sources, as_root)
    for path, target in links:
        parent = os.path.dirname(path)
        if not os.path.isdir(parent):
            os.makedirs(parent, 0o755, exist_ok=True)
        if not os.path.lexists(path):
            os.symlink(target, path)
    for path in placeholders:
        os.makedirs(path, 0o755, exist_ok=True)
    k.mount(None, area, None, k.MS_REMOUNT | k.MS_BIND | k.MS_RDONLY | _TMPFS_FLAGS)


def _private_areas(plan: dict[str, Any], as_root: bool) -> None:
    """A writable tmpfs of the profile's own over ``/tmp`` and ``/dev/shm``: what it writes there is
    never seen by another profile or by the account outside, and is gone with its last process.

    Paths the plan needs below an area (a root or an interpreter under ``/tmp``) are opened first,
    without following any link (whoever can write ``/tmp`` could plant one), and put back.
    Half the RAM at most, the kernel's default for a tmpfs: its files are memory, counted towards
    ``memory_max`` where a cgroup enforces it.
    """
    for area, keep in plan.get("private", ()):
        if not os.path.isdir(area):
            continue
        sources = []
        for path in keep:
            try:
                fd = beneath.open_under("/", path.lstrip("/"), os.O_PATH)
            except FileNotFoundError:
                continue
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.EXDEV):
                    raise ConfineError(f"cannot keep {path} in the private {area}: it is or lies under a symbolic"
                                       " link") from None
                raise ConfineError(f"cannot open {path}: {exc.strerror}") from None
            parents = []
            cur = os.path.dirname(path)
            while _under(cur, area) and cur != area:
                parents.append((cur, os.stat(cur)))
                cur = os.path.dirname(cur)
            sources.append(_Source(path, "rw", fd, stat.S_ISDIR(os.fstat(fd).st_mode), list(reversed(parents))))
        k.mount("tmpfs", area, "tmpfs", k.MS_NOSUID | k.MS_NODEV, "mode=1777,size=50%")
        try:
            _put_back(sources, as_root)
        finally:
            for src in sources:
                os.close(src.fd)


def _private_dev() -> None:
    """A /dev with only the harmless nodes: a root process must not open the raw disks."""
    keep: list[tuple[str, int, bool]] = []
    for name in (*_DEV_NODES, *_DEV_DIRS):
        path = f"/dev/{name}"
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC | os.O_NOFOLLOW)
        except OSError:
            continue
        keep.append((name, fd, stat.S_ISDIR(os.fstat(fd).st_mode)))
    try:
        log_link: str | None = os.readlink("/dev/log")
    except OSError:
        log_link = None
    k.mount("tmpfs", "/dev", "tmpfs", k.MS_NOSUID | k.MS_NOEXEC, "mode=755,size=64k,nr_inodes=64")
    for name, fd, is_dir in keep:
        target = f"/dev/{name}"
        if is_dir:
            os.mkdir(target, 0o755)
        else:
            os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600))
        k.mount(f"/proc/self/fd/{fd}", target, None, k.MS_BIND | k.MS_REC)
        os.close(fd)
    for name, target in _DEV_LINKS + ((("log", log_link),) if log_link else ()):
        os.symlink(target, f"/dev/{name}")
    k.mount(None, "/dev", None, k.MS_REMOUNT | k.MS_BIND | k.MS_RDONLY | k.MS_NOSUID | k.MS_NOEXEC)
    for path in ("/proc/sys", "/proc/sysrq-trigger", "/sys"):
        if os.path.exists(path):
            k.mount(path, path, None, k.MS_BIND | k.MS_REC)
            _make_readonly(path)


def _blank(path: str) -> None:
    """Cover a file with /dev/null on a read-only *nodev* mount: opening it fails either way
    (EACCES), and while the mount exists it cannot be renamed over or unlinked (EBUSY)."""
    k.mount("/dev/null", path, None, k.MS_BIND)
    k.mount(None, path, None, k.MS_REMOUNT | k.MS_BIND | k.MS_RDONLY | k.MS_NODEV | k.MS_NOSUID | k.MS_NOEXEC)


def _build_namespace(plan: dict[str, Any]) -> None:
    as_root = not plan.get("userns")
    enter_namespace(bool(plan.get("userns")))
    hides = sorted((h for h in plan.get("hide", ()) if os.path.lexists(h)), key=_depth)
    exposes = [e for e in plan.get("expose", ())]
    links = [tuple(x) for x in plan.get("links", ())]

    def area_of(path: str) -> str | None:
        """The deepest hidden area strictly containing ``path``."""
        best = None
        for h in hides:
            if path != h and _under(path, h) and (best is None or _depth(h) > _depth(best)):
                best = h
        return best

    # Open everything to put back before anything is covered.
    per_area: dict[str, list[_Source]] = {h: [] for h in hides}
    loose_ro: list[str] = []
    for e in exposes:
        area = area_of(e["path"])
        if area is None:  # nothing hidden around it (the area did not exist): leave it in place
            if e["access"] == "ro" and os.path.exists(e["path"]):
                loose_ro.append(e["path"])
            continue
        try:
            fd, is_dir, parents = _open_source(e["path"], area, plan.get("root", "/"))
        except FileNotFoundError:
            if e.get("optional"):
                continue
            raise ConfineError(f"cannot put back {e['path']}: it does not exist") from None
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.EXDEV) and e["path"] != plan.get("home"):
                _warn(plan, f"{e['path']} is or lies under a symbolic link: not put back (hermesd never mounts"
                            " through a link a profile can plant; remove the link)")
                continue
            if exc.errno in (errno.ELOOP, errno.EXDEV):
                raise ConfineError(f"cannot put back {e['path']}: it is or lies under a symbolic link") from None
            raise ConfineError(f"cannot open {e['path']}: {exc.strerror}") from None
        per_area[area].append(_Source(e["path"], e["access"], fd, is_dir, parents))
    stats = {}
    for h in hides:
        try:
            stats[h] = os.stat(h)
        except OSError as exc:
            raise ConfineError(f"cannot stat {h}: {exc.strerror}") from None

    _private_areas(plan, as_root)  # first: what is hidden or put back below /tmp is reached through it
    covered: list[str] = []
    for h in hides:
        outer = area_of(h)
        if outer is not None and outer in covered and not any(
                _under(h, s.path) for s in per_area.get(outer, ())):
            continue  # already invisible inside an outer hidden area
        if stat.S_ISDIR(stats[h].st_mode):
            area_links = [(p, t) for p, t in links if area_of(p) == h]
            holders = [p for p in plan.get("placeholders", ()) if area_of(p) == h]
            _cover(h, stats[h], per_area[h], area_links, holders, as_root)
        else:
            _blank(h)
        covered.append(h)
    for srcs in per_area.values():
        for s in srcs:
            os.close(s.fd)
    for path in sorted({*plan.get("read_only", ()), *loose_ro}, key=_depth):
        if os.path.exists(path):
            k.mount(path, path, None, k.MS_BIND | k.MS_REC)
            _make_readonly(path)
    for path in plan.get("blank", ()):
        if not os.path.isfile(path):
            raise ConfineError(f"cannot protect {path}: not a regular file")
        _blank(path)
    if plan.get("private_dev"):
        _private_dev()
    if plan.get("proc_read_only"):
        # /proc/<pid>/oom_score_adj and .../autogroup of every process of the account are
        # writable by owner: read-only, a profile cannot make another gateway (or hermesd) the
        # OOM killer's first choice. Reading /proc is unchanged (upstream's liveness checks of
        # PIDs outside its domain, kanban workers included, keep working).
        k.mount("/proc", "/proc", None, k.MS_BIND | k.MS_REC)
        _make_readonly("/proc")


# --- 5. Landlock ---------------------------------------------------------------------------------
def _carve(base: str, holes: list[str], out: list[str]) -> None:
    """Collect the largest paths under ``base`` that contain no hole (for Landlock alone)."""
    inside = [h for h in holes if _under(h, base)]
    if not inside:
        out.append(base)
        return
    if base in inside:
        return
    try:
        entries = list(os.scandir(base))
    except OSError:
        return  # unreadable: grant nothing there
    for entry in entries:
        if entry.is_symlink():
            continue  # its target is granted (or not) where it lives
        _carve(entry.path, inside, out)


def _own_output_files() -> list[int]:
    """O_PATH descriptors of the regular files this process writes as stdout and stderr.

    ``echo … > /dev/stderr`` reopens them by name (``/proc/self/fd/2``), which Landlock checks like
    any path: without a rule of their own, a gateway whose output goes to its log under
    ``.hermesd/logs/`` could no longer do what its inherited descriptor already lets it do.
    """
    fds = []
    for n in (1, 2):
        try:
            fd = os.open(f"/proc/self/fd/{n}", os.O_PATH | os.O_CLOEXEC)
        except OSError:
            continue
        if stat.S_ISREG(os.fstat(fd).st_mode):
            fds.append(fd)
        else:
            os.close(fd)
    return fds


def _landlock(plan: dict[str, Any]) -> None:
    """Reads: everything (the namespace hid what must not be seen) or the carved free parts
    (Landlock alone). Writes: only the exposed read-write paths, ``writable`` and the process's
    own output files; every other change to the file system is denied."""
    abi = int(plan.get("landlock_abi", 0))
    handled = k.fs_rights_for_abi(abi)
    scopes = 0
    if "signal" in plan.get("scopes", ()):
        scopes |= k.SCOPE_SIGNAL
    if "abstract_unix_socket" in plan.get("scopes", ()):
        scopes |= k.SCOPE_ABSTRACT_UNIX_SOCKET
    rw = handled & ~(k.FS_MAKE_CHAR | k.FS_MAKE_BLOCK)
    ro = handled & (k.FS_EXECUTE | k.FS_READ_FILE | k.FS_READ_DIR | k.FS_IOCTL_DEV)
    grants: list[tuple[str, int, str | None]] = []  # (path, rights, open beneath this folder)
    root = plan.get("root", "/")
    if plan.get("landlock_fs") == "everything":
        grants.append(("/", ro, None))
        grants.extend((e["path"], rw, None) for e in plan.get("expose", ()) if e["access"] == "rw")
    else:
        real = os.path.realpath
        holes = [real(p) for p in plan.get("hide", ()) if os.path.lexists(p)]
        free: list[str] = []
        _carve("/", holes, free)
        grants.extend((p, ro, None) for p in free)
        for e in plan.get("expose", ()):
            rights_e = rw if e["access"] == "rw" else ro
            if _under(e["path"], root) and e["path"] != root:
                grants.append((e["path"], rights_e, root))  # opened beneath the root: no link followed
            elif os.path.exists(e["path"]):
                grants.append((real(e["path"]), rights_e, None))
    for path in plan.get("writable", ()):
        # Below the root (the home, the lock folder) no link is followed; elsewhere the path is the
        # operator's (a setting, a device node) or the system's.
        grants.append((path, rw, root if _under(path, root) and path != root else None))
    ruleset = k.landlock_create_ruleset(abi, handled, scopes)
    try:
        for fd in _own_output_files():
            try:
                k.landlock_add_path_rule(ruleset, fd, rw & k.FS_FILE_RIGHTS, "standard output or error")
            finally:
                os.close(fd)
        for path, rights, under in grants:
            try:
                if under is not None:
                    fd = beneath.open_under(under, path[len(under):].lstrip("/"), os.O_PATH)
                else:
                    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.EXDEV):
                    _warn(plan, f"{path} is or lies under a symbolic link: no access granted through it")
                continue  # vanished since it was listed, or not there at all (a device node, a setting's path)
            try:
                if not stat.S_ISDIR(os.fstat(fd).st_mode):
                    rights &= k.FS_FILE_RIGHTS
                k.landlock_add_path_rule(ruleset, fd, rights, path)
            finally:
                os.close(fd)
        k.landlock_restrict_self(ruleset)
    finally:
        os.close(ruleset)


def make_tmpdir(plan: dict[str, Any]) -> None:
    """Under Landlock alone, the private temporary folder inside the home, created as the
    profile's account (after the switch) and beneath the home without following a link."""
    tmpdir, home = plan.get("tmpdir", ""), plan.get("home", "/")
    if plan.get("mechanism") == "landlock" and tmpdir and _under(tmpdir, home) and tmpdir != home:
        beneath.makedirs_under(home, tmpdir[len(home):].lstrip("/"), 0o700)


def tmpdir_for(plan: dict[str, Any], current: str | None) -> str | None:
    """The ``TMPDIR`` the confined command must get (``current``: the one it was given), or
    ``None`` to leave it: the private temporary folder, where that is not ``/tmp`` or where the
    environment named another folder (which is read-only now)."""
    tmpdir = plan.get("tmpdir", "")
    if not tmpdir or plan.get("mechanism") not in ("namespace+landlock", "landlock"):
        return None
    if tmpdir != "/tmp" or (current is not None and current != "/tmp"):
        return str(tmpdir)
    return None


# --- the whole sequence ----------------------------------------------------------------------------
def apply(plan: dict[str, Any]) -> None:
    """Confine the current process as ``plan`` says (everything short of the final execve)."""
    mechanism = plan.get("mechanism")
    home = plan.get("home", "/")
    step = "start"
    try:
        if mechanism == "unavailable":
            raise ConfineError(plan.get("reason") or "isolation unavailable")
        if mechanism == "off":
            step = f"chdir {home}"
            os.chdir(home)
            return
        if mechanism not in ("namespace+landlock", "landlock"):
            raise ConfineError(f"unknown isolation mechanism {mechanism!r}")
        step = "prepare the root"
        _ensure(plan)
        if mechanism == "namespace+landlock":
            step = "build the mount namespace"
            _build_namespace(plan)
        user = plan.get("user")
        if user:
            step = f"switch to account {user['name']}"
            os.setgroups([int(g) for g in user.get("groups", ())])
            os.setresgid(int(user["gid"]), int(user["gid"]), int(user["gid"]))
            os.setresuid(int(user["uid"]), int(user["uid"]), int(user["uid"]))
        elif plan.get("keep_caps") is not None:
            step = "drop capabilities"
            keep = frozenset(k.CAP_NAMES.index(c) for c in plan["keep_caps"] if c in k.CAP_NAMES)
            k.limit_capabilities(keep)
        step = f"chdir {home}"
        os.chdir(home)
        step = "create the private temporary folder"
        make_tmpdir(plan)
        step = "set no_new_privs"
        k.set_no_new_privs()
        step = "apply Landlock"
        _landlock(plan)
        if plan.get("syscall_filter"):
            step = "scope process control"
            syscalls.install()
    except ConfineError:
        raise
    except OSError as exc:
        detail = exc.strerror or str(exc)
        if exc.filename:
            detail += f": {exc.filename}"
        raise ConfineError(f"{step}: {detail}") from None
