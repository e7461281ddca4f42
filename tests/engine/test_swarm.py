"""The same Compose file as ``test_compose.py``, deployed with ``docker stack deploy`` on a one-node
swarm: where a user who outgrows one machine goes next without rewriting it.

The swarm is initialised here (``--advertise-addr 127.0.0.1``) and left again afterwards when the
engine was not in one; an engine already in a swarm is used and left as it was.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from profiles.upstream import files as gf
from tests.engine.engine import (
    PROFILES,
    Deployment,
    Gateway,
    containers,
    die_codes,
    docker,
    ids,
    inspect,
    inspect_network,
    mounts,
    run,
    serving_gateway,
    wait_gone,
)
from tests.harness import wait_for

pytestmark = pytest.mark.slow  # minutes of real engine and real gateways
BRING_UP = 240.0


@pytest.fixture(scope="module")
def swarm(deployment: Deployment) -> Iterator[None]:
    state = docker("info", "--format", "{{.Swarm.LocalNodeState}}").stdout.strip()
    if state not in ("inactive", "active"):
        pytest.skip(f"this engine's swarm is {state!r}; not touching it")
    networks_before = set(ids("network", "ls", "-q", "--no-trunc"))
    if state == "inactive":
        docker("swarm", "init", "--advertise-addr", "127.0.0.1")
    try:
        yield
    finally:
        if state == "inactive":
            docker("swarm", "leave", "--force")
            # joining made docker_gwbridge, which leaving keeps: remove it when it is ours
            for nid in set(ids("network", "ls", "-q", "--no-trunc")) - networks_before:
                if inspect_network(nid).get("Name") == "docker_gwbridge":
                    docker("network", "rm", nid, check=False)


def task_report(service: str) -> str:
    """What swarm says about a service's tasks and their containers' health checks: a task that never
    turns healthy fails with the cause (a rejected task, a crash loop, a failing check), not only a
    timeout."""
    lines = [docker("service", "ps", "--no-trunc", "--format",
                    "{{.Name}} {{.CurrentState}} error={{.Error}}", service, check=False).stdout.strip()]
    for cid in containers(f"com.docker.swarm.service.name={service}", all_states=True):
        state = inspect(cid)["State"]
        checks = state.get("Health", {}).get("Log", [])[-2:]
        lines.append(f"{cid[:12]} {state.get('Status')} exit={state.get('ExitCode')} "
                     f"health={[(c.get('ExitCode'), c.get('Output', '')[-300:]) for c in checks]}")
        logs = docker("logs", "--tail", "20", cid, check=False)
        lines.append((logs.stdout + logs.stderr)[-2000:])
    return "\n".join(lines)


@dataclass
class Stack:
    name: str
    deploy_output: str
    ids: dict[str, str]  # profile -> the running task's container ID
    gateways: dict[str, Gateway]


@pytest.fixture(scope="module")
def stack(swarm: None, deployment: Deployment) -> Iterator[Stack]:
    name = f"hermesd-engine-{secrets.token_hex(3)}"
    label = f"com.docker.stack.namespace={name}"
    services: list[str] = []
    networks: list[str] = []
    try:
        started = time.monotonic()
        done = run(["docker", "stack", "deploy", "-c", str(deployment.compose_file), name],
                   cwd=deployment.compose_file.parent, timeout=300)
        services = ids("service", "ls", "-q", "--filter", f"label={label}")
        networks = ids("network", "ls", "-q", "--no-trunc", "--filter", f"label={label}")
        found: dict[str, str] = {}
        gateways: dict[str, Gateway] = {}
        for profile in PROFILES:
            service = f"{name}_{deployment.service(profile)}"

            def healthy_task(service: str = service) -> str | None:
                running = containers(f"com.docker.swarm.service.name={service}")
                if len(running) != 1:
                    return None
                health = inspect(running[0])["State"].get("Health", {}).get("Status")
                return running[0] if health == "healthy" else None

            try:
                found[profile] = wait_for(healthy_task, timeout=BRING_UP, interval=1.0,
                                          what=f"{service} to be healthy")
            except AssertionError as timed_out:
                raise AssertionError(f"{timed_out}\n{task_report(service)}") from None
            gateways[profile] = serving_gateway(found[profile], deployment.home(profile))
        print(f"\nstack of three gateways healthy in {time.monotonic() - started:.1f}s")
        yield Stack(name, done.stdout + done.stderr, found, gateways)
    finally:
        # By ID: this stack's services, then its containers and networks once the services are gone.
        if services:
            docker("service", "rm", *services, check=False)
        wait_gone(label)
        for nid in networks:
            wait_for(lambda nid=nid: docker("network", "rm", nid, check=False).returncode == 0
                     or not inspect_network(nid), timeout=60, interval=1.0, what=f"network {nid[:12]} removed")


def test_the_stack_runs_the_same_three_services(stack: Stack, deployment: Deployment) -> None:
    listed = docker("service", "ls", "--filter", f"label=com.docker.stack.namespace={stack.name}",
                    "--format", "{{.Name}} {{.Replicas}}").stdout.split("\n")
    assert sorted(filter(None, listed)) == sorted(f"{stack.name}_{deployment.service(p)} 1/1" for p in PROFILES)
    # Swarm says which Compose keys it drops; 'restart' is the only one (Swarm restarts on any exit)
    ignored = [ln for ln in stack.deploy_output.splitlines() if "Ignoring" in ln]
    assert ignored == ["Ignoring unsupported options: restart"], stack.deploy_output
    for profile, cid in stack.ids.items():
        gw = stack.gateways[profile]
        assert gw.env_home == deployment.container_home(profile)
        assert gw.state_matches(deployment.home(profile))
        assert sorted(mounts(cid), key=str) == sorted(deployment.expected_mounts(profile), key=str)
        folder = deployment.home(profile).stat()
        assert gw.uid == folder.st_uid
        config = inspect(cid)
        assert config["HostConfig"]["Init"] is True and config["Config"]["StopSignal"] == "SIGINT"


def test_the_default_task_cannot_read_the_other_profiles_env(stack: Stack, deployment: Deployment) -> None:
    # a tmpfs: key would be dropped here without a word; the tmpfs mounts in volumes: are kept
    default = stack.ids["default"]
    assert docker("exec", "-u", "0", default, "ls", "-A", "/opt/hermes/profiles").stdout.strip() == ""
    for other in ("coder", "writer"):
        done = docker("exec", "-u", "0", default, "cat", f"/opt/hermes/profiles/{other}/.env", check=False)
        assert done.returncode != 0 and deployment.marks[other] not in done.stdout


def test_stack_rm_stops_every_gateway_with_a_planned_stop(stack: Stack, deployment: Deployment) -> None:
    since = time.time() - 1
    started = time.monotonic()
    docker("stack", "rm", stack.name)
    wait_gone(f"com.docker.stack.namespace={stack.name}")
    print(f"\nstack rm: containers gone in {time.monotonic() - started:.1f}s")
    assert die_codes(since, time.time() + 1, list(stack.ids.values())) == {cid: [0] for cid in stack.ids.values()}
    for profile in PROFILES:
        assert gf.read_gateway_state(deployment.home(profile))["gateway_state"] == "stopped"
