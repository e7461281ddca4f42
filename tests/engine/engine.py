"""Talking to the real Docker engine for the engine tests: the CLI with a deadline on every call,
containers found by the labels Compose and Swarm put on them, and the one question every test
asks of a container: which gateway process runs in it, and which profile folder names it.

A gateway is found from the host: the container's init (``docker-init``, PID 1 inside) has
exactly one child, the gateway; ``/proc/<pid>/status`` ``NSpid`` gives its PID inside the
container, which is what the gateway writes into ``gateway_state.json``, and field 22 of
``/proc/<pid>/stat`` (the start time in ticks since boot) is the same in every PID namespace.
That pair identifies the process only within its container: two containers started together
each run their gateway as PID 7, in the same clock tick. Which folders a container can write is
told by its mounts instead (:func:`mounts`).
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from profiles.upstream import files as gf
from profiles.upstream.process import proc_start_time
from supervisor.ops import export
from tests.harness import wait_for
from tests.ops.test_export import compose_tool

DOCKER_TIMEOUT = 120.0
PROFILES = ("default", "coder", "writer")
HUNG_AFTER = 45.0  # hermesd.yaml hung_after of the test root: the liveness probe's heartbeat limit


@dataclass(frozen=True)
class Deployment:
    """A root with three profiles and the Compose file exported from it."""

    root: Path
    compose_file: Path
    image: str
    marks: dict[str, str]  # a value only that profile's .env holds

    def home(self, profile: str) -> Path:
        return self.root if profile == "default" else self.root / "profiles" / profile

    def expected_mounts(self, profile: str) -> list[tuple[str, str | None, str]]:
        """Its own folder only; for the default profile, the root with the others' folders masked."""
        own = [("bind", str(self.home(profile)), self.container_home(profile))]
        if profile != "default":
            return own
        return [*own, ("tmpfs", None, f"{export.CONTAINER_ROOT}/profiles")]

    @staticmethod
    def container_home(profile: str) -> str:
        return export.CONTAINER_ROOT if profile == "default" else f"{export.CONTAINER_ROOT}/profiles/{profile}"

    @staticmethod
    def service(profile: str) -> str:
        return f"{export.UNIT_PREFIX}{profile}"


class EngineError(AssertionError):
    """A docker command failed; the message carries its argv and output."""


def docker(*argv: str, timeout: float = DOCKER_TIMEOUT, check: bool = True) -> subprocess.CompletedProcess[str]:
    return run(["docker", *argv], timeout=timeout, check=check)


def run(argv: list[str], *, timeout: float = DOCKER_TIMEOUT, check: bool = True,
        cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=cwd)
    if check and done.returncode != 0:
        raise EngineError(f"{' '.join(argv)} exited {done.returncode}:\n{done.stdout[-2000:]}{done.stderr[-4000:]}")
    return done


def ids(*argv: str) -> list[str]:
    """The IDs a ``docker ... -q`` listing prints."""
    return docker(*argv).stdout.split()


def inspect(container: str) -> dict[str, Any]:
    return json.loads(docker("inspect", container).stdout)[0]


def inspect_network(nid: str) -> dict[str, Any]:
    """The network's description, or {} when there is no such network."""
    done = docker("network", "inspect", nid, check=False)
    return json.loads(done.stdout)[0] if done.returncode == 0 else {}


def mounts(container: str) -> list[tuple[str, str | None, str]]:
    """(type, host source or None for a tmpfs, target) of each mount, in the container's order."""
    return [(m["Type"], m.get("Source") if m["Type"] == "bind" else None, m["Destination"])
            for m in inspect(container)["Mounts"]]


def containers(*labels: str, all_states: bool = False) -> list[str]:
    """IDs of the containers carrying every one of ``labels`` (``key=value``)."""
    filters = [a for label in labels for a in ("--filter", f"label={label}")]
    return ids("ps", "-q", "--no-trunc", *(["-a"] if all_states else []), *filters)


def die_codes(since: float, until: float, container_ids: list[str]) -> dict[str, list[int]]:
    """Exit codes of every ``die`` event of these containers in [since, until], by container ID."""
    filters = [a for c in container_ids for a in ("--filter", f"container={c}")]
    out = docker("events", "--since", f"{since:.3f}", "--until", f"{until:.3f}", "--filter", "event=die",
                 *filters, "--format", "{{json .}}").stdout
    codes: dict[str, list[int]] = {c: [] for c in container_ids}
    for line in out.splitlines():
        ev = json.loads(line)
        cid = ev.get("id") or ev["Actor"]["ID"]
        codes.setdefault(cid, []).append(int(ev["Actor"]["Attributes"]["exitCode"]))
    return codes


@dataclass(frozen=True)
class Gateway:
    """The gateway process of one container, seen from the host."""

    container: str
    host_pid: int
    pid: int  # inside the container: what the gateway writes into its files
    start_time: int
    uid: int
    argv: tuple[str, ...]
    env_home: str | None

    def state_matches(self, home: Path) -> bool:
        """``home``'s gateway_state.json names this very process."""
        state = gf.read_gateway_state(home)
        return state.get("pid") == self.pid and state.get("start_time") == self.start_time


def gateway_of(container: str) -> Gateway:
    """The one gateway process the container's init runs; fails when there is not exactly one."""
    init = inspect(container)["State"]["Pid"]
    children = psutil.Process(init).children()
    if len(children) != 1:
        raise EngineError(f"container {container[:12]}: init has {len(children)} children, expected the gateway only")
    proc = children[0]
    nspid = [int(x) for x in Path(f"/proc/{proc.pid}/status").read_text().split("NSpid:")[1].split("\n")[0].split()]
    environ = Path(f"/proc/{proc.pid}/environ").read_bytes().split(b"\0")
    home = next((e.split(b"=", 1)[1].decode() for e in environ if e.startswith(b"HERMES_HOME=")), None)
    start = proc_start_time(proc.pid)
    assert start is not None
    return Gateway(container, proc.pid, nspid[-1], start, proc.uids().real, tuple(proc.cmdline()), home)


def serving_gateway(container: str, home: Path, timeout: float = 120.0) -> Gateway:
    """The container's gateway once ``home``'s state file names it and says ``running``."""
    def ready() -> Gateway | None:
        try:
            gw = gateway_of(container)
        except (EngineError, psutil.Error, OSError):
            return None
        running = gf.read_gateway_state(home).get("gateway_state") == "running"
        return gw if running and gw.state_matches(home) else None

    return wait_for(ready, timeout=timeout, interval=0.5, what=f"the gateway of {container[:12]} to run in {home}")


def health(container: str) -> str:
    return inspect(container)["State"].get("Health", {}).get("Status", "none")


def wait_health(container: str, status: str, timeout: float) -> dict[str, Any]:
    """The container's State once its health is ``status``."""
    def reached() -> dict[str, Any] | None:
        state = inspect(container)["State"]
        return state if state.get("Health", {}).get("Status") == status else None

    return wait_for(reached, timeout=timeout, interval=1.0, what=f"{container[:12]} to be {status}")


def wait_gone(label: str, timeout: float = 120.0) -> None:
    wait_for(lambda: not containers(label, all_states=True), timeout=timeout, interval=0.5,
             what=f"the containers labelled {label} to be removed")


def compose_command() -> list[str]:
    tool = compose_tool()
    if tool is None:
        pytest.skip("neither 'docker compose' nor docker-compose is installed (Debian package: docker-compose)")
    return tool


def compose_version(tool: list[str]) -> str:
    return run([*tool, "version", "--short"], check=False).stdout.strip() or "unknown"
