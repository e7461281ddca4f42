"""``hermesd doctor`` on real temporary roots: every rule, one root with every mistake, a clean root."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from profiles.credentials import profile_credentials
from profiles.upstream.process import proc_start_time
from supervisor import doctor
from supervisor.cli.main import build_parser
from supervisor.doctor import Finding, diagnose, exit_code, render, service_profile_name, to_json
from supervisor.layout import Layout

TOKEN = "7123456789:AAE-very-secret-telegram-token-DO-NOT-LEAK"
OTHER_TOKEN = "7987654321:AAF-another-token-that-is-fine-xyz"


# --------------------------------------------------------------------------- helpers


def make_root(tmp_path: Path, *profiles: str) -> Path:
    root = tmp_path / "root"
    (root / "profiles").mkdir(parents=True)
    for name in profiles:
        (root / "profiles" / name).mkdir()
    return root


def home_of(root: Path, profile: str) -> Path:
    return root if profile == "default" else root / "profiles" / profile


def write_env(root: Path, profile: str, text: str, mode: int = 0o600) -> Path:
    path = home_of(root, profile) / ".env"
    path.write_text(text)
    path.chmod(mode)
    return path


def write_config(root: Path, profile: str, text: str) -> Path:
    path = home_of(root, profile) / "config.yaml"
    path.write_text(text)
    return path


def fake_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    home = tmp_path / "user-home"
    home.mkdir(exist_ok=True)
    return {"HOME": str(home), "PATH": os.environ.get("PATH", ""), **extra}


def run(root: Path, tmp_path: Path, service_dirs: list[Path] | None = None, **env: str) -> list[Finding]:
    return diagnose(root, env=fake_env(tmp_path, **env), service_dirs=service_dirs or [])


def codes(findings: list[Finding]) -> set[tuple[str, str | None]]:
    return {(f.code, f.profile) for f in findings}


def only(findings: list[Finding], code: str) -> list[Finding]:
    return [f for f in findings if f.code == code]


def dead_pid() -> int:
    """A PID that was real a moment ago and has exited (and been reaped) since."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def pid_record(pid: int, start_time: int | None) -> str:
    return json.dumps({"pid": pid, "kind": "hermes-gateway", "argv": ["hermes", "gateway", "run"],
                       "start_time": start_time})


# --------------------------------------------------------------------------- one root, every mistake


def _wait_exec(pid: int) -> None:
    """Until the forked child has exec'd: before that, /proc shows the parent's command line."""
    from tests.harness import wait_for

    wait_for(lambda: b"gateway" in Path(f"/proc/{pid}/cmdline").read_bytes(), 10, what="the child's exec")


@pytest.fixture
def gateway_like(tmp_path) -> Iterator[int]:
    """A live process that is profile ``live``'s gateway by every proof (``-p live gateway run``, its
    ``HERMES_HOME``), not started by hermesd."""
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()", "-p", "live", "gateway", "run"],
                            stdin=subprocess.PIPE,
                            env={**os.environ, "HERMES_HOME": str(tmp_path / "root" / "profiles" / "live")})
    try:
        _wait_exec(proc.pid)
        yield proc.pid
    finally:
        assert proc.stdin is not None
        proc.stdin.close()  # it exits on EOF: no signal needed
        proc.wait(timeout=10)


def seed_every_mistake(tmp_path: Path, live_pid: int) -> tuple[Path, list[Path]]:
    root = make_root(tmp_path, "coder", "helper", "porter", "broken", "live", "test", "Bad Name")
    # hermesd.yaml: valid YAML, an unknown key (invalid) and a command that does not exist.
    (root / "hermesd.yaml").write_text("command: /nonexistent/hermes\nbogus: 1\n")
    # Root: multiplexing on, routes in both forms with every kind of routing mistake.
    write_env(root, "default", f"TELEGRAM_BOT_TOKEN={TOKEN}\n")
    write_config(root, "default", """\
gateway:
  multiplex_profiles: true
  profile_routes:
    - {name: nested-rule, platform: discord, guild_id: "9", profile: coder}
profile_routes:
  - {name: server-default, platform: discord, guild_id: "111", profile: coder}
  - {name: support, platform: discord, guild_id: "111", chat_id: "222", profile: helper}
  - {name: ghost, platform: telegram, chat_id: "-100", profile: nosuch}
  - {name: bad, platform: discord, chat_id: "333", profile: "Bad Name!"}
  - {name: reserved, platform: discord, chat_id: "444", profile: test}
  - {name: tie-a, platform: slack, chat_id: "C1", profile: coder}
  - {name: tie-b, platform: slack, chat_id: "C1", profile: helper}
""")
    # coder: same bot token as default, an API server, and a dead gateway's pid and lock files.
    write_env(root, "coder",
              f"TELEGRAM_BOT_TOKEN={TOKEN}\nAPI_SERVER_ENABLED=true\nAPI_SERVER_KEY=k-0123456789abcdef\n")
    gone = dead_pid()
    (root / "profiles/coder/gateway.pid").write_text(pid_record(gone, 12345))
    (root / "profiles/coder/gateway.lock").write_text(pid_record(gone, 12345))
    # helper: same API port, world-readable .env that moves HOME, turns multiplexing on, and
    # overrides the respawn breaker hermesd switches off.
    write_env(
        root, "helper",
        "API_SERVER_ENABLED=true\nAPI_SERVER_KEY=k-0123456789abcdef\nHOME=/somewhere/else\nGATEWAY_MULTIPLEX_PROFILES=true\nHERMES_GATEWAY_MAX_STARTS=5\n",
        mode=0o644,
    )
    # porter: nothing wrong but the API server's default port, which coder has first.
    write_env(root, "porter", "API_SERVER_ENABLED=true\nAPI_SERVER_KEY=k-0123456789abcdef\n")
    # broken: a .env line that does not parse.
    write_env(root, "broken", "TELEGRAM_BOT_TOKEN=fine\nthis is not valid\n")
    # live: a gateway.pid naming a live gateway-like process not started by hermesd.
    (root / "profiles/live/gateway.pid").write_text(pid_record(live_pid, proc_start_time(live_pid)))
    # Installed upstream services for coder (systemd) and the root (launchd).
    systemd = tmp_path / "systemd-user"
    launchd = tmp_path / "LaunchAgents"
    systemd.mkdir()
    launchd.mkdir()
    (systemd / "hermes-gateway-coder.service").write_text(
        f'[Service]\nEnvironment="HERMES_HOME={root}/profiles/coder"\nRestart=always\n'
    )
    (launchd / "ai.hermes.gateway.plist").write_text(
        f"<plist><dict><key>HERMES_HOME</key>\n<string>{root}</string></dict></plist>\n"
    )
    return root, [systemd, launchd]


EXPECTED_EVERY_MISTAKE = {
    ("hermesd_config_invalid", None),
    ("gateway_command_not_found", None),
    ("unserved_profile_dir", None),
    ("duplicate_credential", "coder"),
    ("duplicate_port", "porter"),
    ("multiplex_profiles_on", "default"),
    ("env_overrides_hermesd", "helper"),
    ("routes_both_forms", "default"),
    ("routes_without_multiplex", "default"),
    ("route_profile_missing", "default"),
    ("route_invalid_name", "default"),
    ("route_overlap", "default"),
    ("route_overlap_tie", "default"),
    ("secondary_port_binding", "coder"),
    ("secondary_port_binding", "helper"),
    ("upstream_service_installed", "coder"),
    ("upstream_service_installed", "default"),
    ("env_file_permissions", "helper"),
    ("stale_pid_file", "coder"),
    ("foreign_gateway", "live"),
    ("lock_dir_mismatch", "helper"),
    ("profile_config_invalid", "broken"),
}


def test_every_mistake_at_once(tmp_path, gateway_like):
    root, services = seed_every_mistake(tmp_path, gateway_like)
    findings = diagnose(root, env=fake_env(tmp_path), service_dirs=services)
    missing = EXPECTED_EVERY_MISTAKE - codes(findings)
    assert not missing, render(findings)
    assert exit_code(findings) == 1
    assert {f.severity for f in findings} <= {"error", "warning", "info"}
    severities = [doctor.RANK[f.severity] for f in findings]
    assert severities == sorted(severities)  # errors first
    # Two invalid folders, two invalid route names: each reported on its own.
    assert len(only(findings, "unserved_profile_dir")) == 2
    assert len(only(findings, "route_invalid_name")) == 2


def test_no_credential_value_in_any_output(tmp_path, gateway_like):
    root, services = seed_every_mistake(tmp_path, gateway_like)
    findings = diagnose(root, env=fake_env(tmp_path), service_dirs=services)
    human = render(findings)
    machine = json.dumps(to_json(root, findings))
    for text in (human, machine):
        assert TOKEN not in text
        assert "very-secret" not in text
    assert "duplicate_credential" in human and "duplicate_credential" in machine


# --------------------------------------------------------------------------- clean root and the CLI


def clean_root(tmp_path: Path) -> Path:
    # Platforms whose requirements every test environment meets (Signal needs no library, the API
    # server needs aiohttp, which the test extra pins): a token of a platform whose library is not
    # installed would be a real finding (platform_requirements_missing), not a clean root.
    root = make_root(tmp_path, "coder", "writer")
    write_env(root, "default", "SIGNAL_HTTP_URL=http://127.0.0.1:8080\nSIGNAL_ACCOUNT=+15550000001\n")
    write_env(root, "coder", "SIGNAL_HTTP_URL=http://127.0.0.1:8080\nSIGNAL_ACCOUNT=+15550000002\n"
                             "API_SERVER_ENABLED=true\nAPI_SERVER_KEY=k-0123456789abcdef\n")
    write_env(root, "writer", "SIGNAL_HTTP_URL=http://127.0.0.1:8080\nSIGNAL_ACCOUNT=+15550000003\n")
    write_config(root, "default", "model: {default: x}\n")
    return root


def test_clean_root_has_no_errors_or_warnings(tmp_path):
    findings = run(clean_root(tmp_path), tmp_path)
    assert [f for f in findings if f.severity != "info"] == [], render(findings)
    assert exit_code(findings) == 0


def cli(argv: list[str]) -> argparse.Namespace:
    return build_parser(argv).parse_args(argv)


def test_cli_clean_root_exit_0_and_json(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HOME", str(tmp_path / "user-home"))  # default service folders: none there
    root = clean_root(tmp_path)
    args = cli(["doctor", "--root", str(root), "--json"])
    assert args.func(args) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["root"] == str(root.resolve())
    assert doc["ok"] is True and doc["counts"]["error"] == 0
    assert all(set(f) == {"severity", "code", "profile", "message", "fix"} for f in doc["findings"])


def test_cli_human_output_exit_1_on_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HOME", str(tmp_path / "user-home"))
    root = clean_root(tmp_path)
    account = "+15550000001"  # the default profile's Signal account, now claimed by writer too
    write_env(root, "writer", f"SIGNAL_HTTP_URL=http://127.0.0.1:8080\nSIGNAL_ACCOUNT={account}\n")
    args = cli(["doctor", "--root", str(root)])
    assert args.func(args) == 1
    out = capsys.readouterr().out
    assert "ERROR" in out and "[writer] duplicate_credential" in out and "fix:" in out
    assert account not in out


def test_cli_root_from_hermes_home(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HOME", str(tmp_path / "user-home"))
    root = clean_root(tmp_path)
    monkeypatch.setenv("HERMES_HOME", str(root / "profiles" / "coder"))  # a profile's home: its root is checked
    args = cli(["doctor", "--json"])
    assert args.func(args) == 0
    assert json.loads(capsys.readouterr().out)["root"] == str(root.resolve())


def test_missing_root_is_an_error(tmp_path):
    findings = diagnose(tmp_path / "nope", env=fake_env(tmp_path), service_dirs=[])
    assert codes(findings) == {("root_missing", None)}
    assert exit_code(findings) == 1


def test_render_empty():
    assert render([]) == "no problems found"


# --------------------------------------------------------------------------- duplicates


def test_duplicate_credential_names_everything_but_the_value(tmp_path):
    root = make_root(tmp_path, "alpha", "beta")
    for profile in ("default", "alpha", "beta"):
        write_env(root, profile, f"TELEGRAM_BOT_TOKEN={TOKEN}\n")
    salt = Layout(root.resolve()).salt()  # as the daemon leaves it once it has run
    findings = run(root, tmp_path)
    dups = only(findings, "duplicate_credential")
    assert {f.profile for f in dups} == {"alpha", "beta"}  # default keeps it: first in serving order
    fp = profile_credentials(root, salt)[0].fingerprint
    for f in dups:
        assert f.severity == "error"
        assert "telegram" in f.message and "telegram-bot-token" in f.message and fp in f.message
        assert "'default', 'alpha', 'beta'" in f.message
        assert "profile 'default' (first in serving order), which keeps it" in f.message
        assert TOKEN not in f.message + f.fix


def test_doctor_writes_nothing_into_the_root(tmp_path):
    root = make_root(tmp_path, "alpha")
    write_env(root, "default", f"TELEGRAM_BOT_TOKEN={TOKEN}\n")
    write_env(root, "alpha", f"TELEGRAM_BOT_TOKEN={TOKEN}\n")
    before = sorted(p.relative_to(root) for p in root.rglob("*"))
    [dup] = only(run(root, tmp_path), "duplicate_credential")
    assert "valid for this report only" in dup.message
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before


def test_disabled_profile_does_not_compete(tmp_path):
    root = make_root(tmp_path, "alpha")
    write_env(root, "default", f"TELEGRAM_BOT_TOKEN={TOKEN}\n")
    write_env(root, "alpha", f"TELEGRAM_BOT_TOKEN={TOKEN}\n")
    (root / "hermesd.yaml").write_text("profiles:\n  alpha:\n    enabled: false\n")
    findings = run(root, tmp_path)
    assert not only(findings, "duplicate_credential")
    assert ("profile_disabled", "alpha") in codes(findings)


def test_duplicate_port(tmp_path):
    root = make_root(tmp_path, "alpha")
    write_env(root, "default", "WEBHOOK_ENABLED=true\nWEBHOOK_PORT=9000\n")
    write_env(root, "alpha", "API_SERVER_ENABLED=true\nAPI_SERVER_KEY=k-0123456789abcdef\nAPI_SERVER_PORT=9000\n")
    [dup] = only(run(root, tmp_path), "duplicate_port")
    assert dup.profile == "alpha" and "port 9000" in dup.message and "'default'" in dup.message


# --------------------------------------------------------------------------- multiplexing


def test_multiplex_in_root_config_is_a_warning(tmp_path):
    root = make_root(tmp_path)
    write_config(root, "default", "gateway:\n  multiplex_profiles: true\n")
    [f] = only(run(root, tmp_path), "multiplex_profiles_on")
    assert f.severity == "warning" and f.profile == "default"
    assert "GATEWAY_MULTIPLEX_PROFILES=false" in f.message


def test_multiplex_in_a_dotenv_beats_hermesd(tmp_path):
    root = make_root(tmp_path, "alpha")
    write_env(root, "default", "GATEWAY_MULTIPLEX_PROFILES=true\n")
    write_env(root, "alpha", "GATEWAY_MULTIPLEX_PROFILES=1\n")
    findings = run(root, tmp_path)
    overrides = only(findings, "env_overrides_hermesd")
    assert {f.profile for f in overrides} == {"default", "alpha"}
    assert all(f.severity == "error" and "GATEWAY_MULTIPLEX_PROFILES" in f.message for f in overrides)


def test_dotenv_values_that_upstream_reads_the_same_are_fine(tmp_path):
    """Judged by upstream's own reading: S6 accepts any non-empty value, lazy installs only "1"."""
    root = make_root(tmp_path, "alpha", "beta")
    write_env(root, "alpha", "HERMES_S6_SUPERVISED_CHILD=true\nGATEWAY_MULTIPLEX_PROFILES=off\n")
    write_env(root, "beta", "HERMES_DISABLE_LAZY_INSTALLS=true\nHERMES_GATEWAY_MAX_STARTS=5\n")
    findings = run(root, tmp_path)
    found = {f.profile: f.message for f in only(findings, "env_overrides_hermesd")}
    assert set(found) == {"beta"}
    assert "HERMES_DISABLE_LAZY_INSTALLS" in found["beta"] and "HERMES_GATEWAY_MAX_STARTS" in found["beta"]


def test_dotenv_false_switches_config_multiplex_off(tmp_path):
    root = make_root(tmp_path, "alpha")
    write_config(root, "default", "multiplex_profiles: true\n")
    write_env(root, "default", "GATEWAY_MULTIPLEX_PROFILES=false\n")
    write_env(root, "alpha", "API_SERVER_ENABLED=true\nAPI_SERVER_KEY=k-0123456789abcdef\n")
    findings = run(root, tmp_path)
    assert not only(findings, "multiplex_profiles_on")
    assert not only(findings, "secondary_port_binding")


def test_secondary_port_binding_only_under_multiplexing(tmp_path):
    root = make_root(tmp_path, "alpha", "chat")
    write_env(root, "default", "API_SERVER_ENABLED=true\nAPI_SERVER_KEY=k-0123456789abcdef\n")  # the default may bind
    write_env(root, "alpha", "WEBHOOK_ENABLED=true\n")
    write_env(root, "chat", "FEISHU_APP_ID=cli_x\nFEISHU_APP_SECRET=s3cret-value\n")  # websocket: no port
    assert not only(run(root, tmp_path), "secondary_port_binding")
    write_config(root, "default", "gateway:\n  multiplex_profiles: true\n")
    [f] = only(run(root, tmp_path), "secondary_port_binding")
    assert f.profile == "alpha" and "webhook" in f.message and "/p/alpha/" in f.message


# --------------------------------------------------------------------------- routes


def test_routes_ignored_when_multiplexing_is_off(tmp_path):
    root = make_root(tmp_path, "coder")
    write_config(
        root, "default", "gateway:\n  profile_routes:\n    - {platform: discord, guild_id: '1', profile: coder}\n"
    )
    [f] = only(run(root, tmp_path), "routes_without_multiplex")
    assert "gateway.profile_routes" in f.message and "multiplex_profiles is off" in f.message
    assert not only(run(root, tmp_path), "routes_both_forms")


def test_route_overlap_prints_the_computed_winner(tmp_path):
    root = make_root(tmp_path, "server", "support", "thread")
    write_config(root, "default", """\
profile_routes:
  - {name: server-default, platform: discord, guild_id: "1", profile: server}
  - {name: thread-only, platform: discord, thread_id: "7", profile: thread}
  - {name: support-channel, platform: discord, guild_id: "1", chat_id: "2", profile: support}
  - {name: other-guild, platform: discord, guild_id: "5", chat_id: "2", profile: server}
""")
    overlaps = only(run(root, tmp_path), "route_overlap")
    text = "\n".join(f.message for f in overlaps)
    assert all(f.severity == "info" for f in overlaps)
    assert "'support-channel' wins (specificity 6 > 2), so it goes to profile 'support'" in text
    assert "'thread-only' wins (specificity 8 > 2)" in text
    # guild 5 and guild 1 contradict each other: no overlap between other-guild and server-default.
    assert not any("'other-guild'" in f.message and "'server-default'" in f.message for f in overlaps)


def test_route_tie_is_a_warning_naming_the_first(tmp_path):
    root = make_root(tmp_path, "a", "b")
    write_config(root, "default", """\
profile_routes:
  - {name: first, platform: slack, chat_id: "C1", profile: b}
  - {name: second, platform: slack, chat_id: "C1", profile: a}
  - {name: same-target, platform: slack, chat_id: "C1", profile: a}
""")
    ties = only(run(root, tmp_path), "route_overlap_tie")
    assert [f.severity for f in ties] == ["warning", "warning"]  # second/same-target point at one profile
    assert all("'first' -> profile 'b'" in f.message for f in ties)


def test_route_mistakes_each_get_a_code(tmp_path):
    root = make_root(tmp_path, "coder")
    write_config(root, "default", """\
profile_routes:
  - {name: ghost, platform: telegram, chat_id: "-1", profile: nosuch}
  - {name: ghost-2, platform: discord, chat_id: "-2", profile: nosuch}
  - {name: upper, platform: discord, chat_id: "3", profile: "../etc"}
  - {name: tmp, platform: discord, chat_id: "4", profile: tmp}
  - {name: paused, platform: discord, chat_id: "5", profile: coder, enabled: false}
  - {name: unquoted, platform: discord, chat_id: 6, profile: coder}
  - {name: no-platform, profile: coder}
gateway:
  profile_routes: []
""")
    findings = run(root, tmp_path)
    [missing] = only(findings, "route_profile_missing")
    assert "'nosuch'" in missing.message and "'ghost', 'ghost-2'" in missing.message
    invalid = only(findings, "route_invalid_name")
    assert len(invalid) == 2 and any("'../etc'" in f.message for f in invalid)
    assert any("'tmp'" in f.message and "reserved" in f.message for f in invalid)
    [disabled] = only(findings, "route_disabled")
    assert disabled.severity == "info" and "'paused'" in disabled.message
    problems = only(findings, "route_entry_problem")
    assert any("not a quoted string" in f.message for f in problems)
    assert any("missing platform" in f.message for f in problems)
    [both] = only(findings, "routes_both_forms")
    assert "0 nested rule(s)" in both.message


# --------------------------------------------------------------------------- folders, services, files


def test_unserved_folders(tmp_path):
    root = make_root(tmp_path, "ok", "root", "UPPER")
    (root / "profiles" / "notes.txt").write_text("x")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (root / "profiles" / "linked").symlink_to(elsewhere)
    (root / "profiles" / ".importing").mkdir()  # dot entries are hermesd's scratch: silent
    findings = run(root, tmp_path)
    unserved = {f.message.split()[0]: f for f in only(findings, "unserved_profile_dir")}
    assert set(unserved) == {str(root.resolve() / "profiles" / n) for n in ("root", "UPPER", "linked")}
    assert all(f.profile is None and f.severity == "warning" for f in unserved.values())
    assert "'upper'" in unserved[str(root.resolve() / "profiles/UPPER")].fix
    [stray] = only(findings, "stray_file_in_profiles")
    assert stray.severity == "info" and "notes.txt" in stray.message


@pytest.mark.parametrize(
    ("filename", "profile"),
    [
        ("hermes-gateway.service", "default"),
        ("hermes-gateway-coder.service", "coder"),
        ("ai.hermes.gateway.plist", "default"),
        ("ai.hermes.gateway-coder.plist", "coder"),
        ("hermes-gateway-.service", None),
        ("hermes.service", None),
        ("hermes-gateway.plist", None),
        ("ai.hermes.gateway-x.service", None),
    ],
)
def test_service_profile_name(filename, profile):
    assert service_profile_name(filename) == profile


def test_installed_services(tmp_path):
    root = make_root(tmp_path, "coder", "writer")
    user, system, agents = (tmp_path / d for d in ("user", "system", "agents"))
    for d in (user, system, agents):
        d.mkdir()
    (user / "hermes-gateway.service").write_text(f'[Service]\nEnvironment="HERMES_HOME={root}"\n')
    (user / "default.target.wants").mkdir()
    (user / "default.target.wants" / "hermes-gateway.service").symlink_to(user / "hermes-gateway.service")
    (system / "hermes-gateway-coder.service").write_text("[Service]\nExecStart=/usr/bin/hermes -p coder gateway run\n")
    (system / "hermes-gateway-other.service").write_text(
        f'[Service]\nEnvironment="HERMES_HOME={tmp_path}/another-root/profiles/other"\n'
    )
    (system / "hermes-gateway-ghost.service").write_text("[Service]\n")  # no such profile here
    (system / "unrelated.service").write_text("[Service]\n")
    (agents / "ai.hermes.gateway-writer.plist").write_text(
        f"<dict><key>HERMES_HOME</key><string>{root}/profiles/writer</string></dict>"
    )
    findings = run(root, tmp_path, service_dirs=[user, system, agents, tmp_path / "absent"])
    found = {f.profile: f for f in only(findings, "upstream_service_installed")}
    assert set(found) == {"default", "coder", "writer"}
    assert "enabled" in found["default"].message and "systemctl --user disable" in found["default"].fix
    assert "assumed from its name" in found["coder"].message
    assert "launchd" in found["writer"].message and "launchctl" in found["writer"].fix
    # A warning, not a hold: hermesd's own conflict check still covers these profiles.
    assert all(f.severity == "error" for f in found.values())


def test_default_service_dirs_follow_home(tmp_path):
    dirs = doctor.default_service_dirs({"HOME": str(tmp_path)})
    assert dirs == [tmp_path / ".config/systemd/user", Path("/etc/systemd/system"), tmp_path / "Library/LaunchAgents"]


def test_env_permissions(tmp_path):
    root = make_root(tmp_path, "private", "shared")
    write_env(root, "private", "X=1\n", mode=0o600)
    write_env(root, "shared", "X=1\n", mode=0o640)
    [f] = only(run(root, tmp_path), "env_file_permissions")
    assert f.profile == "shared" and "0640" in f.message and f.fix.startswith("chmod 600 ")


def test_stale_pid_dead_and_recycled(tmp_path):
    root = make_root(tmp_path, "dead", "recycled", "junk")
    (root / "profiles/dead/gateway.pid").write_text(pid_record(dead_pid(), 1))
    me = os.getpid()
    (root / "profiles/recycled/gateway.pid").write_text(pid_record(me, (proc_start_time(me) or 0) + 1))
    (root / "profiles/junk/gateway.pid").write_text("not a pid\n")
    found = {f.profile: f for f in only(run(root, tmp_path), "stale_pid_file")}
    assert set(found) == {"dead", "recycled", "junk"}
    assert "not running" in found["dead"].message
    assert "recycled" in found["recycled"].message
    assert "not a gateway PID record" in found["junk"].message


def test_the_lock_file_every_gateway_leaves_is_not_reported(tmp_path):
    """Upstream's ``gateway.lock`` stays on disk, naming its dead PID, after every exit, clean ones
    included (upstream-contract.md): a finding about it would follow every stop, for every profile."""
    root = make_root(tmp_path, "dead", "alive")
    (root / "profiles/dead/gateway.lock").write_text(pid_record(dead_pid(), 1))
    me = os.getpid()
    (root / "profiles/alive/gateway.lock").write_text(pid_record(me, proc_start_time(me)))
    (root / "gateway.lock").write_text("")
    assert not [f for f in run(root, tmp_path) if "gateway.lock" in f.message], render(run(root, tmp_path))


def test_gateway_started_by_hermesd_is_not_foreign(tmp_path):
    root = make_root(tmp_path, "ours")
    env = {**os.environ, "HERMESD_ROOT": str(root.resolve()), "HERMES_HOME": str(root / "profiles/ours")}
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()", "-p", "ours", "gateway", "run"],
                             stdin=subprocess.PIPE, env=env)
    try:
        _wait_exec(child.pid)
        (root / "profiles/ours/gateway.pid").write_text(pid_record(child.pid, proc_start_time(child.pid)))
        findings = run(root, tmp_path)
    finally:
        assert child.stdin is not None
        child.stdin.close()  # it exits on EOF: no signal needed
        child.wait(timeout=10)
    assert not only(findings, "foreign_gateway") and not only(findings, "stale_pid_file")
    assert not only(findings, "pid_file_not_this_profile")


# --------------------------------------------------------------------------- hermesd.yaml and the command


def test_gateway_command_not_found(tmp_path):
    root = make_root(tmp_path)
    (root / "hermesd.yaml").write_text("command: /nonexistent/hermes\n")
    [f] = only(run(root, tmp_path), "gateway_command_not_found")
    assert f.severity == "error" and f.profile is None and "/nonexistent/hermes" in f.message


def test_malformed_hermesd_yaml_names_file_and_line(tmp_path):
    root = make_root(tmp_path)
    (root / "hermesd.yaml").write_text("command: hermes\nrestart:\n  factor: [1,\n")
    findings = run(root, tmp_path)
    [f] = only(findings, "hermesd_config_invalid")
    assert f.severity == "error" and f"{root.resolve() / 'hermesd.yaml'}:" in f.message
    assert not only(findings, "gateway_command_not_found")  # cannot be known from a broken file


def test_invalid_hermesd_yaml_value_with_line(tmp_path):
    root = make_root(tmp_path)
    (root / "hermesd.yaml").write_text("stop_timeout: 10\nrestart:\n  factor: -3\n")
    [f] = only(run(root, tmp_path), "hermesd_config_invalid")
    assert "hermesd.yaml:3: restart.factor" in f.message


def test_empty_profile_name_in_hermesd_yaml(tmp_path):
    root = make_root(tmp_path)
    (root / "hermesd.yaml").write_text('profiles:\n  "": {enabled: false}\n')
    [f] = only(run(root, tmp_path), "hermesd_config_invalid")
    assert "hermesd.yaml" in f.message and "empty" in f.message


@pytest.mark.parametrize(
    ("text", "expect"),
    [
        ("stop_timeout: !!python/name:os.system\n", "hermesd.yaml:1: invalid value: could not determine a constructor"),
        ("stop_timeout: 2001-13-45\n", "month must be in 1..12"),
    ],
)
def test_hostile_yaml_values(tmp_path, text, expect):
    root = make_root(tmp_path)
    (root / "hermesd.yaml").write_text(text)
    [f] = only(run(root, tmp_path), "hermesd_config_invalid")
    assert expect in f.message


def test_settings_for_unknown_profile(tmp_path):
    root = make_root(tmp_path, "coder")
    (root / "hermesd.yaml").write_text("profiles:\n  Coder: {}\n  typo: {}\n")
    findings = run(root, tmp_path)
    assert [f.message.split("'")[1] for f in only(findings, "config_unknown_profile")] == ["typo"]


# --------------------------------------------------------------------------- HOME and lock directories


def test_lock_settings_that_differ_per_child(tmp_path):
    root = make_root(tmp_path, "yamlset", "envset", "same", "plain")
    env = fake_env(tmp_path)
    (root / "hermesd.yaml").write_text(
        "environment:\n  XDG_STATE_HOME: /shared/state\n"
        "profiles:\n  yamlset:\n    environment:\n      HERMES_GATEWAY_LOCK_DIR: /private/locks\n"
    )
    write_env(root, "envset", "HOME=/another/home\n")
    write_env(root, "same", f"HOME={env['HOME']}\nXDG_STATE_HOME=/shared/state\n")
    found = {f.profile: f for f in only(run(root, tmp_path), "lock_dir_mismatch")}
    assert set(found) == {"yamlset", "envset"}
    assert "hermesd.yaml profiles.yamlset.environment" in found["yamlset"].message
    assert "/private/locks" in found["yamlset"].message and "/shared/state/hermes/gateway-locks" in found[
        "yamlset"].message
    assert ".env" in found["envset"].message and "'/another/home'" in found["envset"].message
    # A warning, not a hold: hermesd's own conflict check still covers these profiles.
    assert all(f.severity == "warning" for f in found.values())


def test_lock_settings_from_config_yaml_and_op_env_and_relative_ones(tmp_path):
    # Hermes fills what is still unset from .op.env and config.yaml's top-level settings, and an empty
    # or relative XDG_STATE_HOME puts the locks in each gateway's own working folder (up to 0.21).
    root = make_root(tmp_path, "fromyaml", "fromop", "empty", "plain")
    write_config(root, "fromyaml", "XDG_STATE_HOME: /yaml/state\n")
    (home_of(root, "fromop") / ".op.env").write_text("HERMES_GATEWAY_LOCK_DIR=/op/locks\n")
    write_env(root, "empty", "XDG_STATE_HOME=\n")
    findings = run(root, tmp_path)
    found = {f.profile: f for f in only(findings, "lock_dir_mismatch")}
    assert set(found) == {"fromyaml", "fromop", "empty"}
    assert "config.yaml" in found["fromyaml"].message
    assert "/yaml/state/hermes/gateway-locks" in found["fromyaml"].message
    assert ".op.env" in found["fromop"].message
    relative = only(findings, "lock_dir_relative")
    assert [f.profile for f in relative] == ["empty"]
    assert str(home_of(root, "empty") / "hermes" / "gateway-locks") in relative[0].message


# --------------------------------------------------------------------------- malformed profile files


def test_malformed_profile_files_name_file_and_line_and_others_still_checked(tmp_path):
    root = make_root(tmp_path, "badenv", "badyaml", "both", "alpha", "beta")
    write_env(root, "badenv", "OK=1\nOK2=2\nthis line is junk\n")
    write_config(root, "badyaml", "model:\n  name: [unclosed\n")
    write_env(root, "both", "'unterminated=1\n")
    write_config(root, "both", "- a list\n")
    write_env(root, "alpha", f"TELEGRAM_BOT_TOKEN={TOKEN}\n")
    write_env(root, "beta", f"TELEGRAM_BOT_TOKEN={TOKEN}\n")
    findings = run(root, tmp_path)
    bad = only(findings, "profile_config_invalid")
    by_profile: dict[str | None, list[str]] = {}
    for f in bad:
        by_profile.setdefault(f.profile, []).append(f.message)
    assert any(".env:3:" in m for m in by_profile["badenv"])
    assert any("config.yaml:" in m for m in by_profile["badyaml"])
    assert len(by_profile["both"]) == 2  # both files named, not only the first
    assert ("duplicate_credential", "beta") in codes(findings)  # the rest of the root is still checked
    assert exit_code(findings) == 1


def test_missing_platform_library_is_an_error_with_the_install_command(tmp_path):
    """Issue #9: a configured platform whose library the gateway's interpreter lacks never starts
    (lazy installs are off under hermesd): doctor says so, with the command for that interpreter."""
    root = tmp_path / "root"
    (root / "profiles" / "coder").mkdir(parents=True)
    (root / "hermesd.yaml").write_text(f"command: [{sys.executable}, -m, hermes_cli.main]\n")
    (root / "profiles" / "coder" / ".env").write_text("DISCORD_BOT_TOKEN=" + "x" * 59 + "\n")
    pytest.importorskip("hermes_cli")
    if __import__("importlib").util.find_spec("discord") is not None:
        pytest.skip("discord.py is installed in this environment: nothing is missing")
    [found] = only(run(root, tmp_path), "platform_requirements_missing")
    assert found.severity == "error" and found.profile == "coder" and "discord" in found.message
    assert "enabled by the files of profile 'coder'" in found.message and "''" not in found.message
    assert sys.executable in found.fix and "pip install" in found.fix and "install-deps coder" in found.fix
    assert "x" * 20 not in found.message + found.fix  # the token is never quoted


@pytest.mark.parametrize("kind", ["symlink", "file", "world_writable"])
def test_hermesd_folder_that_is_not_ours_is_refused(tmp_path, kind):
    """Issue #15: the daemon refuses a .hermesd it cannot trust; doctor says why before it does."""
    root = tmp_path / "root"
    root.mkdir()
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    os.chmod(shared, 0o1777)
    if kind == "symlink":
        (root / ".hermesd").symlink_to(shared)
    elif kind == "file":
        (root / ".hermesd").write_text("")
    else:
        (root / ".hermesd").mkdir()
        os.chmod(root / ".hermesd", 0o777)
    [found] = only(run(root, tmp_path), "hermesd_folder_unsafe")
    assert found.severity == "error" and ".hermesd" in found.message
    assert os.stat(shared).st_mode & 0o7777 == 0o1777  # doctor changed nothing


def test_severity_words_are_the_verdicts():
    """doctor spells the severities itself (so registering the command imports nothing): the same words."""
    from supervisor.plan import verdict

    assert (doctor.ERROR, doctor.WARNING, doctor.INFO) == (verdict.ERROR, verdict.WARNING, verdict.INFO)


# --------------------------------------------------------------------------- isolation: what stays open


def test_writable_paths_are_named_and_the_ones_that_open_the_walls_refused(tmp_path):
    root = make_root(tmp_path, "coder", "writer")
    (root / "hermesd.yaml").write_text("profiles:\n  coder:\n    isolation: {writable: [~/projects/x]}\n"
                                       "  writer:\n    isolation: {writable: [~/root]}\n")
    findings = run(root, tmp_path, HOME=str(tmp_path))  # ~/root is the root itself
    [refused] = only(findings, "isolation_writable_refused")
    assert refused.profile == "writer" and refused.severity == "error"
    assert "isolation.writable: ~/root would let this profile change the root folder" in refused.message
    [named] = only(findings, "isolation_writable")
    assert named.profile == "coder" and named.severity == "info" and "~/projects/x" in named.message
    assert exit_code(findings) == 1


@pytest.mark.skipif(os.geteuid() != 0, reason="profiles run as root only when hermesd does")
def test_profiles_that_run_as_root_are_named(tmp_path):
    root = make_root(tmp_path, "coder")
    (root / "hermesd.yaml").write_text("profiles:\n  coder:\n    isolation: {user: nobody}\n")
    [finding] = only(run(root, tmp_path), "isolation_root_without_user")
    assert finding.message.startswith("'default' run as root (no isolation.user): their writes are walled")


# --------------------------------------------------------------------------- platforms no rule models


def test_a_profile_that_configures_a_platform_no_rule_models(tmp_path):
    from profiles.snapshot import read_profile
    from profiles.upstream.lines import V022
    from profiles.upstream.releases import KNOWN
    from supervisor.doctor.config_checks import check_unmodelled_platforms
    from supervisor.doctor.scan import ProfileEntry, Scan

    root = make_root(tmp_path, "zul", "block", "plain", "hass")
    write_env(root, "zul", "ZULIP_API_KEY=k\n")
    write_config(root, "block", "platforms:\n  zulip:\n    enabled: true\n")
    write_config(root, "plain", "platforms:\n  telegram:\n    enabled: false\n")
    write_env(root, "hass", "HASS_TOKEN=tok-aaaa-1111\n")  # Home Assistant left the core on 0.22
    scan = Scan(root, fake_env(tmp_path), [])
    scan.unmodelled, scan.version, scan.line, scan.contract = {"zulip": ("ZULIP_",)}, "0.22.2", V022, KNOWN[-1]
    scan.profiles = [ProfileEntry(n, home_of(root, n), read_profile(n, home_of(root, n), b"s", V022))
                     for n in ("zul", "block", "plain", "hass")]
    check_unmodelled_platforms(scan)
    assert [(f.code, f.profile) for f in scan.findings] == [("unmodelled_platform_configured", "zul"),
                                                            ("unmodelled_platform_configured", "block"),
                                                            ("platform_not_in_release", "hass")]
    assert all("k" not in f.message.split() for f in scan.findings)
    assert "zulip" in scan.findings[0].message and "homeassistant" in scan.findings[2].message
