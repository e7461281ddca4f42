"""Platform credentials and ports read from a profile's .env and config.yaml, as the gateway would."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from profiles.credentials import (
    Credential,
    PortBinding,
    ProfileConfigError,
    credential_kinds,
    fingerprint,
    load_config,
    profile_credentials,
    profile_ports,
)

SALT = b"test-salt"
HERE = Path(__file__).resolve().parent


def home_with(tmp_path: Path, env: str = "", config: Any = None, name: str = "p") -> Path:
    home = tmp_path / name
    home.mkdir(parents=True, exist_ok=True)
    if env:
        (home / ".env").write_text(env)
    if config is not None:
        (home / "config.yaml").write_text(config if isinstance(config, str) else yaml.safe_dump(config))
    return home


def creds(home: Path) -> dict[str, tuple[str, str]]:
    """{kind: (fingerprint, source)}"""
    return {c.kind: (c.fingerprint, c.source) for c in profile_credentials(home, SALT)}


def fp(value: str) -> str:
    return fingerprint(value, SALT)


# --------------------------------------------------------------------------- fingerprints


def test_fingerprint_is_short_salted_and_never_the_value() -> None:
    a = fingerprint("123456:secret", b"one")
    assert len(a) == 12 and int(a, 16) >= 0
    assert a == fingerprint("123456:secret", b"one")
    assert a != fingerprint("123456:secret", b"two")
    assert a != fingerprint("123456:secreT", b"one")
    assert "secret" not in a
    assert len(fingerprint("x", b"k" * 200)) == 12


@given(st.text(min_size=1), st.text(min_size=1), st.binary(min_size=1, max_size=100))
def test_fingerprint_distinguishes_values(a: str, b: str, salt: bytes) -> None:
    if a != b:
        assert fingerprint(a, salt) != fingerprint(b, salt)


# --------------------------------------------------------------------------- credentials


def test_empty_profile_has_nothing(tmp_path: Path) -> None:
    home = home_with(tmp_path)
    assert profile_credentials(home, SALT) == [] and profile_ports(home) == [] and load_config(home) == {}


def test_env_tokens_and_sources(tmp_path: Path) -> None:
    home = home_with(
        tmp_path,
        env=(
            "export TELEGRAM_BOT_TOKEN='123:tele'\n"
            "DISCORD_BOT_TOKEN=\"disc-token\"  # the bot\n"
            "SLACK_BOT_TOKEN=xoxb-bot\nSLACK_APP_TOKEN=xapp-app\n"
            "SIGNAL_HTTP_URL=http://localhost:8080\nSIGNAL_ACCOUNT=+15550001\n"
            "IRC_SERVER=irc.libera.chat\nIRC_CHANNEL=#hermes\nIRC_NICKNAME=herm\n"
            "LINE_CHANNEL_ACCESS_TOKEN=line-token\nLINE_CHANNEL_SECRET=line-secret\n"
            "QQ_APP_ID=qq1\nYUANBAO_APP_KEY=yb1\nYUANBAO_APP_SECRET=s\n"
            "FEISHU_APP_ID=cli_a\nFEISHU_APP_SECRET=s\nWEIXIN_TOKEN=wx-token\n"
        ),
    )
    assert creds(home) == {
        "telegram-bot-token": (fp("123:tele"), ".env"),
        "discord-bot-token": (fp("disc-token"), ".env"),
        "slack-app-token": (fp("xapp-app"), ".env"),
        "signal-phone": (fp("+15550001"), ".env"),
        "irc": (fp("irc.libera.chat:herm"), ".env"),
        "line": (fp("line-token"), ".env"),
        "qqbot-appid": (fp("qq1"), ".env"),
        "yuanbao-app-key": (fp("yb1"), ".env"),
        "feishu-app-id": (fp("cli_a"), ".env"),
        "weixin-bot-token": (fp("wx-token"), ".env"),
    }
    assert credential_kinds(home) == sorted(creds(home))
    assert all(isinstance(c, Credential) for c in profile_credentials(home, SALT))


def test_env_beats_config_and_config_alone_needs_enabled(tmp_path: Path) -> None:
    config = {"platforms": {"telegram": {"token": "yaml-token", "enabled": True}}}
    assert creds(home_with(tmp_path, config=config, name="a")) == {
        "telegram-bot-token": (fp("yaml-token"), "config.yaml")
    }
    both = home_with(tmp_path, env="TELEGRAM_BOT_TOKEN=env-token\n", config=config, name="b")
    assert creds(both) == {"telegram-bot-token": (fp("env-token"), ".env")}
    no_enable = {"platforms": {"telegram": {"token": "yaml-token"}}}
    assert creds(home_with(tmp_path, config=no_enable, name="c")) == {}


@pytest.mark.parametrize(
    "config",
    [
        {"platforms": {"telegram": {"enabled": False}}},
        {"gateway": {"platforms": {"telegram": {"enabled": "off"}}}},
        {"telegram": {"enabled": False}},
    ],
)
def test_explicitly_disabled_platform_claims_nothing(tmp_path: Path, config: dict[str, Any]) -> None:
    home = home_with(tmp_path, env="TELEGRAM_BOT_TOKEN=env-token\n", config=config)
    assert creds(home) == {}


def test_top_level_block_overrides_platforms_enabled(tmp_path: Path) -> None:
    config = {"platforms": {"discord": {"enabled": False, "token": "d-token"}}, "discord": {"enabled": True}}
    assert creds(home_with(tmp_path, config=config)) == {"discord-bot-token": (fp("d-token"), "config.yaml")}


@pytest.mark.parametrize("token", ["abc", "changeme", "  none ", "***"])
def test_placeholder_tokens_keep_the_platform_off(tmp_path: Path, token: str) -> None:
    home = home_with(tmp_path, env=f"TELEGRAM_BOT_TOKEN={token}\nSLACK_BOT_TOKEN={token}\nSLACK_APP_TOKEN=xapp\n")
    assert creds(home) == {}


def test_process_environment_is_ignored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", "from-the-shell")
    monkeypatch.setenv("API_SERVER_ENABLED", "true")
    home = home_with(tmp_path, env="DISCORD_BOT_TOKEN=disc-token\n")
    assert set(creds(home)) == {"discord-bot-token"} and profile_ports(home) == []


def test_non_ascii_is_stripped_from_credential_values(tmp_path: Path) -> None:
    home = home_with(tmp_path, env="TELEGRAM_BOT_TOKEN=12\u200b34:abc\u028b\n")
    assert creds(home)["telegram-bot-token"][0] == fp("1234:abc")


def test_whatsapp_session_identity(tmp_path: Path) -> None:
    home = home_with(tmp_path, env="WHATSAPP_ENABLED=true\n")
    assert creds(home) == {"whatsapp-session": (fp(str(home / "platforms" / "whatsapp" / "session")), ".env")}
    legacy = home / "whatsapp" / "session"
    legacy.mkdir(parents=True)
    (legacy / "creds.json").write_text("{}")
    assert creds(home)["whatsapp-session"][0] == fp(str(legacy))
    configured = home_with(
        tmp_path, config={"platforms": {"whatsapp": {"enabled": True, "extra": {"session_path": "/s"}}}}, name="w"
    )
    assert creds(configured) == {"whatsapp-session": (fp("/s"), "config.yaml")}


def test_salt_changes_fingerprints_not_kinds(tmp_path: Path) -> None:
    home = home_with(tmp_path, env="DISCORD_BOT_TOKEN=disc-token\n")
    a, b = profile_credentials(home, b"a"), profile_credentials(home, b"b")
    assert [c.kind for c in a] == [c.kind for c in b] and a[0].fingerprint != b[0].fingerprint


# --------------------------------------------------------------------------- ports


def test_port_defaults(tmp_path: Path) -> None:
    home = home_with(
        tmp_path,
        env=(
            "API_SERVER_ENABLED=true\nWEBHOOK_ENABLED=1\nMSGRAPH_WEBHOOK_ENABLED=yes\n"
            "TWILIO_ACCOUNT_SID=AC1\nTWILIO_AUTH_TOKEN=t\n"
            "BLUEBUBBLES_SERVER_URL=http://bb\nBLUEBUBBLES_PASSWORD=p\n"
            "WHATSAPP_CLOUD_PHONE_NUMBER_ID=1\nWHATSAPP_CLOUD_ACCESS_TOKEN=t\n"
            "WECOM_CALLBACK_CORP_ID=c\nWECOM_CALLBACK_CORP_SECRET=s\n"
            "LINE_CHANNEL_ACCESS_TOKEN=lt\nLINE_CHANNEL_SECRET=ls\n"
            "FEISHU_APP_ID=f\nFEISHU_APP_SECRET=s\nFEISHU_CONNECTION_MODE=webhook\nFEISHU_VERIFICATION_TOKEN=v\n"
        ),
    )
    assert sorted(profile_ports(home), key=lambda b: b.platform) == sorted([
        PortBinding("api_server", 8642, "127.0.0.1"),
        PortBinding("webhook", 8644, None),
        PortBinding("msgraph_webhook", 8646, "0.0.0.0"),
        PortBinding("sms", 8080, "127.0.0.1"),
        PortBinding("bluebubbles", 8645, "127.0.0.1"),
        PortBinding("whatsapp_cloud", 8090, "0.0.0.0"),
        PortBinding("wecom_callback", 8645, "0.0.0.0"),
        PortBinding("line", 8646, "0.0.0.0"),
        PortBinding("feishu", 8765, "127.0.0.1"),
    ], key=lambda b: b.platform)


def test_port_overrides_follow_upstream_precedence(tmp_path: Path) -> None:
    config = {"platforms": {"api_server": {"enabled": True, "extra": {"port": 9100, "host": "0.0.0.0"}}}}
    assert profile_ports(home_with(tmp_path, env="API_SERVER_PORT=9000\n", config=config, name="a")) == [
        PortBinding("api_server", 9100, "0.0.0.0")
    ]
    # Enabled from .env: the .env port is written over the YAML one.
    by_env = home_with(tmp_path, env="API_SERVER_KEY=k\nAPI_SERVER_PORT=9000\n", config=config, name="b")
    assert profile_ports(by_env) == [PortBinding("api_server", 9000, "0.0.0.0")]
    no_port = {"platforms": {"api_server": {"enabled": True}}}
    assert profile_ports(home_with(tmp_path, env="API_SERVER_PORT=9001\n", config=no_port, name="c")) == [
        PortBinding("api_server", 9001, "127.0.0.1")
    ]
    feishu = {"platforms": {"feishu": {"extra": {"app_id": "x", "connection_mode": "webhook", "webhook_port": 9300}}}}
    ready = "FEISHU_APP_SECRET=s\nFEISHU_ENCRYPT_KEY=k\n"
    assert profile_ports(home_with(tmp_path, env=f"FEISHU_WEBHOOK_PORT=9400\n{ready}", config=feishu, name="d")) == [
        PortBinding("feishu", 9300, "127.0.0.1")
    ]
    # The adapter's connect() gives up before binding without its secret, or in webhook mode
    # without a verification token or encrypt key: no port to claim.
    assert profile_ports(home_with(tmp_path, env="FEISHU_APP_SECRET=s\n", config=feishu, name="d2")) == []
    assert profile_ports(home_with(tmp_path, env="FEISHU_ENCRYPT_KEY=k\n", config=feishu, name="d3")) == []
    enabled_no_id = {"platforms": {"feishu": {"enabled": "yes", "extra": {"connection_mode": "webhook"}}}}
    assert profile_ports(home_with(tmp_path, env=ready, config=enabled_no_id, name="d4")) == []
    websocket = {"platforms": {"feishu": {"extra": {"app_id": "x"}}}}
    assert profile_ports(home_with(tmp_path, config=websocket, name="e")) == []
    assert profile_ports(home_with(tmp_path, env="API_SERVER_ENABLED=true\nAPI_SERVER_PORT=bad\n", name="f")) == [
        PortBinding("api_server", 8642, "127.0.0.1")
    ]


# --------------------------------------------------------------------------- malformed files


def test_malformed_config_names_file_and_line(tmp_path: Path) -> None:
    home = home_with(tmp_path, config="platforms:\n  telegram:\n    token: [unclosed\n")
    for call in (lambda: profile_credentials(home, SALT), lambda: profile_ports(home), lambda: load_config(home)):
        with pytest.raises(ProfileConfigError) as exc:
            call()
        assert exc.value.path == home / "config.yaml"
        assert exc.value.line is not None and exc.value.line >= 3
        assert str(home / "config.yaml") in str(exc.value)


def test_config_must_be_a_mapping(tmp_path: Path) -> None:
    with pytest.raises(ProfileConfigError, match="mapping"):
        load_config(home_with(tmp_path, config="- a\n- b\n"))
    assert load_config(home_with(tmp_path, config="", name="empty")) == {}


def test_malformed_env_names_file_and_line(tmp_path: Path) -> None:
    home = home_with(tmp_path, env="OK=1\n\nTELEGRAM_BOT_TOKEN='unterminated\n")
    with pytest.raises(ProfileConfigError) as exc:
        profile_credentials(home, SALT)
    assert exc.value.path == home / ".env" and exc.value.line == 3


def test_load_config_returns_a_fresh_copy(tmp_path: Path) -> None:
    home = home_with(tmp_path, config={"model": {"default": "m"}})
    load_config(home)["model"]["default"] = "changed"
    assert load_config(home) == {"model": {"default": "m"}}


def test_edits_are_seen_immediately(tmp_path: Path) -> None:
    home = home_with(tmp_path, env="DISCORD_BOT_TOKEN=first-token\n")
    assert creds(home)["discord-bot-token"][0] == fp("first-token")
    (home / ".env").write_text("DISCORD_BOT_TOKEN=second-token-longer\n")
    assert creds(home)["discord-bot-token"][0] == fp("second-token-longer")


# Speed is the benchmark's (tests/benchmarks/run.sh: "scan of 1000 profiles <= 0.5 s"), not a timed
# assertion here, which the load of another process could fail.


# --------------------------------------------------------------------------- differential test against hermes-agent

ENV_KEYS = [
    "TELEGRAM_BOT_TOKEN", "DISCORD_BOT_TOKEN", "SLACK_BOT_TOKEN", "SLACK_APP_TOKEN", "SIGNAL_HTTP_URL",
    "SIGNAL_ACCOUNT", "WEIXIN_TOKEN", "WEIXIN_ACCOUNT_ID", "QQ_APP_ID", "QQ_CLIENT_SECRET", "YUANBAO_APP_ID",
    "YUANBAO_APP_KEY", "YUANBAO_APP_SECRET", "FEISHU_APP_ID", "FEISHU_APP_SECRET", "FEISHU_CONNECTION_MODE",
    "FEISHU_WEBHOOK_PORT", "WHATSAPP_ENABLED", "IRC_SERVER", "IRC_CHANNEL", "IRC_NICKNAME",
    "LINE_CHANNEL_ACCESS_TOKEN", "LINE_CHANNEL_SECRET", "LINE_PORT", "API_SERVER_ENABLED", "API_SERVER_KEY",
    "API_SERVER_PORT", "WEBHOOK_ENABLED", "WEBHOOK_PORT", "MSGRAPH_WEBHOOK_ENABLED", "MSGRAPH_WEBHOOK_PORT",
    "TWILIO_ACCOUNT_SID", "TWILIO_AUTH_TOKEN", "SMS_WEBHOOK_PORT", "BLUEBUBBLES_SERVER_URL",
    "BLUEBUBBLES_PASSWORD", "BLUEBUBBLES_WEBHOOK_PORT", "WHATSAPP_CLOUD_PHONE_NUMBER_ID",
    "WHATSAPP_CLOUD_ACCESS_TOKEN", "WHATSAPP_CLOUD_WEBHOOK_PORT", "WECOM_CALLBACK_CORP_ID",
    "WECOM_CALLBACK_CORP_SECRET", "WECOM_CALLBACK_PORT", "FEISHU_VERIFICATION_TOKEN", "FEISHU_ENCRYPT_KEY",
]
VALUES = ["tok-aaaa", "tok-bbbb", "9100", "9200", "true", "false", "webhook", "abc", "changeme", "yes", "", "0", "on"]
PLATFORMS = [
    "telegram", "discord", "slack", "signal", "weixin", "qqbot", "yuanbao", "feishu", "whatsapp", "irc", "line",
    "api_server", "webhook", "msgraph_webhook", "sms", "bluebubbles", "whatsapp_cloud", "wecom_callback",
]
EXTRA_KEYS = [
    "app_id", "app_secret", "port", "webhook_port", "connection_mode", "account", "http_url", "server",
    "channel", "nickname", "channel_access_token", "channel_secret", "corp_id", "session_path", "token",
    "verification_token", "encrypt_key",
]
ENABLED = st.sampled_from([True, False, "yes", "off", None])

block = st.fixed_dictionaries(
    {},
    optional={
        "enabled": ENABLED,
        "token": st.sampled_from(VALUES),
        "extra": st.dictionaries(st.sampled_from(EXTRA_KEYS), st.sampled_from([*VALUES, 9300]), max_size=4),
        "require_mention": st.booleans(),
    },
)
config = st.dictionaries(
    st.sampled_from(["platforms", "gateway.platforms", "top"]),
    st.dictionaries(st.sampled_from(PLATFORMS), block, max_size=4),
    max_size=3,
)
profile_files = st.tuples(st.dictionaries(st.sampled_from(ENV_KEYS), st.sampled_from(VALUES), max_size=8), config)


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


def _oracle(homes: list[Path]) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, str(HERE / "upstream_oracle.py"), *map(str, homes)],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


@pytest.mark.skipif(
    subprocess.run([sys.executable, "-c", "import gateway.config"], capture_output=True).returncode != 0,
    reason="hermes-agent is not installed",
)
@settings(
    max_examples=6,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # no shrinking: each example is a subprocess
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.lists(profile_files, min_size=30, max_size=30))
def test_agrees_with_upstream_gateway_config(tmp_path_factory: pytest.TempPathFactory, profiles: list) -> None:
    """The credentials and ports we derive equal what hermes-agent's own config loader enables."""
    base = tmp_path_factory.mktemp("diff")
    homes = []
    for i, (env, spec) in enumerate(profiles):
        lines = "".join(f"{k}={v}\n" for k, v in env.items())
        homes.append(home_with(base, env=lines, config=_config_yaml(spec) if spec else None, name=f"h{i}"))
    upstream = _oracle(homes)
    for home, (env, spec) in zip(homes, profiles, strict=True):
        theirs = upstream[str(home)]
        mine = {c.kind: c.fingerprint for c in profile_credentials(home, SALT)}
        expected = {kind: fp(value) for kind, value in theirs["credentials"].items()}
        assert mine == expected, f"credentials differ for env={env} config={_config_yaml(spec)}"
        ports = {b.platform: b.port for b in profile_ports(home)}
        assert ports == theirs["ports"], f"ports differ for env={env} config={_config_yaml(spec)}"
