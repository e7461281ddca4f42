"""cgroup v2 for hermesd, pure: is a subtree ours, what to write where, what the event counters mean.

Nothing here touches the file system. :mod:`supervisor.limits.cgroup_io` gathers
:class:`HostFacts` (``/proc/self/mountinfo``, ``/proc/self/cgroup``, and a few files and owners
of the relevant cgroup directories) and executes the :class:`Step` lists planned here.

**Where profile cgroups live** (:func:`detect`):

1. *systemd delegation with a subgroup* (``Delegate=yes`` + ``DelegateSubgroup=supervisor``,
   systemd >= 254): systemd starts hermesd in ``<unit>/supervisor``; the unit's cgroup is the base,
   and ``<unit>/profile-<name>`` hold the gateways, with ``memory``, ``pids`` and ``cpu`` enabled in
   ``<unit>/cgroup.subtree_control``. Recognised by the ``trusted.delegate``/``user.delegate``
   xattr systemd sets, or, for a non-root hermesd, by owning the directory and its
   ``cgroup.procs``/``cgroup.subtree_control`` (systemd chowns them to ``User=`` on delegation).
2. *systemd delegation without a subgroup* (``Delegate=yes`` only): hermesd sits in the unit's top
   cgroup. cgroup v2's "no internal processes" rule means that once controllers are enabled there,
   no process may be added to it, and systemd adds every new main process (a restart after a crash)
   and every ``ExecReload=`` to exactly that cgroup: the unit would fail with status 219/CGROUP.
   So hermesd only *groups* here (per-profile child cgroups without controllers: exact membership
   and ``cgroup.kill``) and enforces the limits by watching; doctor says to add
   ``DelegateSubgroup=supervisor``.
3. *root without delegation* on a host with cgroup v2: hermesd creates its own subtree at the top
   of the hierarchy, ``<mount>/hermesd-<hash of the root path>/profile-<name>``, outside systemd's
   slices (doctor warns). The top of the real hierarchy may hold processes (the root cgroup is
   exempt from the rule); the root of a cgroup namespace (a container) is not, so there only
   controllers already enabled can be used.
4. Otherwise nothing: no cgroup v2, read-only mount, or a cgroup owned by someone else.

On a *hybrid* host (cgroup v1 controllers with a bare cgroup v2 mount beside them, like this
machine) cases 1-3 apply to the v2 mount, which has no controllers: grouping and ``cgroup.kill``
only, limits by watching. cgroup v1 is never used; it is only reported for doctor.

**The plan for a profile** (:func:`profile_plan`): ``memory.max`` = ``memory_max`` (or ``max``),
``memory.swap.max`` = 0 when ``memory_max`` is set (so, as in the watch mechanism, the limit holds
RAM and swap together: a limit that swapping escapes protects nothing) else ``max``,
``memory.oom.group`` = 1 (an OOM kill ends the whole tree at once, like every other limit
breach), ``pids.max`` = ``tasks_max`` (or ``max``), ``cpu.weight`` = ``cpu_weight`` (or 100). Each
is written on every apply, so a changed or removed limit takes effect on the running tree without
a restart. ``memory.swap.max`` and ``memory.oom.group`` are optional (missing without swap
accounting or on old kernels).
"""

from __future__ import annotations

import hashlib
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

from supervisor.settings import Limits

WANTED = ("memory", "pids", "cpu")
LEAF = "supervisor"  # hermesd's own leaf; the name DelegateSubgroup= must use
PROFILE_PREFIX = "profile-"  # profile names may be "supervisor": the prefix keeps them apart
# Sessions run *for* a profile but outside its gateway's tree, each in a cgroup of its own beside
# the profile's (``<base>/exec.<profile>.<pid>``, ``<base>/worker.<profile>.<pid>``): the dot is
# not allowed in profile names, so no session cgroup can be taken for a profile's. Beside, not
# below: cgroup v2 lets a cgroup that holds processes (the gateway's) give no controller to
# children, and each session needs limits of its own.
EXEC_PREFIX = "exec."
WORKER_PREFIX = "worker."
# Killed at hermesd's exit: every profile's tree, kanban worker and exec session (a profile's agent
# may run in a session too: nothing of a profile outlives a stop of the fleet).
SWEPT_PREFIXES = (PROFILE_PREFIX, WORKER_PREFIX, EXEC_PREFIX)
_V1_CONTROLLERS = frozenset(
    {"cpu", "cpuacct", "cpuset", "memory", "devices", "freezer", "net_cls", "net_prio", "blkio", "perf_event",
     "hugetlb", "pids", "rdma", "misc"}
)

FIX_DELEGATE = (
    "run hermesd from a systemd unit with `Delegate=yes` and `DelegateSubgroup=supervisor` under [Service] "
    "(systemd >= 254), then `systemctl daemon-reload` and restart it (user unit: `systemctl --user edit hermesd`)"
)
FIX_SUBGROUP = (
    "add `DelegateSubgroup=supervisor` under [Service] next to `Delegate=yes` (systemd >= 254), then "
    "`systemctl daemon-reload` and restart hermesd"
)
FIX_UNIFIED = (
    "boot with the unified cgroup v2 hierarchy: add `systemd.unified_cgroup_hierarchy=1` to the kernel command "
    "line (GRUB_CMDLINE_LINUX in /etc/default/grub, `update-grub`, reboot)"
)
FIX_USER_CONTROLLERS = (
    "the systemd user manager was not given every controller: `systemctl edit user@.service`, add "
    "`[Service]` and `Delegate=cpu cpuset io memory pids`, then log out and in (or reboot)"
)


# ----------------------------------------------------------------------------- /proc parsing

_OCTAL = re.compile(r"\\([0-7]{3})")


@dataclass(frozen=True, slots=True)
class Mount:
    """One line of ``/proc/self/mountinfo`` (the fields a cgroup decision needs)."""

    mount_point: str
    root: str
    fstype: str
    options: frozenset[str]
    super_options: frozenset[str]


def _unescape(text: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as \ooo octal.
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), text)


def parse_mountinfo(text: str) -> list[Mount]:
    """Mounts of type ``cgroup`` and ``cgroup2`` (others are skipped); junk lines are ignored."""
    mounts = []
    for line in text.splitlines():
        parts = line.split()
        if "-" not in parts:
            continue
        sep = parts.index("-")
        if sep < 6 or len(parts) < sep + 3:
            continue
        fstype = parts[sep + 1]
        if fstype not in ("cgroup", "cgroup2"):
            continue
        mounts.append(
            Mount(
                mount_point=_unescape(parts[4]),
                root=_unescape(parts[3]),
                fstype=fstype,
                options=frozenset(parts[5].split(",")),
                super_options=frozenset(parts[sep + 3].split(",")),
            )
        )
    return mounts


def parse_proc_cgroup(text: str) -> str | None:
    """The cgroup v2 path in ``/proc/<pid>/cgroup`` (its ``0::`` line)."""
    for line in text.splitlines():
        if line.startswith("0::"):
            return line[3:]
    return None


@dataclass(frozen=True, slots=True)
class Layout:
    """Which cgroup hierarchies this host has and where hermesd's own v2 cgroup is."""

    kind: Literal["unified", "hybrid", "legacy", "none"]
    mount: Mount | None  # the cgroup2 mount used
    cgroup: str | None  # our v2 path as /proc/self/cgroup says
    own_dir: str | None  # that path under the mount, when reachable
    v1_controllers: tuple[str, ...] = ()


def _under(path: str, root: str) -> str | None:
    """``path`` relative to ``root`` ('' for equal), or None when outside it."""
    if root == "/":
        return path.lstrip("/")
    if path == root:
        return ""
    if path.startswith(root.rstrip("/") + "/"):
        return path[len(root.rstrip("/")) + 1 :]
    return None


def locate(mountinfo: str, self_cgroup: str) -> Layout:
    """Classify the host (unified, hybrid, legacy, none) and find our v2 cgroup directory."""
    mounts = parse_mountinfo(mountinfo)
    v1 = tuple(sorted({c for m in mounts if m.fstype == "cgroup" for c in m.super_options & _V1_CONTROLLERS}))
    v2_mounts = [m for m in mounts if m.fstype == "cgroup2"]
    if not v2_mounts:
        return Layout("legacy" if v1 else "none", None, None, None, v1)
    kind: Literal["unified", "hybrid"] = "hybrid" if v1 else "unified"
    preference = {"/sys/fs/cgroup": 0, "/sys/fs/cgroup/unified": 1}
    v2_mounts.sort(key=lambda m: preference.get(m.mount_point, 2))
    path = parse_proc_cgroup(self_cgroup)
    if path is None or path.startswith("/.."):  # outside our cgroup namespace's view
        return Layout(kind, v2_mounts[0], path, None, v1)
    for m in v2_mounts:
        rel = _under(path, m.root)
        if rel is not None:
            own = posixpath.join(m.mount_point, rel) if rel else m.mount_point
            return Layout(kind, m, path, own, v1)
    return Layout(kind, v2_mounts[0], path, None, v1)


# ----------------------------------------------------------------------------- detection


@dataclass(frozen=True, slots=True)
class DirFacts:
    """What :mod:`cgroup_io` read about one cgroup directory."""

    path: str
    exists: bool = True
    files: frozenset[str] = frozenset()  # entries: "cgroup.type" absent = the real root cgroup
    controllers: frozenset[str] = frozenset()  # cgroup.controllers
    subtree_control: frozenset[str] = frozenset()  # cgroup.subtree_control
    procs: tuple[int, ...] = ()  # cgroup.procs
    owner: int | None = None  # st_uid of the directory
    procs_owner: int | None = None  # ... of cgroup.procs
    subtree_owner: int | None = None  # ... of cgroup.subtree_control
    delegate_xattr: bool = False  # systemd's trusted.delegate / user.delegate = 1
    type: str | None = None  # cgroup.type: domain, domain threaded, threaded, domain invalid

    @property
    def is_root(self) -> bool:
        return self.exists and "cgroup.procs" in self.files and "cgroup.type" not in self.files


@dataclass(frozen=True, slots=True)
class HostFacts:
    """Everything :func:`detect` decides from."""

    layout: Layout
    euid: int
    kernel: str = ""  # os.uname().release
    own: DirFacts | None = None  # our v2 cgroup
    parent: DirFacts | None = None  # its parent (for DelegateSubgroup=)
    top: DirFacts | None = None  # the cgroup2 mount point
    base: DirFacts | None = None  # root mode: <top>/<instance> if it exists from an earlier run


@dataclass(frozen=True, slots=True)
class Detection:
    """The verdict, for the planner, ``status`` (mechanism) and ``doctor`` (problems, fix)."""

    kind: str  # unified | hybrid | legacy | none
    usable: bool  # per-profile cgroups (exact membership, cgroup.kill) are possible
    via: str | None = None  # delegate-subgroup | delegated | root
    base: str | None = None  # parent directory of the profile cgroups
    create_base: bool = False
    top: str | None = None  # the cgroup2 mount point
    leaf: str | None = None  # hermesd's own leaf: every process in base moves here before enabling
    controllers: frozenset[str] = frozenset()  # enabled for profile cgroups
    enable_top: tuple[str, ...] = ()  # to add to <top>/cgroup.subtree_control
    enable_base: tuple[str, ...] = ()  # to add to <base>/cgroup.subtree_control
    missing: Mapping[str, str] = field(default_factory=dict)  # controller -> why not
    kill: str = "signal"  # cgroup.kill | freeze | signal
    v1_controllers: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()  # one line each: why not, or the caveats
    fix: str | None = None  # the exact setting to change


def instance_name(root: str) -> str:
    """The directory name of one hermesd root's subtree in root mode: stable, short, unique per root."""
    return "hermesd-" + hashlib.sha256(root.encode()).hexdigest()[:12]


def _kernel_at_least(release: str, major: int, minor: int) -> bool:
    head = release.split("-")[0].split(".")
    try:
        return (int(head[0]), int(head[1])) >= (major, minor)
    except (ValueError, IndexError):
        return False


def _kill_mode(f: HostFacts) -> str:
    seen = [d for d in (f.own, f.parent, f.top, f.base) if d is not None and d.exists and not d.is_root]
    if any("cgroup.kill" in d.files for d in seen):
        return "cgroup.kill"
    if any("cgroup.freeze" in d.files for d in seen):
        return "freeze"
    if seen:
        return "signal"
    # Only the root cgroup was seen (it has neither file): the kernel version decides.
    if _kernel_at_least(f.kernel, 5, 14):
        return "cgroup.kill"
    return "freeze" if _kernel_at_least(f.kernel, 5, 2) else "signal"


def _delegated(d: DirFacts | None, euid: int) -> bool:
    if d is None or not d.exists or d.is_root:
        return False
    if d.delegate_xattr:
        return True
    return euid != 0 and d.owner == euid and d.procs_owner == euid and d.subtree_owner == euid


def _ctl(cs: frozenset[str] | tuple[str, ...]) -> str:
    return " ".join(c for c in WANTED if c in cs) or "none"


def detect(f: HostFacts, instance: str) -> Detection:
    """Where hermesd may put profile cgroups and which controllers they get; why not, and the fix."""
    lay = f.layout
    v1 = lay.v1_controllers
    none = {c: "no cgroup v2 hierarchy" for c in WANTED}
    if lay.kind == "none":
        return Detection(lay.kind, False, missing=none, problems=("no cgroup file system is mounted",))
    if lay.kind == "legacy":
        return Detection(
            lay.kind, False, missing=none, v1_controllers=v1,
            problems=(f"only cgroup v1 is mounted (controllers: {', '.join(v1)}); hermesd uses cgroup v2 only",),
            fix=FIX_UNIFIED,
        )
    mount = lay.mount
    assert mount is not None
    common = Detection(lay.kind, False, kill=_kill_mode(f), top=mount.mount_point, v1_controllers=v1)

    def unusable(problem: str, fix: str | None) -> Detection:
        return replace(common, missing={c: problem for c in WANTED}, problems=(problem,), fix=fix)

    if "ro" in mount.options or "ro" in mount.super_options:
        return unusable(
            f"the cgroup v2 file system at {mount.mount_point} is mounted read-only",
            "give hermesd a writable cgroup v2 mount (in a container: a private cgroup namespace with "
            "/sys/fs/cgroup mounted read-write), or run it under systemd with Delegate=yes",
        )
    own = f.own
    if own is None or not own.exists or lay.own_dir is None:
        where = lay.cgroup or "?"
        return unusable(f"hermesd's own cgroup {where} is not visible under {mount.mount_point}", FIX_DELEGATE)

    problems: list[str] = []
    fix: str | None = None
    parent = f.parent
    own_name = posixpath.basename(own.path.rstrip("/"))
    facts: DirFacts | None
    leaf: str | None
    if own_name == LEAF and (
        _delegated(parent, f.euid)
        or (f.euid == 0 and parent is not None and posixpath.basename(parent.path).endswith(".service"))
    ):
        assert parent is not None
        via, base, leaf, facts, create = "delegate-subgroup", parent.path, own.path, parent, False
    elif _delegated(own, f.euid):
        # Delegate=yes without DelegateSubgroup=: group, but enable nothing (see the module docstring).
        problems.append(
            f"hermesd runs in its unit's top cgroup {lay.cgroup}: enabling controllers there would stop systemd "
            "from restarting or reloading the unit (cgroup v2 allows no processes beside enabled controllers)"
        )
        return replace(
            common, usable=True, via="delegated", base=own.path,
            missing={c: "the unit has no DelegateSubgroup=" for c in WANTED}, problems=tuple(problems),
            fix=FIX_SUBGROUP,
        )
    elif f.euid == 0:
        if f.top is None or not f.top.exists:
            return unusable(f"cannot read the top of the cgroup v2 hierarchy at {mount.mount_point}", None)
        via, base, leaf, facts, create = "root", posixpath.join(mount.mount_point, instance), None, f.base, True
        if lay.kind == "unified" and not _delegated(own, f.euid):
            problems.append(
                f"hermesd runs as root without systemd delegation: it keeps its cgroups in {base}, outside "
                "systemd's slices"
            )
            fix = FIX_DELEGATE
    else:
        owner = own.owner if own.owner is not None else "?"
        return unusable(
            f"cgroup {lay.cgroup} belongs to uid {owner}, not to hermesd's uid {f.euid}: "
            "it is not delegated to hermesd",
            FIX_DELEGATE,
        )

    # Which controllers the profile cgroups can get.
    missing: dict[str, str] = {}
    enable_top: list[str] = []
    enable_base: list[str] = []
    usable_ctl: list[str] = []
    top = f.top
    for c in WANTED:
        if c in v1:
            missing[c] = f"{c} is bound to cgroup v1 (hybrid hierarchy)"
            continue
        if via == "root":
            assert top is not None
            top_has = c in top.subtree_control
            can_add = c in top.controllers and (top.is_root or not top.procs)
            if not (top_has or can_add):
                if c not in top.controllers:
                    missing[c] = f"{c} is not available at {top.path} (cgroup.controllers: {_ctl(top.controllers)})"
                else:
                    missing[c] = (
                        f"{c} cannot be enabled at {top.path}: it holds processes "
                        "(cgroup v2's no-internal-processes rule)"
                    )
                continue
            if not top_has:
                enable_top.append(c)
        elif facts is None or c not in facts.controllers:
            listed = _ctl(facts.controllers) if facts is not None else "none"
            missing[c] = f"{c} is not delegated to {base} (cgroup.controllers: {listed})"
            continue
        if facts is not None and facts.type not in (None, "domain"):
            missing[c] = f"{base} is a {facts.type} cgroup"
            continue
        usable_ctl.append(c)
        if facts is None or c not in facts.subtree_control:
            enable_base.append(c)
    if missing:
        if any("cgroup v1" in why for why in missing.values()):
            problems.append(
                f"cgroup v2 at {mount.mount_point} has no {', '.join(c for c in missing if c in v1)} controller "
                "(they are bound to cgroup v1): each profile gets a cgroup there for exact membership and "
                "cgroup.kill only"
            )
            fix = fix or FIX_UNIFIED
        elif via != "root" and "/user@" in (lay.cgroup or ""):
            problems.append(f"controllers not delegated to hermesd: {', '.join(missing)}")
            fix = FIX_USER_CONTROLLERS
        else:
            problems.extend(missing.values())
    return replace(
        common, usable=True, via=via, base=base, create_base=create, leaf=leaf, controllers=frozenset(usable_ctl),
        enable_top=tuple(enable_top), enable_base=tuple(enable_base), missing=missing, problems=tuple(problems),
        fix=fix,
    )


# ----------------------------------------------------------------------------- plans


@dataclass(frozen=True, slots=True)
class Mkdir:
    path: str


@dataclass(frozen=True, slots=True)
class Write:
    path: str
    value: str
    optional: bool = False  # a missing file is fine (no swap accounting, older kernel)


@dataclass(frozen=True, slots=True)
class MigrateAll:
    """Move every process listed in ``src/cgroup.procs`` to ``dst`` (read at execution time)."""

    src: str
    dst: str


Step = Mkdir | Write | MigrateAll


def setup_plan(det: Detection) -> list[Step]:
    """Once, at daemon start (and again after a ``hermesd.yaml`` reload is harmless): make the base,
    move hermesd into its leaf, enable the controllers. Empty when cgroups are not usable."""
    if not det.usable or det.base is None:
        return []
    steps: list[Step] = []
    if det.top is not None:
        steps += [Write(posixpath.join(det.top, "cgroup.subtree_control"), f"+{c}") for c in det.enable_top]
    if det.create_base:
        steps.append(Mkdir(det.base))
    if det.leaf is not None:
        if det.leaf != det.base:
            steps.append(Mkdir(det.leaf))
        steps.append(MigrateAll(det.base, det.leaf))
    steps += [Write(posixpath.join(det.base, "cgroup.subtree_control"), f"+{c}") for c in det.enable_base]
    return steps


def _component(name: str) -> bool:
    """A profile name that can only name a cgroup directly below the base (names come from a
    state file too: nothing that climbs out or hides)."""
    return bool(name) and "/" not in name and "\0" not in name and not name.startswith(".")


def profile_dir(det: Detection, name: str) -> str | None:
    if not det.usable or det.base is None or not _component(name):
        return None
    return posixpath.join(det.base, PROFILE_PREFIX + name)


def profile_plan(det: Detection, name: str, limits: Limits) -> list[Step]:
    """Create (idempotently) and configure one profile's cgroup; re-run it when the limits change."""
    d = profile_dir(det, name)
    return [] if d is None else leaf_plan(det, d, limits)


def session_dir(det: Detection, kind: str, name: str, pid: int) -> str | None:
    """The cgroup of one session run for ``name`` (``kind``: ``exec`` or ``worker``), named by the
    PID of the command that keeps it: beside the profile's, never inside it (see EXEC_PREFIX)."""
    prefix = {"exec": EXEC_PREFIX, "worker": WORKER_PREFIX}[kind]
    if not det.usable or det.base is None or not _component(name):
        return None
    return posixpath.join(det.base, f"{prefix}{name}.{pid}")


def sessions_of(det: Detection, entries: list[str], kind: str, name: str) -> list[str]:
    """The cgroups among ``entries`` (the names in the base) of ``name``'s sessions of ``kind``: a
    profile name holds no dot, so ``exec.<name>.<pid>`` is never another profile's."""
    prefix = {"exec": EXEC_PREFIX, "worker": WORKER_PREFIX}[kind] + name + "."
    if not det.usable or det.base is None or not _component(name):
        return []
    return [posixpath.join(det.base, e) for e in sorted(entries) if e.startswith(prefix) and e[len(prefix):].isdigit()]


def session_setup_plan(det: Detection) -> list[Step]:
    """What a command outside the daemon (``hermesd exec``) may do to have a base to create its
    session in: the base and its controllers, never moving a process (that is the daemon's)."""
    return [s for s in setup_plan(det) if not isinstance(s, MigrateAll)] if det.leaf is None else []


def leaf_plan(det: Detection, d: str, limits: Limits) -> list[Step]:
    """Create and configure one cgroup holding processes (a gateway's tree or a session)."""
    steps: list[Step] = [Mkdir(d)]
    ctl = det.controllers
    if "memory" in ctl:
        mem = limits.memory_max
        steps += [
            Write(posixpath.join(d, "memory.max"), "max" if mem is None else str(mem)),
            Write(posixpath.join(d, "memory.swap.max"), "max" if mem is None else "0", optional=True),
            Write(posixpath.join(d, "memory.oom.group"), "1", optional=True),
        ]
    if "pids" in ctl:
        steps.append(Write(posixpath.join(d, "pids.max"), "max" if limits.tasks_max is None else str(limits.tasks_max)))
    if "cpu" in ctl:
        steps.append(Write(posixpath.join(d, "cpu.weight"), str(limits.cpu_weight or 100)))
    return steps


# ----------------------------------------------------------------------------- events


def parse_events(text: str) -> dict[str, int]:
    """A flat-keyed cgroup file (``memory.events``, ``pids.events``, ``cgroup.events``): ``key value`` lines."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            out[parts[0]] = int(parts[1])
    return out


@dataclass(frozen=True, slots=True)
class Events:
    """``memory.events`` and ``pids.events`` of one profile cgroup at one moment (empty: file absent)."""

    memory: Mapping[str, int] = field(default_factory=dict)
    pids: Mapping[str, int] = field(default_factory=dict)


_OOM_KEYS = ("oom_kill", "oom_group_kill", "oom")


def limit_hit(before: Events, after: Events) -> Literal["memory_limit", "tasks_limit"] | None:
    """Which limit the tree hit between two readings, if any.

    Read ``before`` right after the profile's cgroup is set up (or at the previous check) and
    ``after`` when the gateway exits (to tell an OOM kill from a crash: both end in SIGKILL or an
    exception) or when inotify reports the file modified while it runs (the kernel sends a
    modify event on every change). ``memory``: the OOM killer ran (``oom``) or killed
    (``oom_kill``, ``oom_group_kill``): the tree needed more than ``memory_max``. ``memory.events``
    ``max`` alone (reclaim at the limit) is pressure, not a breach. ``pids``: ``max`` counts
    forks refused at ``pids.max``: the tree tried to exceed ``tasks_max``; the kernel refused, the
    tree lives on at the limit, so hermesd kills and restarts it like a watched breach.
    """
    def grew(a: Mapping[str, int], b: Mapping[str, int], key: str) -> bool:
        return b.get(key, 0) > a.get(key, 0)

    if any(grew(before.memory, after.memory, k) for k in _OOM_KEYS):
        return "memory_limit"
    if grew(before.pids, after.pids, "max"):
        return "tasks_limit"
    return None


# ----------------------------------------------------------------------------- status and doctor


def mechanisms(limits: Limits, det: Detection | None) -> dict[str, str]:
    """Per set limit, what enforces it: ``cgroup``, ``watch``, or for ``cpu_weight`` without the cpu
    controller ``nice`` (an approximation, see :func:`supervisor.limits.tree.nice_for_weight`)."""
    ctl = det.controllers if det is not None else frozenset()
    out: dict[str, str] = {}
    if limits.memory_max is not None:
        out["memory_max"] = "cgroup" if "memory" in ctl else "watch"
    if limits.tasks_max is not None:
        out["tasks_max"] = "cgroup" if "pids" in ctl else "watch"
    if limits.cpu_weight is not None:
        out["cpu_weight"] = "cgroup" if "cpu" in ctl else "nice"
    return out


def mechanism(limits: Limits, det: Detection | None) -> str | None:
    """The one word for ``status``: ``cgroup`` when the kernel enforces every set limit, ``watch``
    when hermesd enforces any of them, ``None`` when the profile has no limits."""
    m = mechanisms(limits, det)
    if not m:
        return None
    return "cgroup" if all(v == "cgroup" for v in m.values()) else "watch"


@dataclass(frozen=True, slots=True)
class Finding:
    severity: Literal["error", "warning", "info"]
    code: str
    message: str
    fix: str | None = None


def doctor_findings(det: Detection, *, limits_configured: bool) -> list[Finding]:
    """What doctor says about cgroups. Warnings only matter when some profile has limits; otherwise
    the same facts are reported as info (they still decide how stops find escaped processes)."""
    warn: Literal["warning", "info"] = "warning" if limits_configured else "info"
    watch = "limits are enforced by watching /proc (reaction time about 1 s, see docs/isolation.md)"
    if not det.usable:
        code = {"legacy": "cgroup_v1_only", "none": "cgroup_none"}.get(det.kind, "cgroup_not_delegated")
        first = det.problems[0] if det.problems else "cgroup v2 is not usable"
        return [Finding(warn, code, f"{first}: {watch}", det.fix)]
    out: list[Finding] = []
    where = {
        "delegate-subgroup": "delegated by systemd (DelegateSubgroup)",
        "delegated": "delegated by systemd",
        "root": "hermesd creates it when it starts, as root",
    }.get(det.via or "", det.via or "")
    kill = {"cgroup.kill": "cgroup.kill", "freeze": "freeze, then SIGKILL", "signal": "SIGKILL per process"}[det.kill]
    enforced = ", ".join(c for c in WANTED if c in det.controllers) or "none"
    out.append(
        Finding(
            "info", "cgroup_in_use",
            f"cgroup v2 at {det.base} ({where}): one cgroup per profile, stops by {kill}; controllers: {enforced}",
        )
    )
    if det.missing:
        code = "cgroup_hybrid" if det.kind == "hybrid" else "cgroup_controllers_missing"
        detail = det.problems[0] if det.problems else "; ".join(det.missing.values())
        out.append(Finding(warn, code, f"{detail}; {watch}", det.fix))
    elif det.via == "root" and det.problems:
        out.append(Finding(warn, "cgroup_root_undelegated", det.problems[0], det.fix))
    if det.v1_controllers and det.kind == "hybrid":
        out.append(
            Finding("info", "cgroup_v1_present", f"cgroup v1 controllers present ({', '.join(det.v1_controllers)}); "
                    "hermesd does not use cgroup v1")
        )
    return out


def memory_pressure_findings(
    usage: Mapping[str, int],
    limits: Mapping[str, Limits],
    host_total: int | None,
    share: float = 0.8,
) -> list[Finding]:
    """Doctor: profiles without ``memory_max`` while all profiles together use ``share`` of the host's memory.

    ``usage``: profile -> tree memory bytes (``status``'s ``memory_bytes``) of running profiles.
    """
    if not host_total:
        return []
    total = sum(usage.values())
    unlimited = sorted(n for n in usage if limits.get(n, Limits()).memory_max is None)
    if total < share * host_total or not unlimited:
        return []
    pct = 100 * total / host_total
    return [
        Finding(
            "warning", "memory_unlimited_near_host",
            f"profiles use {pct:.0f}% of the host's memory together and {', '.join(unlimited)} "
            f"{'has' if len(unlimited) == 1 else 'have'} no memory_max: one runaway tree can make the kernel's "
            "OOM killer pick another profile's gateway",
            "set limits.memory_max for those profiles in hermesd.yaml (e.g. `limits: {memory_max: 1G}`)",
        )
    ]
