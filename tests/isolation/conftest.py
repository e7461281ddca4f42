"""Fixtures for the isolation tests: a real root on disk, real confined processes, cleanup by PID.

Roots live under ``/var/tmp`` rather than pytest's ``/tmp`` folder on purpose: under Landlock
alone the folders on the way to a hidden root lose their own create rights (a documented
limit), and the guarantee "``/tmp`` works" must be checked with a root that is not in ``/tmp``.
The user's home is a temporary folder there too (``HOME`` for the test), never the account's own,
so "the rest of the home stays usable" is not passed by way of ``/tmp``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from supervisor.isolation import shared_board as kb
from supervisor.isolation.install import credential_lock_dir, discover_install_paths
from supervisor.isolation.planning import Plan, PlanInputs, make_plan
from supervisor.isolation.probing import Probe, probe
from supervisor.isolation.shim_argv import wrap_argv
from supervisor.settings import IsolationSettings

REPO = Path(__file__).resolve().parents[2]
HERMES = REPO / ".venv" / "bin" / "hermes"
MECHANISMS = ("namespace+landlock", "landlock")


@pytest.fixture(scope="session")
def facts() -> Probe:
    return probe()


def facts_for(real: Probe, mechanism: str) -> Probe:
    """The real probe, or the real one with the namespace taken away (Landlock alone)."""
    if mechanism == "landlock":
        return replace(real, mount_namespace=False, user_namespace=False)
    return real


def need(real: Probe, mechanism: str) -> None:
    if real.landlock_abi < 1:
        pytest.skip("this kernel has no Landlock")
    if mechanism == "namespace+landlock" and not real.namespace_usable:
        pytest.skip("no private mount namespace available here")


@dataclass
class Tree:
    """A Hermes root with the default profile, profiles a and b, secrets and a hermesd folder."""

    base: Path
    root: Path
    user_home: Path  # the user's home for this test (HOME)
    elsewhere: Path  # a folder elsewhere in the user's home
    procs: list[subprocess.Popen] = field(default_factory=list)

    def home(self, profile: str) -> Path:
        return self.root if profile == "default" else self.root / "profiles" / profile

    def homes(self) -> list[Path]:
        return [self.root / "profiles" / n for n in ("a", "b", "c")]

    def plan(self, real: Probe, profile: str, mechanism: str = "namespace+landlock", **settings) -> Plan:
        facts = facts_for(real, mechanism)
        home = self.home(profile)
        plan = make_plan(PlanInputs(
            root=self.root, profile=profile, home=home, probe=facts,
            settings=IsolationSettings(**settings),
            control_socket=self.root / ".hermesd" / "control.sock",
            other_homes=tuple(h for h in self.homes() if h != home),
            install_paths=discover_install_paths([str(HERMES)]),
            lock_dir=credential_lock_dir(os.environ),
            user_home=Path.home(),
            kanban_layout=kb.layout(self.root),
        ))
        assert plan.mechanism == mechanism, plan.reason
        return plan

    def run(self, plan: Plan, script: str, *, timeout: float = 30, env: dict[str, str] | None = None,
            python: str | None = None, **kw) -> subprocess.CompletedProcess[str]:
        """``sh -c script`` confined by ``plan``; returns the finished process."""
        argv = wrap_argv(plan, ["/bin/sh", "-c", script], python=python)
        kw.setdefault("capture_output", "stdout" not in kw)
        return subprocess.run(argv, text=True, timeout=timeout, env=env if env is not None else dict(os.environ),
                              **kw)

    def spawn(self, argv: list[str], **kw) -> subprocess.Popen:
        """A long-lived process, killed by PID in cleanup."""
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kw)
        self.procs.append(proc)
        return proc

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        shutil.rmtree(self.base, ignore_errors=True)
        shutil.rmtree(self.user_home, ignore_errors=True)


def make_tree(where: str = "/var/tmp") -> Tree:
    base = Path(tempfile.mkdtemp(prefix="hermesd-iso-", dir=where))
    root = base / "root"
    for name in ("a", "b"):
        home = root / "profiles" / name
        (home / "memories").mkdir(parents=True)
        (home / ".env").write_text(f"TELEGRAM_BOT_TOKEN=secret-of-{name}\n")
        (home / "memories" / "MEMORY.md").write_text(f"memories of {name}\n")
    (root / ".env").write_text("OPENAI_API_KEY=secret-of-default\n")
    (root / "auth.json").write_text('{"providers": {"root": "secret"}}\n')
    (root / ".hermesd").mkdir(mode=0o700)
    (root / ".hermesd" / "state.json").write_text("{}\n")
    (root / "hermesd.yaml").write_text("environment: {}\n")
    user_home = Path(tempfile.mkdtemp(prefix="hermesd-iso-home-", dir="/var/tmp"))
    elsewhere = user_home / ".cache" / "notes"
    elsewhere.mkdir(parents=True)
    (elsewhere / "notes.txt").write_text("user notes\n")
    return Tree(base=base, root=root, user_home=user_home, elsewhere=elsewhere)


@pytest.fixture
def tree(monkeypatch: pytest.MonkeyPatch) -> Iterator[Tree]:
    t = make_tree()
    monkeypatch.setenv("HOME", str(t.user_home))
    try:
        yield t
    finally:
        t.close()


class Outside:
    """Paths outside the test's own folders that a failing confinement would create (the
    interpreter's folder, cron, system units): ``remove()`` in a ``finally`` deletes those that
    appeared, so a failed test leaves nothing behind. A path that existed before is the machine's
    and is never touched."""

    def __init__(self, *paths: Path) -> None:
        self.new = [p for p in paths if not os.path.lexists(p)]

    def created(self) -> list[Path]:
        return [p for p in self.new if os.path.lexists(p)]

    def remove(self) -> None:
        for p in self.created():
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)


def wait_for(cond: Callable[[], object], timeout: float = 20.0, what: str = "condition") -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def proc_cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode() for a in raw.split(b"\0") if a]


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


PY = sys.executable
