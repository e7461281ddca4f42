"""Which platforms a profile's files enable: hermesd's registry against upstream's own config loader.

The oracle (``tests/profiles/upstream_oracle.py``) runs hermes-agent's ``load_gateway_config`` on
each generated profile in a subprocess, with every requirement check reduced to its configuration
part (libraries count as installed), and reports the platforms it enables. hermesd's
:func:`enabled_platforms` must give the same set for every combination. A second oracle mode keeps
upstream's real checks: whatever upstream then leaves out must be exactly what hermesd's
requirement check reports missing (the plugin platforms upstream silently never enables).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from profiles.credentials import load_config, read_env_file, view_of
from profiles.upstream.platforms import PLATFORMS, enabled_platforms, requirements_of

ORACLE = Path(__file__).resolve().parents[1] / "profiles" / "upstream_oracle.py"

pytestmark = pytest.mark.skipif(
    subprocess.run([sys.executable, "-c", "import gateway.config"], capture_output=True).returncode != 0,
    reason="hermes-agent is not installed",
)

GROUPS: dict[str, tuple[str, ...]] = {
    "telegram": ("TELEGRAM_BOT_TOKEN",),
    "discord": ("DISCORD_BOT_TOKEN",),
    "slack": ("SLACK_BOT_TOKEN", "SLACK_APP_TOKEN"),
    "signal": ("SIGNAL_HTTP_URL", "SIGNAL_ACCOUNT"),
    "weixin": ("WEIXIN_TOKEN", "WEIXIN_ACCOUNT_ID"),
    "qqbot": ("QQ_APP_ID", "QQ_CLIENT_SECRET"),
    "yuanbao": ("YUANBAO_APP_ID", "YUANBAO_APP_KEY", "YUANBAO_APP_SECRET"),
    "feishu": ("FEISHU_APP_ID", "FEISHU_APP_SECRET"),
    "whatsapp": ("WHATSAPP_ENABLED",),
    "whatsapp_cloud": ("WHATSAPP_CLOUD_PHONE_NUMBER_ID", "WHATSAPP_CLOUD_ACCESS_TOKEN"),
    "irc": ("IRC_SERVER", "IRC_CHANNEL"),
    "line": ("LINE_CHANNEL_ACCESS_TOKEN", "LINE_CHANNEL_SECRET"),
    "api_server": ("API_SERVER_ENABLED", "API_SERVER_KEY"),
    "webhook": ("WEBHOOK_ENABLED",),
    "msgraph_webhook": ("MSGRAPH_WEBHOOK_ENABLED", "MSGRAPH_WEBHOOK_PORT"),
    "sms": ("TWILIO_ACCOUNT_SID", "TWILIO_AUTH_TOKEN"),
    "bluebubbles": ("BLUEBUBBLES_SERVER_URL", "BLUEBUBBLES_PASSWORD"),
    "wecom_callback": ("WECOM_CALLBACK_CORP_ID", "WECOM_CALLBACK_CORP_SECRET"),
    "matrix": ("MATRIX_ACCESS_TOKEN", "MATRIX_PASSWORD", "MATRIX_HOMESERVER", "MATRIX_E2EE_MODE"),
    "mattermost": ("MATTERMOST_TOKEN", "MATTERMOST_URL"),
    "email": ("EMAIL_ADDRESS", "EMAIL_PASSWORD", "EMAIL_IMAP_HOST", "EMAIL_SMTP_HOST"),
    "dingtalk": ("DINGTALK_CLIENT_ID", "DINGTALK_CLIENT_SECRET"),
    "homeassistant": ("HASS_TOKEN",),
    "wecom": ("WECOM_BOT_ID", "WECOM_SECRET"),
    "teams": ("TEAMS_CLIENT_ID", "TEAMS_CLIENT_SECRET", "TEAMS_TENANT_ID"),
    "google_chat": ("GOOGLE_CHAT_PROJECT_ID", "GOOGLE_CLOUD_PROJECT", "GOOGLE_CHAT_SUBSCRIPTION_NAME",
                    "GOOGLE_CHAT_SUBSCRIPTION", "GOOGLE_CHAT_HTTP_EVENTS_URL"),
    "ntfy": ("NTFY_TOPIC",),
    "simplex": ("SIMPLEX_WS_URL",),
    "photon": ("PHOTON_PROJECT_ID", "PHOTON_PROJECT_SECRET"),
    "raft": ("RAFT_PROFILE",),
    "relay": ("GATEWAY_RELAY_URL",),
}
NAMES = [p.name for p in PLATFORMS]
VALUES = ["tok-aaaa", "tok-bbbb", "", " ", "changeme", "abc", "true", "false", "0", "yes", "on", "required"]
GOOD = ["tok-aaaa", "tok-bbbb", "wss://x.example", "true"]
EXTRA_KEYS = [
    "app_id", "bot_id", "corp_id", "apps", "topic", "ws_url", "client_id", "client_secret", "tenant_id",
    "project_id", "subscription_name", "http_events_url", "project_secret", "enabled", "bridge_token",
    "relay_url", "address", "homeserver", "server", "channel", "channel_access_token", "channel_secret",
    "session_path", "token", "http_url", "account",
]
EXTRA_VALUES = st.one_of(st.sampled_from(["v-1", "", " ", "0"]), st.booleans(), st.just(0), st.just(["a"]))


def test_every_platform_has_an_enable_rule_and_upstream_knows_it() -> None:
    from gateway.config import Platform
    from gateway.platform_registry import platform_registry
    from hermes_cli.plugins import discover_plugins

    discover_plugins()
    upstream = {p.value for p in Platform} - {"local"} | {e.name for e in platform_registry.plugin_entries()}
    assert set(NAMES) == upstream, "the registry must list exactly upstream's platforms"
    assert all(p.enabled is not None for p in PLATFORMS)
    assert set(GROUPS) == set(NAMES)


env_group = st.sampled_from(list(GROUPS)).flatmap(
    lambda name: st.one_of(
        st.fixed_dictionaries({k: st.sampled_from(GOOD) for k in GROUPS[name]}),
        st.dictionaries(st.sampled_from(GROUPS[name]), st.sampled_from(VALUES), min_size=1),
    )
)
env_files = st.lists(env_group, max_size=4).map(lambda ds: {k: v for d in ds for k, v in d.items()})
block = st.fixed_dictionaries(
    {},
    optional={
        "enabled": st.sampled_from([True, False, "yes", "off", None, "maybe"]),
        "token": st.sampled_from(VALUES),
        "extra": st.dictionaries(st.sampled_from(EXTRA_KEYS), EXTRA_VALUES, max_size=4),
        "require_mention": st.booleans(),
    },
)
config = st.dictionaries(
    st.sampled_from(["platforms", "gateway.platforms", "top"]),
    st.dictionaries(st.sampled_from(NAMES), block, max_size=4),
    max_size=3,
)
auth_json = st.one_of(
    st.none(),
    st.just({"credential_pool": {"photon_project": [{"spectrum_project_id": "sp-1", "project_secret": "ps-1"}]}}),
    st.just({"credential_pool": {"photon_project": [{"project_id": "sp-1"}]}}),
    st.just({"credential_pool": {"other": []}}),
    st.just([1, 2]),
)
profile_files = st.tuples(env_files, config, auth_json)


def _config_yaml(spec: dict[str, dict[str, dict[str, Any]]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for where, blocks in spec.items():
        if where == "platforms":
            out["platforms"] = blocks
        elif where == "gateway.platforms":
            out["gateway"] = {"platforms": blocks}
        else:
            for name, body in blocks.items():
                out[name] = {k: v for k, v in body.items() if k in ("enabled", "require_mention")}
    return out


def write_home(base: Path, name: str, env: dict[str, str], cfg: dict[str, Any] | None, auth: Any = None) -> Path:
    home = base / name
    home.mkdir(parents=True)
    if env:
        (home / ".env").write_text("".join(f'{k}="{v}"\n' for k, v in env.items()))
    if cfg:
        (home / "config.yaml").write_text(yaml.safe_dump(cfg))
    if auth is not None:
        (home / "auth.json").write_text(json.dumps(auth))
    return home


def oracle(homes: list[Path], *, real_checks: bool = False) -> dict[str, Any]:
    args = ["--real-checks"] if real_checks else []
    proc = subprocess.run(
        [sys.executable, str(ORACLE), *args, *map(str, homes)],
        capture_output=True, text=True, timeout=180, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def mine(home: Path) -> list[str]:
    return enabled_platforms(view_of(home, read_env_file(home / ".env"), load_config(home)))


@settings(
    max_examples=5,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # no shrinking: each example is a subprocess
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.lists(profile_files, min_size=40, max_size=40))
def test_enabled_platforms_agree_with_upstream(tmp_path_factory: pytest.TempPathFactory, profiles: list) -> None:
    base = tmp_path_factory.mktemp("enabled")
    homes = [
        write_home(base, f"h{i}", env, _config_yaml(spec) if spec else None, auth)
        for i, (env, spec, auth) in enumerate(profiles)
    ]
    upstream = oracle(homes)
    for home, (env, spec, auth) in zip(homes, profiles, strict=True):
        assert sorted(mine(home)) == upstream[str(home)]["enabled"], (
            f"enabled platforms differ for env={env} config={_config_yaml(spec)} auth.json={auth}"
        )


# Hand-picked cases for every rule's corners, all checked in one oracle run.
CASES: list[tuple[dict[str, str], dict[str, Any] | None, Any]] = [
    ({"TELEGRAM_BOT_TOKEN": "123456:abcd"}, None, None),
    ({"TELEGRAM_BOT_TOKEN": "changeme"}, None, None),  # placeholder: disabled
    ({"TELEGRAM_BOT_TOKEN": "123456:abcd"}, {"telegram": {"enabled": False}}, None),
    ({}, {"platforms": {"telegram": {"enabled": True}}}, None),  # enabled with no token at all
    ({}, {"platforms": {"telegram": {"token": "123456:abcd"}}}, None),  # YAML token alone: off
    ({"MATRIX_PASSWORD": "pw-1234"}, None, None),  # enabled without homeserver (warning only)
    ({"MATRIX_ACCESS_TOKEN": "***"}, None, None),  # placeholder
    ({"MATRIX_ACCESS_TOKEN": "tok-aaaa"}, {"platforms": {"matrix": {"enabled": "off"}}}, None),
    ({"MATTERMOST_TOKEN": "tok-aaaa"}, None, None),
    ({"MATTERMOST_TOKEN": "tok-aaaa"}, {"mattermost": {"enabled": False}}, None),
    ({"HASS_TOKEN": "x"}, {"platforms": {"homeassistant": {"enabled": False}}}, None),  # forced
    ({"EMAIL_ADDRESS": "a@b", "EMAIL_PASSWORD": "p", "EMAIL_IMAP_HOST": "i", "EMAIL_SMTP_HOST": "s"}, None, None),
    ({"EMAIL_ADDRESS": "a@b", "EMAIL_PASSWORD": "p", "EMAIL_IMAP_HOST": "i"}, None, None),
    ({"EMAIL_ADDRESS": " ", "EMAIL_PASSWORD": "p", "EMAIL_IMAP_HOST": "i", "EMAIL_SMTP_HOST": "s"}, None, None),
    ({}, {"platforms": {"email": {"extra": {"address": "a@b"}}}}, None),
    ({"DINGTALK_CLIENT_ID": "i", "DINGTALK_CLIENT_SECRET": "s"}, {"dingtalk": {"enabled": False}}, None),
    ({}, {"platforms": {"feishu": {"extra": {"app_id": "cli_1"}}}}, None),  # plugin pass via extra
    ({}, {"platforms": {"feishu": {"enabled": False, "extra": {"app_id": "cli_1"}}}}, None),
    ({}, {"platforms": {"wecom": {"extra": {"bot_id": "b"}}}}, None),
    ({"WECOM_BOT_ID": "b", "WECOM_SECRET": "s"}, None, None),
    ({"IRC_SERVER": "irc.example", "IRC_CHANNEL": "#c"}, None, None),
    ({}, {"platforms": {"irc": {"extra": {"server": "irc.example", "channel": "#c"}}}}, None),
    ({"LINE_CHANNEL_ACCESS_TOKEN": "t", "LINE_CHANNEL_SECRET": "s"}, None, None),
    ({"TEAMS_CLIENT_ID": "c", "TEAMS_CLIENT_SECRET": "s", "TEAMS_TENANT_ID": "t"}, None, None),
    ({"TEAMS_CLIENT_ID": "c"}, {"platforms": {"teams": {"extra": {"client_secret": "s", "tenant_id": "t"}}}}, None),
    ({"GOOGLE_CLOUD_PROJECT": "p", "GOOGLE_CHAT_SUBSCRIPTION": "s"}, None, None),
    ({"GOOGLE_CHAT_HTTP_EVENTS_URL": "https://x"}, {"platforms": {"google_chat": {"extra": {"http_events_url": ""}}}},
     None),
    ({"GOOGLE_CHAT_PROJECT_ID": "p"}, None, None),
    ({"NTFY_TOPIC": " "}, None, None),
    ({"NTFY_TOPIC": "alerts"}, None, None),
    ({"SIMPLEX_WS_URL": "ws://127.0.0.1:5225"}, {"simplex": {"enabled": "no"}}, None),
    ({"PHOTON_PROJECT_ID": "p", "PHOTON_PROJECT_SECRET": "s"}, None, None),
    ({}, None, {"credential_pool": {"photon_project": [{"spectrum_project_id": "sp", "project_secret": "ps"}]}}),
    ({"PHOTON_PROJECT_SECRET": "s"}, None, {"credential_pool": {"photon_project": [{"project_id": "sp"}]}}),
    ({}, None, {"credential_pool": {"photon_project": ["junk"]}}),
    ({"RAFT_PROFILE": "me"}, None, None),
    ({"RAFT_PROFILE": "me"}, {"platforms": {"raft": {"extra": {"enabled": False}}}}, None),  # setdefault keeps False
    ({}, {"platforms": {"raft": {"extra": {"bridge_token": "b"}}}}, None),
    ({"GATEWAY_RELAY_URL": "wss://relay"}, None, None),
    ({"GATEWAY_RELAY_URL": "wss://relay"}, {"relay": {"enabled": False}}, None),
    ({}, {"platforms": {"relay": {"extra": {"relay_url": " wss://r "}}}}, None),
    ({"WHATSAPP_ENABLED": "yes"}, None, None),
    ({}, {"whatsapp": {"require_mention": True}}, None),
    ({"WEIXIN_ACCOUNT_ID": "acc"}, {"platforms": {"weixin": {"token": "changeme"}}}, None),
    ({"MSGRAPH_WEBHOOK_PORT": "9000"}, None, None),  # creates the entry, does not enable it
    ({"MSGRAPH_WEBHOOK_ENABLED": "on"}, {"msgraph_webhook": {"enabled": False}}, None),
    ({"SLACK_BOT_TOKEN": "xoxb-1"}, {"slack": {"enabled": False}}, None),
    ({"TWILIO_ACCOUNT_SID": "AC1"}, None, None),
]


def test_hand_picked_cases_agree_with_upstream(tmp_path: Path) -> None:
    homes = [write_home(tmp_path, f"c{i}", env, cfg, auth) for i, (env, cfg, auth) in enumerate(CASES)]
    upstream = oracle(homes)
    for home, case in zip(homes, CASES, strict=True):
        assert sorted(mine(home)) == upstream[str(home)]["enabled"], f"differs for {case}"


def test_upstream_leaves_out_exactly_what_requirements_report_missing(tmp_path: Path) -> None:
    """With upstream's real checks (this interpreter's libraries, lazy installs off), every platform
    hermesd enables but upstream does not is one whose requirements hermesd reports missing."""
    from supervisor.requirements import check_requirements

    homes = [write_home(tmp_path, f"c{i}", env, cfg, auth) for i, (env, cfg, auth) in enumerate(CASES)]
    real = oracle(homes, real_checks=True)
    env = {"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "/")}
    silent: set[str] = set()
    for home in homes:
        view = view_of(home, read_env_file(home / ".env"), load_config(home))
        ours = enabled_platforms(view)
        theirs = real[str(home)]["enabled"]
        assert set(theirs) <= set(ours)
        left_out = set(ours) - set(theirs)
        if left_out:
            report = check_requirements([sys.executable, "-m", "hermes_cli.main"],
                                        requirements_of(view, left_out).values(), env=env)
            states = {p: c.state for p, c in report.platforms.items()}
            assert all(s == "missing" for s in states.values()), (home, states)
            silent |= left_out
    # teams (its SDK is not a test dependency), raft (no raft CLI) and photon (no sidecar) at least
    assert {"teams", "raft", "photon"} <= silent
