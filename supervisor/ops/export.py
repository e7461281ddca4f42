"""``hermesd export systemd|compose|kubernetes``: the profile tree as another engine's native objects.

For people who would rather let systemd, Docker Compose or Kubernetes supervise the gateways:
one object per profile of ``profiles_to_serve(True, root)`` (minus profiles disabled in
hermesd.yaml), each carrying exactly the contract hermesd gives its own children, taken from
``profiles.upstream.process`` and ``supervisor.processes.childspec`` and never restated here:

* argv from ``contract.child_argv`` (``hermes [-p NAME] gateway run --external-supervisor``);
* environment ``contract.FIXED_ENV`` + ``HERMES_HOME`` + hermesd.yaml's ``environment`` (the
  same extra variables hermesd gives that child). Not the ``HERMESD_*`` tags: a hermesd started
  later on the same root must see these gateways as foreign, not adopt and kill them. The kanban
  dispatcher choice (``HERMES_KANBAN_DISPATCH_IN_GATEWAY``) goes into the systemd units as
  hermesd.yaml makes it (one machine, one root, one dispatcher lock). In containers only the
  default profile's mounts the root, where the board is: a named profile's container has no board
  to dispatch (as a non-root user its dispatcher could not even create one), so it never
  dispatches. ``HERMES_BIN`` never: the worker hand-off needs a running hermesd, so exported
  gateways run upstream's own workers in the dispatcher's tree;
* a planned stop and a SIGKILL deadline of the same stop timeout hermesd would use (hermesd.yaml
  ``stop_timeout``, else ``contract.stop_timeout(contract.profile_drain_seconds(home))``). systemd
  and Kubernetes run upstream's planned-stop marker (``hermesd _planned-stop``, a hidden helper
  defined here, as ``ExecStop`` and ``preStop``) before their SIGTERM. Compose and Swarm have no
  stop hook, so their services stop with SIGINT, which upstream takes as a planned stop (exit 0,
  state ``stopped``) and which the container's init (``init: true``) passes on to the gateway;
* restart on 75 and never on 78 where the engine can say so (systemd can; Compose and a
  Deployment restart on any exit).

The export never reads a credential value into its output: ``.env`` files are only parsed, by
the daemon's own reader (``profiles.snapshot.read_profile``) and judged by the daemon's own
verdict (``supervisor.plan.verdict.judge``), to refuse what the daemon
would hold: a malformed file, a ``.env`` that overrides the contract variables, or two profiles
sharing a bot token or a TCP port (``conflicts.all_conflicts``; the refusal names platform,
credential kind, salted fingerprint and profiles). Kubernetes gets credentials from a
Secret per profile (``envFrom``) that the operator creates from the ``.env`` file.
"""

from __future__ import annotations

import hashlib
import math
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from profiles.discovery import profiles_to_serve
from profiles.fileio import atomic_write_text
from profiles.snapshot import read_profile
from profiles.upstream.lines import BASELINE, RuleLine, line_for
from profiles.upstream.process import FIXED_ENV, Exit
from profiles.upstream.releases import Unsupported
from supervisor import config as config_mod
from supervisor.hermes.requirements import interpreter_facts, release_contract
from supervisor.kanban.dispatch import DISPATCH_ENV
from supervisor.layout import Layout
from supervisor.ops.service import env_line, systemd_quote
from supervisor.plan.verdict import Candidate, ReleaseRules, judge
from supervisor.processes.childspec import GatewayCommandError, child_argv, resolve_gateway_command
from supervisor.processes.program import hermesd_command

if TYPE_CHECKING:
    from profiles.upstream.releases import Contract
    from supervisor.config import Config

FORMATS = ("systemd", "compose", "kubernetes")
DEFAULT_IMAGE = "hermes-agent:latest"
CONTAINER_ROOT = "/opt/hermes"  # where a profile tree lives inside a container
UNIT_PREFIX = "hermes-gw-"
# Docker 20.10's 'docker stack deploy' (Debian 12's docker.io) refuses a Compose file without a
# version ("unsupported Compose file version: 1.0"); 3.8 is the newest it knows and has every key
# the export writes ('init' needs 3.7). docker-compose 1.29 accepts it, Compose v2 ignores it.
COMPOSE_FILE_VERSION = "3.8"


class ExportError(ValueError):
    """The tree cannot be exported as it is (conflict, malformed file); the message says why."""


@dataclass(frozen=True, slots=True)
class Gateway:
    """One profile's gateway, as every engine needs it."""

    name: str
    home: Path
    stop_timeout: float
    extra_env: Mapping[str, str]
    has_env_file: bool
    # what a container gets instead: only the default profile's container mounts the root's board,
    # so a named profile's never dispatches
    container_env: Mapping[str, str]
    # owner (uid, gid) of the profile folder: a Compose service runs as it, so what the gateway
    # writes through the bind mount stays the owner's and the gateway is not root unless the folder is
    owner: tuple[int, int] | None
    # hermesd.yaml's hung_after for the profile (None: hung detection off): the heartbeat age at which
    # the engine's liveness probe fails, as hermesd would kill the gateway for it
    hung_after: float | None

    @property
    def stop_seconds(self) -> int:
        return math.ceil(self.stop_timeout)

    def probe(self, mode: str) -> list[str]:
        """``hermesd probe`` as the engine runs it in this gateway's container: ``--live`` judges the
        heartbeat with the same limit hermesd's own hung detection uses for the profile."""
        argv = ["hermesd", "probe", self.name, f"--{mode}", "--root", CONTAINER_ROOT]
        if mode == "live" and self.hung_after is not None:
            argv += ["--max-age", f"{math.ceil(self.hung_after)}"]
        return argv


# --------------------------------------------------------------------------- shared with the daemon


def collect(root: Path, rules: ReleaseRules | None = None, line: RuleLine = BASELINE) -> list[Gateway]:
    """Every gateway to export; refuses exactly the profiles the daemon would hold (one verdict for both).

    ``rules``: what the release the units will run asks of the files (the multiplex-default line's
    ``gateway.standalone``), when it is known here (systemd units run this machine's release);
    ``line``: how that release reads the files (which platforms, credentials and ports they claim).
    """
    layout = Layout(root)
    try:
        cfg = config_mod.load(layout.config)
    except config_mod.ConfigError as exc:
        raise ExportError(str(exc)) from None
    # The root's salt when hermesd has made one, so fingerprints match what hermesd reports; an
    # export never writes into the tree it reads, so otherwise a throwaway salt.
    salt = layout.salt() if layout.salt_file.exists() else os.urandom(16)
    facts = []
    for name, home in profiles_to_serve(True, root=root):
        if not cfg.for_profile(name).enabled:
            print(f"hermesd export: profile {name!r} skipped: disabled in {layout.config}", file=sys.stderr)
            continue
        facts.append(read_profile(name, Path(home), salt, line))
    holds = judge([Candidate(f, f.name) for f in facts], None, rules)
    problems = [f"profile {name!r}: {hold.kind.value}: {hold.message}" for name, hold in holds.items() if hold]
    if problems:
        raise ExportError("cannot export; hermesd itself would hold these profiles:\n  " + "\n  ".join(problems))
    if not facts:
        raise ExportError(f"no profile to export under {root}")
    return [Gateway(f.name, f.home, cfg.stop_timeout_for(f.name, f.drain_s), cfg.child_environment(f.name),
                    (f.home / ".env").is_file(), _container_environment(cfg, f.name), _owner(f.home),
                    cfg.hung_for(f.name).hung_after)
            for f in facts]


def _container_environment(cfg: Config, name: str) -> dict[str, str]:
    env = cfg.child_environment(name)
    if name != "default":
        env[DISPATCH_ENV] = "false"  # no board in this container: the root is not mounted
    return env


def _warn_dispatcher_lost(gateways: Sequence[Gateway]) -> None:
    """Say so when hermesd.yaml's kanban dispatcher is a named profile, whose container has no board."""
    for gw in gateways:
        if gw.name != "default" and gw.extra_env.get(DISPATCH_ENV) == "true":
            print(f"hermesd export: kanban.dispatcher is {gw.name!r}, but in a container only the default profile"
                  " mounts the root's board: no container dispatches", file=sys.stderr)


def _owner(home: Path) -> tuple[int, int] | None:
    """The profile folder's owner, not following a link (discovery never serves a linked profile)."""
    try:
        st = os.lstat(home)
    except OSError:
        return None
    return st.st_uid, st.st_gid


def _environment(gw: Gateway, home: str, *, container: bool = False) -> dict[str, str]:
    return {"HERMES_HOME": home, **FIXED_ENV, **(gw.container_env if container else gw.extra_env)}


def _container_home(gw: Gateway) -> str:
    return CONTAINER_ROOT if gw.name == "default" else f"{CONTAINER_ROOT}/profiles/{gw.name}"


def _local_contract(command: Sequence[str]) -> Contract | None:
    """The contract of the release ``command`` runs on this machine (the systemd units run it here);
    ``None`` when it cannot be read. An unsupported release refuses the export, as the daemon would
    hold every profile."""
    contract = release_contract(interpreter_facts(list(command)))
    if contract is None:
        return None
    if isinstance(contract, Unsupported):
        raise ExportError(f"cannot export; hermesd itself would hold every profile: {contract.message}")
    return contract


# --------------------------------------------------------------------------- systemd


def render_systemd(gateways: Sequence[Gateway], *, root: Path, gateway_command: Sequence[str],
                   hermesd: Sequence[str], contract: Contract | None = None) -> dict[str, str]:
    """``{unit file name: text}``: one ``hermes-gw-<profile>.service`` user unit per profile."""
    out = {}
    for gw in gateways:
        unit = f"{UNIT_PREFIX}{gw.name}.service"
        exec_start = " ".join(systemd_quote(a) for a in child_argv(list(gateway_command), gw.name, contract))
        exec_stop = " ".join(systemd_quote(a) for a in [*hermesd, "_planned-stop", str(gw.home)])
        env = _environment(gw, str(gw.home))
        lines = [
            f"# Exported by 'hermesd export systemd' from {root}: the gateway of profile {gw.name!r}, with the",
            "# same argv, environment and stop sequence hermesd gives its own child. Do not also run hermesd",
            "# on this root: it would find this gateway running and hold the profile as foreign.",
            f"# Install: cp {unit} ~/.config/systemd/user/ && systemctl --user daemon-reload &&"
            f" systemctl --user enable --now {unit}",
            "",
            "[Unit]",
            f"Description=Hermes Agent gateway, profile {gw.name}",
            "After=network-online.target",
            "Wants=network-online.target",
            "",
            "[Service]",
            "Type=simple",
            f"WorkingDirectory={systemd_quote(str(gw.home))}",
            *(env_line(k, v) for k, v in env.items()),
            f"ExecStart={exec_start}",
            "# Upstream's planned-stop marker first, so the SIGTERM that follows is a planned stop (exit 0,",
            "# state 'stopped') rather than an unexpected one (exit 1). '-': a gateway already gone is fine.",
            f"ExecStop=-{exec_stop}",
            "# SIGTERM to the gateway, SIGKILL to whatever is left of its cgroup after the stop timeout:",
            "# max(60, agent.restart_drain_timeout + 30) s, or stop_timeout from hermesd.yaml.",
            "KillMode=mixed",
            "KillSignal=SIGTERM",
            f"TimeoutStopSec={gw.stop_seconds}",
            "# 75: restart requested (/restart, hermes update, SIGUSR1); 78: fatal configuration, wait for a fix.",
            "Restart=on-failure",
            "RestartSec=5",
            f"RestartForceExitStatus={Exit.RESTART.value}",
            f"RestartPreventExitStatus={Exit.CONFIG.value}",
            "",
            "[Install]",
            "WantedBy=default.target",
        ]
        out[unit] = "\n".join(lines) + "\n"
    return out


# --------------------------------------------------------------------------- compose


def render_compose(gateways: Sequence[Gateway], *, root: Path, image: str) -> str:
    """One Compose file, one service per profile, each profile folder bind-mounted as its HERMES_HOME.

    The same file runs under ``docker compose`` and ``docker stack deploy`` (Swarm), so it uses only
    what both honour: a ``tmpfs:`` key is silently dropped by Swarm (the default profile's container
    would then see every other profile's ``.env``), tmpfs mounts in ``volumes:`` are kept by both.
    """
    services: dict[str, Any] = {}
    for gw in gateways:
        home = _container_home(gw)
        svc: dict[str, Any] = {"image": image}
        if gw.owner is not None:
            # Bind mounts keep host ids: as the folder's owner the gateway can write its files there,
            # and they stay the owner's (the image's default user, root, would leave them root's).
            svc["user"] = f"{gw.owner[0]}:{gw.owner[1]}"
        # An id the image's /etc/passwd does not know gets HOME=/, where it can create nothing, and
        # upstream keeps its credential locks under ~/.local/state: /tmp is writable by any id.
        svc["environment"] = {**_environment(gw, home, container=True), "HOME": "/tmp"}
        svc["command"] = child_argv(["hermes"], gw.name)
        volumes: list[dict[str, str]] = [{"type": "bind", "source": str(gw.home), "target": home}]
        volumes += [{"type": "tmpfs", "target": f"{home}/{d}"} for d in ("profiles", ".hermesd")
                    if gw.name == "default" and (gw.home / d).is_dir()]
        svc.update({
            "volumes": volumes,
            # docker-init as PID 1: reaps what the agent's tools orphan, passes signals to the gateway,
            # and exits with its status (128+n after a signal), so the engine sees the gateway's death.
            "init": True,
            "restart": "unless-stopped",
            "stop_signal": "SIGINT",
            "stop_grace_period": f"{gw.stop_seconds}s",
            "healthcheck": {
                "test": ["CMD", *gw.probe("live")],
                "interval": "10s",
                "timeout": "10s",
                "retries": 3,
                "start_period": "300s",
            },
        })
        services[f"{UNIT_PREFIX}{gw.name}"] = svc
    header = [
        f"# Exported by 'hermesd export compose' from {root}: one service per profile, with the argv and",
        "# environment hermesd gives its own children. Do not also run hermesd on this root, and do not run",
        "# this file twice at once (compose and a stack): two gateways would share each profile folder.",
        f"# The image ({image}) must provide 'hermes' (hermes-agent) and 'hermesd' (hermesd-supervisor, for",
        "# the health check) on PATH; pass --image to name yours. hermesd's contrib/docker/build-image.sh",
        "# builds one from Debian's packages and PyPI alone (docs/containers.md).",
        "# Each profile folder is bind-mounted as that gateway's HERMES_HOME and the service runs as the",
        "# folder's owner; the default profile's container gets empty tmpfs over profiles/ and .hermesd/,",
        "# so it cannot read the other profiles' .env files. The gateway loads its own .env from there:",
        "# no credential is in this file.",
        "# Stop: SIGINT, which upstream takes as a planned stop (exit 0, state 'stopped'): Compose has no",
        "# hook to write upstream's planned-stop marker, and a plain SIGTERM exits 1, state 'running'.",
        f"# Compose restarts on any exit, including {Exit.CONFIG.value} (fatal configuration): watch"
        " 'docker compose ps'.",
        "# Under 'docker stack deploy' (Swarm) 'restart' is ignored (Swarm restarts on any exit) and an",
        "# unhealthy task is replaced; under Compose 'unhealthy' is only reported.",
    ]
    body = yaml.safe_dump({"version": COMPOSE_FILE_VERSION, "services": services}, sort_keys=False,
                          default_flow_style=False, width=1000)
    return "\n".join(header) + "\n" + body


# --------------------------------------------------------------------------- kubernetes


def k8s_name(profile: str) -> str:
    """A DNS-1123 name for the profile's objects, unique per profile.

    Profile names may contain ``_`` or end in ``-``, which Kubernetes names may not; such names
    (and long ones) get a short hash so ``a_b`` and ``a-b`` never collide.
    """
    clean = profile.replace("_", "-")
    name = f"{UNIT_PREFIX}{clean}"
    if clean == profile and not clean.endswith("-") and len(name) <= 52:
        return name
    digest = hashlib.sha256(profile.encode()).hexdigest()[:6]
    return f"{UNIT_PREFIX}{clean[:35].rstrip('-')}-{digest}"


def render_kubernetes(gateways: Sequence[Gateway], *, image: str, storage: str) -> dict[str, list[dict[str, Any]]]:
    """``{profile: [PersistentVolumeClaim, Deployment]}``."""
    out: dict[str, list[dict[str, Any]]] = {}
    for gw in gateways:
        name = k8s_name(gw.name)
        home = _container_home(gw)
        labels = {"app.kubernetes.io/name": "hermes-gateway", "app.kubernetes.io/instance": name,
                  "app.kubernetes.io/part-of": "hermes"}
        meta = {"name": name, "labels": labels, "annotations": {"hermesd/profile": gw.name}}

        def probe(mode: str, gw: Gateway = gw) -> dict[str, Any]:
            return {"exec": {"command": gw.probe(mode)}}

        pvc = {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {**meta, "name": f"{name}-home"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": storage}}},
        }
        container = {
            "name": "gateway",
            "image": image,
            "command": child_argv(["hermes"], gw.name),
            "env": [{"name": k, "value": v} for k, v in _environment(gw, home, container=True).items()],
            # Required when the profile has a .env (a forgotten Secret fails loudly), optional otherwise.
            "envFrom": [{"secretRef": {"name": f"{name}-env", "optional": not gw.has_env_file}}],
            "volumeMounts": [{"name": "home", "mountPath": home}],
            "lifecycle": {"preStop": {"exec": {"command": ["hermesd", "_planned-stop", home]}}},
            # Platform connects may take 30 s each: liveness waits until the gateway first says running.
            "startupProbe": {**probe("live"), "periodSeconds": 5, "timeoutSeconds": 5, "failureThreshold": 60},
            "readinessProbe": {**probe("ready"), "periodSeconds": 10, "timeoutSeconds": 5, "failureThreshold": 3},
            "livenessProbe": {**probe("live"), "periodSeconds": 30, "timeoutSeconds": 10, "failureThreshold": 3},
        }
        deployment = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": meta,
            "spec": {
                "replicas": 1,
                # Recreate: the old pod is gone before the new one starts; two pods must never poll one token.
                "strategy": {"type": "Recreate"},
                "selector": {"matchLabels": {k: labels[k] for k in ("app.kubernetes.io/name",
                                                                    "app.kubernetes.io/instance")}},
                "template": {
                    "metadata": {"labels": labels, "annotations": {"hermesd/profile": gw.name}},
                    "spec": {
                        "terminationGracePeriodSeconds": gw.stop_seconds,
                        "automountServiceAccountToken": False,
                        # The pause container becomes PID 1 and reaps what the agent's tools orphan.
                        "shareProcessNamespace": True,
                        "containers": [container],
                        "volumes": [{"name": "home", "persistentVolumeClaim": {"claimName": f"{name}-home"}}],
                    },
                },
            },
        }
        out[gw.name] = [pvc, deployment]
    return out


def kubernetes_header(gateways: Sequence[Gateway], root: Path, image: str) -> str:
    lines = [
        f"# Exported by 'hermesd export kubernetes' from {root}: per profile a Deployment (1 replica,",
        "# Recreate) and a PersistentVolumeClaim mounted as its HERMES_HOME. Credentials come from a Secret",
        "# per profile, never from this file; create each one from the profile's .env, and copy the",
        "# profile's other files (config.yaml, SOUL.md, memories, skills; not .env, which would override",
        "# the Secret) into its volume:",
    ]
    for gw in gateways:
        if gw.has_env_file:
            env_file = gw.home / ".env"
            lines.append(f"#   kubectl create secret generic {k8s_name(gw.name)}-env --from-env-file={env_file}")
    lines += [
        f"# The image ({image}) must provide 'hermes' and 'hermesd' on PATH (probes and the preStop hook).",
        "# A Deployment restarts its pod on every exit, so exit 78 (fatal configuration) loops in CrashLoopBackOff.",
    ]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- command


def write_files(directory: Path, files: Mapping[str, str]) -> None:
    """Write each exported file into ``directory`` (the operator's ``--out``), naming it on stderr."""
    directory.mkdir(parents=True, exist_ok=True)
    for fname, text in files.items():
        atomic_write_text(directory / fname, text, mode=0o644)
        print(f"wrote {directory / fname}", file=sys.stderr)


def export_files(fmt: str, root: Path, *, image: str = DEFAULT_IMAGE, storage: str = "1Gi",
                 gateway_command: Sequence[str] | None = None, hermesd: Sequence[str] | None = None) -> dict[str, str]:
    """``{file name: text}`` for ``fmt``; raises :class:`ExportError`."""
    if fmt == "systemd":
        if gateway_command is None:
            configured = config_mod.load(Layout(root).config).command
            try:
                gateway_command = resolve_gateway_command(configured)
            except GatewayCommandError as exc:
                raise ExportError(str(exc)) from None
        contract = _local_contract(gateway_command)
        # exported units run without hermesd's confinement: the default gateway sees every profile
        gateways = collect(root, ReleaseRules.of(contract, contract.release if contract else None,
                                                 default_hidden=False), line_for(contract))
        return render_systemd(gateways, root=root, gateway_command=gateway_command,
                              hermesd=hermesd or hermesd_command(), contract=contract)
    gateways = collect(root)
    _warn_dispatcher_lost(gateways)
    if fmt == "compose":
        return {"compose.yaml": render_compose(gateways, root=root, image=image)}

    docs = render_kubernetes(gateways, image=image, storage=storage)
    header = kubernetes_header(gateways, root, image)
    return {f"{k8s_name(name)}.yaml": header + yaml.safe_dump_all(objs, sort_keys=False, width=1000)
            for name, objs in docs.items()}
