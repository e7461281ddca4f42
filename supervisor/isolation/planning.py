"""What one profile's confinement looks like: a pure function from facts to a serialisable Plan.

``make_plan(PlanInputs)`` does no I/O: the caller passes the root, the profile and its home,
hermesd's folder, the other profiles' homes, the install paths, the settings, the kanban layout
and the :class:`~supervisor.isolation.probing.Probe`. Pass resolved absolute paths (``Path.resolve()``);
the plan compares them lexically.

Model: **reads** stay as they were outside the hidden areas (the rest of the disk, the network);
a hidden area is an *allow-list* (an empty read-only folder in which only the listed entries are
put back), so a profile folder created after the child started is never visible to it.
**Writes are denied by default**: a profile may change only its home, the channels upstream needs
(``kanban/``, ``shared/``, the credential-lock folder), a private ``/tmp``, a few device nodes
(``/dev/null``…) and the paths its ``writable`` setting lists. Anything else it could change
(shell start-up files, ``~/.ssh``, user units, cron, an interpreter under the home) would be code
that runs later *outside* every wall.

- named profile: hidden ``<root>`` (and other profiles' homes elsewhere, hermesd's socket
  folder when it is outside the root); put back: its own home (rw), ``kanban/`` (rw) plus the
  board links, ``shared/`` (rw), ``auth.json`` (ro, only when ``root_auth``), install paths and
  ``read_only`` paths under the root (ro), the credential-lock folder if it is under the root.
- default profile (home = root): hidden ``profiles/`` and ``.hermesd/``; ``hermesd.yaml``
  blanked (an empty read-only file: the default profile could otherwise rewrite hermesd's
  ``command`` and run code for every profile).
- read-only everywhere: the install paths (the gateway interpreter, its site-packages, a
  hermes-agent checkout, hermesd's own code) — a profile that could edit shared code would run
  inside every other profile on its next restart. Landlock already denies writing them; the
  namespace also binds them read-only, so no ``writable`` path can reopen them.
- the private ``/tmp``: in the namespace a tmpfs of its own over ``/tmp`` and ``/dev/shm`` (with
  whatever the plan needs below ``/tmp`` put back); under Landlock alone ``<home>/cache/tmp``
  named by ``TMPDIR`` (``/tmp`` itself is read-only there, ``/dev/shm`` stays shared).

Mechanisms, strongest first (``auto``): ``namespace+landlock`` (a private mount namespace does the
hiding; Landlock denies writes outside the plan's writable paths, scopes signals and abstract
sockets, blocks ptrace and forbids undoing the mounts), ``landlock`` (Landlock rules only; see
``gaps``), ``off``. A mount namespace *without* Landlock is never chosen: same-user processes
outside it remain reachable through ``/proc/<pid>/root`` and by signals, so it would hide files
without being a boundary.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any

from supervisor.isolation import shared_board
from supervisor.isolation.probing import Probe, best_mechanism
from supervisor.isolation.shim_argv import PLAN_VERSION
from supervisor.settings import IsolationSettings

CONFIG_NAME = "hermesd.yaml"
PROFILES_DIR = "profiles"
SHARED_DIR = "shared"
ROOT_AUTH = "auth.json"
# Read-only for every confined profile: a process that could write cgroup.procs (a non-root
# hermesd's delegated tree belongs to the profiles' account) could move itself out of its
# profile's cgroup, or into another's.
CGROUP_FS = "/sys/fs/cgroup"
# Capabilities a root gateway keeps when it has no account of its own: Docker's default set
# minus MKNOD, SETPCAP and SETFCAP. Gone: SYS_ADMIN (mounts, namespaces), SYS_PTRACE,
# DAC_READ_SEARCH (open_by_handle_at walks around every path rule), SYS_MODULE, SYS_RAWIO, BPF…
# Device nodes every process may write: the sinks and sources programs open by name, and the
# terminals (the agent's terminal tool runs commands on a pty).
DEV_WRITABLE = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty", "/dev/ptmx",
                "/dev/pts")
# Folders every program expects to write, each a private tmpfs in the namespace.
PRIVATE_AREAS = ("/tmp", "/dev/shm")
# Under Landlock alone, the private temporary folder (``TMPDIR``), inside the home: upstream's own
# export leaves ``cache/`` out, and the home is the one place the profile's account surely owns.
LANDLOCK_TMP = "cache/tmp"
ROOT_KEEP_CAPS = ("chown", "dac_override", "fowner", "fsetid", "kill", "setgid", "setuid",
                  "net_bind_service", "net_raw", "sys_chroot", "audit_write")


@dataclass(frozen=True, slots=True)
class UserIds:
    """A resolved account (the caller looks the name up; see ``install.resolve_user``)."""

    name: str
    uid: int
    gid: int
    groups: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class PlanInputs:
    root: Path
    profile: str
    home: Path
    probe: Probe
    settings: IsolationSettings = field(default_factory=IsolationSettings)
    hermesd_dir: Path | None = None  # default: <root>/.hermesd
    control_socket: Path | None = None  # Layout.socket; only matters when outside hermesd_dir
    other_homes: tuple[Path, ...] = ()
    install_paths: tuple[Path, ...] = ()
    lock_dir: Path | None = None  # upstream's credential-lock folder (stays read-write)
    user_home: Path | None = None  # the child's HOME, to expand ~ in settings
    user_ids: UserIds | None = None  # settings.user, resolved
    kanban_layout: str = "linked"  # shared_board.layout(root): linked | absent | legacy | foreign
    # Paths the daemon itself wants put back ("rw" | "ro"), e.g. a per-profile folder under
    # .hermesd/ holding the socket through which kanban workers are handed to the daemon.
    grants: tuple[tuple[Path, str], ...] = ()
    # Other profiles' homes to show as *empty* read-only folders: for the kanban dispatcher, whose
    # upstream code skips tasks whose assignee's folder does not exist (profile_exists()).
    placeholders: tuple[Path, ...] = ()
    # Paths under the root that are, or lie under, a symbolic link (the daemon checks before each
    # spawn): never put back. The shim refuses links on its own too; this is what status explains.
    linked: tuple[Path, ...] = ()


@dataclass(frozen=True, slots=True)
class Access:
    """A path put back inside a hidden area."""

    path: str
    access: str  # "rw" | "ro"
    optional: bool = False  # skipped when missing at spawn time (auth.json)
    why: str = ""


@dataclass(frozen=True, slots=True)
class Plan:
    profile: str
    root: str
    home: str
    mechanism: str  # namespace+landlock | landlock | off | unavailable
    reason: str  # why this mechanism (one line)
    userns: bool = False  # unshare a user namespace first (hermesd is not root)
    hide: tuple[str, ...] = ()
    expose: tuple[Access, ...] = ()
    read_only: tuple[str, ...] = ()
    # Outside ``expose``, the only paths Landlock lets the profile change (missing ones are skipped).
    writable: tuple[str, ...] = ()
    # The namespace's private tmpfs areas, each with the plan's paths below it put back first.
    private: tuple[tuple[str, tuple[str, ...]], ...] = ()
    tmpdir: str = ""  # the private temporary folder; the shim sets TMPDIR to it where it is not /tmp
    writable_setting: tuple[str, ...] = ()  # isolation.writable as expanded (explanation: status names them)
    blank: tuple[str, ...] = ()  # files replaced by an empty read-only file
    links: tuple[tuple[str, str], ...] = ()  # (path, relative target) recreated inside hidden areas
    placeholders: tuple[str, ...] = ()  # empty read-only folders inside hidden areas (names only)
    ensure_dirs: tuple[str, ...] = ()  # created (real file system) before confining
    ensure_files: tuple[str, ...] = ()
    ensure_links: tuple[tuple[str, str], ...] = ()
    landlock_abi: int = 0
    # Landlock's reads: "everything" (the namespace hides) | "carve" (Landlock alone); writes: ``writable``.
    landlock_fs: str = ""
    scopes: tuple[str, ...] = ()  # "signal", "abstract_unix_socket"
    private_dev: bool = False  # root without an account: a minimal /dev, read-only /proc/sys and /sys
    keep_caps: tuple[str, ...] | None = None  # root without an account: capabilities kept
    syscall_filter: bool = False  # process control limited to the process itself (supervisor.isolation.syscalls)
    proc_read_only: bool = False  # /proc read-only in the namespace: no oom_score_adj/autogroup of others
    user: UserIds | None = None
    channels: tuple[tuple[str, str], ...] = ()  # kanban / shared_auth / root_auth -> open|closed|...
    gaps: tuple[str, ...] = ()  # what this plan does not guarantee, in words

    @property
    def enforced(self) -> bool:
        return self.mechanism in ("namespace+landlock", "landlock")

    @property
    def runnable(self) -> bool:
        """False: the daemon must not start the profile (hold it, showing ``reason``)."""
        return self.mechanism != "unavailable"

    # --- explanation -------------------------------------------------------------------
    def summary(self) -> str:
        """One line for ``hermesd status``."""
        if not self.enforced:
            return f"{self.mechanism}: {self.reason}"
        ch = dict(self.channels)
        shared = [n for n in ("kanban", "shared_auth", "root_auth") if ch.get(n, "").startswith("open")]
        bits = [self.mechanism]
        if self.user:
            bits.append(f"as {self.user.name}")
        bits.append("signals scoped" if "signal" in self.scopes else "signals NOT scoped")
        bits.append("shares " + (", ".join(shared) if shared else "nothing"))
        tmp = "/tmp (private)" if self.tmpdir == "/tmp" else f"TMPDIR ({self.tmpdir})"
        bits.append("writes only " + ", ".join(("its home", tmp, *self.writable_setting)))
        if self.gaps:  # the same count as the list status --json shows
            severe = self.gaps_severe()
            named = ""
            if severe:  # named here, so the table alone says what most needs fixing
                more = f" (+{len(severe) - 1} more)" if len(severe) > 1 else ""
                named = f", {len(severe)} severe: {severe[0][1:].split(' (', 1)[0]}{more}"
            bits.append(f"{len(self.gaps)} gap(s){named}")
            bits.append("see status --json")
        return "; ".join(bits)

    def gaps_severe(self) -> list[str]:
        return [g for g in self.gaps if g.startswith("!")]

    def status_json(self) -> dict[str, Any]:
        """The ``isolation`` object of ``status --json`` (scalars first: metrics take the first ones)."""
        ch = dict(self.channels)
        return {
            "mechanism": self.mechanism,
            "enforced": self.enforced,
            "signals": "scoped" if "signal" in self.scopes else "open",
            "user": self.user.name if self.user else "",
            "kanban": ch.get("kanban", ""),
            "shared_auth": ch.get("shared_auth", ""),
            "root_auth": ch.get("root_auth", ""),
            "landlock_abi": self.landlock_abi,
            "process_control": "scoped" if self.syscall_filter else "open",
            "proc": "read-only" if self.proc_read_only else "writable",
            "reason": self.reason,
            "summary": self.summary(),
            "hidden": list(self.hide),
            "exposed": [{"path": a.path, "access": a.access} for a in self.expose],
            "read_only": list(self.read_only),
            "writable": [a.path for a in self.expose if a.access == "rw"] + list(self.writable),
            "tmp": self.tmpdir,
            "gaps": [g.lstrip("!") for g in self.gaps],
            "gaps_severe": [g.lstrip("!") for g in self.gaps_severe()],  # the summary's "(N severe)"
        }

    def to_json(self) -> dict[str, Any]:
        """Everything ``enter`` needs, as plain JSON (also the explanation fields)."""
        return {"version": PLAN_VERSION, **_plain(self), "channels": dict(self.channels)}


def _plain(value: Any) -> Any:
    """``value`` with every tuple a list, as JSON would read it back."""
    if is_dataclass(value) and not isinstance(value, type):  # not asdict: it deep-copies every leaf (20x slower)
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return [_plain(v) for v in value] if isinstance(value, tuple | list) else value


# --- the planner ----------------------------------------------------------------------------
def _norm(p: Path | str) -> str:
    s = posixpath.normpath(str(p))
    return "/" + s.lstrip("/") if s.startswith("//") else s


def _under(p: str, base: str) -> bool:
    """``p`` is ``base`` or inside it (lexically)."""
    return p == base or base == "/" or p.startswith(base.rstrip("/") + "/")


def _strictly_under(p: str, base: str) -> bool:
    return p != base and _under(p, base)


def _dedupe(paths: list[str]) -> tuple[str, ...]:
    """Sorted, without duplicates and without paths already covered by another one in the list."""
    out: list[str] = []
    for p in sorted(set(paths), key=lambda x: (x.count("/"), x)):
        if not any(_under(p, q) for q in out):
            out.append(p)
    return tuple(sorted(out))


def _expand(path: str, user_home: Path | None) -> str | None:
    if path == "~" or path.startswith("~/"):
        if user_home is None:
            return None
        return _norm(str(user_home) + path[1:])
    return _norm(path)


def _writable_clash(path: str, *, root: str, home: str, hermesd_dir: str, others: list[str],
                    installs: list[str]) -> str:
    """What a ``writable`` path would open that confinement exists to protect ("" when nothing).

    A write rule is a right on a whole hierarchy, and under Landlock alone rights add up: a path
    holding the root would give back every other home. Inside its own home a path is merely redundant.
    """
    if home != root and _under(path, home):
        return ""
    if _under(root, path) or (_under(path, root) and home != root):
        return f"the root folder {root} (other profiles' homes, hermesd's state)"
    for hidden, what in ((f"{root}/{PROFILES_DIR}", "the named profiles' homes"), (hermesd_dir, "hermesd's folder"),
                         (f"{root}/{CONFIG_NAME}", "hermesd's settings")):
        if _under(path, hidden) or _under(hidden, path):
            return f"{what} ({hidden})"
    for other in others:
        if _under(path, other) or _under(other, path):
            return f"another profile's home ({other})"
    for code in installs:
        if _under(path, code) or _under(code, path):
            return f"the code every profile runs ({code})"
    return ""


def _off(inp: PlanInputs, mechanism: str, reason: str) -> Plan:
    return Plan(profile=inp.profile, root=_norm(inp.root), home=_norm(inp.home), mechanism=mechanism, reason=reason,
                gaps=() if mechanism == "unavailable" else
                ("!no confinement: this profile can read, change and signal every other profile and hermesd",))


def _choose(inp: PlanInputs) -> tuple[str, str]:
    s, p = inp.settings, inp.probe
    if s.mode == "off":
        return "off", "isolation: off in hermesd.yaml"
    if s.user and not p.is_root:
        return "unavailable", f"isolation.user {s.user!r} needs hermesd to run as root"
    if s.user and inp.user_ids is None:
        return "unavailable", f"isolation.user {s.user!r}: no such account"
    best = best_mechanism(p)
    if best == "off":
        why = p.landlock_error or "no Landlock"
        if s.mode == "required":
            return "unavailable", f"isolation: required, but this kernel offers no confinement ({why})"
        return "off", f"isolation unavailable here ({why}); see hermesd doctor"
    if best == "landlock":
        ns_why = p.mount_namespace_error if p.is_root else p.user_namespace_error
        return best, f"auto: Landlock ABI {p.landlock_abi} only (no private mount namespace: {ns_why or 'unavailable'})"
    how = "root" if p.is_root else "user namespace"
    return best, f"auto: private mount namespace ({how}) + Landlock ABI {p.landlock_abi}"


def hides_other_profiles(settings: IsolationSettings, probe: Probe) -> bool:
    """Whether a profile's confinement shows it no other profile's files (a private mount namespace).

    Landlock alone denies reading them but not seeing that they exist, which is all upstream's
    multiplexing default gateway needs to count a folder as a profile to serve.
    """
    return settings.mode != "off" and best_mechanism(probe) == "namespace+landlock"


def make_plan(inp: PlanInputs) -> Plan:
    """The strongest confinement the probe allows for this profile, with what it does not cover."""
    mechanism, reason = _choose(inp)
    if mechanism in ("off", "unavailable"):
        return _off(inp, mechanism, reason)

    s, p = inp.settings, inp.probe
    root, home = _norm(inp.root), _norm(inp.home)
    named = home != root
    hermesd_dir = _norm(inp.hermesd_dir) if inp.hermesd_dir else _norm(f"{root}/.hermesd")
    namespace = mechanism == "namespace+landlock"
    gaps: list[str] = []
    channels: dict[str, str] = {}

    extra_ro: list[str] = []
    extra_hide: list[str] = []
    extra_rw: list[str] = []
    for raw_list, out in ((s.read_only, extra_ro), (s.hide, extra_hide), (s.writable, extra_rw)):
        for raw in raw_list:
            x = _expand(raw, inp.user_home)
            if x is None:
                return _off(inp, "unavailable", f"isolation: {raw!r} needs the child's HOME to expand ~")
            out.append(x)
    installs = [_norm(x) for x in inp.install_paths]
    others = [_norm(x) for x in inp.other_homes if _norm(x) != home]
    for raw, path in zip(s.writable, extra_rw, strict=True):
        clash = _writable_clash(path, root=root, home=home, hermesd_dir=hermesd_dir, others=others,
                                installs=installs)
        if clash:
            return _off(inp, "unavailable", f"isolation.writable: {raw} would let this profile change {clash};"
                                            " list a folder that holds none of them")

    hide: list[str] = []
    expose: list[Access] = []
    read_only: list[str] = []
    blank: list[str] = []
    links: list[tuple[str, str]] = []
    ensure_dirs: list[str] = []
    ensure_files: list[str] = []
    ensure_links: list[tuple[str, str]] = []

    # --- the kanban board and the other root channels --------------------------------
    board_usable = inp.kanban_layout in ("linked", "absent")
    if s.kanban:
        if board_usable:
            channels["kanban"] = "open"
            ensure_dirs.append(f"{root}/{shared_board.BOARD_DIR}")
            ensure_links.extend((f"{root}/{n}", shared_board.link_target(n)) for n in shared_board.LINKS)
        else:
            channels["kanban"] = f"blocked: {root}/kanban.db is {inp.kanban_layout}"
            gaps.append(f"kanban board unusable for named profiles until {root}/kanban.db is migrated into"
                        f" {shared_board.BOARD_DIR}/ (layout: {inp.kanban_layout}; hermesd moves it when it starts"
                        " and no process has it open; its log says why it did not)")
        gaps.append("kanban board shared: this profile can read and change every task, comment, workspace and"
                    " worker log on it, and a task it assigns to another profile is a prompt that profile's"
                    " agent runs with its own credentials")
    else:
        channels["kanban"] = "closed"
    channels["shared_auth"] = "open" if s.shared_auth else "closed"
    if s.shared_auth:
        gaps.append(f"shared Nous login {root}/{SHARED_DIR}/ readable and replaceable by every profile that keeps it")

    lock_dir = _norm(inp.lock_dir) if inp.lock_dir else None
    if lock_dir:
        gaps.append(f"credential-lock folder {lock_dir} shared (upstream needs it): a profile can delete or fake"
                    " another profile's platform locks (a retrying platform, not a leaked token)")

    linked = {_norm(x) for x in inp.linked}

    def refused(path: str, channel: str) -> bool:
        if path not in linked:
            return False
        channels[channel] = f"closed: {path} is a symbolic link"
        gaps.append(f"!{path} is a symbolic link: not put back, so the {channel} channel is closed for this"
                    " profile (hermesd never mounts through a link a profile can plant; remove the link)")
        return True

    if named:
        channels["root_auth"] = "open (read-only)" if s.root_auth else "closed"
        hide.append(root)
        hide.extend(o for o in others if not _under(o, root))
        expose.append(Access(home, "rw", why="the profile's own home"))
        if s.kanban and board_usable and not refused(f"{root}/{shared_board.KANBAN_DIR}", "kanban"):
            expose.append(Access(f"{root}/{shared_board.KANBAN_DIR}", "rw", why="kanban board"))
            links.extend((f"{root}/{n}", shared_board.link_target(n)) for n in shared_board.LINKS)
        if s.shared_auth and not refused(f"{root}/{SHARED_DIR}", "shared_auth"):
            ensure_dirs.append(f"{root}/{SHARED_DIR}")
            expose.append(Access(f"{root}/{SHARED_DIR}", "rw", why="shared Nous auth"))
        if s.root_auth and not refused(f"{root}/{ROOT_AUTH}", "root_auth"):
            expose.append(Access(f"{root}/{ROOT_AUTH}", "ro", optional=True, why="root auth.json fallback"))
            gaps.append(f"the root's {ROOT_AUTH} is readable (root_auth: true): the default profile's provider"
                        " credentials")
        if lock_dir and _under(lock_dir, root):
            expose.append(Access(lock_dir, "rw", why="credential locks"))
    else:
        channels["root_auth"] = "own"
        hide.append(f"{root}/{PROFILES_DIR}")
        hide.append(hermesd_dir)
        hide.extend(others)
        ensure_dirs.append(f"{root}/{PROFILES_DIR}")
        if not s.kanban:
            hide.append(f"{root}/{shared_board.KANBAN_DIR}")
        if not s.shared_auth:
            hide.append(f"{root}/{SHARED_DIR}")
        blank.append(f"{root}/{CONFIG_NAME}")
        ensure_files.append(f"{root}/{CONFIG_NAME}")
        gaps.append("the default profile owns the root folder: it can replace the board links there (named"
                    " profiles are not affected: their view is rebuilt from the plan)")
    ensure_dirs.append(hermesd_dir)
    writable: list[str] = [home]
    if lock_dir:  # created now: under a read-only parent the gateway could not create it itself
        ensure_dirs.append(lock_dir)
        writable.append(lock_dir)

    if inp.control_socket is not None:
        sock_dir = _norm(inp.control_socket.parent)
        if namespace and not _under(sock_dir, hermesd_dir) and not _under(sock_dir, root):
            hide.append(sock_dir)
    hide.extend(extra_hide)

    hide_t = _dedupe(hide)
    for path in extra_rw:  # inside a hidden area: put back read-write; elsewhere: a write rule
        if any(_under(path, h) for h in hide_t):
            expose.append(Access(path, "rw", optional=True, why="writable (setting)"))
        else:
            writable.append(path)
        gaps.append(f"{path} is writable (isolation.writable): whatever later runs code from there (a project's"
                    " scripts, hooks, build files) runs what this profile put there")
    for raw_path, access in inp.grants:
        path = _norm(raw_path)
        if access not in ("rw", "ro"):
            raise ValueError(f"grant {path}: access must be 'rw' or 'ro', not {access!r}")
        if any(_under(path, h) for h in hide_t):
            expose.append(Access(path, access, why="granted by hermesd"))
        elif access == "ro":
            extra_ro.append(path)
    # Read-only paths: put back read-only inside a hidden area, else bound read-only in place.
    for path in [*installs, *extra_ro]:
        if _under(root, path) or _under(home, path):
            gaps.append(f"!{path} holds this profile's home or the root: left writable (making it read-only"
                        " would make them read-only too)")
            continue
        if any(_under(path, h) for h in hide_t):
            expose.append(Access(path, "ro", optional=True, why="read-only (install or setting)"))
        else:
            read_only.append(path)

    # --- mechanism-specific adjustments ----------------------------------------------
    private: list[tuple[str, tuple[str, ...]]] = []
    if not namespace:
        # Landlock alone cannot carve inside a folder the profile must write, nor blank files.
        changeable = [*writable, *(a.path for a in expose if a.access == "rw")]
        kept_ro = []
        for ro in read_only:
            if any(_strictly_under(ro, w) or _under(w, ro) for w in changeable):
                gaps.append(f"!{ro} stays writable (Landlock alone cannot make part of a writable folder"
                            " read-only)")
            else:
                kept_ro.append(ro)
        read_only = kept_ro
        kept_hide = []
        for h in hide_t:
            if any(_strictly_under(h, w) for w in changeable):
                gaps.append(f"!{h} stays visible and writable (Landlock alone cannot exclude part of a folder"
                            " the profile must write)")
            else:
                kept_hide.append(h)
        hide_t = tuple(kept_hide)
        if blank:
            gaps.append(f"!{blank[0]} stays writable: the default profile can change how hermesd runs every"
                        " profile (Landlock alone cannot protect one file in a folder the profile must write)")
            blank = []
        gaps.append("!hermesd's control socket is reachable (Landlock cannot restrict connecting to a unix"
                    " socket path; a private mount namespace can)")
        gaps.append("names, sizes and dates inside hidden folders can still be probed with stat() on guessed"
                    " names (Landlock does not restrict path lookups; contents stay unreadable)")
        gaps.append("folders on the way to a hidden one (e.g. the home folder holding the root, and /) are"
                    " readable file by file but cannot be listed; entries added there after the start are out of"
                    " reach until a restart")
        tmpdir = f"{home}/{LANDLOCK_TMP}"
        gaps.append(f"no private /tmp (Landlock alone): /tmp is read-only and TMPDIR names {tmpdir}; a command"
                    " that writes into /tmp by name fails")
        gaps.append("/dev/shm stays writable and shared with every process of the account (POSIX shared memory"
                    " and semaphores need it; a private one needs the mount namespace)")
        writable.append("/dev/shm")
        landlock_fs = "carve"
    else:
        tmpdir = "/tmp"
        # What the rest of the plan needs below a private area is put back into it first.
        needed = [*hide_t, *(a.path for a in expose if not any(_strictly_under(a.path, h) for h in hide_t)),
                  *read_only, *blank, *writable, root, home]
        for area in PRIVATE_AREAS:
            if any(_under(area, x) for x in (root, home)):
                gaps.append(f"!{area} is not private: it holds this profile's home or the root, so it stays"
                            " shared and read-only")
                continue
            private.append((area, _dedupe([x for x in needed if _strictly_under(x, area)])))
            writable.append(area)
        landlock_fs = "everything"
    writable.extend(DEV_WRITABLE)

    if p.landlock_abi >= 6:
        scopes: tuple[str, ...] = ("signal", "abstract_unix_socket")
    else:
        scopes = ()
        gaps.append(f"!signals are not scoped (Landlock ABI {p.landlock_abi} < 6): this profile can kill other"
                    " profiles' gateways and hermesd")

    # Process control that is not a signal: rlimits, nice, affinity, scheduling, I/O priority
    # (syscalls), OOM score and autogroup (files under /proc/<pid>: read-only for both
    # mechanisms, by the namespace's mount and by Landlock's denied writes), and cgroup membership.
    read_only.append(CGROUP_FS)
    if not p.seccomp:
        gaps.append(f"!process control not scoped ({p.seccomp_error or 'no seccomp'}): this profile can change the"
                    " resource limits, nice value, CPU affinity, scheduling and I/O priority of every process of its"
                    " account (hermesd restores its own at housekeeping)")

    if inp.placeholders:
        gaps.append("kanban dispatcher: the other profiles' names are visible (their homes as empty read-only"
                    " folders), and it can ask hermesd to run upstream's worker for a task on the board as that"
                    " task's assignee (in the assignee's own domain, only upstream's worker command)")
    user = inp.user_ids if s.user else None
    root_without_account = p.is_root and user is None
    gaps.append(("!" if user is None else "")  # an account of its own is one those services do not obey
                + "unix sockets stay reachable by path (Landlock cannot restrict connecting to one): a service"
                " listening on one that runs commands for whoever connects (the D-Bus and systemd of "
                + ("root" if root_without_account else "the account") + ", a container engine's socket such as"
                " docker.sock) runs them outside this profile's confinement")
    if root_without_account:
        gaps.append("!runs as root: its writes are walled like any profile's, but root's own services (systemd,"
                    " D-Bus, docker.sock) obey root, and root can read every file of every account outside the"
                    " hidden folders; set isolation.user for a trust boundary")

    return Plan(
        profile=inp.profile, root=root, home=home, mechanism=mechanism, reason=reason,
        userns=namespace and not p.is_root,
        hide=tuple(hide_t),
        expose=tuple(expose),
        read_only=_dedupe(read_only),
        writable=tuple(dict.fromkeys(writable)),
        private=tuple(private),
        tmpdir=tmpdir,
        writable_setting=tuple(extra_rw),
        blank=tuple(blank),
        links=tuple(links),
        placeholders=tuple(sorted({_norm(x) for x in inp.placeholders if namespace and _norm(x) != home
                                   and any(_strictly_under(_norm(x), h) for h in hide_t)})),
        ensure_dirs=tuple(dict.fromkeys(ensure_dirs)),
        ensure_files=tuple(ensure_files),
        ensure_links=tuple(ensure_links),
        landlock_abi=p.landlock_abi,
        landlock_fs=landlock_fs,
        scopes=scopes,
        private_dev=namespace and root_without_account,
        keep_caps=ROOT_KEEP_CAPS if root_without_account else None,
        syscall_filter=p.seccomp,
        proc_read_only=namespace,
        user=user,
        channels=tuple(sorted(channels.items())),
        gaps=tuple(dict.fromkeys(gaps)),
    )
