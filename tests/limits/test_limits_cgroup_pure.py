"""cgroup v2 decisions against fake hierarchies in a temp dir: detection, plans, events, doctor text.

The fake hierarchy is plain files (cgroup.controllers, cgroup.procs, ...) under tmp_path, named as a
cgroup2 mount by a hand-written mountinfo text; the same gather/detect/plan code runs as on a host.
"""

import os

import pytest

from supervisor import limits as lim
from supervisor.limits import cgroup_io
from supervisor.limits.cgroup import (
    FIX_DELEGATE,
    FIX_SUBGROUP,
    FIX_UNIFIED,
    FIX_USER_CONTROLLERS,
    Events,
    MigrateAll,
    Mkdir,
    Write,
    detect,
    doctor_findings,
    instance_name,
    limit_hit,
    locate,
    mechanism,
    mechanisms,
    memory_pressure_findings,
    parse_events,
    parse_mountinfo,
    parse_proc_cgroup,
    profile_plan,
    setup_plan,
)
from supervisor.settings import Limits

ROOT = "/home/alice/.hermes"
INST = instance_name(ROOT)
USER = 1000

# This machine's real texts: cgroup v1 controllers plus a bare cgroup2 mount (a hybrid host).
HYBRID_MOUNTINFO = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / {v2} rw,relatime - cgroup2 cgroup2 rw
"""
HYBRID_CGROUP = "9:name=systemd:/\n8:pids:/\n4:memory:/process_api/abc\n1:cpu:/\n0::/\n"


def unified_mountinfo(mount, opts="rw,nosuid,nodev,noexec,relatime"):
    return f"25 30 0:22 / {mount} {opts} shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n"


def mkcg(path, *, controllers="", subtree="", procs="", root=False, owner=None, type_="domain", kill=True):
    """A fake cgroup directory with the files the kernel would show."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "cgroup.controllers").write_text(controllers + "\n")
    (path / "cgroup.subtree_control").write_text(subtree + "\n")
    (path / "cgroup.procs").write_text(procs)
    if not root:
        (path / "cgroup.type").write_text(type_ + "\n")
        (path / "cgroup.events").write_text("populated 0\nfrozen 0\n")
        (path / "cgroup.freeze").write_text("0\n")
        if kill:
            (path / "cgroup.kill").write_text("")
    if owner is not None:
        for p in (path, path / "cgroup.procs", path / "cgroup.subtree_control"):
            os.chown(p, owner, owner)
    return path


def facts(mountinfo, self_cgroup, euid=0):
    return cgroup_io.gather_facts(INST, mountinfo=mountinfo, self_cgroup=self_cgroup, euid=euid)


# ----------------------------------------------------------------------------- parsing


def test_parse_mountinfo_escapes_and_types():
    text = (
        "41 31 0:38 / /sys/fs/cgroup/un\\040ified rw,relatime - cgroup2 cgroup2 rw\n"
        "32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu,cpuacct\n"
        "22 1 0:5 / /proc rw - proc proc rw\n"
        "garbage\n"
    )
    mounts = parse_mountinfo(text)
    assert [m.fstype for m in mounts] == ["cgroup2", "cgroup"]
    assert mounts[0].mount_point == "/sys/fs/cgroup/un ified"
    assert {"cpu", "cpuacct"} <= mounts[1].super_options


def test_parse_proc_cgroup():
    assert parse_proc_cgroup(HYBRID_CGROUP) == "/"
    assert parse_proc_cgroup("0::/system.slice/x.service\n") == "/system.slice/x.service"
    assert parse_proc_cgroup("junk\n") is None


def test_locate_kinds():
    lay = locate(HYBRID_MOUNTINFO.format(v2="/sys/fs/cgroup/unified"), HYBRID_CGROUP)
    assert lay.kind == "hybrid" and lay.own_dir == "/sys/fs/cgroup/unified"
    assert lay.v1_controllers == ("cpu", "cpuacct", "memory", "pids")
    lay = locate(unified_mountinfo("/sys/fs/cgroup"), "0::/system.slice/hermesd.service\n")
    assert lay.kind == "unified" and lay.own_dir == "/sys/fs/cgroup/system.slice/hermesd.service"
    assert locate("32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n", "1:cpu:/\n").kind == "legacy"
    assert locate("", "").kind == "none"
    outside = locate(unified_mountinfo("/sys/fs/cgroup"), "0::/../../x\n")
    assert outside.own_dir is None


# ----------------------------------------------------------------------------- detection


def test_this_hosts_shape_root_on_hybrid(tmp_path):
    top = mkcg(tmp_path / "unified", controllers="hugetlb", procs="1\n2\n", root=True)
    f = facts(HYBRID_MOUNTINFO.format(v2=top), HYBRID_CGROUP)
    det = detect(f, INST)
    assert det.kind == "hybrid" and det.usable and det.via == "root"
    assert det.base == f"{top}/{INST}" and det.create_base and det.leaf is None
    assert det.controllers == frozenset() and set(det.missing) == {"memory", "pids", "cpu"}
    assert "bound to cgroup v1" in det.missing["memory"] and det.fix == FIX_UNIFIED
    assert setup_plan(det) == [Mkdir(f"{top}/{INST}")]
    assert profile_plan(det, "coder", Limits(512 << 20, 100, 50)) == [Mkdir(f"{top}/{INST}/profile-coder")]
    codes = [x.code for x in doctor_findings(det, limits_configured=True)]
    assert codes == ["cgroup_in_use", "cgroup_hybrid", "cgroup_v1_present"]
    assert mechanism(Limits(memory_max=1 << 30), det) == "watch"
    expected = {"memory_max": "watch", "tasks_max": "watch", "cpu_weight": "nice"}
    assert mechanisms(Limits(1 << 30, 10, 50), det) == expected


def test_delegate_subgroup_is_the_full_mechanism(tmp_path):
    unit = mkcg(tmp_path / "system.slice" / "hermesd.service", controllers="cpu io memory pids", owner=USER)
    mkcg(unit / "supervisor", procs=f"{os.getpid()}\n", owner=USER)
    mkcg(tmp_path, controllers="cpu io memory pids", subtree="cpu io memory pids", root=True)
    f = facts(unified_mountinfo(tmp_path), "0::/system.slice/hermesd.service/supervisor\n", euid=USER)
    det = detect(f, INST)
    assert det.usable and det.via == "delegate-subgroup" and det.base == str(unit)
    assert det.leaf == str(unit / "supervisor") and not det.create_base
    assert det.controllers == {"memory", "pids", "cpu"} and det.missing == {} and det.fix is None
    assert det.kill == "cgroup.kill"
    assert setup_plan(det) == [
        Mkdir(str(unit / "supervisor")),  # exists (systemd made it): a no-op, kept for stray restarts
        MigrateAll(str(unit), str(unit / "supervisor")),
        Write(f"{unit}/cgroup.subtree_control", "+memory"),
        Write(f"{unit}/cgroup.subtree_control", "+pids"),
        Write(f"{unit}/cgroup.subtree_control", "+cpu"),
    ]
    d = f"{unit}/profile-coder"
    assert profile_plan(det, "coder", Limits(memory_max=512 << 20, tasks_max=200, cpu_weight=50)) == [
        Mkdir(d),
        Write(f"{d}/memory.max", str(512 << 20)),
        Write(f"{d}/memory.swap.max", "0", optional=True),
        Write(f"{d}/memory.oom.group", "1", optional=True),
        Write(f"{d}/pids.max", "200"),
        Write(f"{d}/cpu.weight", "50"),
    ]
    # a removed limit is written back to "max" on the running tree
    assert Write(f"{d}/memory.max", "max") in profile_plan(det, "coder", Limits())
    assert Write(f"{d}/memory.swap.max", "max", optional=True) in profile_plan(det, "coder", Limits())
    assert Write(f"{d}/cpu.weight", "100") in profile_plan(det, "coder", Limits())
    assert mechanism(Limits(memory_max=1 << 30, tasks_max=5), det) == "cgroup"
    assert mechanism(Limits(), det) is None
    assert [x.code for x in doctor_findings(det, limits_configured=True)] == ["cgroup_in_use"]


def test_subtree_control_already_enabled_is_not_written_again(tmp_path):
    unit = mkcg(tmp_path / "s" / "h.service", controllers="cpu memory pids", subtree="memory", owner=USER)
    mkcg(unit / "supervisor", owner=USER)
    det = detect(facts(unified_mountinfo(tmp_path), "0::/s/h.service/supervisor\n", euid=USER), INST)
    assert det.enable_base == ("pids", "cpu")


def test_delegate_without_subgroup_groups_but_enables_nothing(tmp_path):
    unit = mkcg(tmp_path / "system.slice" / "hermesd.service", controllers="cpu memory pids", procs="7\n", owner=USER)
    det = detect(facts(unified_mountinfo(tmp_path), "0::/system.slice/hermesd.service\n", euid=USER), INST)
    assert det.usable and det.via == "delegated" and det.base == str(unit) and det.controllers == frozenset()
    assert det.fix == FIX_SUBGROUP and "DelegateSubgroup" in det.fix
    assert setup_plan(det) == []
    assert profile_plan(det, "a", Limits(memory_max=1 << 30)) == [Mkdir(f"{unit}/profile-a")]
    warn = doctor_findings(det, limits_configured=True)[1]
    assert warn.severity == "warning" and warn.code == "cgroup_controllers_missing" and "DelegateSubgroup" in warn.fix


def test_not_delegated_for_an_ordinary_user(tmp_path):
    mkcg(tmp_path / "user.slice" / "session-3.scope", controllers="memory pids")  # owned by root
    det = detect(facts(unified_mountinfo(tmp_path), "0::/user.slice/session-3.scope\n", euid=USER), INST)
    assert not det.usable and det.fix == FIX_DELEGATE
    assert "not delegated" in det.problems[0] and "uid 0" in det.problems[0]
    (f,) = doctor_findings(det, limits_configured=True)
    assert f.code == "cgroup_not_delegated" and f.severity == "warning" and "Delegate=yes" in f.fix
    assert doctor_findings(det, limits_configured=False)[0].severity == "info"
    assert setup_plan(det) == [] and profile_plan(det, "a", Limits(memory_max=1 << 30)) == []
    assert mechanism(Limits(memory_max=1 << 30), det) == "watch"


def test_user_manager_without_cpu(tmp_path):
    svc = "user.slice/user-1000.slice/user@1000.service/app.slice/hermesd.service"
    unit = mkcg(tmp_path / svc, controllers="memory pids", owner=USER)
    mkcg(unit / "supervisor", owner=USER)
    det = detect(facts(unified_mountinfo(tmp_path), f"0::/{svc}/supervisor\n", euid=USER), INST)
    assert det.usable and det.controllers == {"memory", "pids"} and set(det.missing) == {"cpu"}
    assert det.fix == FIX_USER_CONTROLLERS and "user@.service" in det.fix
    expected = {"memory_max": "cgroup", "tasks_max": "cgroup", "cpu_weight": "nice"}
    assert mechanisms(Limits(1 << 30, 10, 50), det) == expected
    assert mechanism(Limits(1 << 30, 10, 50), det) == "watch"  # one limit is not the kernel's


def test_legacy_v1_only(tmp_path):
    det = detect(facts("32 31 0:29 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n", "4:memory:/\n"), INST)
    assert det.kind == "legacy" and not det.usable and det.v1_controllers == ("memory",) and det.fix == FIX_UNIFIED
    assert doctor_findings(det, limits_configured=True)[0].code == "cgroup_v1_only"
    none = detect(facts("", ""), INST)
    assert none.kind == "none" and not none.usable


def test_read_only_mount(tmp_path):
    mkcg(tmp_path, controllers="memory pids cpu", root=True)
    det = detect(facts(unified_mountinfo(tmp_path, "ro,nosuid"), "0::/\n"), INST)
    assert not det.usable and "read-only" in det.problems[0]


def test_root_on_unified_host_enables_at_the_top(tmp_path):
    mkcg(tmp_path, controllers="cpu io memory pids", subtree="memory pids", procs="1\n", root=True)
    mkcg(tmp_path / "user.slice" / "session-1.scope", controllers="memory pids", procs="99\n")
    det = detect(facts(unified_mountinfo(tmp_path), "0::/user.slice/session-1.scope\n"), INST)
    assert det.usable and det.via == "root" and det.base == f"{tmp_path}/{INST}"
    assert det.enable_top == ("cpu",) and det.enable_base == ("memory", "pids", "cpu")
    assert det.controllers == {"memory", "pids", "cpu"}
    assert setup_plan(det) == [
        Write(f"{tmp_path}/cgroup.subtree_control", "+cpu"),
        Mkdir(f"{tmp_path}/{INST}"),
        Write(f"{tmp_path}/{INST}/cgroup.subtree_control", "+memory"),
        Write(f"{tmp_path}/{INST}/cgroup.subtree_control", "+pids"),
        Write(f"{tmp_path}/{INST}/cgroup.subtree_control", "+cpu"),
    ]
    assert det.fix == FIX_DELEGATE  # works, but outside systemd's tree: doctor says so
    codes = [x.code for x in doctor_findings(det, limits_configured=True)]
    assert codes == ["cgroup_in_use", "cgroup_root_undelegated"]
    # a second start finds its base from the last run with the controllers already on
    mkcg(tmp_path / INST, controllers="cpu memory pids", subtree="memory pids cpu")
    (tmp_path / "cgroup.subtree_control").write_text("cpu memory pids\n")
    again = detect(facts(unified_mountinfo(tmp_path), "0::/user.slice/session-1.scope\n"), INST)
    assert setup_plan(again) == [Mkdir(f"{tmp_path}/{INST}")]


def test_root_in_a_cgroup_namespace_with_processes_uses_only_what_is_on(tmp_path):
    # the namespace root is a real non-root cgroup (it has cgroup.type) holding the container's processes
    mkcg(tmp_path, controllers="cpu memory pids", subtree="memory", procs="1\n12\n")
    det = detect(facts(unified_mountinfo(tmp_path), "0::/\n"), INST)
    assert det.usable and det.controllers == {"memory"}
    assert "holds processes" in det.missing["pids"] and det.enable_top == ()


def test_threaded_base_gets_no_controllers(tmp_path):
    unit = mkcg(tmp_path / "s" / "h.service", controllers="memory pids cpu", owner=USER, type_="domain threaded")
    mkcg(unit / "supervisor", owner=USER)
    det = detect(facts(unified_mountinfo(tmp_path), "0::/s/h.service/supervisor\n", euid=USER), INST)
    assert det.controllers == frozenset() and "threaded" in det.missing["memory"]


def test_kill_mode_from_files_or_kernel(tmp_path):
    unit = mkcg(tmp_path / "s" / "h.service", controllers="memory", owner=USER, kill=False)
    mkcg(unit / "supervisor", owner=USER, kill=False)
    det = detect(facts(unified_mountinfo(tmp_path), "0::/s/h.service/supervisor\n", euid=USER), INST)
    assert det.kill == "freeze"
    top = mkcg(tmp_path / "u", root=True)
    f = facts(HYBRID_MOUNTINFO.format(v2=top), HYBRID_CGROUP)
    from dataclasses import replace

    assert detect(replace(f, kernel="5.10.0-amd64"), INST).kill == "freeze"
    assert detect(replace(f, kernel="4.19.0"), INST).kill == "signal"
    assert detect(replace(f, kernel="6.1.0"), INST).kill == "cgroup.kill"


def test_instance_name_is_stable_and_per_root():
    assert instance_name("/a") == instance_name("/a") != instance_name("/b")
    assert instance_name("/a").startswith("hermesd-") and len(instance_name("/a")) == 20


# ----------------------------------------------------------------------------- applying to a fake tree


def test_apply_against_a_fake_tree(tmp_path):
    d = tmp_path / "cg"
    mkcg(d)
    (d / "memory.max").write_text("max\n")
    cgroup_io.apply([Mkdir(str(d)), Mkdir(str(d / "child")), Write(str(d / "memory.max"), "1048576")])
    assert (d / "memory.max").read_text() == "1048576" and (d / "child").is_dir()
    cgroup_io.apply([Write(str(d / "memory.swap.max"), "0", optional=True)])  # absent: fine
    with pytest.raises(cgroup_io.CgroupError, match=r"pids\.max: cannot write '10'"):
        cgroup_io.apply([Write(str(d / "pids.max"), "10")])
    with pytest.raises(cgroup_io.CgroupError, match="cannot create cgroup"):
        cgroup_io.apply([Mkdir(str(tmp_path / "no" / "such"))])


def test_setup_downgrades_on_failure(tmp_path):
    top = mkcg(tmp_path / "unified", controllers="", root=True)
    f = facts(HYBRID_MOUNTINFO.format(v2=top), HYBRID_CGROUP)
    det = lim.setup(ROOT, f)
    assert det.usable and (top / INST).is_dir()  # created the base in the fake tree
    (top / INST).rmdir()
    (top / INST).write_text("")  # something that is not a cgroup where the base goes
    det = lim.setup(ROOT, f)
    assert not det.usable and det.controllers == frozenset() and "cannot create cgroup" in det.problems[-1]


# ----------------------------------------------------------------------------- events


def test_parse_events():
    text = "low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\noom_group_kill 1\njunk\nbad x\n"
    assert parse_events(text) == {"low": 0, "high": 0, "max": 12, "oom": 1, "oom_kill": 1, "oom_group_kill": 1}


def test_limit_hit():
    quiet = Events(memory={"max": 3, "oom": 0, "oom_kill": 0}, pids={"max": 0})
    assert limit_hit(quiet, quiet) is None
    assert limit_hit(quiet, Events(memory={"max": 90, "oom": 0, "oom_kill": 0}, pids={"max": 0})) is None  # reclaim
    assert limit_hit(quiet, Events(memory={"max": 9, "oom": 1, "oom_kill": 1}, pids={"max": 0})) == "memory_limit"
    assert limit_hit(quiet, Events(memory={"oom_group_kill": 1}, pids={})) == "memory_limit"
    assert limit_hit(quiet, Events(memory={"max": 3, "oom": 1, "oom_kill": 0}, pids={})) == "memory_limit"
    assert limit_hit(quiet, Events(memory=quiet.memory, pids={"max": 5})) == "tasks_limit"
    assert limit_hit(Events(), Events()) is None  # no controllers: never a limit


def test_watch_limits_strip_what_the_kernel_enforces(tmp_path):
    unit = mkcg(tmp_path / "s" / "h.service", controllers="memory", owner=USER)
    mkcg(unit / "supervisor", owner=USER)
    det = detect(facts(unified_mountinfo(tmp_path), "0::/s/h.service/supervisor\n", euid=USER), INST)
    assert lim.watch_limits(Limits(1 << 30, 50, 10), det) == Limits(None, 50, None)
    assert lim.watch_limits(Limits(1 << 30, 50, 10), None) == Limits(1 << 30, 50, None)


def test_memory_pressure_findings():
    g = 1 << 30
    usage = {"a": 3 * g, "b": 4 * g, "c": 1 * g}
    limits = {"a": Limits(memory_max=4 * g)}
    (f,) = memory_pressure_findings(usage, limits, host_total=9 * g)
    assert f.code == "memory_unlimited_near_host" and "b, c have no memory_max" in f.message
    assert memory_pressure_findings(usage, limits, host_total=20 * g) == []
    assert memory_pressure_findings(usage, {n: Limits(memory_max=g) for n in usage}, host_total=9 * g) == []
    assert memory_pressure_findings(usage, limits, host_total=None) == []


def test_status_fields(tmp_path):
    from supervisor.limits.watcher import TreeUsage

    det = detect(facts("", ""), INST)
    f = lim.status_fields(TreeUsage(300 << 20, 40, 5), Limits(memory_max=1 << 30), det)
    assert f == {
        "memory_bytes": 300 << 20, "tasks": 40,
        "limits": {"memory_max": 1 << 30, "tasks_max": None, "cpu_weight": None},
        "mechanism": "watch", "limit_mechanisms": {"memory_max": "watch"},
    }
    assert lim.status_fields(None, Limits(), det)["mechanism"] is None


def test_cgroup_names_stay_below_the_base() -> None:
    from supervisor.limits.cgroup import Detection, profile_dir, session_dir

    det = Detection("unified", True, via="root", base="/sys/fs/cgroup/hermesd-x")
    assert profile_dir(det, "coder") == "/sys/fs/cgroup/hermesd-x/profile-coder"
    assert session_dir(det, "exec", "coder", 42) == "/sys/fs/cgroup/hermesd-x/exec.coder.42"
    assert session_dir(det, "worker", "coder", 42) == "/sys/fs/cgroup/hermesd-x/worker.coder.42"
    for bad in ("../../x", "a/b", "", ".hidden", "a\0b"):
        assert profile_dir(det, bad) is None and session_dir(det, "exec", bad, 1) is None


def test_a_profiles_sessions_are_its_own_and_no_other_cgroup() -> None:
    """What ``hermesd stop coder`` ends: coder's exec sessions, never coder-2's, a worker's, the
    profile's own cgroup or a name that only starts like a session."""
    from supervisor.limits.cgroup import Detection, sessions_of

    det = Detection("unified", True, via="root", base="/b")
    entries = ["exec.coder.42", "exec.coder.7", "exec.coder-2.42", "worker.coder.42", "profile-coder",
               "exec.coder.42x", "exec.coder.", "exec.coder", "supervisor"]
    assert sessions_of(det, entries, "exec", "coder") == ["/b/exec.coder.42", "/b/exec.coder.7"]
    assert sessions_of(det, entries, "worker", "coder") == ["/b/worker.coder.42"]
    assert sessions_of(det, entries, "exec", "../b") == []
    assert sessions_of(Detection("none", False), entries, "exec", "coder") == []
