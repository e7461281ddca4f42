"""The platform and file rules of each line of releases, on hand-written profiles.

Each case is a rule read from that line's upstream code (``gateway/config.py``,
``gateway/config_env.py``, the adapters) and checked against that code running by the gateway
oracle on the release matrix (``tests/profiles/test_gateway_oracle.py`` via
``scripts/test-releases.sh``); here they are pinned so a change to one line's rules cannot quietly
change another's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from profiles.credentials import fingerprint
from profiles.snapshot import read_profile
from profiles.upstream.lines import BASELINE, LINES, V019, V020, V022, line_for, unmodelled
from profiles.upstream.nostr import public_key
from profiles.upstream.process import lock_dir
from profiles.upstream.releases import KNOWN, Contract, contract_for
from supervisor.plan.verdict import Candidate, HoldKind, judge

SALT = b"lines"
KEY = "0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f20"
NSEC = "nsec1qypqxpq9qcrsszg2pvxq6rs0zqg3yyc5z5tpwxqergd3c8g7rusqpqcc2y"  # the same key, bech32


def home(tmp_path: Path, env: str = "", config: Any = None, name: str = "p", op_env: str = "") -> Path:
    folder = tmp_path / name
    folder.mkdir(parents=True, exist_ok=True)
    if env:
        (folder / ".env").write_text(env)
    if op_env:
        (folder / ".op.env").write_text(op_env)
    if config is not None:
        (folder / "config.yaml").write_text(yaml.safe_dump(config))
    return folder


def facts(folder: Path, line: Any = BASELINE) -> Any:
    f = read_profile(folder.name, folder, SALT, line)
    assert f.ok, f.problems
    return f


def claims(folder: Path, line: Any) -> set[str]:
    return {f"{c.platform}:{c.what}:{c.key if c.kind == 'port' else ''}" for c in facts(folder, line).claims}


# --------------------------------------------------------------------------- which line a release gets


def test_every_measured_row_names_a_line_and_later_releases_follow_theirs() -> None:
    assert {c.rules for c in KNOWN} <= set(LINES)
    assert line_for(contract_for("0.19.0")) is V019  # type: ignore[arg-type]
    assert line_for(contract_for("0.20.1")) is V020  # type: ignore[arg-type]
    assert line_for(contract_for("0.22.2")) is V022  # type: ignore[arg-type]
    per_profile = {"gateway.host_attach": False, "hermes_cli.gateway_multiplex_mode": False}
    newer = contract_for("0.20.7", per_profile)  # a per-profile release no row names: the newest such row's rules
    assert isinstance(newer, Contract) and not newer.exact and line_for(newer) is V020
    marked = contract_for("0.0.0", {"gateway.host_attach": True})  # upstream main without a stamp
    assert isinstance(marked, Contract) and line_for(marked) is V022
    assert line_for(None) is BASELINE


def test_a_platform_the_code_no_longer_ships_is_never_enabled(tmp_path: Path) -> None:
    folder = home(tmp_path, "HASS_TOKEN=tok-aaaa-1111\n")
    assert "homeassistant" in facts(folder, V020).platforms
    assert "homeassistant" not in facts(folder, V022).platforms  # left the core on 0.22
    shipped = {p: () for p in V020.platforms - {"homeassistant"}}
    assert "homeassistant" not in facts(folder, line_for(contract_for("0.20.1"), shipped)).platforms  # type: ignore[arg-type]


def test_platforms_a_release_ships_and_hermesd_cannot_model_are_named_with_their_variables() -> None:
    shipped = {**{p: () for p in V022.platforms}, "zulip": ("ZULIP_API_KEY", "ZULIP_SITE", "ZCHAT_TOKEN")}
    assert unmodelled(V022, shipped) == {"zulip": ("ZULIP_", "ZCHAT_TOKEN", "ZULIP_API_KEY", "ZULIP_SITE")}
    assert unmodelled(V022, {p: () for p in V022.platforms}) == {}


# --------------------------------------------------------------------------- an explicit off in config.yaml


@pytest.mark.parametrize("platform,env", [
    ("qqbot", "QQ_APP_ID=id-1\nQQ_CLIENT_SECRET=sec-1111\n"),
    ("yuanbao", "YUANBAO_APP_ID=id-1\nYUANBAO_APP_SECRET=sec-1111\n"),
    ("whatsapp_cloud", "WHATSAPP_CLOUD_PHONE_NUMBER_ID=id-1\nWHATSAPP_CLOUD_ACCESS_TOKEN=tok-aaaa-1111\n"),
    ("sms", "TWILIO_ACCOUNT_SID=id-1\nTWILIO_AUTH_TOKEN=sec-1111\n"),
    ("api_server", "API_SERVER_KEY=k-0123456789abcdef-long\n"),
    ("whatsapp", "WHATSAPP_ENABLED=true\n"),
])
@pytest.mark.parametrize("off", [False, "off", None])
def test_an_explicit_off_beats_the_environment_from_0_22_on(tmp_path: Path, platform: str, env: str, off: Any) -> None:
    folder = home(tmp_path, env, {"platforms": {platform: {"enabled": off}}})
    assert platform in facts(folder, V019).platforms  # the .env block still forced it on
    assert (platform in facts(folder, V020).platforms) is (platform != "api_server")  # 0.20: the API server yields
    assert platform not in facts(folder, V022).platforms
    assert not {c for c in facts(folder, V022).claims if c.platform == platform}


# --------------------------------------------------------------------------- the API server


def test_the_api_server_needs_a_usable_key_from_0_20_on(tmp_path: Path) -> None:
    flag_only = home(tmp_path, "API_SERVER_ENABLED=true\n", name="flag")
    short = home(tmp_path, "API_SERVER_ENABLED=true\nAPI_SERVER_KEY=short-key\n", name="short")
    good = home(tmp_path, "API_SERVER_KEY=k-0123456789abcdef-long\nAPI_SERVER_PORT=8100\n", name="good")
    for line in (V020, V022):
        assert "api_server" not in facts(flag_only, line).platforms
        assert "api_server" not in facts(short, line).platforms
        assert claims(good, line) == {"api_server:port:8100"}
    assert "api_server" in facts(flag_only, V019).platforms  # enabled, but listens without no key
    assert claims(flag_only, V019) == set()


def test_block_keys_reach_the_adapter_from_0_20_on(tmp_path: Path) -> None:
    folder = home(tmp_path, "API_SERVER_KEY=k-0123456789abcdef-long\n",
                  {"gateway": {"api_server": {"port": 8105}},
                   "platforms": {"webhook": {"enabled": True, "port": 8106}}})
    assert claims(folder, V019) == {"api_server:port:8642", "webhook:port:8644"}
    assert claims(folder, V020) == {"api_server:port:8105", "webhook:port:8106"}
    assert claims(folder, V022) == {"api_server:port:8105", "webhook:port:8106"}


# --------------------------------------------------------------------------- webhooks and the relay


def test_a_webhook_secret_in_env_beside_a_yaml_enabled_webhook_listens_on_0_22(tmp_path: Path) -> None:
    folder = home(tmp_path, "WEBHOOK_SECRET=sec-1111\n",
                  {"platforms": {"webhook": {"enabled": True, "extra": {"routes": {"r": {}}}}}})
    assert claims(folder, V019) == claims(folder, V020) == set()  # a route without a secret: no listener
    assert claims(folder, V022) == {"webhook:port:8644"}


def test_a_relay_in_the_environment_switches_direct_platforms_off_on_0_22(tmp_path: Path) -> None:
    env = "GATEWAY_RELAY_URL=wss://relay.example\nTELEGRAM_BOT_TOKEN=123456:abcd\nAPI_SERVER_KEY=k-0123456789abcdef-long\n"
    relayed = home(tmp_path, env, name="relayed")
    assert set(facts(relayed, V020).platforms) >= {"relay", "telegram", "api_server"}
    assert set(facts(relayed, V022).platforms) == {"relay", "api_server"}
    assert claims(relayed, V022) == {"api_server:port:8642"}
    direct = home(tmp_path, env + "GATEWAY_RELAY_ALLOW_DIRECT_PLATFORMS=true\n", name="direct")
    assert "telegram" in facts(direct, V022).platforms
    opted_out = home(tmp_path, env, {"platforms": {"relay": {"enabled": False}}}, name="optout")
    assert "telegram" in facts(opted_out, V022).platforms  # a relay switched off owns nothing


# --------------------------------------------------------------------------- .env lines


def test_two_settings_run_together_are_split_only_by_0_19(tmp_path: Path) -> None:
    folder = home(tmp_path, "DISCORD_BOT_TOKEN=tok-aaaa-1111IRC_SERVER=irc.example\n")
    assert facts(folder, V019).env == {"DISCORD_BOT_TOKEN": "tok-aaaa-1111", "IRC_SERVER": "irc.example"}
    assert facts(folder, V022).env == {"DISCORD_BOT_TOKEN": "tok-aaaa-1111IRC_SERVER=irc.example"}


@pytest.mark.parametrize("flag,on", [(" false", True), ("false", False), ("true ", True), (" no", True), ("NO", False)])
def test_the_whatsapp_flag_is_false_only_as_written(tmp_path: Path, flag: str, on: bool) -> None:
    # " false" is neither true (trimmed) nor false (lower-cased, not trimmed): config.yaml's
    # ``enabled: true`` stands.
    folder = home(tmp_path, f'WHATSAPP_ENABLED="{flag}"\n', {"platforms": {"whatsapp": {"enabled": True}}})
    for line in (V019, V020, V022):
        assert ("whatsapp" in facts(folder, line).platforms) is on


# --------------------------------------------------------------------------- the platforms that arrived


def test_two_profiles_on_one_buzz_identity_conflict(tmp_path: Path) -> None:
    a = home(tmp_path, f"BUZZ_RELAY_URL=https://relay.example\nBUZZ_PRIVATE_KEY={KEY}\n", name="a")
    b = home(tmp_path, f"BUZZ_PRIVATE_KEY={NSEC}\n",
             {"platforms": {"buzz": {"extra": {"relay_url": " https://relay.example "}}}}, name="b")
    other_relay = home(tmp_path, f"BUZZ_RELAY_URL=https://other.example\nBUZZ_PRIVATE_KEY={KEY}\n", name="c")
    assert facts(a, V019).claims == ()  # no Buzz before 0.20
    identity = fingerprint(f"https://relay.example:{public_key(KEY)}", SALT)
    fa, fb, fc = facts(a, V022), facts(b, V022), facts(other_relay, V022)
    assert [(x.platform, x.what, x.key) for x in fa.claims] == [("buzz", "buzz", identity)]
    assert [(x.platform, x.what, x.key) for x in fb.claims] == [("buzz", "buzz", identity)]  # hex or nsec: one key
    assert fc.claims and fc.claims[0].key != identity
    holds = judge([Candidate(fa, "a"), Candidate(fb, "b"), Candidate(fc, "c")])
    assert holds["a"] is None and holds["c"] is None
    assert holds["b"] is not None and holds["b"].kind is HoldKind.CREDENTIAL_CONFLICT


def test_an_invalid_buzz_key_claims_nothing(tmp_path: Path) -> None:
    folder = home(tmp_path, "BUZZ_RELAY_URL=https://relay.example\nBUZZ_PRIVATE_KEY=abc\n")
    assert "buzz" in facts(folder, V020).platforms and facts(folder, V020).claims == ()


def test_a2a_listens_on_loopback_unless_a_token_widens_it(tmp_path: Path) -> None:
    plain = home(tmp_path, "A2A_PORT=9905\nA2A_HOST=0.0.0.0\n", name="plain")
    token = home(tmp_path, "A2A_PORT=9906\nA2A_HOST=0.0.0.0\nA2A_BEARER_TOKEN=tok\n", name="token")
    enabled = home(tmp_path, "", {"platforms": {"a2a": {"extra": {"enabled": True}}}}, name="enabled")
    assert claims(plain, V019) == set()
    assert claims(plain, V022) == {"a2a:port:9905"} and claims(token, V022) == {"a2a:port:9906"}
    assert claims(enabled, V020) == {"a2a:port:9900"}
    bad = home(tmp_path, "A2A_PORT=abc\n", name="bad")
    assert "a2a" in facts(bad, V022).platforms and claims(bad, V022) == set()  # no adapter: no listener


@pytest.mark.parametrize("line", [V019, V020, V022])
def test_photon_enabled_without_a_project_secret_starts_no_sidecar(tmp_path: Path, line: Any) -> None:
    """Found by the oracle on 0.20.1: ``enabled: yes`` with an empty secret is enabled in upstream's
    configuration, but the registry's ``validate_config`` builds no adapter, so no sidecar listens."""
    config = {"gateway": {"platforms": {"photon": {"enabled": "yes", "project_secret": ""}}}}
    bare = home(tmp_path, "", config, name="bare", op_env="PHOTON_PROJECT_ID='id-1'\nPHOTON_SIDECAR_PORT=8100\n")
    full = home(tmp_path, "PHOTON_PROJECT_SECRET=s\n", config, name="full",
                op_env="PHOTON_PROJECT_ID='id-1'\nPHOTON_SIDECAR_PORT=8100\n")
    assert "photon" in facts(bare, line).platforms and claims(bare, line) == set()
    assert claims(full, line) == {"photon:port:8100"}


# --------------------------------------------------------------------------- beside the platforms


def test_the_lock_folder_with_an_empty_or_relative_state_home() -> None:
    env = {"HOME": "/h", "XDG_STATE_HOME": ""}
    assert lock_dir(env, cwd="/srv/p") == "/srv/p/hermes/gateway-locks"  # up to 0.21: the working folder
    assert lock_dir(env, cwd="/srv/p", relative_state_ignored=True) == "/h/.local/state/hermes/gateway-locks"
    assert lock_dir({"HOME": "/h", "XDG_STATE_HOME": "rel"}, cwd="/x", relative_state_ignored=True) == \
        "/h/.local/state/hermes/gateway-locks"
    assert lock_dir({"HOME": "/h", "HERMES_GATEWAY_LOCK_DIR": "", "XDG_STATE_HOME": "/s"}) == "/s/hermes/gateway-locks"


def test_lock_variables_from_config_yaml_and_op_env_reach_the_gateway(tmp_path: Path) -> None:
    folder = home(tmp_path, "", {"XDG_STATE_HOME": "/from-config"}, op_env="HERMES_GATEWAY_LOCK_DIR=/from-op\n")
    env = facts(folder).gateway_environment({"HOME": "/h"})
    assert env["XDG_STATE_HOME"] == "/from-config" and env["HERMES_GATEWAY_LOCK_DIR"] == "/from-op"
    set_by_hermesd = facts(folder).gateway_environment({"HOME": "/h", "XDG_STATE_HOME": "/hermesd"})
    assert set_by_hermesd["XDG_STATE_HOME"] == "/hermesd"  # config.yaml only fills what is unset


@pytest.mark.parametrize("env,config,drain", [
    ("HERMES_RESTART_DRAIN_TIMEOUT=45\n", None, 45.0),
    ("HERMES_RESTART_DRAIN_TIMEOUT= 45 \n", None, 45.0),
    ("HERMES_RESTART_DRAIN_TIMEOUT=abc\n", None, 0.0),
    ("HERMES_RESTART_DRAIN_TIMEOUT=45\n", {"agent": {"restart_drain_timeout": 20}}, 20.0),  # config.yaml wins
    ("HERMES_RESTART_DRAIN_TIMEOUT=45\n", {"agent": {"restart_drain_timeout": None}}, 0.0),  # even unusable
    ("", {"HERMES_RESTART_DRAIN_TIMEOUT": 30}, 30.0),  # a top-level setting bridged into the environment
])
def test_the_drain_timeout_comes_from_config_yaml_else_the_environment(tmp_path: Path, env: str, config: Any,
                                                                       drain: float) -> None:
    assert facts(home(tmp_path, env, config)).drain_s == drain


@pytest.mark.parametrize("line,env,config,overridden", [
    (V019, "HERMES_DISABLE_LAZY_INSTALLS=true\n", None, True),  # compared with "1"
    (V022, "HERMES_DISABLE_LAZY_INSTALLS=true\n", None, False),  # trimmed, 1/true/yes
    (V019, "HERMES_LAZY_INSTALL_TARGET=/opt/lazy\n", None, True),  # installs redirected there: allowed
    (V022, "HERMES_LAZY_INSTALL_TARGET=/opt/lazy\n", None, False),
    (V019, "", {"HERMES_LAZY_INSTALL_TARGET": "/opt/lazy"}, True),  # from config.yaml's top level too
    (V019, "HERMES_DISABLE_LAZY_INSTALLS=0\n", {"security": {"allow_lazy_installs": False}}, False),
])
def test_lazy_installs_switched_back_on_by_a_profile_are_an_override(tmp_path: Path, line: Any, env: str,
                                                                     config: Any, overridden: bool) -> None:
    found = facts(home(tmp_path, env, config), line).overrides
    assert bool([o for o in found if o.variable.name == "HERMES_DISABLE_LAZY_INSTALLS"]) is overridden
