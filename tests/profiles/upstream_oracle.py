"""Ask the real hermes-agent what a profile's gateway would enable, for differential tests.

Run as ``python upstream_oracle.py HOME...``; prints one JSON object per home with the
credential identities and listeners computed from upstream's own ``load_gateway_config``
after loading the profile's ``.env`` exactly as the gateway does (with override, into a
scrubbed environment). The identity of each platform is then read off its
``PlatformConfig`` with the formula its adapter's ``connect`` uses.

Platform SDKs are not installed in the test environment; upstream's plugin pass would
then refuse to enable any plugin platform. hermesd assumes a platform is installable, so
the oracle replaces each plugin's requirement check with its configuration part only (the
environment variables it reads: IRC, LINE, SMS, email, DingTalk, Matrix, Google Chat, ntfy,
SimpleX; libraries, programs and files count as present). ``enabled`` lists every platform
``load_gateway_config`` enables, sorted.

``python upstream_oracle.py --real-checks HOME...`` keeps upstream's own requirement checks
(lazy installs disabled, as hermesd runs gateways): what upstream enables with this
interpreter's libraries, including the plugin platforms it then silently never enables.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

BASE_ENV = {k: os.environ[k] for k in ("PATH", "HOME", "LANG") if k in os.environ}
BASE_ENV["HERMES_DISABLE_LAZY_INSTALLS"] = "1"


def _env_check(*names: str) -> Any:
    return lambda: all(os.environ.get(n) for n in names)


def _stripped(*names: str) -> Any:
    return lambda: all(os.environ.get(n, "").strip() for n in names)


def _google_chat_env() -> bool:  # _check_for_registry without check_google_chat_requirements
    project = os.getenv("GOOGLE_CHAT_PROJECT_ID") or os.getenv("GOOGLE_CLOUD_PROJECT")
    subscription = os.getenv("GOOGLE_CHAT_SUBSCRIPTION_NAME") or os.getenv("GOOGLE_CHAT_SUBSCRIPTION")
    return bool(os.getenv("GOOGLE_CHAT_HTTP_EVENTS_URL") or (project and subscription))


def _matrix_env() -> bool:  # check_matrix_requirements before feature_missing
    token = os.getenv("MATRIX_ACCESS_TOKEN", "") or os.getenv("MATRIX_PASSWORD", "")
    return bool(token and os.getenv("MATRIX_HOMESERVER", ""))


def _patch_requirement_checks() -> None:
    from gateway.platform_registry import platform_registry
    from hermes_cli.plugins import discover_plugins

    discover_plugins()
    special = {
        "irc": _env_check("IRC_SERVER", "IRC_CHANNEL"),
        "line": _env_check("LINE_CHANNEL_ACCESS_TOKEN", "LINE_CHANNEL_SECRET"),
        "sms": _env_check("TWILIO_ACCOUNT_SID", "TWILIO_AUTH_TOKEN"),
        "email": _stripped("EMAIL_ADDRESS", "EMAIL_PASSWORD", "EMAIL_IMAP_HOST", "EMAIL_SMTP_HOST"),
        "dingtalk": _env_check("DINGTALK_CLIENT_ID", "DINGTALK_CLIENT_SECRET"),
        "matrix": _matrix_env,
        "google_chat": _google_chat_env,
        "ntfy": _stripped("NTFY_TOPIC"),
        "simplex": _env_check("SIMPLEX_WS_URL"),
    }
    for entry in platform_registry.plugin_entries():
        entry.check_fn = special.get(entry.name, lambda: True)


def _s(value: object) -> str:
    return "" if value is None else str(value).strip()


def identities(cfg: Any, home: Path) -> dict[str, str]:
    env = os.environ
    out: dict[str, str] = {}
    plats = {p.value: pc for p, pc in cfg.platforms.items() if pc.enabled}

    def put(kind: str, value: str) -> None:
        if value:
            out[kind] = value

    if "telegram" in plats:
        put("telegram-bot-token", _s(plats["telegram"].token))
    if "discord" in plats:
        put("discord-bot-token", _s(plats["discord"].token))
    if "slack" in plats and _s(plats["slack"].token):
        put("slack-app-token", env.get("SLACK_APP_TOKEN", ""))
    if "signal" in plats and _s(plats["signal"].extra.get("http_url")):
        put("signal-phone", _s(plats["signal"].extra.get("account")))
    if "weixin" in plats:
        pc = plats["weixin"]
        put("weixin-bot-token", _s(pc.token or pc.extra.get("token") or env.get("WEIXIN_TOKEN")))
    if "qqbot" in plats:
        put("qqbot-appid", _s(plats["qqbot"].extra.get("app_id") or env.get("QQ_APP_ID")))
    if "yuanbao" in plats and _s(plats["yuanbao"].extra.get("app_secret")):
        put("yuanbao-app-key", _s(plats["yuanbao"].extra.get("app_id")))
    if "feishu" in plats:
        put("feishu-app-id", _s(plats["feishu"].extra.get("app_id") or env.get("FEISHU_APP_ID")))
    if "whatsapp" in plats:
        configured = _s(plats["whatsapp"].extra.get("session_path"))
        put("whatsapp-session", configured or str(home / "platforms" / "whatsapp" / "session"))
    if "irc" in plats:
        extra = plats["irc"].extra
        server = env.get("IRC_SERVER") or _s(extra.get("server"))
        channel = env.get("IRC_CHANNEL") or _s(extra.get("channel"))
        nick = env.get("IRC_NICKNAME") or _s(extra.get("nickname")) or "hermes-bot"
        if server and channel:
            put("irc", f"{server}:{nick}")
    if "line" in plats:
        extra = plats["line"].extra
        token = env.get("LINE_CHANNEL_ACCESS_TOKEN") or _s(extra.get("channel_access_token"))
        secret = env.get("LINE_CHANNEL_SECRET") or _s(extra.get("channel_secret"))
        if token and secret:
            put("line", token)
    return out


def listeners(cfg: Any) -> dict[str, int]:
    env = os.environ
    plats = {p.value: pc for p, pc in cfg.platforms.items() if pc.enabled}
    out: dict[str, int] = {}

    def port(value: object, default: int) -> int:
        try:
            return int(str(value).strip(), 10)
        except (TypeError, ValueError):
            return default

    if "api_server" in plats:
        raw = plats["api_server"].extra.get("port")
        out["api_server"] = port(env.get("API_SERVER_PORT", "8642") if raw is None else raw, 8642)
    if "webhook" in plats:
        out["webhook"] = port(plats["webhook"].extra.get("port", 8644), 8644)
    if "msgraph_webhook" in plats:
        out["msgraph_webhook"] = port(plats["msgraph_webhook"].extra.get("port", 8646), 8646)
    if "sms" in plats and env.get("TWILIO_ACCOUNT_SID") and "TWILIO_AUTH_TOKEN" in env:
        out["sms"] = port(env.get("SMS_WEBHOOK_PORT", "8080"), 8080)
    if "bluebubbles" in plats:
        extra = plats["bluebubbles"].extra
        out["bluebubbles"] = port(extra.get("webhook_port") or env.get("BLUEBUBBLES_WEBHOOK_PORT", "8645"), 8645)
    if "whatsapp_cloud" in plats:
        out["whatsapp_cloud"] = port(plats["whatsapp_cloud"].extra.get("webhook_port", 8090), 8090)
    if "wecom_callback" in plats:
        out["wecom_callback"] = port(plats["wecom_callback"].extra.get("port") or 8645, 8645)
    if "line" in plats and identities(cfg, Path("/")).get("line"):
        extra = plats["line"].extra
        out["line"] = port(env.get("LINE_PORT") or extra.get("port", 8646), 8646)
    if "feishu" in plats:
        extra = plats["feishu"].extra

        def setting(key: str, env_name: str) -> str:  # the adapter's own settings (plugins/platforms/feishu)
            return _s(extra.get(key) or env.get(env_name, ""))

        mode = _s(extra.get("connection_mode") or env.get("FEISHU_CONNECTION_MODE", "websocket")).lower()
        # connect() returns before binding without these:
        ready = setting("app_id", "FEISHU_APP_ID") and setting("app_secret", "FEISHU_APP_SECRET") and (
            setting("verification_token", "FEISHU_VERIFICATION_TOKEN") or setting("encrypt_key", "FEISHU_ENCRYPT_KEY"))
        if mode == "webhook" and ready:
            out["feishu"] = port(extra.get("webhook_port") or env.get("FEISHU_WEBHOOK_PORT", "8765"), 8765)
    return out


def main(homes: list[str]) -> None:
    real_checks = bool(homes) and homes[0] == "--real-checks"
    if real_checks:
        homes = homes[1:]
    os.environ.clear()
    os.environ.update(BASE_ENV)
    import logging

    logging.disable(logging.CRITICAL)
    from gateway.config import load_gateway_config
    from hermes_cli.env_loader import load_hermes_dotenv

    if not real_checks:
        _patch_requirement_checks()
    result = {}
    for home in homes:
        os.environ.clear()
        os.environ.update(BASE_ENV)
        os.environ["HERMES_HOME"] = home
        load_hermes_dotenv(hermes_home=home)
        cfg = load_gateway_config()
        result[home] = {
            "credentials": identities(cfg, Path(home)),
            "ports": listeners(cfg),
            "enabled": sorted(p.value for p, pc in cfg.platforms.items() if pc.enabled),
        }
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1:])
