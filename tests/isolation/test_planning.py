"""The planner, the settings and the probe's text: pure functions, no process started.

Missing mechanisms are simulated through the probe result, exactly what the planner sees on a
machine without them: "not root", "no user namespaces", "no Landlock", "Landlock ABI 5".
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from supervisor.isolation import shared_board
from supervisor.isolation.planning import DEV_WRITABLE, Plan, PlanInputs, UserIds, make_plan
from supervisor.isolation.probing import Probe, best_mechanism, doctor_lines, landlock_features, probe
from supervisor.settings import (
    IsolationSettings,
    SettingError,
    merge_isolation,
    parse_isolation,
)

R = Path("/home/alice/.hermes")  # never touched: the planner does no I/O
ROOT_FULL = Probe(euid=0, kernel="6.15", landlock_abi=7, mount_namespace=True, user_namespace=True, seccomp=True)
USER_NS = Probe(euid=1000, kernel="6.15", landlock_abi=7, user_namespace=True, seccomp=True)
USER_LL = Probe(euid=1000, kernel="6.15", landlock_abi=7, user_namespace_error="Operation not permitted",
                seccomp=True)
NO_LL = Probe(euid=1000, kernel="5.10", landlock_abi=0, landlock_error="the kernel has no Landlock")
INSTALL = (Path("/home/alice/.local/share/hermesd"), Path("/home/alice/.hermes/hermes-agent"))


def plan_for(profile: str = "coder", probe_: Probe = ROOT_FULL, **kw) -> Plan:
    home = R if profile == "default" else R / "profiles" / profile
    settings = kw.pop("settings", IsolationSettings())
    defaults = dict(root=R, profile=profile, home=home, probe=probe_, settings=settings,
                    control_socket=R / ".hermesd" / "control.sock",
                    other_homes=(R / "profiles" / "coder", R / "profiles" / "writer", Path("/srv/elsewhere")),
                    install_paths=INSTALL, lock_dir=Path("/home/alice/.local/state/hermes/gateway-locks"),
                    user_home=Path("/home/alice"))
    defaults.update(kw)
    return make_plan(PlanInputs(**defaults))


def exposed(plan: Plan) -> dict[str, str]:
    return {a.path: a.access for a in plan.expose}


# --- choosing a mechanism ---------------------------------------------------------------------
def test_root_gets_namespace_plus_landlock() -> None:
    p = plan_for()
    assert p.mechanism == "namespace+landlock" and not p.userns and p.enforced and p.runnable
    assert p.hide == (str(R), "/srv/elsewhere")
    assert exposed(p) == {f"{R}/profiles/coder": "rw", f"{R}/kanban": "rw", f"{R}/shared": "rw",
                          f"{R}/hermes-agent": "ro"}
    assert p.read_only == ("/home/alice/.local/share/hermesd", "/sys/fs/cgroup")
    assert p.scopes == ("signal", "abstract_unix_socket") and p.landlock_fs == "everything"
    assert p.private_dev and p.keep_caps and "sys_admin" not in p.keep_caps
    assert dict(p.links) == {f"{R}/{n}": f"kanban/default-board/{n}" for n in shared_board.LINKS}


def test_process_control_is_scoped_where_the_kernel_allows() -> None:
    for probe_ in (ROOT_FULL, USER_NS):
        p = plan_for(probe_=probe_)
        assert p.syscall_filter and p.proc_read_only and "/sys/fs/cgroup" in p.read_only
        assert not [g for g in p.gaps if "process control" in g or "/proc" in g]
        assert p.status_json()["process_control"] == "scoped" and p.status_json()["proc"] == "read-only"
    alone = plan_for(probe_=USER_LL)
    assert alone.syscall_filter and not alone.proc_read_only and "/sys/fs/cgroup" in alone.read_only
    assert not [g for g in alone.gaps if "OOM score" in g]  # /proc: writes denied by Landlock alone too
    old = plan_for(probe_=dataclasses.replace(ROOT_FULL, seccomp=False, seccomp_error="no seccomp here"))
    assert not old.syscall_filter and old.status_json()["process_control"] == "open"
    assert [g for g in old.gaps_severe() if "process control not scoped (no seccomp here)" in g]


def test_unprivileged_with_user_namespaces() -> None:
    p = plan_for(probe_=USER_NS)
    assert p.mechanism == "namespace+landlock" and p.userns
    assert not p.private_dev and p.keep_caps is None


def test_no_namespace_falls_back_to_landlock_and_says_what_is_lost() -> None:
    p = plan_for(probe_=USER_LL)
    assert p.mechanism == "landlock" and p.landlock_fs == "carve" and not p.userns
    assert "Operation not permitted" in p.reason
    gaps = " ".join(p.gaps)
    assert "control socket is reachable" in gaps and "cannot be listed" in gaps
    assert p.hide == (str(R), "/srv/elsewhere")
    assert p.summary().startswith("landlock;") and "gap(s)" in p.summary()


# --- writes: denied by default ------------------------------------------------------------------------
def test_writes_go_only_to_the_home_the_channels_the_private_tmp_and_devices() -> None:
    p = plan_for()
    assert p.writable == (f"{R}/profiles/coder", "/home/alice/.local/state/hermes/gateway-locks", "/tmp", "/dev/shm",
                          *DEV_WRITABLE)
    assert {a.path for a in p.expose if a.access == "rw"} == {f"{R}/profiles/coder", f"{R}/kanban", f"{R}/shared"}
    assert p.private == (("/tmp", ()), ("/dev/shm", ())) and p.tmpdir == "/tmp"
    assert "/home/alice/.local/state/hermes/gateway-locks" in p.ensure_dirs  # its parents are read-only now
    assert p.status_json()["writable"] == [f"{R}/profiles/coder", f"{R}/kanban", f"{R}/shared", *p.writable]
    assert p.status_json()["tmp"] == "/tmp"
    assert not [g for g in p.gaps if "/tmp" in g and "private" in g]


def test_landlock_alone_has_a_tmp_folder_in_the_home_and_says_so() -> None:
    p = plan_for(probe_=USER_LL)
    assert p.private == () and p.tmpdir == f"{R}/profiles/coder/cache/tmp"
    assert "/tmp" not in p.writable and "/dev/shm" in p.writable
    gaps = " ".join(p.gaps)
    assert "no private /tmp" in gaps and "/dev/shm stays writable and shared" in gaps
    assert "/proc stays writable" not in gaps  # no write rule covers /proc: denied like any path


def test_what_lies_below_tmp_is_put_back_into_the_private_one() -> None:
    root = Path("/tmp/pytest-of-root/t0/root")
    p = plan_for(root=root, home=root / "profiles" / "coder", control_socket=root / ".hermesd" / "control.sock",
                 other_homes=(root / "profiles" / "writer",), install_paths=(Path("/tmp/clone/.venv"),),
                 lock_dir=Path("/tmp/home/.local/state/hermes/gateway-locks"), user_home=Path("/tmp/home"),
                 settings=IsolationSettings(writable=("~/projects/x",)))
    assert dict(p.private)["/tmp"] == ("/tmp/clone/.venv", "/tmp/home/.local/state/hermes/gateway-locks",
                                       "/tmp/home/projects/x", str(root))
    assert dict(p.private)["/dev/shm"] == ()
    held = plan_for(root=Path("/tmp"), home=Path("/tmp/profiles/coder"), other_homes=())
    assert "/tmp" not in dict(held.private) and any("/tmp is not private" in g for g in held.gaps_severe())


def test_writable_setting_adds_write_rules_and_names_the_cost() -> None:
    p = plan_for(settings=IsolationSettings(writable=("~/projects/x", f"{R}/profiles/coder/sub", "/dev/nvidia0")))
    assert {"/home/alice/projects/x", "/dev/nvidia0"} <= set(p.writable)
    assert sum("isolation.writable" in g for g in p.gaps) == 3
    inside_hidden = plan_for(settings=IsolationSettings(writable=("~/work",), hide=("~/work",)))
    assert exposed(inside_hidden)["/home/alice/work"] == "rw"  # hidden by a setting, yet listed: put back


@pytest.mark.parametrize(("profile", "raw", "what"), [
    ("coder", "~", "the root folder"),
    ("coder", "/", "the root folder"),
    ("coder", "~/.hermes", "the root folder"),
    ("coder", "~/.hermes/.env", "the root folder"),  # the default profile's secrets
    ("coder", "~/.hermes/profiles/writer/memories", "the root folder"),
    ("coder", "/srv/elsewhere/x", "another profile's home"),
    ("coder", "~/.local/share", "the code every profile runs"),
    ("coder", "~/.hermes/hermes-agent/tools", "the root folder"),
    ("default", "~/.hermes", "the root folder"),
    ("default", "~/.hermes/profiles", "the named profiles' homes"),
    ("default", "~/.hermes/.hermesd/logs", "hermesd's folder"),
    ("default", "~/.hermes/hermesd.yaml", "hermesd's settings"),
    ("default", "~/.hermes/hermes-agent", "the code every profile runs"),
])
def test_writable_paths_that_would_open_the_walls_are_refused(profile: str, raw: str, what: str) -> None:
    """A write rule is a right on a whole hierarchy, so ``writable`` cannot hold (or lie in) what
    confinement protects. The profile is not started (``unavailable``: the daemon holds it),
    and the reason names the setting."""
    p = plan_for(profile, settings=IsolationSettings(writable=(raw,)))
    assert p.mechanism == "unavailable" and not p.runnable, raw
    assert p.reason.startswith(f"isolation.writable: {raw} would let this profile change {what}"), p.reason


def test_writable_inside_the_own_home_or_beside_the_root_is_fine() -> None:
    assert plan_for(settings=IsolationSettings(writable=(f"{R}/profiles/coder/x",))).runnable
    assert plan_for("default", settings=IsolationSettings(writable=(f"{R}/projects",))).runnable


def test_root_whose_namespaces_fail_falls_back_too() -> None:
    p = plan_for(probe_=dataclasses.replace(ROOT_FULL, mount_namespace=False, mount_namespace_error="EPERM (seccomp)"))
    assert p.mechanism == "landlock" and "EPERM (seccomp)" in p.reason
    assert p.keep_caps and not p.private_dev  # root still drops capabilities


def test_no_landlock_means_off_or_unavailable() -> None:
    off = plan_for(probe_=NO_LL)
    assert off.mechanism == "off" and off.runnable and "no Landlock" in off.reason
    assert off.gaps and "no confinement" in off.gaps[0]
    req = plan_for(probe_=NO_LL, settings=IsolationSettings(mode="required"))
    assert req.mechanism == "unavailable" and not req.runnable and "required" in req.reason
    # a mount namespace alone is never chosen: no boundary without Landlock
    assert best_mechanism(dataclasses.replace(ROOT_FULL, landlock_abi=0)) == "off"


def test_off_by_setting() -> None:
    p = plan_for(settings=IsolationSettings(mode="off"))
    assert p.mechanism == "off" and p.reason == "isolation: off in hermesd.yaml"
    assert p.summary() == "off: isolation: off in hermesd.yaml"


def test_old_landlock_without_signal_scoping() -> None:
    p = plan_for(probe_=dataclasses.replace(ROOT_FULL, landlock_abi=5))
    assert p.mechanism == "namespace+landlock" and p.scopes == ()
    assert any("signals are not scoped" in g for g in p.gaps_severe())
    assert "signals NOT scoped" in p.summary()


def test_dedicated_account_needs_root_and_an_account() -> None:
    s = IsolationSettings(user="hermes-coder")
    assert "needs hermesd to run as root" in plan_for(probe_=USER_NS, settings=s).reason
    assert plan_for(settings=s).mechanism == "unavailable"  # not resolved
    ids = UserIds("hermes-coder", 1201, 1201, (1201, 1300))
    p = plan_for(settings=s, user_ids=ids)
    assert p.user == ids and p.keep_caps is None and not p.private_dev
    assert "as hermes-coder" in p.summary()
    assert not any("runs as root" in g for g in p.gaps)


# --- what is shared ---------------------------------------------------------------------------------
def test_channels_default_keep_board_and_shared_auth_close_root_auth() -> None:
    p = plan_for()
    assert dict(p.channels) == {"kanban": "open", "shared_auth": "open", "root_auth": "closed"}
    assert f"{R}/auth.json" not in exposed(p)


def test_root_auth_fallback_is_read_only_and_optional() -> None:
    p = plan_for(settings=IsolationSettings(root_auth=True))
    (auth,) = [a for a in p.expose if a.path.endswith("auth.json")]
    assert auth.access == "ro" and auth.optional
    assert any("auth.json is readable" in g for g in p.gaps)


def test_closing_the_board_and_shared_auth() -> None:
    p = plan_for(settings=IsolationSettings(kanban=False, shared_auth=False))
    assert exposed(p) == {f"{R}/profiles/coder": "rw", f"{R}/hermes-agent": "ro"}
    assert p.links == () and dict(p.channels)["kanban"] == "closed"
    d = plan_for("default", settings=IsolationSettings(kanban=False, shared_auth=False))
    assert f"{R}/kanban" in d.hide and f"{R}/shared" in d.hide


def test_legacy_board_is_blocked_not_split() -> None:
    p = plan_for(kanban_layout="legacy")
    assert dict(p.channels)["kanban"].startswith("blocked")
    assert p.links == () and p.ensure_links == () and f"{R}/kanban" not in exposed(p)
    assert any("migrated" in g for g in p.gaps)


def test_default_profile_hides_profiles_and_hermesd() -> None:
    p = plan_for("default")
    assert p.home == str(R)
    assert set(p.hide) == {f"{R}/profiles", f"{R}/.hermesd", "/srv/elsewhere"}
    assert p.blank == (f"{R}/hermesd.yaml",) and p.ensure_files == (f"{R}/hermesd.yaml",)
    assert f"{R}/profiles" in p.ensure_dirs
    assert f"{R}/hermes-agent" in p.read_only  # its own root, but shared code stays read-only
    assert dict(p.channels)["root_auth"] == "own"


def test_default_profile_under_landlock_alone_lists_its_holes() -> None:
    p = plan_for("default", probe_=USER_LL)
    text = " ".join(p.gaps_severe())
    assert f"{R}/profiles stays visible" in text and f"{R}/.hermesd stays visible" in text
    assert "hermesd.yaml stays writable" in text and f"{R}/hermes-agent stays writable" in text
    assert p.blank == () and p.hide == ("/srv/elsewhere",)


def test_paths_holding_the_root_are_never_made_read_only() -> None:
    p = plan_for(install_paths=(Path("/home/alice"),))
    assert "/home/alice" not in p.read_only
    assert any("/home/alice holds" in g for g in p.gaps)


def test_control_socket_outside_the_root() -> None:
    sock = Path("/tmp/hermesd-1000/0123456789abcdef.sock")
    assert "/tmp/hermesd-1000" in plan_for(control_socket=sock).hide
    assert "/tmp/hermesd-1000" not in plan_for(control_socket=sock, probe_=USER_LL).hide


def test_lock_dir_under_the_root_stays_writable() -> None:
    p = plan_for(lock_dir=R / "locks")
    assert exposed(p)[f"{R}/locks"] == "rw" and f"{R}/locks" in p.ensure_dirs


def test_settings_paths_expand_against_the_childs_home() -> None:
    s = IsolationSettings(read_only=("~/.local/bin",), hide=("~/work/secret", f"{R}/shared-skills"))
    p = plan_for(settings=s)
    assert "/home/alice/.local/bin" in p.read_only and "/home/alice/work/secret" in p.hide
    assert f"{R}/shared-skills" not in p.hide  # already inside the hidden root
    assert plan_for(settings=s, user_home=None).mechanism == "unavailable"


def test_read_only_setting_under_the_root_shares_a_folder_read_only() -> None:
    p = plan_for(settings=IsolationSettings(read_only=(f"{R}/shared-skills",)))
    assert exposed(p)[f"{R}/shared-skills"] == "ro"


def test_plan_is_serialisable_and_explainable() -> None:
    for p in (plan_for(), plan_for("default"), plan_for(probe_=USER_LL), plan_for(probe_=NO_LL),
              plan_for(settings=IsolationSettings(user="x"), user_ids=UserIds("x", 5, 5))):
        json.dumps(p.to_json())
        status = p.status_json()
        json.dumps(status)
        assert list(status)[:4] == ["mechanism", "enforced", "signals", "user"]
        assert "\n" not in p.summary() and p.summary()


# --- settings ---------------------------------------------------------------------------------------
def test_parse_forms() -> None:
    assert merge_isolation(parse_isolation("auto"), None) == IsolationSettings()
    assert merge_isolation(parse_isolation(False), None).mode == "off"  # YAML's bare `off`
    assert merge_isolation(parse_isolation("Required"), None).mode == "required"
    top = parse_isolation({"kanban": False, "read_only": "~/.local/bin"})
    own = parse_isolation("off", "profiles.coder.isolation")
    merged = merge_isolation(top, own)
    assert merged == IsolationSettings(mode="off", kanban=False, read_only=("~/.local/bin",))
    assert merge_isolation(top, parse_isolation({"kanban": True})).kanban is True
    assert merge_isolation(None, parse_isolation({"user": 1201})).user == "1201"
    assert merge_isolation(top, parse_isolation({"writable": "~/projects/x"})).writable == ("~/projects/x",)


@pytest.mark.parametrize(("value", "key", "msg"), [
    ("strict", "isolation", "expected one of auto, off, required"),
    ({"mode": "on"}, "isolation.mode", "expected one of"),
    ({"kanban": "yes"}, "isolation.kanban", "true or false"),
    ({"hide": ["relative/path"]}, "isolation.hide[0]", "absolute path"),
    ({"read_only": ["/a/../b"]}, "isolation.read_only[0]", "'..'"),
    ({"read_only": 3}, "isolation.read_only", "a path or a list"),
    ({"writable": ["projects/x"]}, "isolation.writable[0]", "absolute path"),
    ({"writable": ["~/a/../../etc"]}, "isolation.writable[0]", "'..'"),
    ({"user": "bad name"}, "isolation.user", "account name"),
    ({"colour": 1}, "isolation.colour", "unknown key"),
])
def test_parse_errors_name_the_key(value, key, msg) -> None:
    with pytest.raises(SettingError) as err:
        parse_isolation(value)
    assert err.value.key == key and str(err.value).startswith(f"{key}: ") and msg in str(err.value)


# --- probe and doctor ------------------------------------------------------------------------------
def test_probe_this_machine() -> None:
    p = probe()
    assert p.euid >= 0 and p.kernel
    json.dumps(p.to_json())
    if p.landlock_abi:
        assert landlock_features(p.landlock_abi) and not p.landlock_error
    if p.is_root:
        assert p.mount_namespace, p.mount_namespace_error
    quick = probe(try_namespaces=False)
    assert quick.landlock_abi == p.landlock_abi and quick.mount_namespace_error == "not probed"


def test_doctor_text_names_the_fix() -> None:
    text = lambda pr: "\n".join(t for _, t in doctor_lines(pr))  # noqa: E731
    assert "private mount namespace plus Landlock ABI 7" in text(ROOT_FULL)
    apparmor = dataclasses.replace(USER_LL, sysctls=(("kernel.apparmor_restrict_unprivileged_userns", "1"),))
    assert "sysctl -w kernel.apparmor_restrict_unprivileged_userns=0" in text(apparmor)
    assert "`userns,`" in text(apparmor)
    debian = dataclasses.replace(USER_LL, sysctls=(("kernel.unprivileged_userns_clone", "0"),))
    assert "sysctl -w kernel.unprivileged_userns_clone=1" in text(debian)
    maxns = dataclasses.replace(USER_LL, sysctls=(("user.max_user_namespaces", "0"),))
    assert "user.max_user_namespaces=15000" in text(maxns)
    disabled = dataclasses.replace(
        NO_LL, landlock_error="Landlock is built in but not enabled at boot (missing from lsm=)")
    assert "lsm=landlock," in text(disabled)
    assert "CONFIG_SECURITY_LANDLOCK=y" in text(NO_LL)
    assert "cannot scope signals" in text(dataclasses.replace(ROOT_FULL, landlock_abi=5))
    assert tuple(lvl for lvl, t in doctor_lines(USER_LL) if t.startswith("isolation:")) == ("warning", )
    assert "isolation: {user" not in text(USER_NS) and "an account of its own" in text(ROOT_FULL)
    assert "read-only to it (shell start-up files, ~/.ssh, units, cron, interpreters)" in text(ROOT_FULL)
    assert "no private /tmp" in text(USER_LL) and "no private /tmp" not in text(USER_NS)
    assert "writes:" not in text(NO_LL)


def test_wrap_and_unwrap() -> None:
    from supervisor.isolation.shim_argv import ENTER_SCRIPT, decode_plan, unwrap, wrap_argv

    p = plan_for()
    argv = ["/usr/bin/hermes", "-p", "coder", "gateway", "run", "--external-supervisor"]
    wrapped = wrap_argv(p, argv, python="/usr/bin/python3")
    assert wrapped[:5] == ["/usr/bin/python3", "-E", "-s", "-S", ENTER_SCRIPT] and wrapped[-len(argv):] == argv
    assert decode_plan(wrapped[5]) == p.to_json()
    assert decode_plan(json.dumps(p.to_json())) == p.to_json()  # by hand: plain JSON works too
    assert unwrap(wrapped) == argv and unwrap(argv) is None
    assert wrap_argv(plan_for(settings=IsolationSettings(mode="off")), argv) == argv
    with pytest.raises(ValueError):
        wrap_argv(p, [])


def test_daemon_grants_put_paths_back() -> None:
    handoff = R / ".hermesd" / "handoff" / "coder"
    p = plan_for(grants=((handoff, "rw"), (Path("/opt/models"), "ro")))
    assert exposed(p)[str(handoff)] == "rw" and "/opt/models" in p.read_only
    d = plan_for("default", grants=((R / ".hermesd" / "handoff" / "default", "rw"),))
    assert exposed(d)[f"{R}/.hermesd/handoff/default"] == "rw"
    with pytest.raises(ValueError, match="access"):
        plan_for(grants=((handoff, "x"),))


def test_placeholders_show_names_not_contents() -> None:
    others = (R / "profiles" / "writer", R / "profiles" / "coder")
    p = plan_for(placeholders=others)
    assert p.placeholders == (f"{R}/profiles/writer",)  # never its own home
    d = plan_for("default", placeholders=others)
    assert d.placeholders == (f"{R}/profiles/coder", f"{R}/profiles/writer")
    assert plan_for(probe_=USER_LL, placeholders=others).placeholders == ()  # names are visible there anyway


def test_the_summary_counts_the_gaps_status_lists() -> None:
    """The one-line summary and the ``gaps`` list of ``status --json`` give the same number."""
    for probe_ in (USER_LL, USER_NS, ROOT_FULL):
        p = plan_for(probe_=probe_)
        listed = p.status_json()["gaps"]
        assert listed, probe_
        assert f"; {len(listed)} gap(s)" in p.summary(), (p.summary(), listed)
        severe = p.status_json()["gaps_severe"]
        assert set(severe) <= set(listed)
        assert (f"{len(listed)} gap(s), {len(severe)} severe: " in p.summary()) == bool(severe)
        if severe:  # the first severe gap is named, up to its explanation in brackets
            assert severe[0].split(" (", 1)[0] in p.summary(), (p.summary(), severe)


# --- install discovery --------------------------------------------------------------------------------
def test_scripts_on_the_command_line_and_pythonpath_count_as_code(tmp_path: Path) -> None:
    """What the gateway runs beyond its interpreter is read-only like it (and kept in a private
    /tmp): a script named by absolute path, the folders of the child's PYTHONPATH."""
    from supervisor.isolation.install import discover_install_paths, environment_code_paths

    script = tmp_path / "gw.sh"
    script.write_text("#!/bin/sh\n")
    site = tmp_path / "site"
    site.mkdir()
    found = discover_install_paths(["/bin/sh", str(script), "gateway", "run", "/no/such/file"])
    assert script in found and Path("/no/such/file") not in found
    assert not [p for p in found if str(p).startswith(("/usr", "/bin"))]  # the system's: every profile reads only
    env = {"PYTHONPATH": f"{site}:relative:/usr/lib/python3/dist-packages:{tmp_path / 'missing'}"}
    assert environment_code_paths(env) == (site,)
    assert environment_code_paths({}) == ()
