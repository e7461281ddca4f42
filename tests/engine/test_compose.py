"""The exported Compose file on the real engine, with real gateways (hermes-agent in the image).

One bring-up (``up -d`` of default + coder + writer, each healthy by ``hermesd probe``) serves
every test of this module; the last one takes it down. The writer's gateway is stopped
(SIGSTOP) by the first test, because Docker needs about two minutes to call a hung gateway
unhealthy (its heartbeat must be older than 90 s, then three probes 10 s apart must fail) and
the other tests run meanwhile.
"""

from __future__ import annotations

import os
import secrets
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from profiles.upstream import files as gf
from profiles.upstream.process import proc_start_time
from tests.engine.engine import (
    HUNG_AFTER,
    PROFILES,
    Deployment,
    Gateway,
    compose_command,
    compose_version,
    containers,
    die_codes,
    docker,
    gateway_of,
    ids,
    inspect,
    mounts,
    run,
    serving_gateway,
    wait_health,
)
from tests.harness import wait_for

pytestmark = pytest.mark.slow  # minutes of real engine and real gateways
BRING_UP = 240.0  # three gateways on two busy cores, then the first probe 10 s later
HUNG_LIMIT = HUNG_AFTER + 3 * 10 + 120  # heartbeat limit + three failed probes + slack for a busy machine


@dataclass
class Stack:
    deployment: Deployment
    compose: list[str]  # the compose command with this project's file and name
    project: str
    ids: dict[str, str]  # profile -> container ID
    gateways: dict[str, Gateway]  # as brought up

    def home(self, profile: str) -> Path:
        return self.deployment.home(profile)


@pytest.fixture(scope="module")
def stack(deployment: Deployment) -> Iterator[Stack]:
    tool = compose_command()
    project = f"hermesd-engine-{secrets.token_hex(3)}"
    label = f"com.docker.compose.project={project}"
    argv = [*tool, "-f", str(deployment.compose_file), "-p", project]
    try:
        started = time.monotonic()
        run([*argv, "up", "-d"], cwd=deployment.compose_file.parent, timeout=300)
        found = {}
        for profile in PROFILES:
            (found[profile],) = containers(label, f"com.docker.compose.service={deployment.service(profile)}",
                                           all_states=True)
        gateways = {}
        for profile, cid in found.items():
            wait_health(cid, "healthy", timeout=BRING_UP)
            gateways[profile] = serving_gateway(cid, deployment.home(profile))
        print(f"\n{' '.join(tool)} {compose_version(tool)}: three gateways healthy in "
              f"{time.monotonic() - started:.1f}s")
        yield Stack(deployment, argv, project, found, gateways)
    finally:
        # By ID, whatever this project left (a failed test may leave it up); nothing else is touched.
        left = containers(label, all_states=True)
        if left:
            docker("rm", "-f", *left, check=False)
        nets = ids("network", "ls", "-q", "--filter", f"label={label}")
        if nets:
            docker("network", "rm", *nets, check=False)


class Hang:
    """The writer's gateway, stopped with SIGSTOP at ``since`` (monotonic)."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self._signal(signal.SIGSTOP)
        self.since = time.monotonic()

    def resume(self) -> None:
        self._signal(signal.SIGCONT)

    def _signal(self, sig: signal.Signals) -> None:
        # the PID is signalled only while it is still that gateway (same start time)
        if proc_start_time(self.gateway.host_pid) == self.gateway.start_time:
            os.kill(self.gateway.host_pid, sig)


@pytest.fixture(scope="module")
def hang(stack: Stack) -> Iterator[Hang]:
    h = Hang(stack.gateways["writer"])
    yield h
    h.resume()


def test_each_container_serves_one_profile(stack: Stack, hang: Hang) -> None:
    # requests `hang` so the writer's clock starts now (see the module's docstring)
    for profile, cid in stack.ids.items():
        gw = gateway_of(cid)
        assert gw == stack.gateways[profile]
        home = stack.deployment.container_home(profile)
        assert gw.env_home == home
        assert ("-p" in gw.argv) == (profile != "default")
        if profile != "default":
            assert gw.argv[gw.argv.index("-p") + 1] == profile
        # the profile's own files name this process, and its folder is the only one it can reach
        assert gw.state_matches(stack.home(profile))
        assert sorted(mounts(cid), key=str) == sorted(stack.deployment.expected_mounts(profile), key=str)
        rec = gf.read_pid_record(stack.home(profile))
        assert rec is not None and (rec.pid, rec.start_time) == (gw.pid, gw.start_time)


def test_gateways_run_as_their_folder_owner(stack: Stack) -> None:
    for profile, gw in stack.gateways.items():
        folder = stack.home(profile).stat()
        assert gw.uid == folder.st_uid
        assert inspect(stack.ids[profile])["Config"]["User"] == f"{folder.st_uid}:{folder.st_gid}"
        # what the gateway wrote through the bind mount belongs to the folder's owner
        written = (stack.home(profile) / "gateway_state.json").stat()
        assert (written.st_uid, written.st_gid) == (folder.st_uid, folder.st_gid)


def test_health_check_is_hermesd_probe(stack: Stack) -> None:
    for profile, cid in stack.ids.items():
        info = inspect(cid)
        assert info["Config"]["Healthcheck"]["Test"] == [
            "CMD", "hermesd", "probe", profile, "--live", "--root", "/opt/hermes", "--max-age", f"{HUNG_AFTER:g}"]
        log = info["State"]["Health"]["Log"]
        assert any(e["ExitCode"] == 0 and e["Output"].startswith(f"{profile}: running (PID ") for e in log), log


def test_default_container_cannot_read_the_other_profiles_env(stack: Stack) -> None:
    marks = stack.deployment.marks
    default = stack.ids["default"]
    # as root in the container, not only as the gateway's user: the files are not there at all
    own = docker("exec", "-u", "0", default, "cat", "/opt/hermes/.env").stdout
    assert marks["default"] in own  # the reading works: only the other profiles' files are missing
    assert docker("exec", "-u", "0", default, "ls", "-A", "/opt/hermes/profiles").stdout.strip() == ""
    for other in ("coder", "writer"):
        done = docker("exec", "-u", "0", default, "cat", f"/opt/hermes/profiles/{other}/.env", check=False)
        assert done.returncode != 0 and marks[other] not in done.stdout
        found = docker("exec", "-u", "0", default, "grep", "-rls", marks[other], "/opt/hermes", check=False)
        assert found.stdout.strip() == ""
    # nor does a named profile's container see the root's .env or its sibling's
    coder = stack.ids["coder"]
    assert marks["coder"] in docker("exec", coder, "cat", "/opt/hermes/profiles/coder/.env").stdout
    for path in ("/opt/hermes/.env", "/opt/hermes/profiles/writer/.env"):
        assert docker("exec", "-u", "0", coder, "cat", path, check=False).returncode != 0


def test_killing_a_gateway_restarts_its_container_alone(stack: Stack) -> None:
    coder = stack.ids["coder"]
    others = {p: stack.ids[p] for p in ("default", "writer")}
    before = {p: inspect(c)["State"] | {"RestartCount": inspect(c)["RestartCount"]} for p, c in stack.ids.items()}
    old = gateway_of(coder)
    assert old == stack.gateways["coder"]
    since = time.time() - 1
    os.kill(old.host_pid, signal.SIGKILL)

    def replaced() -> Gateway | None:
        gw = serving_gateway(coder, stack.home("coder"))
        return gw if gw.start_time != old.start_time or gw.host_pid != old.host_pid else None

    new = wait_for(replaced, timeout=BRING_UP, interval=0.5, what="coder's gateway to be replaced")
    after = inspect(coder)
    assert after["RestartCount"] == before["coder"]["RestartCount"] + 1
    assert after["State"]["Pid"] != before["coder"]["Pid"]
    # docker-init passed the gateway's death on: 128 + SIGKILL
    assert die_codes(since, time.time() + 1, [coder]) == {coder: [128 + signal.SIGKILL]}
    assert new.pid == gf.read_gateway_state(stack.home("coder"))["pid"]
    for profile, cid in others.items():
        now = inspect(cid)
        assert now["RestartCount"] == before[profile]["RestartCount"]
        assert (now["State"]["Pid"], now["State"]["StartedAt"]) == (before[profile]["Pid"],
                                                                   before[profile]["StartedAt"])
        assert gateway_of(cid) == stack.gateways[profile]


def test_a_hung_gateway_turns_unhealthy(stack: Stack, hang: Hang) -> None:
    writer = stack.ids["writer"]
    before = inspect(writer)
    left = HUNG_LIMIT - (time.monotonic() - hang.since)
    state = wait_health(writer, "unhealthy", timeout=max(left, 1.0))
    print(f"\nwriter unhealthy {time.monotonic() - hang.since:.0f}s after SIGSTOP")
    failed = [e for e in state["Health"]["Log"] if e["ExitCode"] != 0]
    assert failed and all("heartbeat is" in e["Output"] and "event loop stuck" in e["Output"] for e in failed), \
        state["Health"]["Log"]
    assert state["Health"]["FailingStreak"] >= 3
    # Compose only reports it: the same container and process, still stopped
    after = inspect(writer)
    assert (after["State"]["Pid"], after["RestartCount"]) == (before["State"]["Pid"], before["RestartCount"])
    assert gateway_of(writer) == stack.gateways["writer"]
    hang.resume()
    wait_health(writer, "healthy", timeout=60)


def test_down_stops_every_gateway_with_a_planned_stop(stack: Stack, hang: Hang) -> None:
    hang.resume()  # a stopped process would hear SIGINT only after the grace period's SIGKILL
    since = time.time() - 1
    started = time.monotonic()
    run([*stack.compose, "down"], cwd=stack.deployment.compose_file.parent, timeout=300)
    took = time.monotonic() - started
    print(f"\ndown took {took:.1f}s")
    codes = die_codes(since, time.time() + 1, list(stack.ids.values()))
    # stop_signal SIGINT through docker-init: upstream's planned stop, exit 0, for every gateway
    assert codes == {cid: [0] for cid in stack.ids.values()}
    for profile in PROFILES:
        home = stack.home(profile)
        assert gf.read_gateway_state(home)["gateway_state"] == "stopped"
        assert not (home / "gateway.pid").exists()
    assert containers(f"com.docker.compose.project={stack.project}", all_states=True) == []
