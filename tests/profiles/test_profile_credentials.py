"""Platform credentials and ports read from a profile's .env and config.yaml, as the gateway would."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from profiles.credentials import (
    Credential,
    credential_kinds,
    fingerprint,
    load_config,
    profile_credentials,
    profile_ports,
)
from profiles.errors import ProfileConfigError
from profiles.upstream.platforms import PortBinding

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
            "QQ_APP_ID=qq1\nQQ_CLIENT_SECRET=s\nYUANBAO_APP_KEY=yb1\nYUANBAO_APP_SECRET=s\n"
            "FEISHU_APP_ID=cli_a\nFEISHU_APP_SECRET=s\nWEIXIN_TOKEN=wx-token\nWEIXIN_ACCOUNT_ID=acc\n"
        ),
    )
    assert creds(home) == {
        "telegram-bot-token": (fp("123:tele"), ".env"),
        "discord-bot-token": (fp("disc-token"), ".env"),
        "slack-app-token": (fp("xapp-app"), ".env"),
        "signal-phone": (fp("+15550001"), ".env"),
        "irc": (fp("irc.libera.chat:herm"), ".env"),
        "line": (fp(hashlib.sha256(b"line-token").hexdigest()[:16]), ".env"),  # LINE locks the token's hash
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


KEY = "k-0123456789abcdef"  # the API server refuses a key shorter than 16 characters


def test_port_defaults(tmp_path: Path) -> None:
    home = home_with(
        tmp_path,
        env=(
            f"API_SERVER_ENABLED=true\nAPI_SERVER_KEY={KEY}\nWEBHOOK_ENABLED=1\nWEBHOOK_SECRET=s\n"
            "MSGRAPH_WEBHOOK_ENABLED=yes\nMSGRAPH_WEBHOOK_CLIENT_STATE=cs\nMSGRAPH_WEBHOOK_ALLOWED_SOURCE_CIDRS=10.0.0.0/8\n"
            "TWILIO_ACCOUNT_SID=AC1\nTWILIO_AUTH_TOKEN=t\nTWILIO_PHONE_NUMBER=+1555\nSMS_WEBHOOK_URL=https://x/t\n"
            "BLUEBUBBLES_SERVER_URL=http://bb\nBLUEBUBBLES_PASSWORD=p\n"
            "WHATSAPP_CLOUD_PHONE_NUMBER_ID=1\nWHATSAPP_CLOUD_ACCESS_TOKEN=t\n"
            "WECOM_CALLBACK_CORP_ID=c\nWECOM_CALLBACK_CORP_SECRET=s\n"
            "LINE_CHANNEL_ACCESS_TOKEN=lt\nLINE_CHANNEL_SECRET=ls\n"
            "FEISHU_APP_ID=f\nFEISHU_APP_SECRET=s\nFEISHU_CONNECTION_MODE=webhook\nFEISHU_VERIFICATION_TOKEN=v\n"
            "TELEGRAM_BOT_TOKEN=123:tok\nTELEGRAM_WEBHOOK_URL=https://x/tg\nTELEGRAM_WEBHOOK_SECRET=s\n"
            "TEAMS_CLIENT_ID=c\nTEAMS_CLIENT_SECRET=s\nTEAMS_TENANT_ID=t\nWHATSAPP_ENABLED=true\n"
        ),
    )
    assert sorted(profile_ports(home), key=lambda b: b.platform) == sorted([
        PortBinding("api_server", 8642, "127.0.0.1"),
        PortBinding("webhook", 8644, None),
        PortBinding("msgraph_webhook", 8646, None),
        PortBinding("sms", 8080, "127.0.0.1"),
        PortBinding("bluebubbles", 8645, "127.0.0.1"),
        PortBinding("whatsapp_cloud", 8090, None),
        PortBinding("wecom_callback", 8645, None),
        PortBinding("line", 8646, None),
        PortBinding("feishu", 8765, "127.0.0.1"),
        PortBinding("telegram", 8443, None),
        PortBinding("teams", 3978, None),
        PortBinding("whatsapp", 3000, "127.0.0.1"),
    ], key=lambda b: b.platform)


@pytest.mark.parametrize(("env", "why"), [
    ("API_SERVER_ENABLED=true\n", "no key"),
    ("API_SERVER_ENABLED=true\nAPI_SERVER_KEY=short-key\n", "a key under 16 characters"),
    ("WEBHOOK_ENABLED=true\n", "(none): routes need a secret only when there are routes"),
    ("MSGRAPH_WEBHOOK_ENABLED=true\n", "no client_state"),
    ("MSGRAPH_WEBHOOK_ENABLED=true\nMSGRAPH_WEBHOOK_CLIENT_STATE=cs\n", "all interfaces without source CIDRs"),
    ("TWILIO_ACCOUNT_SID=AC1\nTWILIO_AUTH_TOKEN=t\nSMS_WEBHOOK_URL=https://x\n", "no sending number"),
    ("TWILIO_ACCOUNT_SID=AC1\nTWILIO_AUTH_TOKEN=t\nTWILIO_PHONE_NUMBER=+1\n", "no webhook URL"),
    ("TWILIO_ACCOUNT_SID=AC1\nTWILIO_AUTH_TOKEN=\nTWILIO_PHONE_NUMBER=+1\nSMS_WEBHOOK_URL=https://x\n", "empty token"),
    ("FEISHU_APP_ID=f\nFEISHU_APP_SECRET=s\nFEISHU_CONNECTION_MODE=webhook\n", "webhook mode unsigned"),
    ("FEISHU_APP_ID=f\nFEISHU_APP_SECRET=s\nFEISHU_CONNECTION_MODE=webhook\nFEISHU_ENCRYPT_KEY=k\n"
     "FEISHU_WEBHOOK_PORT=abc\n", "a port that is not a number"),
    ("TELEGRAM_BOT_TOKEN=123:tok\nTELEGRAM_WEBHOOK_URL=https://x/tg\n", "webhook mode without its secret"),
])
def test_no_listener_where_the_adapter_refuses_to_listen(tmp_path: Path, env: str, why: str) -> None:
    ports = profile_ports(home_with(tmp_path, env=env))
    if why.startswith("(none)"):
        assert ports == [PortBinding("webhook", 8644, None)]
    else:
        assert ports == [], why


def test_port_overrides_follow_upstream_precedence(tmp_path: Path) -> None:
    config = {"platforms": {"api_server": {"enabled": True, "extra": {"port": 9100, "host": "0.0.0.0", "key": KEY}}}}
    assert profile_ports(home_with(tmp_path, env="API_SERVER_PORT=9000\n", config=config, name="a")) == [
        PortBinding("api_server", 9100, None)
    ]
    # Enabled from .env: the .env port is written over the YAML one.
    by_env = home_with(tmp_path, env=f"API_SERVER_KEY={KEY}\nAPI_SERVER_PORT=9000\n", config=config, name="b")
    assert profile_ports(by_env) == [PortBinding("api_server", 9000, None)]
    no_port = {"platforms": {"api_server": {"enabled": True, "extra": {"key": KEY}}}}
    assert profile_ports(home_with(tmp_path, env="API_SERVER_PORT=9001\n", config=no_port, name="c")) == [
        PortBinding("api_server", 9001, "127.0.0.1")
    ]
    # A host variable set but empty binds all interfaces (the adapter reads it with os.getenv).
    assert profile_ports(home_with(tmp_path, env="API_SERVER_HOST=\n", config=no_port, name="c2")) == [
        PortBinding("api_server", 8642, None)
    ]
    feishu = {"platforms": {"feishu": {"extra": {"app_id": "x", "connection_mode": "webhook", "webhook_port": 9300}}}}
    ready = "FEISHU_APP_SECRET=s\nFEISHU_ENCRYPT_KEY=k\n"
    assert profile_ports(home_with(tmp_path, env=f"FEISHU_WEBHOOK_PORT=9400\n{ready}", config=feishu, name="d")) == [
        PortBinding("feishu", 9300, "127.0.0.1")
    ]
    assert profile_ports(home_with(tmp_path, env="FEISHU_APP_SECRET=s\n", config=feishu, name="d2")) == []
    assert profile_ports(home_with(tmp_path, env="FEISHU_ENCRYPT_KEY=k\n", config=feishu, name="d3")) == []
    enabled_no_id = {"platforms": {"feishu": {"enabled": "yes", "extra": {"connection_mode": "webhook"}}}}
    assert profile_ports(home_with(tmp_path, env=ready, config=enabled_no_id, name="d4")) == []
    websocket = {"platforms": {"feishu": {"extra": {"app_id": "x"}}}}
    assert profile_ports(home_with(tmp_path, config=websocket, name="e")) == []
    assert profile_ports(home_with(tmp_path, env=f"API_SERVER_KEY={KEY}\nAPI_SERVER_PORT=bad\n", name="f")) == [
        PortBinding("api_server", 8642, "127.0.0.1")
    ]
    # WeCom callback port 0 is its default (``or 8645``); elsewhere port 0 is any free port: no claim.
    wecom = "WECOM_CALLBACK_CORP_ID=c\nWECOM_CALLBACK_CORP_SECRET=s\nWECOM_CALLBACK_PORT=0\n"
    assert profile_ports(home_with(tmp_path, env=wecom, name="g")) == [PortBinding("wecom_callback", 8645, None)]
    assert profile_ports(home_with(tmp_path, env=f"API_SERVER_KEY={KEY}\nAPI_SERVER_PORT=0\n", name="h")) == []


# --------------------------------------------------------------------------- how the gateway's environment is built


def test_op_env_fills_what_env_leaves_unset(tmp_path: Path) -> None:
    home = home_with(tmp_path, env="TELEGRAM_BOT_TOKEN=from-env\n")
    (home / ".op.env").write_text("TELEGRAM_BOT_TOKEN=from-op\nDISCORD_BOT_TOKEN=disc-op\n")
    assert creds(home) == {"telegram-bot-token": (fp("from-env"), ".env"),
                           "discord-bot-token": (fp("disc-op"), ".op.env")}
    # With the 1Password bootstrap token already set, upstream does not load .op.env at all.
    (home / ".env").write_text("TELEGRAM_BOT_TOKEN=from-env\nOP_SERVICE_ACCOUNT_TOKEN=ops\n")
    assert set(creds(home)) == {"telegram-bot-token"}


def test_top_level_config_scalars_reach_the_environment(tmp_path: Path) -> None:
    config = "TELEGRAM_BOT_TOKEN: yaml-token\nWEBHOOK_ENABLED: true\nDISCORD_BOT_TOKEN: ${TOK}\n"
    home = home_with(tmp_path, env="TOK=disc-expanded\n", config=config)
    assert creds(home) == {"telegram-bot-token": (fp("yaml-token"), "config.yaml"),
                           "discord-bot-token": (fp("disc-expanded"), "config.yaml")}
    assert profile_ports(home) == [PortBinding("webhook", 8644, None)]  # true → "True", truthy upstream
    # .env wins over the bridge (it only fills names still unset).
    assert creds(home_with(tmp_path, env="TELEGRAM_BOT_TOKEN=env-token\n", config=config, name="b"))[
        "telegram-bot-token"] == (fp("env-token"), ".env")


def test_two_settings_run_together_are_split_as_upstream_splits_them(tmp_path: Path) -> None:
    home = home_with(tmp_path, env=f"TELEGRAM_BOT_TOKEN=123:abcAPI_SERVER_KEY={KEY}\nAPI_SERVER_ENABLED=true\n")
    assert creds(home) == {"telegram-bot-token": (fp("123:abc"), ".env")}
    assert profile_ports(home) == [PortBinding("api_server", 8642, "127.0.0.1")]
    # A name upstream does not know (FEISHU_CONNECTION_MODE) is not split off: the value keeps it.
    unsplit = home_with(tmp_path, env="TELEGRAM_BOT_TOKEN=123:abcFEISHU_CONNECTION_MODE=webhook\n", name="b")
    assert creds(unsplit) == {"telegram-bot-token": (fp("123:abcFEISHU_CONNECTION_MODE=webhook"), ".env")}


def test_a_disabled_plugin_builds_no_adapter(tmp_path: Path) -> None:
    env = "TELEGRAM_BOT_TOKEN=123:tok\nIRC_SERVER=irc.example\nIRC_CHANNEL=#c\n"
    for entry, kept in (("telegram-platform", {"irc"}), ("telegram", {"telegram-bot-token", "irc"}),
                        ("platforms/telegram", {"telegram-bot-token", "irc"})):
        home = home_with(tmp_path, env=env, config={"plugins": {"disabled": [entry]}}, name=entry.replace("/", "_"))
        assert set(creds(home)) == kept, entry


def test_locks_exactly_what_each_adapter_locks(tmp_path: Path) -> None:
    # Weixin needs its account id, QQ its client secret, Yuanbao a non-blank secret.
    assert creds(home_with(tmp_path, env="WEIXIN_TOKEN=wx\n", name="a")) == {}
    assert creds(home_with(tmp_path, env="QQ_APP_ID=qq1\n", name="b")) == {}
    assert creds(home_with(tmp_path, env="YUANBAO_APP_ID=yb\n", config={"YUANBAO_APP_SECRET": " "}, name="c")) == {}
    # IRC and LINE set only in config.yaml: their plugins' checks read the environment, no adapter.
    irc = {"platforms": {"irc": {"enabled": True, "extra": {"server": "irc.example", "channel": "#c"}}}}
    assert creds(home_with(tmp_path, config=irc, name="d")) == {}
    # Signal: URL from .env, account from config.yaml; YAML values are locked as written.
    signal = {"platforms": {"signal": {"enabled": True, "extra": {"account": " +15550001 "}}}}
    assert creds(home_with(tmp_path, env="SIGNAL_HTTP_URL=http://s\n", config=signal, name="e")) == {
        "signal-phone": (fp(" +15550001 "), "config.yaml")}
    telegram = {"platforms": {"telegram": {"enabled": True, "token": " 123:tok "}}}
    assert creds(home_with(tmp_path, config=telegram, name="f")) == {
        "telegram-bot-token": (fp(" 123:tok "), "config.yaml")}


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


# The comparison with upstream's running code is tests/profiles/test_gateway_oracle.py.
