"""The platform registry: per messaging platform, everything upstream decides about it, together.

One entry per platform declares its environment prefixes (hermesd removes them from every child's
environment, so no gateway inherits a bot token it was not configured with), the exclusive
credential its adapter locks (upstream's lock scope and the value that identifies it), the TCP
listener it opens, and what it needs installed. Keeping them in one row means a new platform cannot
get a credential rule without also being scrubbed from children, or the reverse.

How a profile's files turn into an enabled platform was read from hermes-agent 0.19.0
(``gateway/config.py`` ``load_gateway_config`` / ``_apply_env_overrides`` and each adapter's
``connect``):

* Values: the profile's ``.env`` wins over ``config.yaml`` (the gateway loads ``.env`` into its
  environment with override, and environment variables override the YAML), except where an adapter
  reads ``extra`` first (Feishu webhook port/host, BlueBubbles webhook port/host when not enabled
  from ``.env``): those follow the adapter. The process environment is never consulted: it is the
  supervisor's, and hermesd scrubs platform variables from its children.
* ``config.yaml`` platform blocks are merged as upstream merges them: ``gateway.platforms.<p>`` then
  ``platforms.<p>`` (``extra`` merged one level deep), then a top-level ``<p>:`` block's ``enabled``.
  An explicit ``enabled: false`` keeps a platform off even when ``.env`` has its token, except for
  the platforms upstream force-enables from ``.env`` (API server, webhook, SMS, BlueBubbles,
  WhatsApp Cloud, WeCom callback, Feishu, Weixin, QQ, Yuanbao).
* A credential counts only when its platform would be enabled and its adapter would get as far as
  taking the lock (Slack needs a bot token before it locks the app token).
* Credential-looking ``.env`` keys (``*_TOKEN``, ``*_KEY``, ``*_SECRET``, ``*_API_KEY``) have
  non-ASCII characters stripped, as upstream's loader does.

Not modelled (documented so nobody relies on it): tokens a platform persists in its own state
files (Slack workspaces, Weixin accounts) and plugin platforms not shipped with hermes-agent.

Values never leave the rules except to :mod:`profiles.credentials`, which fingerprints them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from profiles.upstream.bools import TRUTHY, coerce_bool

SRC_ENV = ".env"
SRC_CONFIG = "config.yaml"

_BRIDGED_KEYS = frozenset(
    {
        "unauthorized_dm_behavior", "notice_delivery", "reply_prefix", "reply_in_thread",
        "cron_continuable_surface", "require_mention", "free_response_channels", "mention_patterns",
        "exclusive_bot_mentions", "dm_policy", "allow_from", "allow_admin_from", "user_allowed_commands",
        "group_policy", "group_allow_from", "group_allow_admin_from", "group_user_allowed_commands",
        "channel_prompts", "gateway_restart_notification", "typing_indicator", "typing_status_text",
    }
)
_CREDENTIAL_SUFFIXES = ("_API_KEY", "_TOKEN", "_SECRET", "_KEY")

@dataclass(frozen=True)
class PortBinding:
    """A TCP listener an enabled platform would open; ``host`` ``None`` means all interfaces."""

    platform: str
    port: int
    host: str | None


def _strip_non_ascii(env: dict[str, str]) -> dict[str, str]:
    for k, v in env.items():
        if k.endswith(_CREDENTIAL_SUFFIXES) and not v.isascii():
            env[k] = v.encode("ascii", "ignore").decode("ascii")
    return env


def _text(value: object) -> str:
    return "" if value is None else str(value).strip()


def _int_or(value: object, default: int) -> int:
    try:
        return int(str(value).strip(), 10)
    except (TypeError, ValueError):
        return default


_PLACEHOLDERS = frozenset(
    {"*", "**", "***", "changeme", "your_api_key", "your_api_key_here", "your-api-key",
     "placeholder", "example", "dummy", "null", "none"}
)


def _usable_secret(value: str) -> bool:
    """Upstream's ``has_usable_secret``: a placeholder token disables its platform at start-up."""
    cleaned = value.strip()
    return len(cleaned) >= 4 and cleaned.lower() not in _PLACEHOLDERS


def _is_int(value: str) -> bool:
    try:
        int(value.strip(), 10)
    except ValueError:
        return False
    return True



class View:
    """A profile's ``.env`` and ``config.yaml`` with upstream's merge rules applied lazily."""

    def __init__(self, home: Path, env: Mapping[str, str], cfg: Mapping[str, Any]) -> None:
        self.home = Path(home)
        self.env = _strip_non_ascii(dict(env))
        self.cfg = cfg
        self._platforms: dict[str, tuple[dict[str, Any], dict[str, Any], bool]] = {}

    def e(self, name: str) -> str:
        """A ``.env`` value, ``""`` when unset."""
        return self.env.get(name, "")

    def e_true(self, name: str) -> bool:
        return self.e(name).strip().lower() in TRUTHY

    def _platform(self, name: str) -> tuple[dict[str, Any], dict[str, Any], bool]:
        cached = self._platforms.get(name)
        if cached is not None:
            return cached
        merged: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        explicit = False
        gateway = self.cfg.get("gateway")
        sources = [
            gateway.get("platforms") if isinstance(gateway, dict) else None,
            self.cfg.get("platforms"),
        ]
        for src in sources:
            block = src.get(name) if isinstance(src, dict) else None
            if not isinstance(block, dict):
                continue
            merged.update(block)
            if isinstance(block.get("extra"), dict):
                extra.update(block["extra"])
            explicit = explicit or "enabled" in block
        top = self.cfg.get(name)
        if isinstance(top, dict) and "enabled" in top:
            merged["enabled"] = top["enabled"]
            explicit = True
        result = (merged, extra, explicit)
        self._platforms[name] = result
        return result

    def has_extra(self, name: str) -> bool:
        """Whether upstream's ``PlatformConfig.extra`` would be non-empty (WhatsApp's enable probe).

        ``extra`` gets the merged ``extra`` blocks plus the shared keys upstream bridges from
        the platform's top-level block (or, without one, from its first ``platforms`` block).
        """
        if self.extra(name):
            return True
        gateway = self.cfg.get("gateway")
        candidates = [self.cfg.get(name)]
        for src in (gateway.get("platforms") if isinstance(gateway, dict) else None, self.cfg.get("platforms")):
            candidates.append(src.get(name) if isinstance(src, dict) else None)
        shared = next((c for c in candidates if isinstance(c, dict)), None)
        return shared is not None and not _BRIDGED_KEYS.isdisjoint(shared)

    def block(self, name: str) -> dict[str, Any]:
        return self._platform(name)[0]

    def extra(self, name: str) -> dict[str, Any]:
        return self._platform(name)[1]

    def explicit(self, name: str) -> bool:
        return self._platform(name)[2]

    def cfg_enabled(self, name: str) -> bool:
        return coerce_bool(self.block(name).get("enabled"), False)

    def explicitly_off(self, name: str) -> bool:
        return self.explicit(name) and not self.cfg_enabled(name)

    def plugin_enabled(self, name: str, configured: bool) -> bool:
        """Upstream's plugin pass: on if YAML enables it, or if configured and not explicitly off."""
        return self.cfg_enabled(name) or (configured and not self.explicit(name))


Found = tuple[str, str, str, str]  # platform, lock scope, identifying value, source file



def _one(platform: str, kind: str, value: str, source: str) -> list[Found]:
    return [(platform, kind, value, source)] if value else []


def _bot_token(v: View, platform: str, env_name: str) -> tuple[str, str] | None:
    """The bot token a token-authenticated platform would start with, and its source.

    Follows upstream: the ``.env`` token enables the platform unless YAML explicitly
    disables it; a YAML-only token needs ``enabled: true`` (the plugin pass probes without
    it); a placeholder token (shorter than 4, or ``changeme``-like) keeps it off.
    """
    if v.e(env_name):
        if v.explicitly_off(platform):
            return None
        token, source = v.e(env_name), SRC_ENV
    elif v.cfg_enabled(platform):
        token, source = _text(v.block(platform).get("token")), SRC_CONFIG
    else:
        return None
    if token.strip() and not _usable_secret(token):
        return None
    return token, source


def _telegram(v: View) -> list[Found]:
    found = _bot_token(v, "telegram", "TELEGRAM_BOT_TOKEN")
    return _one("telegram", "telegram-bot-token", *found) if found else []


def _discord(v: View) -> list[Found]:
    found = _bot_token(v, "discord", "DISCORD_BOT_TOKEN")
    return _one("discord", "discord-bot-token", *found) if found else []


def _slack(v: View) -> list[Found]:
    if v.e("SLACK_BOT_TOKEN"):
        enabled = not v.explicitly_off("slack")
        bot = v.e("SLACK_BOT_TOKEN")
    else:
        enabled = v.cfg_enabled("slack")
        bot = _text(v.block("slack").get("token"))
    if not (enabled and bot and _usable_secret(bot)):
        return []
    return _one("slack", "slack-app-token", v.e("SLACK_APP_TOKEN"), SRC_ENV)


def _signal(v: View) -> list[Found]:
    if v.e("SIGNAL_HTTP_URL") and v.e("SIGNAL_ACCOUNT"):
        if v.explicitly_off("signal"):
            return []
        return _one("signal", "signal-phone", v.e("SIGNAL_ACCOUNT"), SRC_ENV)
    extra = v.extra("signal")
    if not (v.cfg_enabled("signal") and _text(extra.get("http_url"))):
        return []
    return _one("signal", "signal-phone", _text(extra.get("account")), SRC_CONFIG)


def _weixin(v: View) -> list[Found]:
    if not (v.e("WEIXIN_TOKEN") or v.e("WEIXIN_ACCOUNT_ID") or v.cfg_enabled("weixin")):
        return []
    config_token = v.e("WEIXIN_TOKEN") or _text(v.block("weixin").get("token"))
    if config_token.strip() and not _usable_secret(config_token):
        return []
    if v.e("WEIXIN_TOKEN"):
        return _one("weixin", "weixin-bot-token", v.e("WEIXIN_TOKEN").strip(), SRC_ENV)
    token = config_token or _text(v.extra("weixin").get("token"))
    return _one("weixin", "weixin-bot-token", token.strip(), SRC_CONFIG)


def _qqbot(v: View) -> list[Found]:
    if not (v.e("QQ_APP_ID") or v.e("QQ_CLIENT_SECRET") or v.cfg_enabled("qqbot")):
        return []
    if v.e("QQ_APP_ID"):
        return _one("qqbot", "qqbot-appid", v.e("QQ_APP_ID").strip(), SRC_ENV)
    return _one("qqbot", "qqbot-appid", _text(v.extra("qqbot").get("app_id")), SRC_CONFIG)


def _yuanbao(v: View) -> list[Found]:
    app_id = v.e("YUANBAO_APP_ID") or v.e("YUANBAO_APP_KEY")
    if app_id and v.e("YUANBAO_APP_SECRET"):
        return _one("yuanbao", "yuanbao-app-key", app_id.strip(), SRC_ENV)
    extra = v.extra("yuanbao")
    if not (v.cfg_enabled("yuanbao") and _text(extra.get("app_secret"))):
        return []
    return _one("yuanbao", "yuanbao-app-key", _text(extra.get("app_id")), SRC_CONFIG)


def _feishu(v: View) -> list[Found]:
    if v.e("FEISHU_APP_ID") and v.e("FEISHU_APP_SECRET"):
        return _one("feishu", "feishu-app-id", v.e("FEISHU_APP_ID").strip(), SRC_ENV)
    cfg_id = _text(v.extra("feishu").get("app_id"))
    if not v.plugin_enabled("feishu", bool(cfg_id)):
        return []
    if cfg_id:
        return _one("feishu", "feishu-app-id", cfg_id, SRC_CONFIG)
    return _one("feishu", "feishu-app-id", v.e("FEISHU_APP_ID").strip(), SRC_ENV)


def _whatsapp(v: View) -> list[Found]:
    flag = v.e("WHATSAPP_ENABLED").strip().lower()
    if flag in TRUTHY:
        enabled, source = True, SRC_ENV
    elif flag in {"false", "0", "no"}:
        # Upstream turns the platform off, then its plugin pass turns it back on when the
        # YAML block carries settings and never said ``enabled`` itself.
        enabled, source = not v.explicit("whatsapp") and v.has_extra("whatsapp"), SRC_CONFIG
    else:
        enabled, source = v.plugin_enabled("whatsapp", v.has_extra("whatsapp")), SRC_CONFIG
    if not enabled:
        return []
    configured = _text(v.extra("whatsapp").get("session_path"))
    if configured:
        return _one("whatsapp", "whatsapp-session", configured, SRC_CONFIG)
    legacy = v.home / "whatsapp" / "session"
    try:
        use_legacy = legacy.is_dir() and any(legacy.iterdir())
    except OSError:
        use_legacy = False
    path = legacy if use_legacy else v.home / "platforms" / "whatsapp" / "session"
    return _one("whatsapp", "whatsapp-session", str(path), source)


def _irc(v: View) -> list[Found]:
    extra = v.extra("irc")
    server = v.e("IRC_SERVER") or _text(extra.get("server"))
    channel = v.e("IRC_CHANNEL") or _text(extra.get("channel"))
    nick = v.e("IRC_NICKNAME") or _text(extra.get("nickname")) or "hermes-bot"
    # The plugin's requirement check wants IRC_SERVER and IRC_CHANNEL in the environment,
    # so a config.yaml-only IRC setup needs an explicit ``enabled: true``.
    env_ready = bool(v.e("IRC_SERVER") and v.e("IRC_CHANNEL"))
    if not (server and channel) or not v.plugin_enabled("irc", env_ready):
        return []
    source = SRC_ENV if (v.e("IRC_SERVER") or v.e("IRC_NICKNAME")) else SRC_CONFIG
    return _one("irc", "irc", f"{server}:{nick}", source)


def _line(v: View) -> list[Found]:
    extra = v.extra("line")
    token = v.e("LINE_CHANNEL_ACCESS_TOKEN") or _text(extra.get("channel_access_token"))
    secret = v.e("LINE_CHANNEL_SECRET") or _text(extra.get("channel_secret"))
    env_ready = bool(v.e("LINE_CHANNEL_ACCESS_TOKEN") and v.e("LINE_CHANNEL_SECRET"))
    if not (token and secret) or not v.plugin_enabled("line", env_ready):
        return []
    source = SRC_ENV if v.e("LINE_CHANNEL_ACCESS_TOKEN") else SRC_CONFIG
    return _one("line", "line", token, source)


def _api_server(v: View) -> PortBinding | None:
    by_env = v.e_true("API_SERVER_ENABLED") or bool(v.e("API_SERVER_KEY"))
    if not (by_env or v.cfg_enabled("api_server")):
        return None
    extra = v.extra("api_server")
    port: object = extra.get("port")
    host: object = extra.get("host")
    if by_env and _is_int(v.e("API_SERVER_PORT")):
        port = v.e("API_SERVER_PORT")
    if by_env and v.e("API_SERVER_HOST"):
        host = v.e("API_SERVER_HOST")
    if port is None:
        port = v.e("API_SERVER_PORT") or 8642
    if host is None:
        host = v.e("API_SERVER_HOST") or "127.0.0.1"
    return PortBinding("api_server", _int_or(port, 8642), _text(host) or None)


def _webhook(v: View) -> PortBinding | None:
    by_env = v.e_true("WEBHOOK_ENABLED")
    if not (by_env or v.cfg_enabled("webhook")):
        return None
    extra = v.extra("webhook")
    port: object = extra.get("port")
    if by_env and _is_int(v.e("WEBHOOK_PORT")):
        port = v.e("WEBHOOK_PORT")
    return PortBinding("webhook", _int_or(port, 8644), _text(extra.get("host")) or None)


def _msgraph_webhook(v: View) -> PortBinding | None:
    if not (v.e_true("MSGRAPH_WEBHOOK_ENABLED") or v.cfg_enabled("msgraph_webhook")):
        return None
    extra = v.extra("msgraph_webhook")
    port: object = extra.get("port")
    if _is_int(v.e("MSGRAPH_WEBHOOK_PORT")):
        port = v.e("MSGRAPH_WEBHOOK_PORT")
    return PortBinding("msgraph_webhook", _int_or(port, 8646), _text(extra.get("host", "0.0.0.0")) or None)


def _sms(v: View) -> PortBinding | None:
    # The adapter reads TWILIO_* from the environment only and cannot start without both.
    if not (v.e("TWILIO_ACCOUNT_SID") and "TWILIO_AUTH_TOKEN" in v.env):
        return None
    return PortBinding(
        "sms", _int_or(v.e("SMS_WEBHOOK_PORT") or 8080, 8080), v.e("SMS_WEBHOOK_HOST") or "127.0.0.1"
    )


def _bluebubbles(v: View) -> PortBinding | None:
    by_env = bool(v.e("BLUEBUBBLES_SERVER_URL") and v.e("BLUEBUBBLES_PASSWORD"))
    if not (by_env or v.cfg_enabled("bluebubbles")):
        return None
    if by_env:
        port: object = _int_or(v.e("BLUEBUBBLES_WEBHOOK_PORT") or 8645, 8645)
        host: object = v.e("BLUEBUBBLES_WEBHOOK_HOST") or "127.0.0.1"
    else:
        extra = v.extra("bluebubbles")
        port = extra.get("webhook_port") or v.e("BLUEBUBBLES_WEBHOOK_PORT") or 8645
        host = extra.get("webhook_host") or v.e("BLUEBUBBLES_WEBHOOK_HOST") or "127.0.0.1"
    return PortBinding("bluebubbles", _int_or(port, 8645), _text(host) or None)


def _whatsapp_cloud(v: View) -> PortBinding | None:
    by_env = bool(v.e("WHATSAPP_CLOUD_PHONE_NUMBER_ID") and v.e("WHATSAPP_CLOUD_ACCESS_TOKEN"))
    if not (by_env or v.cfg_enabled("whatsapp_cloud")):
        return None
    extra = v.extra("whatsapp_cloud")
    port: object = extra.get("webhook_port", 8090)
    host: object = extra.get("webhook_host", "0.0.0.0")
    if by_env and _is_int(v.e("WHATSAPP_CLOUD_WEBHOOK_PORT")):
        port = v.e("WHATSAPP_CLOUD_WEBHOOK_PORT")
    if by_env and v.e("WHATSAPP_CLOUD_WEBHOOK_HOST"):
        host = v.e("WHATSAPP_CLOUD_WEBHOOK_HOST")
    return PortBinding("whatsapp_cloud", _int_or(port, 8090), _text(host) or None)


def _wecom_callback(v: View) -> PortBinding | None:
    by_env = bool(v.e("WECOM_CALLBACK_CORP_ID") and v.e("WECOM_CALLBACK_CORP_SECRET"))
    extra = v.extra("wecom_callback")
    configured = bool(extra.get("corp_id") or extra.get("apps"))
    if not (by_env or v.plugin_enabled("wecom_callback", configured)):
        return None
    if by_env:
        port: object = _int_or(v.e("WECOM_CALLBACK_PORT") or 8645, 8645)
        host: object = v.e("WECOM_CALLBACK_HOST") or "0.0.0.0"
    else:
        port = extra.get("port") or 8645
        host = extra.get("host") or "0.0.0.0"
    return PortBinding("wecom_callback", _int_or(port, 8645), _text(host) or None)


def _line_port(v: View) -> PortBinding | None:
    if not _line(v):
        return None
    extra = v.extra("line")
    port = v.e("LINE_PORT") or extra.get("port", 8646)
    host = v.e("LINE_HOST") or extra.get("host", "0.0.0.0")
    return PortBinding("line", _int_or(port, 8646), _text(host) or None)


def _feishu_port(v: View) -> PortBinding | None:
    if not _feishu(v):
        return None
    extra = v.extra("feishu")
    if v.e("FEISHU_APP_ID") and v.e("FEISHU_APP_SECRET"):
        mode = v.e("FEISHU_CONNECTION_MODE") or "websocket"
    else:
        mode = _text(extra.get("connection_mode")) or v.e("FEISHU_CONNECTION_MODE") or "websocket"
    if mode.strip().lower() != "webhook":
        return None
    port = extra.get("webhook_port") or v.e("FEISHU_WEBHOOK_PORT") or 8765
    host = extra.get("webhook_host") or v.e("FEISHU_WEBHOOK_HOST") or "127.0.0.1"
    return PortBinding("feishu", _int_or(port, 8765), _text(host) or None)


CredentialRule = Callable[[View], list[Found]]
PortRule = Callable[[View], PortBinding | None]


@dataclass(frozen=True, slots=True)
class Platform:
    """One messaging platform as upstream defines it (see the module docstring)."""

    name: str
    env_prefixes: tuple[str, ...]
    credential: CredentialRule | None = None
    port: PortRule | None = None


PLATFORMS: tuple[Platform, ...] = (
    Platform("telegram", ("TELEGRAM_",), credential=_telegram),
    Platform("discord", ("DISCORD_",), credential=_discord),
    Platform("slack", ("SLACK_",), credential=_slack),
    Platform("signal", ("SIGNAL_",), credential=_signal),
    Platform("weixin", ("WEIXIN_",), credential=_weixin),
    Platform("qqbot", ("QQ_",), credential=_qqbot),
    Platform("yuanbao", ("YUANBAO_",), credential=_yuanbao),
    Platform("feishu", ("FEISHU_",), credential=_feishu, port=_feishu_port),
    Platform("whatsapp", ("WHATSAPP_",), credential=_whatsapp),
    Platform("whatsapp_cloud", ("WHATSAPP_CLOUD_",), port=_whatsapp_cloud),
    Platform("irc", ("IRC_",), credential=_irc),
    Platform("line", ("LINE_",), credential=_line, port=_line_port),
    Platform("api_server", ("API_SERVER_",), port=_api_server),
    Platform("webhook", ("WEBHOOK_",), port=_webhook),
    Platform("msgraph_webhook", ("MSGRAPH_",), port=_msgraph_webhook),
    Platform("sms", ("SMS_", "TWILIO_"), port=_sms),
    Platform("bluebubbles", ("BLUEBUBBLES_",), port=_bluebubbles),
    Platform("wecom_callback", ("WECOM_",), port=_wecom_callback),
    Platform("matrix", ("MATRIX_",)),
    Platform("mattermost", ("MATTERMOST_",)),
    Platform("email", ("EMAIL_",)),
    Platform("dingtalk", ("DINGTALK_",)),
    Platform("homeassistant", ("HASS_",)),
)

ENV_PREFIXES: tuple[str, ...] = tuple(sorted({p for plat in PLATFORMS for p in plat.env_prefixes}))


def is_platform_variable(name: str) -> bool:
    """Whether an environment variable configures some platform (and so must not leak into children)."""
    return name.startswith(ENV_PREFIXES)


def credentials_of(view: View) -> list[Found]:
    """Every exclusive credential the profile's gateway would lock, in registry order."""
    return [found for plat in PLATFORMS if plat.credential is not None for found in plat.credential(view)]


def ports_of(view: View) -> list[PortBinding]:
    """Every TCP listener the profile's gateway would open, in registry order."""
    return [b for plat in PLATFORMS if plat.port is not None and (b := plat.port(view)) is not None]
