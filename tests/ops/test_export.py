"""hermesd export: the profile tree as systemd units, a Compose file and Kubernetes manifests.

Validated with the engines' own tools where this machine has them (systemd-analyze verify,
docker-compose/docker compose config, the kubernetes-validate schemas), structurally always.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from profiles.upstream import files as gf
from profiles.upstream import process as contract
from profiles.upstream.process import proc_start_time
from supervisor.cli import export as export_cli
from supervisor.cli.main import build_parser
from supervisor.exits import UserError
from supervisor.kanban.dispatch import DISPATCH_ENV
from supervisor.ops import export
from supervisor.processes import childspec, tags
from tests.contrib.test_contrib import systemd_verify

SECRETS = {
    "default": "123456:AAdefault-telegram-secret",
    "coder": "discord-coder-secret-value",
    "writer": "sk-writer-openai-secret",
}


@pytest.fixture
def secrets_root(tmp_path: Path) -> Path:
    """default + coder + writer, each with a secret in .env; writer drains for 100 s and serves an API port."""
    r = tmp_path / "hroot"
    (r / "profiles" / "coder").mkdir(parents=True)
    (r / "profiles" / "writer").mkdir()
    (r / ".env").write_text(f"TELEGRAM_BOT_TOKEN={SECRETS['default']}\n")
    (r / "profiles" / "coder" / ".env").write_text(f"DISCORD_BOT_TOKEN={SECRETS['coder']}\n")
    (r / "profiles" / "writer" / ".env").write_text(
        f"OPENAI_API_KEY={SECRETS['writer']}\nAPI_SERVER_ENABLED=true\nAPI_SERVER_KEY=k-0123456789abcdef\n")
    (r / "profiles" / "writer" / "config.yaml").write_text("agent:\n  restart_drain_timeout: 100\n")
    return r


def files_for(fmt: str, root: Path, **kw) -> dict[str, str]:
    if fmt == "systemd":
        kw.setdefault("gateway_command", [sys.executable, "-m", "hermes_cli.main"])
        kw.setdefault("hermesd", [sys.executable, "-m", "supervisor"])
    return export.export_files(fmt, root, **kw)


def home_of(root: Path, name: str) -> Path:
    return root if name == "default" else root / "profiles" / name


@pytest.mark.parametrize("fmt", export.FORMATS)
def test_no_secret_reaches_the_output(secrets_root, fmt):
    text = "".join(files_for(fmt, secrets_root).values())
    for secret in SECRETS.values():
        assert secret not in text
    assert not (secrets_root / ".hermesd").exists()  # an export never writes into the tree it reads


# --------------------------------------------------------------------------- systemd


def test_systemd_units_carry_the_child_contract(secrets_root):
    files = files_for("systemd", secrets_root)
    assert sorted(files) == ["hermes-gw-coder.service", "hermes-gw-default.service", "hermes-gw-writer.service"]
    for name in ("default", "coder", "writer"):
        text = files[f"hermes-gw-{name}.service"]
        lines = [ln for ln in text.splitlines() if "=" in ln and not ln.startswith("#")]
        unit = dict(ln.split("=", 1) for ln in lines)
        assert shlex.split(unit["ExecStart"]) == childspec.child_argv([sys.executable, "-m", "hermes_cli.main"], name)
        env = dict(shlex.split(ln.split("=", 1)[1])[0].split("=", 1) for ln in lines if ln.startswith("Environment="))
        # one machine, one root, one dispatcher lock: the kanban dispatcher choice (default) goes with them
        assert env == {"HERMES_HOME": str(home_of(secrets_root, name)), **contract.FIXED_ENV,
                       "HERMES_KANBAN_DISPATCH_IN_GATEWAY": "true" if name == "default" else "false"}
        assert tags.TAG_ROOT not in text  # a later hermesd must not adopt (and kill) these
        assert unit["ExecStop"] == f"-{sys.executable} -m supervisor _planned-stop {home_of(secrets_root, name)}"
        assert unit["KillMode"] == "mixed" and unit["KillSignal"] == "SIGTERM"
        assert unit["Restart"] == "on-failure"
        assert unit["RestartForceExitStatus"] == "75" and unit["RestartPreventExitStatus"] == "78"
        drain = 100 if name == "writer" else 0
        assert unit["TimeoutStopSec"] == str(int(contract.stop_timeout(drain)))


def test_systemd_units_verify(secrets_root, tmp_path):
    out = tmp_path / "units"
    export.write_files(out, files_for("systemd", secrets_root))
    systemd_verify(sorted(out.iterdir()))


def test_hermesd_yaml_settings_are_honoured(secrets_root):
    (secrets_root / "hermesd.yaml").write_text(
        "stop_timeout: 45\nenvironment: {OPENAI_BASE_URL: 'http://127.0.0.1:8000/v1'}\n"
        "profiles:\n  coder: {enabled: false}\n  writer: {stop_timeout: 500}\n"
    )
    files = files_for("systemd", secrets_root)
    assert "hermes-gw-coder.service" not in files  # disabled: hermesd would not run it either
    assert "TimeoutStopSec=45" in files["hermes-gw-default.service"]
    assert "TimeoutStopSec=500" in files["hermes-gw-writer.service"]
    assert 'Environment="OPENAI_BASE_URL=http://127.0.0.1:8000/v1"' in files["hermes-gw-writer.service"]


# --------------------------------------------------------------------------- compose


def compose_tool() -> list[str] | None:
    docker = shutil.which("docker")
    if docker and subprocess.run([docker, "compose", "version"], capture_output=True).returncode == 0:
        return [docker, "compose"]
    legacy = shutil.which("docker-compose")
    return [legacy] if legacy else None


def test_compose_services(secrets_root, tmp_path):
    text = files_for("compose", secrets_root, image="registry.example/hermes:1")["compose.yaml"]
    doc = yaml.safe_load(text)
    assert doc["version"] == "3.8"  # docker 20.10's stack deploy refuses a file without one
    services = doc["services"]
    assert list(services) == ["hermes-gw-default", "hermes-gw-coder", "hermes-gw-writer"]
    for name in ("default", "coder", "writer"):
        svc = services[f"hermes-gw-{name}"]
        home = "/opt/hermes" if name == "default" else f"/opt/hermes/profiles/{name}"
        assert svc["image"] == "registry.example/hermes:1"
        assert svc["command"] == childspec.child_argv(["hermes"], name)
        # only the default profile's container mounts the root's kanban board, so only it dispatches
        assert svc["environment"] == {"HERMES_HOME": home, **contract.FIXED_ENV, "HOME": "/tmp",
                                      DISPATCH_ENV: "true" if name == "default" else "false"}
        folder = home_of(secrets_root, name).stat()
        assert svc["user"] == f"{folder.st_uid}:{folder.st_gid}"
        assert svc["volumes"][0] == {"type": "bind", "source": str(home_of(secrets_root, name)), "target": home}
        assert svc["restart"] == "unless-stopped" and svc["init"] is True
        assert svc["stop_signal"] == "SIGINT"  # upstream's planned stop without a marker
        assert svc["stop_grace_period"] == f"{int(contract.stop_timeout(100 if name == 'writer' else 0))}s"
        # the liveness probe judges the heartbeat with hermesd's own hung_after (default 120 s)
        assert svc["healthcheck"]["test"] == ["CMD", "hermesd", "probe", name, "--live", "--root", "/opt/hermes",
                                              "--max-age", "120"]
        assert "env_file" not in svc and "tmpfs" not in svc  # Swarm drops a tmpfs: key without a word
    # other profiles' .env stay hidden from the default profile's container, under Compose and Swarm alike
    assert services["hermes-gw-default"]["volumes"][1:] == [{"type": "tmpfs", "target": "/opt/hermes/profiles"}]
    assert all(len(services[f"hermes-gw-{n}"]["volumes"]) == 1 for n in ("coder", "writer"))


def test_liveness_probes_follow_each_profiles_hung_after(secrets_root):
    """The engine's liveness probe fails at the heartbeat age at which hermesd would call the gateway
    hung: hermesd.yaml's hung_after, a profile's own over the top level's; off means the probe's default."""
    (secrets_root / "hermesd.yaml").write_text(yaml.safe_dump(
        {"hung_after": 45, "profiles": {"coder": {"hung_after": 200}, "writer": {"hung_after": None}}}))
    compose = yaml.safe_load(files_for("compose", secrets_root)["compose.yaml"])["services"]
    tests = {name: compose[f"hermes-gw-{name}"]["healthcheck"]["test"] for name in ("default", "coder", "writer")}
    assert tests["default"][-2:] == ["--max-age", "45"] and tests["coder"][-2:] == ["--max-age", "200"]
    assert "--max-age" not in tests["writer"]


def test_compose_hides_hermesd_state_and_follows_each_owner(secrets_root):
    (secrets_root / ".hermesd").mkdir()
    if os.geteuid() == 0:
        os.chown(secrets_root / "profiles" / "coder", 12345, 23456)
    text = files_for("compose", secrets_root)["compose.yaml"]
    services = yaml.safe_load(text)["services"]
    assert services["hermes-gw-default"]["volumes"][1:] == [{"type": "tmpfs", "target": "/opt/hermes/profiles"},
                                                           {"type": "tmpfs", "target": "/opt/hermes/.hermesd"}]
    coder = (secrets_root / "profiles" / "coder").stat()
    assert services["hermes-gw-coder"]["user"] == f"{coder.st_uid}:{coder.st_gid}"
    if os.geteuid() == 0:
        assert services["hermes-gw-coder"]["user"] == "12345:23456"
        assert services["hermes-gw-default"]["user"] == "0:0"


def test_containers_dispatch_only_where_the_board_is(secrets_root, capsys):
    (secrets_root / "hermesd.yaml").write_text("kanban: {dispatcher: coder}\n")
    systemd = files_for("systemd", secrets_root)
    assert f"{DISPATCH_ENV}=true" in systemd["hermes-gw-coder.service"]  # one machine: coder dispatches
    capsys.readouterr()
    services = yaml.safe_load(files_for("compose", secrets_root)["compose.yaml"])["services"]
    assert {n: s["environment"][DISPATCH_ENV] for n, s in services.items()} == {
        "hermes-gw-default": "false", "hermes-gw-coder": "false", "hermes-gw-writer": "false"}
    assert "kanban.dispatcher is 'coder'" in capsys.readouterr().err


def test_compose_file_validates_with_compose(secrets_root, tmp_path):
    tool = compose_tool()
    if tool is None:
        pytest.skip("neither 'docker compose' nor docker-compose is installed (Debian package: docker-compose)")
    out = tmp_path / "deploy"
    export.write_files(out, files_for("compose", secrets_root))
    done = subprocess.run([*tool, "-f", str(out / "compose.yaml"), "config"], capture_output=True, text=True,
                          cwd=out, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "hermes-gw-writer" in done.stdout


# --------------------------------------------------------------------------- kubernetes


def test_kubernetes_manifests(secrets_root):
    files = files_for("kubernetes", secrets_root, image="registry.example/hermes:1", storage="5Gi")
    assert sorted(files) == ["hermes-gw-coder.yaml", "hermes-gw-default.yaml", "hermes-gw-writer.yaml"]
    for name in ("default", "coder", "writer"):
        text = files[f"hermes-gw-{name}.yaml"]
        env_file = home_of(secrets_root, name) / ".env"
        assert f"kubectl create secret generic hermes-gw-{name}-env --from-env-file={env_file}" in text
        pvc, dep = yaml.safe_load_all(text)
        assert pvc["kind"] == "PersistentVolumeClaim" and pvc["spec"]["resources"]["requests"]["storage"] == "5Gi"
        assert dep["kind"] == "Deployment"
        spec = dep["spec"]
        assert spec["replicas"] == 1 and spec["strategy"] == {"type": "Recreate"}
        pod = spec["template"]["spec"]
        assert pod["terminationGracePeriodSeconds"] == int(contract.stop_timeout(100 if name == "writer" else 0))
        assert pod["volumes"] == [{"name": "home", "persistentVolumeClaim": {"claimName": pvc["metadata"]["name"]}}]
        (c,) = pod["containers"]
        home = "/opt/hermes" if name == "default" else f"/opt/hermes/profiles/{name}"
        assert c["command"] == childspec.child_argv(["hermes"], name)
        assert {e["name"]: e["value"] for e in c["env"]} == {"HERMES_HOME": home, **contract.FIXED_ENV,
                                                            DISPATCH_ENV: "true" if name == "default" else "false"}
        assert c["envFrom"] == [{"secretRef": {"name": f"hermes-gw-{name}-env", "optional": False}}]
        assert c["volumeMounts"] == [{"name": "home", "mountPath": home}]
        assert c["lifecycle"]["preStop"]["exec"]["command"] == ["hermesd", "_planned-stop", home]
        assert c["readinessProbe"]["exec"]["command"] == ["hermesd", "probe", name, "--ready", "--root", "/opt/hermes"]
        assert c["livenessProbe"]["exec"]["command"] == ["hermesd", "probe", name, "--live", "--root", "/opt/hermes",
                                                         "--max-age", "120"]
        assert c["startupProbe"]["exec"]["command"][3] == "--live"


def test_kubernetes_manifests_validate_against_the_schemas(secrets_root):
    """Kubernetes' published OpenAPI schemas, as kubernetes-validate bundles them: the oldest and the
    newest release it ships, strict (an unknown field fails). No cluster runs here."""
    kv = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate is not installed (pip)")
    from kubernetes_validate.utils import all_versions

    versions = sorted({all_versions()[0], kv.latest_version()}, key=lambda v: tuple(map(int, v.split("."))))
    docs = [json.loads(json.dumps(doc)) for text in files_for("kubernetes", secrets_root).values()
            for doc in yaml.safe_load_all(text)]
    assert sorted(d["kind"] for d in docs) == ["Deployment"] * 3 + ["PersistentVolumeClaim"] * 3
    for version in versions:
        for doc in docs:
            kv.validate(doc, version, strict=True)
    # the same validator rejects what a cluster would: a misspelt field, a wrong type, an unknown kind
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    misspelt = json.loads(json.dumps(deployment))
    misspelt["spec"]["template"]["spec"]["terminationGracePeriod"] = 5
    wrong_type = json.loads(json.dumps(deployment))
    wrong_type["spec"]["replicas"] = "one"
    for bad in (misspelt, wrong_type):
        with pytest.raises(kv.ValidationError):
            kv.validate(bad, versions[-1], strict=True)
    with pytest.raises(kv.SchemaNotFoundError):
        kv.validate({**deployment, "kind": "Deploymint"}, versions[-1], strict=True)


def test_kubernetes_names_are_dns_labels_and_unique():
    names = {p: export.k8s_name(p) for p in ("coder", "a_b", "a-b", "x-", "z" * 64, "default")}
    assert names["coder"] == "hermes-gw-coder"
    assert len(set(names.values())) == len(names)
    for n in names.values():
        assert re.fullmatch(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?", n) and len(n) <= 52


# --------------------------------------------------------------------------- refusals


def test_refuses_duplicate_tokens_naming_them(secrets_root):
    (secrets_root / "profiles" / "coder" / ".env").write_text(f"TELEGRAM_BOT_TOKEN={SECRETS['default']}\n")
    with pytest.raises(export.ExportError) as info:
        export.export_files("compose", secrets_root)
    msg = str(info.value)
    assert "profile 'coder': credential_conflict: telegram telegram-bot-token (fingerprint " in msg
    assert "also configured in profile 'default'" in msg
    assert SECRETS["default"] not in msg


def test_refuses_duplicate_ports_naming_them(secrets_root):
    (secrets_root / "profiles" / "coder" / "config.yaml").write_text(
        "platforms:\n  api_server:\n    enabled: true\n    extra: {key: k-0123456789abcdef}\n")
    refusal = r"profile 'writer': port_conflict: api_server port 8642 .* profile 'coder'"
    with pytest.raises(export.ExportError, match=refusal):
        export.export_files("kubernetes", secrets_root)


def test_refuses_a_malformed_profile_and_a_contract_override(secrets_root):
    (secrets_root / "profiles" / "coder" / "config.yaml").write_text("platforms: [\n")
    (secrets_root / "profiles" / "writer" / ".env").write_text("GATEWAY_MULTIPLEX_PROFILES=true\n")
    with pytest.raises(export.ExportError) as info:
        export.export_files("compose", secrets_root)
    msg = str(info.value)
    assert "profile 'coder'" in msg and "config.yaml" in msg
    assert "profile 'writer'" in msg and "GATEWAY_MULTIPLEX_PROFILES" in msg


# --------------------------------------------------------------------------- the commands


def cli(*argv: str) -> int:
    args = build_parser(list(argv)).parse_args(list(argv))
    return args.func(args)


def test_command_writes_files_or_stdout(secrets_root, tmp_path, capsys):
    out = tmp_path / "k8s"
    assert cli("export", "kubernetes", "--root", str(secrets_root), "--out", str(out)) == 0
    assert sorted(p.name for p in out.iterdir()) == ["hermes-gw-coder.yaml", "hermes-gw-default.yaml",
                                                     "hermes-gw-writer.yaml"]
    capsys.readouterr()
    assert cli("export", "kubernetes", "--root", str(secrets_root)) == 0
    docs = [d for d in yaml.safe_load_all(capsys.readouterr().out) if d]
    assert [d["kind"] for d in docs] == ["PersistentVolumeClaim", "Deployment"] * 3
    assert cli("export", "compose", "--root", str(secrets_root)) == 0
    assert "hermes-gw-writer" in yaml.safe_load(capsys.readouterr().out)["services"]
    with pytest.raises(UserError, match="--out DIR"):
        cli("export", "systemd", "--root", str(secrets_root))
    (secrets_root / "profiles" / "writer" / ".env").write_text(f"DISCORD_BOT_TOKEN={SECRETS['coder']}\n")
    with pytest.raises(UserError, match="credential_conflict: discord"):
        cli("export", "compose", "--root", str(secrets_root))


def test_planned_stop_helper_marks_the_live_gateway(tmp_path, capsys):
    home = tmp_path / "gw"
    home.mkdir()
    assert cli("_planned-stop", str(home)) == 0  # nothing runs: nothing to do
    assert not (home / gf.PLANNED_STOP_MARKER).exists()
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "gateway", "run"],
                            env={**os.environ, "HERMES_HOME": str(home)})
    try:
        from tests.harness import wait_for

        wait_for(lambda: b"gateway" in Path(f"/proc/{proc.pid}/cmdline").read_bytes(), 10, what="the child's exec")
        start = proc_start_time(proc.pid)
        (home / gf.PID_FILE).write_text(json.dumps({"pid": proc.pid, "kind": "hermes-gateway", "argv": [],
                                                    "start_time": start}))
        assert cli("_planned-stop", str(home)) == 0
        marker = json.loads((home / gf.PLANNED_STOP_MARKER).read_text())
        assert marker["target_pid"] == proc.pid and marker["target_start_time"] == start
    finally:
        proc.kill()
        proc.wait()


def test_the_command_offers_exactly_the_formats_and_default_image():
    assert (export_cli.FORMATS, export_cli.DEFAULT_IMAGE) == (export.FORMATS, export.DEFAULT_IMAGE)


def test_help_has_examples():
    sub = next(a for a in build_parser(["export"])._actions if isinstance(a, argparse._SubParsersAction))
    assert "examples:\n  hermesd export kubernetes" in sub.choices["export"].format_help()
    assert "example:\n  hermesd _planned-stop" in sub.choices["_planned-stop"].format_help()
