"""Running a real hermesd daemon against a temporary root, for integration tests.

Everything is a real process: the daemon is ``python -m supervisor run``, its children are the
fake gateway (or the real one), and every wait is a deadline with polling. ``close()`` stops the
daemon, then SIGKILLs by PID anything still carrying the root's tag, so no test leaks a process.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from supervisor.control import client as control
from supervisor.layout import Layout
from supervisor.processes import identity
from tests.fakegw import fake_gateway_command

T = TypeVar("T")
REPO = Path(__file__).resolve().parent.parent


# The default poll: the first gaps short, so a condition met at once is seen at once, then growing to
# a cap, because most conditions are asked of the daemon (a status request costs it several ms of CPU)
# and a wait of tens of seconds at a fixed 20 ms spent a tenth of a core on asking, on a machine the
# suite keeps busy. A test that must see a brief state passes its own ``interval``, kept fixed.
FIRST_POLL = 0.02
POLL_GROWTH = 1.5
POLL_CAP = 0.1


def wait_for(pred: Callable[[], T], timeout: float = 10.0, interval: float | None = None,
             what: str = "condition") -> T:
    deadline = time.monotonic() + timeout
    last: Any = None
    gap = FIRST_POLL if interval is None else interval
    while True:
        try:
            last = pred()
        except (control.DaemonNotRunning, control.DaemonNotAnswering, FileNotFoundError, ConnectionError):
            last = None
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")
        time.sleep(gap)
        if interval is None:
            gap = min(gap * POLL_GROWTH, POLL_CAP)


def make_root(tmp: Path, names: tuple[str, ...] = ("coder", "writer")) -> Path:
    root = tmp / "root"
    (root / "profiles").mkdir(parents=True)
    for name in names:
        (root / "profiles" / name).mkdir()
    return root


def write_config(root: Path, *, command: list[str] | None = None, **extra: Any) -> None:
    """hermesd.yaml for tests: the fake gateway, fast restarts, short stop timeout."""
    import yaml

    cfg: dict[str, Any] = {
        "command": command or fake_gateway_command(),
        "restart": {"initial_delay": 0.2, "max_delay": 2.0, "healthy_after": 3.0, "jitter": 0.0},
        "stop_timeout": 5,
    }
    cfg.update(extra)
    (root / "hermesd.yaml").write_text(yaml.safe_dump(cfg))


class Hermesd:
    """One daemon process for ``root``."""

    def __init__(self, root: Path, env: dict[str, str] | None = None) -> None:
        self.root = root.resolve()
        self.layout = Layout(self.root)
        home = self.root.parent / "home"
        home.mkdir(exist_ok=True)
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(home),
            "LANG": "C.UTF-8",
            "PYTHONPATH": str(REPO),
            **(env or {}),
        }
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = self.root.parent / "hermesd-test.log"

    # -- process
    def start(self, wait_ready: bool = True) -> Hermesd:
        logf = self.log.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "supervisor", "run", "--root", str(self.root)],
            stdin=subprocess.DEVNULL, stdout=logf, stderr=logf, env=self.env, cwd=str(REPO),
            start_new_session=True,
        )
        logf.close()
        if wait_ready:
            wait_for(lambda: self.ping().get("ready"), 15, what=f"hermesd ready; log:\n{self.log_text()}")
        return self

    def log_text(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-4000:]
        except FileNotFoundError:
            return ""

    def cli(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "supervisor", *args, "--root", str(self.root)] if args and args[0] != "profile"
            else [sys.executable, "-m", "supervisor", *args],
            capture_output=True, text=True, env=self.env, cwd=str(REPO), timeout=timeout,
        )

    def request(self, payload: dict[str, Any], wait: float = 10.0) -> dict[str, Any]:
        payload = dict(payload)
        return control.Client(self.layout).call(payload.pop("cmd"), wait=wait, **payload)

    def ping(self) -> dict[str, Any]:
        try:
            return self.request({"cmd": "ping"}, wait=1.0)
        except (control.DaemonNotRunning, control.DaemonNotAnswering, OSError):
            return {}

    def status(self) -> dict[str, Any]:
        return self.request({"cmd": "status"})["status"]

    def row(self, name: str) -> dict[str, Any]:
        for r in self.status()["profiles"]:
            if r["name"] == name:
                return r
        raise KeyError(name)

    def wait_state(self, name: str, state: str, timeout: float = 10.0) -> dict[str, Any]:
        seen: list[Any] = [None]  # the last row seen, for the message if it never comes

        def check() -> dict[str, Any] | None:
            rows = {r["name"]: r for r in self.status()["profiles"]}
            r = seen[0] = rows.get(name)  # a new profile may not be known yet
            return r if r is not None and r["state"] == state else None

        try:
            return wait_for(check, timeout, what=f"{name} {state}")
        except AssertionError as exc:
            row = seen[0] or {}
            raise AssertionError(f"{exc}; its last row: state {row.get('state')!r}, reason {row.get('reason')!r}, "
                                 f"hold {row.get('hold')!r}") from None

    def wait_running(self, *names: str, timeout: float = 10.0) -> dict[str, int]:
        pids = {}
        for n in names:
            r = self.wait_state(n, "running", timeout)
            pids[n] = r["pid"]
        return pids

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(10)

    def shutdown(self, timeout: float = 30.0) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        with contextlib.suppress(control.DaemonNotRunning, control.DaemonNotAnswering, control.ControlError, OSError):
            self.request({"cmd": "shutdown"}, wait=5.0)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            return None

    def close(self) -> list[int]:
        """Stop the daemon and kill every leftover tagged process; return the leftovers' PIDs.

        A daemon that was SIGKILLed leaves its (now empty) per-root cgroup behind: removed here,
        so test runs do not accumulate them on the host.
        """
        self.shutdown()
        leftovers = kill_tagged(self.root)
        remove_cgroups(self.root)
        return leftovers


def tagged_pids(root: Path) -> list[int]:
    return [pid for pid, _name, _env in identity.find_tagged(root.resolve())]


def kill_tagged(root: Path) -> list[int]:
    leftovers = tagged_pids(root)
    for pid in leftovers:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return leftovers


def remove_cgroups(root: Path) -> None:
    """Remove the empty cgroups a hermesd of ``root`` created (after its processes are gone)."""
    from supervisor.limits import cgroup, cgroup_io

    det = cgroup.detect(cgroup_io.gather_facts(cgroup.instance_name(str(root.resolve()))),
                        cgroup.instance_name(str(root.resolve())))
    base = det.base
    if not det.create_base or base is None or not os.path.isdir(base):
        return
    # Deepest first (a profile's exec sessions below it); whatever is still in one (a process that
    # left the tag behind, one slow to die on a loaded machine) is killed through the cgroup first.
    for path in sorted((d for d, _dirs, _files in os.walk(base)), key=lambda d: -d.count(os.sep)):
        with contextlib.suppress(OSError, cgroup_io.CgroupError):
            if cgroup_io.populated(path):
                cgroup_io.kill(path)
            cgroup_io.remove(path, timeout=10.0)


def pid_alive(pid: int) -> bool:
    return identity.proc_start_time(pid) is not None


def read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())
