"""The platform registry: per messaging platform, everything upstream decides about it, together.

One entry per platform declares its environment prefixes (hermesd removes them from every child's
environment, so no gateway inherits a bot token it was not configured with), the exclusive
credential its adapter locks (upstream's lock scope and the value that identifies it) and the TCP
listener it opens (what it needs installed is its ``_NEEDS`` entry). Keeping them in one row means
a new platform cannot get a credential rule without also being scrubbed from children, or the reverse.

How a profile's files turn into locks and listeners was read from hermes-agent 0.19.0
(``gateway/config.py`` ``load_gateway_config`` / ``_apply_env_overrides``, ``gateway/run.py``'s start-up
and each adapter's constructor and ``connect``), and what later lines changed from their code
(:mod:`profiles.upstream.lines`: every :class:`View` carries the reading release's
:class:`~profiles.upstream.lines.RuleLine`, and the rules below consult it where they differ); all
of it is checked against that code running, per release (``tests/profiles/test_gateway_oracle.py``):

* The gateway's environment (:func:`gateway_env`): ``.env`` after upstream's repair, with override;
  ``.op.env`` for names still unset; then config.yaml's top-level scalars for names still unset.
  Credential-looking names (``*_TOKEN``, ``*_KEY``, ``*_SECRET``, ``*_API_KEY``) from the two files
  lose non-ASCII characters, as upstream's loader strips them. The process environment is never
  consulted: it is the supervisor's, and hermesd scrubs platform variables from its children.
* ``config.yaml`` platform blocks are merged as upstream merges them: ``gateway.platforms.<p>`` then
  ``platforms.<p>`` (``extra`` merged one level deep), then a top-level ``<p>:`` block's ``enabled``.
  An explicit ``enabled: false`` keeps a platform off even when the environment has its token, except
  for the platforms the line force-enables from it (:attr:`RuleLine.env_beats_yaml_off`: on 0.19
  the API server, webhook, SMS, BlueBubbles, WhatsApp (Cloud), WeCom (callback), Feishu, Weixin, QQ,
  Yuanbao, …; none on 0.22). ``plugins.disabled`` naming a platform plugin's manifest
  (``telegram-platform``) means no adapter is ever built for it (:func:`credentials_of` and
  :func:`ports_of` only ask the rules of a built adapter).
* A credential counts only where the adapter takes its lock, with the value it locks (as written,
  blanks included); a listener only where the adapter listens. Each rule below cites what its
  adapter checks first. Port 0 asks for any free port and is nobody's to claim.

Which platforms a profile *enables* (:func:`enabled_platforms`) follows the same two passes
upstream runs in ``_apply_env_overrides``: the explicit per-platform ``.env`` blocks, then the
registry pass for plugin platforms (``is_connected`` on a probe config seeded by the plugin's
``env_enablement_fn``, then ``check_fn``), then the placeholder-token check. Requirement checks are
assumed to pass: a platform whose library is missing is still *enabled* here, because the user
configured it, and :func:`requirements_of` says what it needs (upstream silently never enables
the plugin platforms that have no ``.env`` block, line, teams, google_chat, photon, raft …, when
their libraries are missing; that silence is what hermesd must not copy).

Not modelled (documented so nobody relies on it): tokens a platform persists in its own state
files (Slack workspaces, Weixin accounts), ``secrets:`` sources (Bitwarden, 1Password), webhook
routes added at run time, plugin platforms not shipped with hermes-agent (a release's own platform
with no entry here is reported and scrubbed: ``profiles.upstream.lines.unmodelled``), the legacy
``gateway.json`` layer under ``config.yaml``, the ``/etc/hermes`` managed overlay, and variables the
gateway inherits from the supervisor's own environment (``GOOGLE_CLOUD_PROJECT`` for Google Chat,
``OP_SERVICE_ACCOUNT_TOKEN``, say). Deliberately stricter (docs/upstream.md): the WhatsApp session
and bridge port are claimed before the session is paired, the Photon sidecar port before the
sidecar is installed.

Values never leave the rules except to :mod:`profiles.credentials`, which fingerprints them.
"""

from __future__ import annotations

import functools
import hashlib
import ipaddress
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from profiles.numbers import PORT
from profiles.safeio import home_file, lstat
from profiles.upstream.apiserver import API_SERVER
from profiles.upstream.bools import TRUTHY, coerce_bool
from profiles.upstream.files import read_json_or_absent
from profiles.upstream.lines import BASELINE, RuleLine
from profiles.upstream.nostr import public_key

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


_PLACEHOLDERS = frozenset(
    {"*", "**", "***", "changeme", "your_api_key", "your_api_key_here", "your-api-key",
     "placeholder", "example", "dummy", "null", "none"}
)


def _usable_secret(value: str, min_length: int = 4) -> bool:
    """Upstream's ``has_usable_secret``: a placeholder token disables its platform at start-up."""
    cleaned = value.strip()
    return len(cleaned) >= min_length and cleaned.lower() not in _PLACEHOLDERS




# Plugin folders under hermes-agent's ``plugins/platforms/``. ``plugins.disabled`` switches one off by its
# manifest name, ``<folder>-platform`` (the folder name or ``platforms/<folder>`` does nothing); WeCom's
# plugin registers both WeCom modes.
PLUGIN_OF: dict[str, str] = {
    **{p: p for p in ("a2a", "buzz", "dingtalk", "discord", "email", "feishu", "google_chat", "homeassistant", "irc",
                      "line", "matrix", "mattermost", "ntfy", "photon", "raft", "simplex", "slack", "sms", "teams",
                      "telegram", "wecom", "whatsapp")},
    "wecom_callback": "wecom",
}
SRC_OP_ENV = ".op.env"
_SCALARS = (str, int, float, bool)
_EXPAND = re.compile(r"\$\{([^}]+)\}")


def _bridged(cfg: Mapping[str, Any], env: Mapping[str, str]) -> Iterable[tuple[str, str]]:
    """``gateway/run.py``'s bridge: each top-level scalar of config.yaml, as the environment gets it.

    Strings have ``${VAR}`` expanded from the environment so far (unknown names stay as written);
    a value becomes ``str(value)`` (``true`` → ``"True"``). A key upstream cannot put into the
    environment (not text, empty, holding ``=`` or NUL) ends the bridge there, as its exception does.
    """
    for key, value in cfg.items():
        if not isinstance(value, _SCALARS):
            continue
        if not isinstance(key, str) or not key or "=" in key or "\0" in key:
            return
        if key in env:
            continue
        if isinstance(value, str):
            value = _EXPAND.sub(lambda m: env.get(m.group(1), m.group(0)), value)
        text = str(value)
        if "\0" in text:
            return
        yield key, text


def gateway_env(env: Mapping[str, str], op_env: Mapping[str, str] | None, cfg: Mapping[str, Any]
                ) -> tuple[dict[str, str], dict[str, str]]:
    """The platform settings a profile's gateway ends up with in its environment, and each one's file.

    hermes-agent 0.19.0 at start-up (``hermes_cli/env_loader.py``, ``gateway/run.py``): the
    (repaired) ``.env`` with override; then ``.op.env`` without override, unless
    ``OP_SERVICE_ACCOUNT_TOKEN`` is already set; non-ASCII characters stripped from credential-looking
    names after each load; then config.yaml's top-level scalars for names still unset. hermesd's
    children inherit no platform variable, so nothing else sets one.
    """
    out = _strip_non_ascii(dict(env))
    source = dict.fromkeys(out, SRC_ENV)
    if op_env and "OP_SERVICE_ACCOUNT_TOKEN" not in out:
        for key, value in _strip_non_ascii(dict(op_env)).items():
            if key not in out:
                out[key], source[key] = value, SRC_OP_ENV
    for key, value in _bridged(cfg, out):
        out[key], source[key] = value, SRC_CONFIG
    return out, source


# Keys of a platform block that are fields of upstream's ``PlatformConfig`` (everything else in a block
# is the adapter's, on the lines where block keys reach the adapter).
_TYPED = frozenset({"enabled", "token", "api_key", "home_channel", "reply_to_mode", "channel_overrides", "extra",
                    "gateway_restart_notification", "typing_indicator", "typing_status_text"})
# 0.20's named bridges from a block's own keys into ``extra`` (``gateway/config.py``).
_BLOCK_KEYS_020 = {"api_server": ("port", "host"), "webhook": ("port", "host", "secret"),
                   "msgraph_webhook": ("port", "host", "secret")}
_API_SERVER_KEYS_020 = ("port", "key", "host", "cors_origins", "model_name")


class View:
    """A profile's files as its gateway reads them: its environment and config.yaml's platform blocks.

    ``line``: the rules of the release that will read them (:mod:`profiles.upstream.lines`).
    """

    def __init__(self, home: Path, env: Mapping[str, str], cfg: Mapping[str, Any],
                 op_env: Mapping[str, str] | None = None, line: RuleLine = BASELINE) -> None:
        self.home = Path(home)
        self.cfg = cfg
        self.line = line
        self.env, self._source = gateway_env(env, op_env, cfg)
        self._platforms: dict[str, tuple[dict[str, Any], dict[str, Any], bool]] = {}
        self._cfg_enabled: dict[str, bool] = {}
        gateway = cfg.get("gateway")
        self._gateway = gateway if isinstance(gateway, dict) else {}
        # Where platform blocks are read from, in upstream's merge order: gateway.platforms, platforms.
        self._sources = [src for src in (self._gateway.get("platforms"), cfg.get("platforms")) if isinstance(src, dict)]
        # Every name a platform's blocks are looked up under: one named nowhere has none (most of the
        # ~30 platforms asked about for every profile of a scan).
        self._named = {key for src in (*self._sources, self._gateway, cfg) for key in src}
        self.memo: dict[str, object] = {}  # what a rule read from the home once, for the rules after it
        plugins = cfg.get("plugins")
        disabled = plugins.get("disabled") if isinstance(plugins, dict) else None
        try:
            self._disabled = set(disabled) if isinstance(disabled, list) else set()
        except TypeError:  # an unhashable entry: upstream's set() raises and it disables nothing
            self._disabled = set()

    def e(self, name: str) -> str:
        """The gateway's value of environment variable ``name``, ``""`` when unset."""
        return self.env.get(name, "")

    def get(self, name: str, default: str) -> str:
        """``os.getenv(name, default)``: ``default`` only when unset (an empty value stays empty)."""
        return self.env.get(name, default)

    def src(self, name: str) -> str:
        """The file that set environment variable ``name`` (``.env``, ``.op.env`` or config.yaml)."""
        return self._source.get(name, SRC_ENV)

    def e_true(self, name: str) -> bool:
        return self.e(name).strip().lower() in TRUTHY

    def plugin_off(self, name: str) -> bool:
        """Whether ``plugins.disabled`` in config.yaml switches off the plugin that provides ``name``."""
        folder = PLUGIN_OF.get(name)
        return folder is not None and f"{folder}-platform" in self._disabled

    def _blocks(self, name: str) -> list[dict[str, Any]]:
        """``name``'s blocks in upstream's merge order: ``gateway.platforms``, ``platforms``, then (0.20+)
        a ``gateway.<name>:`` block."""
        blocks = [b for src in self._sources if isinstance(b := src.get(name), dict)]
        nested = self._gateway.get(name)
        if self.line.block_keys_reach_adapter and name != "platforms" and isinstance(nested, dict):
            blocks.append(nested)
        return blocks

    def _platform(self, name: str) -> tuple[dict[str, Any], dict[str, Any], bool]:
        cached = self._platforms.get(name)
        if cached is not None:
            return cached
        if name not in self._named:
            cached = self._platforms[name] = ({}, {}, False)
            return cached
        merged: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        explicit = False
        for block in self._blocks(name):
            merged.update(block)
            if isinstance(block.get("extra"), dict):
                extra.update(block["extra"])
            explicit = explicit or "enabled" in block
        top = self.cfg.get(name)
        if isinstance(top, dict) and "enabled" in top:
            merged["enabled"] = top["enabled"]
            explicit = True
        if self.line.block_keys_reach_adapter:
            extra = self._block_keys(name, merged, extra, top)
        result = (merged, extra, explicit)
        self._platforms[name] = result
        return result

    def _block_keys(self, name: str, merged: dict[str, Any], extra: dict[str, Any], top: object) -> dict[str, Any]:
        """The ``extra`` an adapter gets when a block's own keys reach it.

        0.22 (``PlatformConfig.from_dict``): every key of the merged block that is no
        ``PlatformConfig`` field, under the merged ``extra``; a top-level ``<name>:`` block's keys
        and ``extra`` go over both. 0.20: the API server's port/key/host/cors_origins/model_name from
        the merged block, then port/host(/secret) of the first block (top-level, else
        ``gateway.platforms``, else ``platforms``) for the API server, webhook and MS Graph.
        """
        top_block = top if isinstance(top, dict) else None
        if self.line.all_block_keys_reach_adapter:
            out = {**{k: v for k, v in merged.items() if k not in _TYPED}, **extra}
            if top_block is not None:
                out.update({k: v for k, v in top_block.items() if k not in _TYPED and k != "channel_overrides"})
                if isinstance(top_block.get("extra"), dict):
                    out.update(top_block["extra"])
            return out
        out = dict(extra)
        if name == "api_server":
            for key in _API_SERVER_KEYS_020:
                if key in merged and key not in out:
                    out[key] = merged[key]
        first = top_block or next((b for src in self._sources if isinstance(b := src.get(name), dict)), None)
        if first is not None:
            raw = first.get("extra")
            own: dict[str, Any] = raw if isinstance(raw, dict) else {}
            out.update({k: first[k] for k in _BLOCK_KEYS_020.get(name, ()) if k in first and k not in own})
        return out

    def has_block(self, name: str) -> bool:
        """Whether config.yaml gives upstream a ``platforms[name]`` entry at all."""
        top = self.cfg.get(name)
        return bool(self._blocks(name)) or (isinstance(top, dict) and "enabled" in top) or bool(self.extra(name))

    def section(self, name: str) -> dict[str, Any] | None:
        """The block a plugin's YAML hook reads: a top-level ``<name>:`` block, else the first of
        ``gateway.platforms.<name>`` and ``platforms.<name>``."""
        candidates = [self.cfg.get(name), *(src.get(name) for src in self._sources)]
        return next((c for c in candidates if isinstance(c, dict)), None)

    def has_extra(self, name: str) -> bool:
        """Whether upstream's ``PlatformConfig.extra`` would be non-empty (WhatsApp's enable probe).

        ``extra`` gets the merged ``extra`` blocks plus the shared keys upstream bridges from
        the platform's top-level block (or, without one, from its first ``platforms`` block).
        """
        if self.extra(name):
            return True
        shared = self.section(name)
        return shared is not None and not _BRIDGED_KEYS.isdisjoint(shared)

    def block(self, name: str) -> dict[str, Any]:
        return self._platform(name)[0]

    def extra(self, name: str) -> dict[str, Any]:
        return self._platform(name)[1]

    def explicit(self, name: str) -> bool:
        return self._platform(name)[2]

    def cfg_enabled(self, name: str) -> bool:
        """config.yaml says ``enabled: true``. A plugin-only platform whose plugin ``plugins.disabled``
        switches off is still enabled in upstream's configuration (its name stays a bundled platform);
        no adapter is ever built for it, so its rules claim nothing and it needs nothing installed."""
        hit = self._cfg_enabled.get(name)
        if hit is None:
            hit = self._cfg_enabled[name] = coerce_bool(self.block(name).get("enabled"), False)
        return hit

    def explicitly_off(self, name: str) -> bool:
        return self.explicit(name) and not coerce_bool(self.block(name).get("enabled"), False)

    def plugin_enabled(self, name: str, configured: bool) -> bool:
        """Upstream's plugin pass: on if YAML enables it, or if configured and not explicitly off.

        A disabled plugin never registers, so its pass does not run.
        """
        if self.plugin_off(name):
            return self.cfg_enabled(name)
        return self.cfg_enabled(name) or (configured and not self.explicit(name))


Found = tuple[str, str, str, str]  # platform, lock scope, identifying value, source file


def _one(platform: str, kind: str, value: object, source: str) -> list[Found]:
    """A lock on ``value``; only text is ever locked (upstream's lock hashes the text, anything else raises)."""
    return [(platform, kind, value, source)] if isinstance(value, str) and value else []


def _bot_token(v: View, platform: str, env_name: str) -> tuple[object, str] | None:
    """The bot token a token-authenticated platform would start with (``PlatformConfig.token``), and its source.

    Follows upstream: the environment's token enables the platform unless YAML explicitly
    disables it; a YAML-only token needs ``enabled: true`` (the plugin pass probes without
    it); a placeholder token (shorter than 4, or ``changeme``-like) keeps it off. The token is
    locked as written, blanks included.
    """
    if v.e(env_name):
        if v.explicitly_off(platform):
            return None
        token: object = v.e(env_name)
        source = v.src(env_name)
    elif v.cfg_enabled(platform):
        token, source = v.block(platform).get("token"), SRC_CONFIG
    else:
        return None
    if isinstance(token, str) and token.strip() and not _usable_secret(token):
        return None
    return token, source


def _telegram(v: View) -> list[Found]:
    found = _bot_token(v, "telegram", "TELEGRAM_BOT_TOKEN")
    return _one("telegram", "telegram-bot-token", *found) if found else []


def _discord(v: View) -> list[Found]:
    found = _bot_token(v, "discord", "DISCORD_BOT_TOKEN")
    return _one("discord", "discord-bot-token", *found) if found else []


def _slack(v: View) -> list[Found]:
    # connect(): the bot token (PlatformConfig.token) and SLACK_APP_TOKEN, which is locked.
    found = _bot_token(v, "slack", "SLACK_BOT_TOKEN")
    if not found or not found[0]:
        return []
    return _one("slack", "slack-app-token", v.e("SLACK_APP_TOKEN"), v.src("SLACK_APP_TOKEN"))


def _signal_extra(v: View) -> dict[str, Any]:
    extra = dict(v.extra("signal"))
    if v.e("SIGNAL_HTTP_URL") and v.e("SIGNAL_ACCOUNT"):  # the .env block writes both into extra
        extra.update(http_url=v.e("SIGNAL_HTTP_URL"), account=v.e("SIGNAL_ACCOUNT"))
    return extra


def _signal(v: View) -> list[Found]:
    # validate_signal_config: URL and account, each from extra or the environment (stripped);
    # the adapter then locks extra's account only, as written.
    extra = _signal_extra(v)
    try:
        url = (extra.get("http_url", "") or v.e("SIGNAL_HTTP_URL")).strip()
        account = (extra.get("account", "") or v.e("SIGNAL_ACCOUNT")).strip()
    except AttributeError:  # a number in YAML: upstream's start-up fails
        return []
    if not (url and account):
        return []
    both_env = bool(v.e("SIGNAL_HTTP_URL") and v.e("SIGNAL_ACCOUNT"))
    source = v.src("SIGNAL_ACCOUNT") if both_env else SRC_CONFIG
    return _one("signal", "signal-phone", extra.get("account", ""), source)


def _weixin(v: View) -> list[Found]:
    # WeixinAdapter: token = PlatformConfig.token or extra token or WEIXIN_TOKEN; account id from extra
    # or WEIXIN_ACCOUNT_ID; both stripped and both required before the lock.
    extra = v.extra("weixin")
    account = str(extra.get("account_id") or v.e("WEIXIN_ACCOUNT_ID")).strip()
    config_token = v.e("WEIXIN_TOKEN") or v.block("weixin").get("token")
    token = str(config_token or extra.get("token") or v.e("WEIXIN_TOKEN")).strip()
    if not (token and account):
        return []  # (with an account id but no token upstream reads a token it saved itself: not modelled)
    return _one("weixin", "weixin-bot-token", token, v.src("WEIXIN_TOKEN") if v.e("WEIXIN_TOKEN") else SRC_CONFIG)


def _qqbot(v: View) -> list[Found]:
    # QQAdapter: app id and client secret, each from extra (the .env block writes them there) or the
    # environment, stripped; both required before the lock.
    extra = v.extra("qqbot")
    app_id = str(v.e("QQ_APP_ID") or extra.get("app_id") or "").strip()
    secret = str(v.e("QQ_CLIENT_SECRET") or extra.get("client_secret") or "").strip()
    if not (app_id and secret):
        return []
    return _one("qqbot", "qqbot-appid", app_id, v.src("QQ_APP_ID") if v.e("QQ_APP_ID") else SRC_CONFIG)


def _yuanbao(v: View) -> list[Found]:
    # YuanbaoAdapter reads extra only (app_id, app_secret), stripped; the .env block fills both when
    # the environment has an id and a secret.
    env_id = v.e("YUANBAO_APP_ID") or v.e("YUANBAO_APP_KEY")
    if env_id and v.e("YUANBAO_APP_SECRET"):
        app_id, secret = env_id, v.e("YUANBAO_APP_SECRET")
        source = v.src("YUANBAO_APP_ID") if v.e("YUANBAO_APP_ID") else v.src("YUANBAO_APP_KEY")
    else:
        extra = v.extra("yuanbao")
        app_id, secret, source = extra.get("app_id") or "", extra.get("app_secret") or "", SRC_CONFIG
    if not (isinstance(app_id, str) and isinstance(secret, str) and app_id.strip() and secret.strip()):
        return []
    return _one("yuanbao", "yuanbao-app-key", app_id.strip(), source)


class _Feishu:
    """The Feishu adapter's settings (``FeishuAdapter._load_settings``), or why it is never built."""

    def __init__(self, v: View) -> None:
        extra = dict(v.extra("feishu"))
        if v.e("FEISHU_APP_ID") and v.e("FEISHU_APP_SECRET"):  # the .env block
            extra.update(app_id=v.e("FEISHU_APP_ID"), app_secret=v.e("FEISHU_APP_SECRET"),
                         connection_mode=v.get("FEISHU_CONNECTION_MODE", "websocket"))
            for key, env in (("encrypt_key", "FEISHU_ENCRYPT_KEY"),
                             ("verification_token", "FEISHU_VERIFICATION_TOKEN")):
                if v.e(env):
                    extra[key] = v.e(env)

        def setting(key: str, env: str, default: str = "") -> str:
            return str(extra.get(key) or v.get(env, default)).strip()

        self.app_id = setting("app_id", "FEISHU_APP_ID")
        self.app_secret = setting("app_secret", "FEISHU_APP_SECRET")
        self.mode = setting("connection_mode", "FEISHU_CONNECTION_MODE", "websocket").lower()
        self.signed = bool(setting("encrypt_key", "FEISHU_ENCRYPT_KEY")
                           or setting("verification_token", "FEISHU_VERIFICATION_TOKEN"))
        self.host = setting("webhook_host", "FEISHU_WEBHOOK_HOST", "127.0.0.1")
        try:
            self.port: int | None = int(extra.get("webhook_port") or v.get("FEISHU_WEBHOOK_PORT", "8765"))
        except (TypeError, ValueError):
            self.port = None  # the adapter cannot be built
        from_env = bool(v.e("FEISHU_APP_ID") and v.e("FEISHU_APP_SECRET")) or not extra.get("app_id")
        self.source = v.src("FEISHU_APP_ID") if from_env else SRC_CONFIG

    def locks(self) -> bool:
        """connect() gets to the lock: id and secret, a known mode, webhook mode signed."""
        return (self.port is not None and bool(self.app_id and self.app_secret)
                and self.mode in ("websocket", "webhook") and (self.mode != "webhook" or self.signed))


def _feishu(v: View) -> list[Found]:
    settings = _Feishu(v)
    return _one("feishu", "feishu-app-id", settings.app_id, settings.source) if settings.locks() else []


def _whatsapp_enabled(v: View) -> tuple[bool, str]:
    # WHATSAPP_ENABLED: true-ish trimmed (``is_truthy_value``), but false-ish only as written,
    # lower-cased: " false" (a blank kept in quotes) is neither, and the YAML block decides.
    raw = v.e("WHATSAPP_ENABLED")
    if raw.strip().lower() in TRUTHY:
        if "whatsapp" in v.line.env_beats_yaml_off or not v.explicitly_off("whatsapp"):
            return True, v.src("WHATSAPP_ENABLED")
        return False, SRC_CONFIG
    if raw.lower() in {"false", "0", "no"}:
        # Upstream turns off an entry config.yaml made, then its plugin pass turns it back on when
        # the YAML block carries settings and never said ``enabled`` itself.
        return not v.explicit("whatsapp") and v.has_extra("whatsapp") and not v.plugin_off("whatsapp"), SRC_CONFIG
    return v.plugin_enabled("whatsapp", v.has_extra("whatsapp")), SRC_CONFIG


def _whatsapp(v: View) -> list[Found]:
    # Stricter than upstream, which locks the session only once it is paired (creds.json) and its
    # bridge script exists: a session two profiles share collides as soon as either is paired.
    source = _whatsapp_enabled(v)[1]
    extra = v.extra("whatsapp")
    if "session_path" in extra:  # Path(value): "" is the gateway's working folder, a number stops the adapter
        configured = extra["session_path"]
        if not isinstance(configured, str):
            return []
        return _one("whatsapp", "whatsapp-session", str(Path(configured)), SRC_CONFIG)
    legacy = v.home / "whatsapp" / "session"
    try:
        use_legacy = legacy.is_dir() and any(legacy.iterdir())
    except OSError:
        use_legacy = False
    path = legacy if use_legacy else v.home / "platforms" / "whatsapp" / "session"
    return _one("whatsapp", "whatsapp-session", str(path), source)


def _irc(v: View) -> list[Found]:
    # The plugin's check_fn wants IRC_SERVER and IRC_CHANNEL in the environment before any adapter
    # is built; the adapter then locks "server:nickname" as written (env first, then extra).
    if not (v.e("IRC_SERVER") and v.e("IRC_CHANNEL")):
        return []
    extra = v.extra("irc")
    try:
        int(v.e("IRC_PORT") or extra.get("port", 6697))
    except (TypeError, ValueError):
        return []  # the adapter cannot be built
    server = v.e("IRC_SERVER") or extra.get("server", "")
    channel = v.e("IRC_CHANNEL") or extra.get("channel", "")
    nick = v.e("IRC_NICKNAME") or extra.get("nickname", "hermes-bot")
    if not (server and channel):
        return []
    source = v.src("IRC_NICKNAME") if v.e("IRC_NICKNAME") else v.src("IRC_SERVER")
    return _one("irc", "irc", f"{server}:{nick}", source)


def _line_token(v: View) -> object:
    """The channel access token the LINE adapter starts with, or ``None`` when it is never built."""
    if v.line.line_token_trimmed:  # 0.22: both trimmed, in the environment for check_fn, the token locked trimmed
        if not (v.e("LINE_CHANNEL_ACCESS_TOKEN").strip() and v.e("LINE_CHANNEL_SECRET").strip()):
            return None
        return v.e("LINE_CHANNEL_ACCESS_TOKEN").strip()
    if not (v.e("LINE_CHANNEL_ACCESS_TOKEN") and v.e("LINE_CHANNEL_SECRET")):  # check_fn: the environment only
        return None
    return v.e("LINE_CHANNEL_ACCESS_TOKEN")


def _line(v: View) -> list[Found]:
    # The adapter locks the first 16 hex digits of the token's SHA-256, not the token.
    token = _line_token(v)
    if not isinstance(token, str) or not token:
        return []
    return _one("line", "line", hashlib.sha256(token.encode()).hexdigest()[:16], v.src("LINE_CHANNEL_ACCESS_TOKEN"))


# --------------------------------------------------------------------------- listeners


def _listen(name: str, port: int | None, host: object) -> PortBinding | None:
    """A listener on a fixed port; port 0 asks for any free port, which is nobody's to claim, and a
    number outside :data:`profiles.numbers.PORT` is no port upstream can listen on."""
    if port is None or port == 0 or not PORT.holds(port):
        return None
    return PortBinding(name, port, None if host in (None, "", "0.0.0.0", "::") else str(host))


def _int(value: object) -> int | None:
    """``int(value)`` as Python does it, ``None`` where that raises."""
    try:
        return int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError, OverflowError):
        return None


def _api_server(v: View) -> PortBinding | None:
    # APIServerAdapter: extra host/port/key first (the .env block writes them there), else the
    # environment's, else 127.0.0.1:8642; connect() refuses to listen without a key of 16+ characters.
    extra = dict(v.extra("api_server"))
    if _api_server_by_env(v):  # the .env block writes its values into extra only when it enables
        if v.e("API_SERVER_KEY"):
            extra["key"] = v.e("API_SERVER_KEY")
        if (port := _int(v.e("API_SERVER_PORT"))) is not None:
            extra["port"] = port
        if v.e("API_SERVER_HOST"):
            extra["host"] = v.e("API_SERVER_HOST")
    key = extra.get("key", v.e("API_SERVER_KEY"))
    if not (isinstance(key, str) and _usable_secret(key, 16)):
        return None
    raw_port = extra.get("port")
    port = _int(v.get("API_SERVER_PORT", "8642") if raw_port is None else raw_port)
    host = extra.get("host", v.get("API_SERVER_HOST", "127.0.0.1"))
    return _listen("api_server", 8642 if port is None else port, host)


def _webhook(v: View) -> PortBinding | None:
    # WebhookAdapter: every route needs a secret (its own or the global one) or connect() raises
    # before listening. A port that is not a number stops the whole gateway at start-up; hermesd
    # then keeps claiming the default port (the crash is reported as a start-up failure).
    extra = dict(v.extra("webhook"))
    # The .env values reach the adapter when WEBHOOK_ENABLED turns it on, and (0.22) whenever
    # config.yaml has a webhook block: WEBHOOK_SECRET beside a YAML-enabled webhook makes it listen.
    if v.e_true("WEBHOOK_ENABLED") or (v.line.env_completes_yaml_webhooks and v.has_block("webhook")):
        if (port := _int(v.e("WEBHOOK_PORT"))) is not None:
            extra["port"] = port
        if v.e("WEBHOOK_SECRET"):
            extra["secret"] = v.e("WEBHOOK_SECRET")
    routes = extra.get("routes", {})
    secret = extra.get("secret", "")
    try:
        if any(not route.get("secret", secret) for route in dict(routes).values()):
            return None
    except (AttributeError, TypeError, ValueError):
        return None
    port = _int(extra.get("port", 8644))
    return _listen("webhook", 8644 if port is None else port, extra.get("host") or None)


def _msgraph_webhook(v: View) -> PortBinding | None:
    # MSGraphWebhookAdapter: no listener without extra.client_state, nor on a host reachable from
    # the network without extra.allowed_source_cidrs.
    extra = dict(v.extra("msgraph_webhook"))
    if (port := _int(v.e("MSGRAPH_WEBHOOK_PORT"))) is not None:
        extra["port"] = port
    if v.e("MSGRAPH_WEBHOOK_CLIENT_STATE"):
        extra["client_state"] = v.e("MSGRAPH_WEBHOOK_CLIENT_STATE")
    cidrs = [c.strip() for c in v.e("MSGRAPH_WEBHOOK_ALLOWED_SOURCE_CIDRS").split(",") if c.strip()]
    if cidrs:
        extra["allowed_source_cidrs"] = cidrs
    state = extra.get("client_state")
    if state is None or not str(state).strip():
        return None
    host = _host(v, extra, "host", "0.0.0.0")
    if host is _NO_HOST:
        return None
    if (host is None or _network_accessible(host)) and not _networks(extra.get("allowed_source_cidrs")):
        return None
    port = _int(extra.get("port", 8646))
    return _listen("msgraph_webhook", 8646 if port is None else port, host)


_NO_HOST = object()  # a host the adapter cannot bind: it never listens


def _host(v: View, extra: Mapping[str, Any], key: str, default: str) -> Any:
    """The host an adapter with a dual-stack default binds: None (all interfaces) for a missing or
    empty one from 0.20 on; up to 0.19 ``str(value)``, where a YAML null is the host "None"."""
    raw = extra.get(key, default)
    if v.line.none_host_is_all_interfaces:
        return str(raw) if raw else None
    return _NO_HOST if raw is None else str(raw)


def _network_accessible(host: str) -> bool:
    """``gateway/platforms/base.py`` ``is_network_accessible``: not a loopback address (names count as reachable)."""
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        return host != "localhost"
    mapped = getattr(addr, "ipv4_mapped", None)
    return not (addr.is_loopback or (mapped is not None and mapped.is_loopback))


def _networks(raw: object) -> bool:
    """Whether ``allowed_source_cidrs`` holds at least one valid network."""
    if isinstance(raw, str):
        items: list[Any] = list(raw.split(","))
    elif isinstance(raw, (list, tuple, set)):
        items = list(raw)
    else:
        return False
    for item in items:
        try:
            ipaddress.ip_network(str(item).strip(), strict=False)
        except ValueError:
            continue
        if str(item).strip():
            return True
    return False


def _sms(v: View) -> PortBinding | None:
    # The SMS plugin reads the environment only: the account and auth token to exist at all, a
    # sending number and a webhook URL (or SMS_INSECURE_NO_SIGNATURE=true) before it listens.
    if not (v.e("TWILIO_ACCOUNT_SID") and v.e("TWILIO_AUTH_TOKEN")):
        return None
    port = _int(v.get("SMS_WEBHOOK_PORT", "8080"))
    if port is None or not v.e("TWILIO_PHONE_NUMBER"):
        return None
    if not (v.e("SMS_WEBHOOK_URL").strip() or v.e("SMS_INSECURE_NO_SIGNATURE").lower() == "true"):
        return None
    return _listen("sms", port, v.get("SMS_WEBHOOK_HOST", "127.0.0.1"))


def _bluebubbles(v: View) -> PortBinding | None:
    # BlueBubblesAdapter: server URL and password (extra first, then the environment) before it
    # listens; the .env block writes its own values into extra when it enables the platform.
    extra = dict(v.extra("bluebubbles"))
    if v.e("BLUEBUBBLES_SERVER_URL") and v.e("BLUEBUBBLES_PASSWORD"):
        extra.update(server_url=v.e("BLUEBUBBLES_SERVER_URL").rstrip("/"), password=v.e("BLUEBUBBLES_PASSWORD"),
                     webhook_host=v.get("BLUEBUBBLES_WEBHOOK_HOST", "127.0.0.1"),
                     webhook_port=_env_int(v, "BLUEBUBBLES_WEBHOOK_PORT", 8645))
    url = extra.get("server_url") or v.e("BLUEBUBBLES_SERVER_URL")
    password = extra.get("password") or v.e("BLUEBUBBLES_PASSWORD")
    if not (isinstance(url, str) and url.strip() and password):
        return None
    port = _int(extra.get("webhook_port") or v.get("BLUEBUBBLES_WEBHOOK_PORT", "8645"))
    host = extra.get("webhook_host") or v.get("BLUEBUBBLES_WEBHOOK_HOST", "127.0.0.1")
    return _listen("bluebubbles", port, host)


def _env_int(v: View, name: str, default: int) -> int:
    """``gateway/config.py`` ``_getenv_int`` and ``utils.env_int``: base-10 after stripping, else the default."""
    value = _int(v.e(name))
    return default if value is None else value


def _whatsapp_cloud(v: View) -> PortBinding | None:
    # WhatsAppCloudAdapter: phone number id and access token (stripped, from extra, which the .env
    # block fills) before it listens.
    extra = dict(v.extra("whatsapp_cloud"))
    if v.e("WHATSAPP_CLOUD_PHONE_NUMBER_ID") and v.e("WHATSAPP_CLOUD_ACCESS_TOKEN"):
        extra.update(phone_number_id=v.e("WHATSAPP_CLOUD_PHONE_NUMBER_ID"),
                     access_token=v.e("WHATSAPP_CLOUD_ACCESS_TOKEN"))
        if v.e("WHATSAPP_CLOUD_WEBHOOK_HOST"):
            extra["webhook_host"] = v.e("WHATSAPP_CLOUD_WEBHOOK_HOST")
        if (port := _int(v.e("WHATSAPP_CLOUD_WEBHOOK_PORT"))) is not None:
            extra["webhook_port"] = port
    if not (str(extra.get("phone_number_id", "")).strip() and str(extra.get("access_token", "")).strip()):
        return None
    port = _int(extra.get("webhook_port", 8090))
    host = _host(v, extra, "webhook_host", "0.0.0.0")
    return None if host is _NO_HOST else _listen("whatsapp_cloud", 8090 if port is None else port, host)


def _wecom_callback(v: View) -> PortBinding | None:
    # WecomCallbackAdapter: host and port from extra (``or`` the defaults, so port 0 is 8645); the
    # .env block writes its values there. It needs an app (corp_id or apps) before it listens.
    extra = dict(v.extra("wecom_callback"))
    if v.e("WECOM_CALLBACK_CORP_ID") and v.e("WECOM_CALLBACK_CORP_SECRET"):
        extra.update(corp_id=v.e("WECOM_CALLBACK_CORP_ID"), corp_secret=v.e("WECOM_CALLBACK_CORP_SECRET"),
                     host=v.get("WECOM_CALLBACK_HOST", "0.0.0.0"), port=_env_int(v, "WECOM_CALLBACK_PORT", 8645))
    apps = extra.get("apps")
    if not (extra.get("corp_id") or (isinstance(apps, list) and any(isinstance(a, dict) for a in apps))):
        return None
    port = _int(extra.get("port") or 8645)
    return _listen("wecom_callback", port, str(extra.get("host") or "0.0.0.0"))


def _line_port(v: View) -> PortBinding | None:
    token = _line_token(v)
    if not token:
        return None
    extra = v.extra("line")
    port = _int(v.e("LINE_PORT") or extra.get("port", 8646))
    return _listen("line", 8646 if port is None else port, v.e("LINE_HOST") or extra.get("host", "0.0.0.0"))


def _feishu_port(v: View) -> PortBinding | None:
    # FeishuAdapter in webhook mode listens once it has taken its lock.
    settings = _Feishu(v)
    if not (settings.locks() and settings.mode == "webhook"):
        return None
    return _listen("feishu", settings.port, settings.host)


def _telegram_port(v: View) -> PortBinding | None:
    # Webhook mode (TELEGRAM_WEBHOOK_URL, with the secret it requires) listens on all interfaces.
    if not _telegram(v) or not (v.e("TELEGRAM_WEBHOOK_URL").strip() and v.e("TELEGRAM_WEBHOOK_SECRET").strip()):
        return None
    return _listen("telegram", _env_int(v, "TELEGRAM_WEBHOOK_PORT", 8443), "0.0.0.0")


def _teams_port(v: View) -> PortBinding | None:
    # TeamsAdapter listens on all interfaces once it has its three credentials.
    extra = v.extra("teams")
    if not all(extra.get(k) or v.e(f"TEAMS_{k.upper()}") for k in ("client_id", "client_secret", "tenant_id")):
        return None
    port = _int(extra.get("port") or v.get("TEAMS_PORT", "3978"))
    return _listen("teams", 3978 if port is None else port, "0.0.0.0")


def _whatsapp_port(v: View) -> PortBinding | None:
    # The Node bridge the adapter starts listens on bridge_port (loopback); the adapter first kills
    # whatever listens there, so two WhatsApp profiles on one port stop each other's bridge.
    if not _whatsapp(v):
        return None
    port = v.extra("whatsapp").get("bridge_port", 3000)
    return _listen("whatsapp", port if isinstance(port, int) else _int(port), "127.0.0.1")


def _photon_port(v: View) -> PortBinding | None:
    # The Photon sidecar (autostarted unless PHOTON_SIDECAR_AUTOSTART says no) listens on loopback.
    if str(v.get("PHOTON_SIDECAR_AUTOSTART", "true")).lower() in ("0", "false", "no") or not _photon_valid(v):
        return None
    port = _int(v.extra("photon").get("sidecar_port") or v.e("PHOTON_SIDECAR_PORT") or None)
    return _listen("photon", 8789 if port is None else port, "127.0.0.1")


def _raft_port(v: View) -> PortBinding | None:
    # RaftAdapter listens on extra port (0, any free port, by default).
    extra = v.extra("raft")
    if extra.get("host", "127.0.0.1") is None:
        return None  # str(None): the host "None", which does not resolve
    return _listen("raft", _int(extra.get("port", 0)), str(extra.get("host", "127.0.0.1")))


def _once(rule: Callable[[View], bool]) -> Callable[[View], bool]:
    """An enable rule answered once per view: the credential and port rules ask it again, and a
    1,000-profile scan spent a third of its time re-deciding the same platforms.

    Every enable rule goes through here, so here is where the line's own say comes in: a platform
    the release does not ship is never on, and (0.22) a relay in the environment switches the
    direct platforms off.
    """
    key = rule.__name__
    name = key.removeprefix("_on_")

    @functools.wraps(rule)
    def answer(v: View) -> bool:
        hit = v.memo.get(key)
        if hit is None:
            hit = v.memo[key] = name in v.line.platforms and not _relayed(v, name) and rule(v)
        return bool(hit)

    return answer


# What a relay in the environment leaves connected directly (``gateway/config_env.py`` ``_relay``).
_BESIDE_RELAY = frozenset({"relay", "api_server", "webhook"})


def _relayed(v: View, name: str) -> bool:
    """0.22: GATEWAY_RELAY_URL in the environment, with the relay on, switches ``name`` off."""
    if name in _BESIDE_RELAY or not v.line.relay_is_exclusive or not v.e("GATEWAY_RELAY_URL").strip():
        return False
    if v.e_true("GATEWAY_RELAY_ALLOW_DIRECT_PLATFORMS"):
        return False
    return _on_relay(v)


# --------------------------------------------------------------------------- enabled platforms
#
# One rule per platform: whether upstream's ``load_gateway_config`` (hermes-agent 0.19.0) ends with
# ``platforms.<name>.enabled`` true for these files, with every requirement check passing. Line
# numbers are ``gateway/config.py``'s unless another file is named.


def _from_env(v: View, name: str, by_env: bool) -> bool:
    """``_enable_from_env`` (1703): the ``.env`` enables it unless YAML explicitly says ``enabled: false``."""
    return v.cfg_enabled(name) or (by_env and not v.explicitly_off(name))


def _forced(v: View, name: str, by_env: bool) -> bool:
    """The blocks that set ``enabled = True`` outright: ``.env`` wins over an explicit ``enabled: false``
    on the lines that still do so for ``name`` (:attr:`RuleLine.env_beats_yaml_off`), else as
    :func:`_from_env`."""
    if name in v.line.env_beats_yaml_off:
        return by_env or v.cfg_enabled(name)
    return _from_env(v, name, by_env)


def _token_usable(v: View, name: str, env_name: str) -> bool:
    """``_validate_gateway_config``: a placeholder ``token`` disables the platforms upstream checks it for."""
    token = v.e(env_name) or _text(v.block(name).get("token"))
    return not (token.strip() and not _usable_secret(token))


def _seeded(extra: Mapping[str, Any], seed: Mapping[str, Any] | None) -> dict[str, Any]:
    """The registry pass's probe config: the platform's ``extra`` with the env seed ``setdefault``-ed in."""
    merged = dict(extra)
    for key, value in (seed or {}).items():
        if key != "home_channel":
            merged.setdefault(key, value)
    return merged


def _token_rule(name: str, env_name: str) -> EnableRule:
    """A token-authenticated platform: on when :func:`_bot_token` finds the token it starts with."""
    def rule(v: View) -> bool:
        return _bot_token(v, name, env_name) is not None
    rule.__name__ = f"_on_{name}"
    return _once(rule)


def _env_rule(name: str, how: Callable[[View, str, bool], bool], *needed: str) -> EnableRule:
    """A platform the environment turns on when every one of ``needed`` is set, decided by ``how``:
    :func:`_from_env`, :func:`_forced` or the plugin pass (:meth:`View.plugin_enabled`)."""
    def rule(v: View) -> bool:
        return how(v, name, all(v.e(n) for n in needed))
    rule.__name__ = f"_on_{name}"
    return _once(rule)


_on_telegram = _token_rule("telegram", "TELEGRAM_BOT_TOKEN")  # 1720 + _is_connected (env token) + placeholder
_on_discord = _token_rule("discord", "DISCORD_BOT_TOKEN")  # 1750
_on_slack = _token_rule("slack", "SLACK_BOT_TOKEN")  # 1849: same as _enable_from_env, written out
_on_mattermost = _token_rule("mattermost", "MATTERMOST_TOKEN")  # 1901; the plugin pass needs the token too
_on_signal = _env_rule("signal", _from_env, "SIGNAL_HTTP_URL", "SIGNAL_ACCOUNT")  # 1882
_on_homeassistant = _env_rule("homeassistant", _forced, "HASS_TOKEN")  # 1955 (!)
# 1966 (!); the plugin pass needs all four too (stripped), so adds nothing
_on_email = _env_rule("email", _forced, "EMAIL_ADDRESS", "EMAIL_PASSWORD", "EMAIL_IMAP_HOST", "EMAIL_SMTP_HOST")
_on_sms = _env_rule("sms", _forced, "TWILIO_ACCOUNT_SID")  # 1989 (!)
# 2100 (!); the plugin pass's check_fn needs both env vars too
_on_dingtalk = _env_rule("dingtalk", _forced, "DINGTALK_CLIENT_ID", "DINGTALK_CLIENT_SECRET")
_on_bluebubbles = _env_rule("bluebubbles", _forced, "BLUEBUBBLES_SERVER_URL", "BLUEBUBBLES_PASSWORD")  # 2230 (!)
_on_whatsapp_cloud = _env_rule("whatsapp_cloud", _forced,  # 1794 (!)
                               "WHATSAPP_CLOUD_PHONE_NUMBER_ID", "WHATSAPP_CLOUD_ACCESS_TOKEN")
# The plugin pass: check_fn wants these in the environment (LINE: and aiohttp).
_on_irc = _env_rule("irc", View.plugin_enabled, "IRC_SERVER", "IRC_CHANNEL")
_on_line = _env_rule("line", View.plugin_enabled, "LINE_CHANNEL_ACCESS_TOKEN", "LINE_CHANNEL_SECRET")
_on_simplex = _env_rule("simplex", View.plugin_enabled, "SIMPLEX_WS_URL")


@_once
def _on_matrix(v: View) -> bool:  # 1919; the plugin pass needs MATRIX_ACCESS_TOKEN/PASSWORD too
    by_env = bool(v.e("MATRIX_ACCESS_TOKEN") or v.e("MATRIX_PASSWORD"))
    return _from_env(v, "matrix", by_env) and _token_usable(v, "matrix", "MATRIX_ACCESS_TOKEN")


def _api_server_by_env(v: View) -> bool:
    """The environment's part: API_SERVER_ENABLED or a key (0.19); a usable key alone (0.20+)."""
    if v.line.api_server_needs_key:
        return _usable_secret(v.e("API_SERVER_KEY"), 16)
    return v.e_true("API_SERVER_ENABLED") or bool(v.e("API_SERVER_KEY"))


@_once
def _on_api_server(v: View) -> bool:  # 2005 (!)
    return _forced(v, "api_server", _api_server_by_env(v))


@_once
def _on_webhook(v: View) -> bool:  # 2032 (!)
    return _forced(v, "webhook", v.e_true("WEBHOOK_ENABLED"))


@_once
def _on_msgraph_webhook(v: View) -> bool:  # 2048: other MSGRAPH_WEBHOOK_* only create the entry
    return _forced(v, "msgraph_webhook", v.e_true("MSGRAPH_WEBHOOK_ENABLED"))


@_once
def _on_feishu(v: View) -> bool:  # 2120 (!), then the plugin pass: is_connected = extra app_id
    by_env = bool(v.e("FEISHU_APP_ID") and v.e("FEISHU_APP_SECRET"))
    return _forced(v, "feishu", by_env) or v.plugin_enabled("feishu", bool(v.extra("feishu").get("app_id")))


@_once
def _on_wecom(v: View) -> bool:  # 2148 (!), then the plugin pass: is_connected = extra bot_id
    by_env = bool(v.e("WECOM_BOT_ID") and v.e("WECOM_SECRET"))
    return _forced(v, "wecom", by_env) or v.plugin_enabled("wecom", bool(v.extra("wecom").get("bot_id")))


@_once
def _on_wecom_callback(v: View) -> bool:  # 2171 (!), then the plugin pass: extra corp_id or apps
    by_env = bool(v.e("WECOM_CALLBACK_CORP_ID") and v.e("WECOM_CALLBACK_CORP_SECRET"))
    extra = v.extra("wecom_callback")
    configured = bool(extra.get("corp_id") or extra.get("apps"))
    return _forced(v, "wecom_callback", by_env) or v.plugin_enabled("wecom_callback", configured)


@_once
def _on_weixin(v: View) -> bool:  # 2188 (!), placeholder check on its token
    by_env = bool(v.e("WEIXIN_TOKEN") or v.e("WEIXIN_ACCOUNT_ID"))
    return _forced(v, "weixin", by_env) and _token_usable(v, "weixin", "WEIXIN_TOKEN")


@_once
def _on_qqbot(v: View) -> bool:  # 2270 (!)
    return _forced(v, "qqbot", bool(v.e("QQ_APP_ID") or v.e("QQ_CLIENT_SECRET")))


@_once
def _on_yuanbao(v: View) -> bool:  # 2312 (!)
    by_env = bool((v.e("YUANBAO_APP_ID") or v.e("YUANBAO_APP_KEY")) and v.e("YUANBAO_APP_SECRET"))
    return _forced(v, "yuanbao", by_env)


@_once
def _on_whatsapp(v: View) -> bool:  # 1772 + the plugin pass (see _whatsapp_enabled)
    return _whatsapp_enabled(v)[0]


@_once
def _on_ntfy(v: View) -> bool:  # plugin pass: check_fn wants NTFY_TOPIC (stripped)
    return v.plugin_enabled("ntfy", bool(v.e("NTFY_TOPIC").strip()))


@_once
def _on_teams(v: View) -> bool:  # plugin pass: validate_config, each value from the env or extra
    extra = v.extra("teams")
    configured = all(v.e(f"TEAMS_{k.upper()}") or extra.get(k) for k in ("client_id", "client_secret", "tenant_id"))
    return v.plugin_enabled("teams", configured)


@_once
def _on_google_chat(v: View) -> bool:  # plugin pass: env seed, _validate_config, _check_for_registry's env part
    project = v.e("GOOGLE_CHAT_PROJECT_ID") or v.e("GOOGLE_CLOUD_PROJECT")
    subscription = v.e("GOOGLE_CHAT_SUBSCRIPTION_NAME") or v.e("GOOGLE_CHAT_SUBSCRIPTION")
    url = v.e("GOOGLE_CHAT_HTTP_EVENTS_URL")
    env_configured = bool(url or (project and subscription))
    if not env_configured and "google_chat" not in v.line.installable_plugins:  # check_fn wants the env part
        return v.cfg_enabled("google_chat")
    seed = {k: val for k, val in
            (("project_id", project), ("subscription_name", subscription), ("http_events_url", url))
            if val and env_configured}
    probe = _seeded(v.extra("google_chat"), seed)
    configured = bool(probe.get("http_events_url") or (probe.get("project_id") and probe.get("subscription_name")))
    return v.plugin_enabled("google_chat", configured)


class _Unreadable(Exception):
    """Upstream would raise reading this file (and skip the platform)."""


def _photon_stored(v: View) -> tuple[object, object]:
    """photon/auth.py ``load_project_credentials``: the env pair, else ``auth.json``'s first pool entry.

    Asked up to four times per profile (enabled, port, twice each): ``auth.json`` is read once per view
    (measured: 0.44 s of a 1,000-profile scan read it again and again).
    """
    found = v.memo.get("photon")
    if found is None:
        try:
            found = _photon_read(v)
        except _Unreadable as exc:
            found = exc
        v.memo["photon"] = found
    if isinstance(found, _Unreadable):
        raise found
    return found  # type: ignore[return-value]


def _photon_read(v: View) -> tuple[object, object]:
    env_id, env_sec = v.e("PHOTON_PROJECT_ID"), v.e("PHOTON_PROJECT_SECRET")
    if env_id and env_sec:
        return env_id, env_sec
    where = home_file(v.home, "auth.json")
    auth, absent = read_json_or_absent(where)
    if auth is None:
        if not absent and lstat(where) is not None:
            raise _Unreadable(where.text)  # upstream: json.load → {} only for empty values; a list raises
        auth = {}
    pool = auth.get("credential_pool", {})
    if not isinstance(pool, dict):
        raise _Unreadable(where.text)
    proj = pool.get("photon_project") or []
    if isinstance(proj, list) and proj:
        entry = proj[0]
        if not isinstance(entry, dict):
            raise _Unreadable(where.text)
        sid = entry.get("spectrum_project_id") or entry.get("project_id")
        return env_id or sid, env_sec or entry.get("project_secret")
    return env_id, env_sec


def _photon_valid(v: View) -> bool:
    """The plugin's ``validate_config`` after the env seed: a project id and secret (the block's
    ``extra``, the environment, else the stored credentials). Without them the registry builds no
    adapter, so an explicitly enabled Photon starts no sidecar and claims no port."""
    try:
        pid, psec = _photon_stored(v)
    except _Unreadable:
        pid = psec = None
    stored = bool(pid and psec)
    probe = _seeded(v.extra("photon"), {"project_id": pid, "project_secret": psec} if stored else None)
    configured = bool((probe.get("project_id") or v.e("PHOTON_PROJECT_ID"))
                      and (probe.get("project_secret") or v.e("PHOTON_PROJECT_SECRET")))
    return configured or stored


@_once
def _on_photon(v: View) -> bool:  # plugin pass: env seed from stored credentials, then validate_config
    return v.plugin_enabled("photon", _photon_valid(v))


@_once
def _on_raft(v: View) -> bool:  # plugin pass: RAFT_PROFILE seeds extra.enabled (setdefault)
    probe = _seeded(v.extra("raft"), {"enabled": True} if v.e("RAFT_PROFILE") else None)
    return v.plugin_enabled("raft", bool(probe.get("enabled") or probe.get("bridge_token")))


@_once
def _on_relay(v: View) -> bool:  # 2524: GATEWAY_RELAY_URL or extra relay_url, through _enable_from_env
    by_env = bool(v.e("GATEWAY_RELAY_URL").strip() or _text(v.extra("relay").get("relay_url") or ""))
    return _from_env(v, "relay", by_env)


def _buzz_relay(v: View) -> str:
    """BUZZ_RELAY_URL as the adapter reads it: the environment, else what its YAML hook bridged there
    (``relay_url`` of the first Buzz block's ``extra``, as text)."""
    if v.e("BUZZ_RELAY_URL"):
        return v.e("BUZZ_RELAY_URL")
    section = v.section("buzz")
    extra = section.get("extra", section) if section is not None else None
    value = extra.get("relay_url") if isinstance(extra, dict) else None
    return "" if value in (None, "") else str(value)


@_once
def _on_buzz(v: View) -> bool:  # 0.20+ plugin pass: check_fn wants the relay and a key in the environment, trimmed
    return v.plugin_enabled("buzz", bool(_buzz_relay(v).strip() and v.e("BUZZ_PRIVATE_KEY").strip()))


def _buzz(v: View) -> list[Found]:
    # BuzzAdapter.connect(): the relay and the key (the environment's, trimmed; a credentials file in
    # the user's home is not modelled); the relay then names the key's public key, and the adapter
    # locks "<relay>:<public key>": one Buzz identity per relay.
    relay = _buzz_relay(v).strip()
    pubkey = public_key(v.e("BUZZ_PRIVATE_KEY"))
    if not relay or pubkey is None:
        return []
    return _one("buzz", "buzz", f"{relay}:{pubkey}", v.src("BUZZ_PRIVATE_KEY"))


@_once
def _on_a2a(v: View) -> bool:  # 0.20+ plugin pass: is_connected = extra "enabled" (Python truthiness) or A2A_PORT
    return v.plugin_enabled("a2a", bool(v.extra("a2a").get("enabled")) or bool(v.e("A2A_PORT").strip()))


def _a2a_port(v: View) -> PortBinding | None:
    # A2AAdapter: A2A_PORT, else extra port, else 9900; loopback unless a token (A2A_BEARER_TOKEN or a
    # valid A2A_PEER_TOKENS pair) is set and A2A_HOST asks for more.
    port = _int(v.e("A2A_PORT") or v.extra("a2a").get("port", 9900))
    if port is None:
        return None  # the plugin registry catches the constructor's error: no adapter, no listener
    requested = v.e("A2A_HOST").strip() or "127.0.0.1"
    peers = [pair.split(":", 1) for pair in v.e("A2A_PEER_TOKENS").split(",") if ":" in pair]
    tokens = bool(v.e("A2A_BEARER_TOKEN").strip()) or any(n.strip() and t.strip() for n, t in peers)
    host = requested if requested in ("127.0.0.1", "localhost", "::1") or tokens else "127.0.0.1"
    return _listen("a2a", port, host)


# --------------------------------------------------------------------------- requirements
#
# What each platform's requirement check (``check_fn``, or the built-in ``check_*_requirements``
# that ``_create_adapter`` calls) needs, read from hermes-agent 0.19.0, and what installs it. The
# pins below are 0.19.0's; :mod:`supervisor.hermes.requirements` asks the gateway's own interpreter for
# its release's pins (``tools.lazy_deps.LAZY_DEPS`` and hermes-agent's ``Requires-Dist``) and uses
# these only where that interpreter has none.

# tools/lazy_deps.py LAZY_DEPS, the platform features (0.19.0).
LAZY_FEATURES: dict[str, tuple[str, ...]] = {
    "platform.telegram": ("python-telegram-bot[webhooks]==22.6",),
    "platform.discord": ("discord.py[voice]==2.7.1", "brotlicffi==1.2.0.1", "aiohttp==3.14.1"),
    "platform.slack": ("slack-bolt==1.29.0", "slack-sdk==3.43.0", "aiohttp==3.14.1"),
    "platform.matrix": (
        "mautrix[encryption]==0.21.0", "aiosqlite==0.22.1", "asyncpg==0.31.0", "aiohttp-socks==0.11.0",
        "aiohttp==3.14.1",
    ),
    "platform.dingtalk": ("dingtalk-stream==0.24.3", "alibabacloud-dingtalk==2.2.42", "qrcode==7.4.2"),
    "platform.feishu": ("lark-oapi==1.6.8", "qrcode==7.4.2"),
    "platform.wecom_callback": ("defusedxml==0.7.1",),
    "platform.teams": ("microsoft-teams-apps==2.0.13.4", "aiohttp==3.14.1"),
}

# The distribution that provides an import name, pinned as hermes-agent 0.19.0 pins it (its
# ``Requires-Dist``; unpinned where upstream pins nothing). The longest dotted prefix wins.
MODULE_SPECS: dict[str, str] = {
    "telegram": "python-telegram-bot[webhooks]==22.6",
    "discord": "discord.py[voice]==2.7.1",
    "slack_bolt": "slack-bolt==1.29.0",
    "slack_sdk": "slack-sdk==3.43.0",
    "aiohttp": "aiohttp==3.14.1",
    "mautrix": "mautrix[encryption]==0.21.0",
    "asyncpg": "asyncpg==0.31.0",
    "aiosqlite": "aiosqlite==0.22.1",
    "dingtalk_stream": "dingtalk-stream==0.24.3",
    "lark_oapi": "lark-oapi==1.6.8",
    "defusedxml": "defusedxml==0.7.1",
    "microsoft_teams": "microsoft-teams-apps==2.0.13.4",
    "httpx": "httpx[socks]==0.28.1",
    "websockets": "websockets==15.0.1",
    "cryptography": "cryptography==46.0.7",
    "httplib2": "httplib2",
    "google.cloud.pubsub_v1": "google-cloud-pubsub",
    "google.api_core": "google-api-core",
    "google.oauth2": "google-auth",
    "google_auth_httplib2": "google-auth-httplib2==0.3.1",
    "googleapiclient": "google-api-python-client==2.194.0",
}


def spec_for_module(module: str) -> str | None:
    """The pip spec that provides ``module`` (longest dotted prefix in :data:`MODULE_SPECS`), or None."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        spec = MODULE_SPECS.get(".".join(parts[:n]))
        if spec is not None:
            return spec
    return None


@dataclass(frozen=True, slots=True)
class Needs:
    """What a platform's requirement check needs, as upstream checks it (hermes-agent 0.19.0).

    ``imports``: the import names the check (or the adapter module's guarded top-level imports it
    reports) uses; all must import. ``feature``: its ``tools/lazy_deps.py`` feature, the specs
    upstream's own installer would install. ``exact``: the check is ``feature_missing`` itself,
    every spec installed at its pinned version (matrix), not an import. ``extra``: the
    hermes-agent extra that provides all of it, when one really exists (``hermes-agent[telegram]``
    does not). ``programs``: executables the check looks for on PATH (pip cannot install them).
    ``hint``: what upstream says to do where pip cannot help.
    """

    imports: tuple[str, ...] = ()
    feature: str | None = None
    exact: bool = False
    extra: str | None = None
    programs: tuple[str, ...] = ()
    hint: str = ""

    @property
    def specs(self) -> tuple[str, ...]:
        """Upstream's pins (0.19.0) that make the check pass: the feature's, then any import it misses."""
        out = list(LAZY_FEATURES.get(self.feature or "", ()))
        have = {dist_key(s) for s in out}
        for module in self.imports:
            spec = spec_for_module(module)
            if spec is not None and dist_key(spec) not in have:
                out.append(spec)
                have.add(dist_key(spec))
        return tuple(out)


def dist_key(spec: str) -> str:
    """A pip spec's distribution name, normalised (PEP 503): ``discord.py[voice]==2.7.1`` → ``discord-py``."""
    name = spec.split(";")[0].strip()
    for i, ch in enumerate(name):
        if not (ch.isalnum() or ch in "._-"):
            name = name[:i]
            break
    return "-".join(part for part in name.replace("_", "-").replace(".", "-").lower().split("-") if part)


@dataclass(frozen=True, slots=True)
class Program:
    """An executable a requirement check looks for: in ``dirs`` first, then on the gateway's PATH.

    ``tree``: when any of these names is an executable in ``dirs`` (a Hermes-managed Node folder),
    ``dirs`` is the only place looked (upstream's ``find_node_executable`` up to 0.21 falls back to
    PATH only without one). ``managed``: found only by the release's own package manager (0.22's
    Node), which the gateway's interpreter is asked for.
    """

    name: str
    dirs: tuple[str, ...] = ()
    tree: tuple[str, ...] = ()
    managed: bool = False


@dataclass(frozen=True, slots=True)
class Requirement:
    """One enabled platform's requirements for one profile (what :mod:`supervisor.hermes.requirements` checks)."""

    platform: str
    imports: tuple[str, ...]
    feature: str | None
    exact: bool
    extra: str | None
    specs: tuple[str, ...]  # hermes-agent 0.19.0's pins; the gateway's interpreter may know its own
    programs: tuple[Program, ...] = ()
    files: tuple[str, ...] = ()  # paths under hermes-agent's ``plugins`` package that must exist
    hint: str = ""


_AIOHTTP = "aiohttp"
_AIOHTTP_WEB = "aiohttp.web"
_MATRIX_E2EE = ("mautrix.crypto", "mautrix.crypto.store.asyncpg", "asyncpg", "aiosqlite")  # _check_e2ee_deps
_PHOTON_SIDECAR = "platforms/photon/sidecar/node_modules"

_NEEDS: dict[str, Needs] = {
    # check_telegram_requirements (telegram/adapter.py:367): the module-level imports, else ensure()
    "telegram": Needs(("telegram", "telegram.ext", "telegram.constants", "telegram.request"),
                      "platform.telegram", extra="messaging"),
    "discord": Needs(("discord", "discord.ext.commands"), "platform.discord", extra="messaging"),
    "slack": Needs(("slack_bolt.async_app", "slack_bolt.adapter.socket_mode.async_handler",
                    "slack_sdk.web.async_client", _AIOHTTP), "platform.slack", extra="slack"),
    # check_matrix_requirements (matrix/adapter.py:719): feature_missing("platform.matrix") decides
    "matrix": Needs((), "platform.matrix", exact=True, extra="matrix"),
    "mattermost": Needs((_AIOHTTP,)),
    "email": Needs(),
    "sms": Needs((_AIOHTTP,), extra="sms"),
    "homeassistant": Needs((_AIOHTTP,), extra="homeassistant"),
    "dingtalk": Needs(("dingtalk_stream", "dingtalk_stream.frames", "httpx"), "platform.dingtalk", extra="dingtalk"),
    "feishu": Needs(("lark_oapi", "lark_oapi.api.application.v6", "lark_oapi.api.im.v1", "lark_oapi.core",
                     "lark_oapi.core.const", "lark_oapi.core.model",
                     "lark_oapi.event.callback.model.p2_card_action_trigger",
                     "lark_oapi.event.dispatcher_handler", "lark_oapi.ws"), "platform.feishu", extra="feishu"),
    "wecom": Needs((_AIOHTTP, "httpx")),
    "wecom_callback": Needs(("defusedxml.ElementTree", _AIOHTTP_WEB, "httpx"), "platform.wecom_callback"),
    "whatsapp": Needs(programs=("node",),
                      hint="WhatsApp requires a Node.js bridge (node on PATH or under HERMES_HOME/node/bin)"),
    "irc": Needs(),
    "line": Needs((_AIOHTTP,)),
    "teams": Needs((_AIOHTTP_WEB, "microsoft_teams.apps", "microsoft_teams.common.http.client",
                    "microsoft_teams.api", "microsoft_teams.apps.http.adapter", "microsoft_teams.cards"),
                   "platform.teams", extra="teams"),
    "google_chat": Needs(("httplib2", "google.cloud.pubsub_v1", "google.api_core.exceptions",
                          "google.oauth2.service_account", "google_auth_httplib2", "googleapiclient.discovery",
                          "googleapiclient.errors", "googleapiclient.http")),
    "ntfy": Needs(("httpx",)),
    "simplex": Needs(("websockets",)),
    "photon": Needs(("httpx",), programs=("node",),
                    hint="run 'hermes photon setup' (installs Node.js sidecar dependencies)"),
    "raft": Needs((_AIOHTTP_WEB,), programs=("raft",), hint="install the Raft CLI from https://raft.build"),
    "whatsapp_cloud": Needs((_AIOHTTP_WEB, "httpx")),
    "signal": Needs(),
    "weixin": Needs((_AIOHTTP, "cryptography.hazmat.backends", "cryptography.hazmat.primitives.ciphers")),
    "api_server": Needs((_AIOHTTP_WEB,)),
    "webhook": Needs((_AIOHTTP_WEB,)),
    "msgraph_webhook": Needs((_AIOHTTP_WEB,)),
    "bluebubbles": Needs((_AIOHTTP, "httpx")),
    "qqbot": Needs((_AIOHTTP, "httpx")),
    "yuanbao": Needs(("websockets", "websockets.exceptions")),
    "relay": Needs(),
    "buzz": Needs(programs=("buzz",),
                  hint="install the buzz CLI (https://github.com/block/buzz) on PATH, or set BUZZ_CLI_PATH"),
    "a2a": Needs(),
}


def _matrix_e2ee_required(v: View) -> bool:
    """matrix/adapter.py ``_resolve_e2ee_mode()`` as the check calls it (no extra: the env only)."""
    explicit = v.e("MATRIX_E2EE_MODE")
    if explicit:
        return explicit.strip().lower() in ("required", "require", "true", "1", "yes", "on")
    return v.e("MATRIX_ENCRYPTION").lower() in ("true", "1", "yes")


def requirement_of(view: View, name: str) -> Requirement:
    """``name``'s requirements for this profile (its ``.env`` picks Matrix E2EE and Photon's node)."""
    needs = _NEEDS[name]
    imports = needs.imports
    programs = tuple(Program(p) for p in needs.programs)
    files: tuple[str, ...] = ()
    if name == "matrix" and _matrix_e2ee_required(view):
        imports = (*imports, *_MATRIX_E2EE)
    hint = needs.hint
    if name == "whatsapp" and view.line.node_from_package_manager:  # hermes_constants.find_node_executable
        programs = (Program("node", managed=True),)
        hint = "run 'hermes pm install': WhatsApp's Node.js comes only from Hermes' package manager, never PATH"
    elif name == "whatsapp":  # hermes_constants.find_node_executable: the managed Node first
        node = view.home / "node"
        programs = (Program("node", (str(node / "bin"), str(node)), tree=("node", "npm", "npx")),)
    if name == "photon":
        programs = (Program(view.e("PHOTON_NODE_BIN") or "node"),)
        files = (_PHOTON_SIDECAR,)
    if name == "feishu" and _Feishu(view).mode == "webhook":  # its webhook server; the feishu extra lacks it
        imports = (*imports, _AIOHTTP_WEB)
    specs = Needs(imports, needs.feature).specs
    return Requirement(name, imports, needs.feature, needs.exact, needs.extra, specs, programs, files, hint)


CredentialRule = Callable[[View], list[Found]]
PortRule = Callable[[View], PortBinding | None]
EnableRule = Callable[[View], bool]


@dataclass(frozen=True, slots=True)
class Platform:
    """One messaging platform as upstream defines it (see the module docstring)."""

    name: str
    env_prefixes: tuple[str, ...]
    credential: CredentialRule | None = None
    port: PortRule | None = None
    enabled: EnableRule | None = None

    @property
    def needs(self) -> Needs:
        return _NEEDS[self.name]


PLATFORMS: tuple[Platform, ...] = (
    Platform("telegram", ("TELEGRAM_",), credential=_telegram, port=_telegram_port, enabled=_on_telegram),
    Platform("discord", ("DISCORD_",), credential=_discord, enabled=_on_discord),
    Platform("slack", ("SLACK_",), credential=_slack, enabled=_on_slack),
    Platform("signal", ("SIGNAL_",), credential=_signal, enabled=_on_signal),
    Platform("weixin", ("WEIXIN_",), credential=_weixin, enabled=_on_weixin),
    Platform("qqbot", ("QQ_", "QQBOT_"), credential=_qqbot, enabled=_on_qqbot),  # QQBOT_HOME_CHANNEL…
    Platform("yuanbao", ("YUANBAO_",), credential=_yuanbao, enabled=_on_yuanbao),
    Platform("feishu", ("FEISHU_",), credential=_feishu, port=_feishu_port, enabled=_on_feishu),
    Platform("whatsapp", ("WHATSAPP_",), credential=_whatsapp, port=_whatsapp_port, enabled=_on_whatsapp),
    Platform("whatsapp_cloud", ("WHATSAPP_CLOUD_",), port=_whatsapp_cloud, enabled=_on_whatsapp_cloud),
    Platform("irc", ("IRC_",), credential=_irc, enabled=_on_irc),
    Platform("line", ("LINE_",), credential=_line, port=_line_port, enabled=_on_line),
    Platform(API_SERVER, ("API_SERVER_",), port=_api_server, enabled=_on_api_server),
    Platform("webhook", ("WEBHOOK_",), port=_webhook, enabled=_on_webhook),
    Platform("msgraph_webhook", ("MSGRAPH_",), port=_msgraph_webhook, enabled=_on_msgraph_webhook),
    Platform("sms", ("SMS_", "TWILIO_"), port=_sms, enabled=_on_sms),
    Platform("bluebubbles", ("BLUEBUBBLES_",), port=_bluebubbles, enabled=_on_bluebubbles),
    Platform("wecom_callback", ("WECOM_",), port=_wecom_callback, enabled=_on_wecom_callback),
    Platform("matrix", ("MATRIX_",), enabled=_on_matrix),
    Platform("mattermost", ("MATTERMOST_",), enabled=_on_mattermost),
    Platform("email", ("EMAIL_",), enabled=_on_email),
    Platform("dingtalk", ("DINGTALK_",), enabled=_on_dingtalk),
    Platform("homeassistant", ("HASS_",), enabled=_on_homeassistant),
    Platform("wecom", ("WECOM_",), enabled=_on_wecom),
    Platform("teams", ("TEAMS_",), port=_teams_port, enabled=_on_teams),
    Platform("google_chat", ("GOOGLE_CHAT_",), enabled=_on_google_chat),
    Platform("ntfy", ("NTFY_",), enabled=_on_ntfy),
    Platform("simplex", ("SIMPLEX_",), enabled=_on_simplex),
    Platform("photon", ("PHOTON_",), port=_photon_port, enabled=_on_photon),
    Platform("raft", ("RAFT_",), port=_raft_port, enabled=_on_raft),
    Platform("relay", ("GATEWAY_RELAY_",), enabled=_on_relay),
    Platform("buzz", ("BUZZ_",), credential=_buzz, enabled=_on_buzz),
    Platform("a2a", ("A2A_",), port=_a2a_port, enabled=_on_a2a),
)

ENV_PREFIXES: tuple[str, ...] = tuple(sorted({p for plat in PLATFORMS for p in plat.env_prefixes}))


def is_platform_variable(name: str) -> bool:
    """Whether an environment variable configures some platform (and so must not leak into children)."""
    return name.startswith(ENV_PREFIXES)


def _on(view: View, plat: Platform) -> bool:
    return plat.enabled is not None and plat.enabled(view)


def _built(view: View, plat: Platform) -> bool:
    """Whether the gateway builds ``plat``'s adapter at all: it is enabled and its plugin loads."""
    return _on(view, plat) and not view.plugin_off(plat.name)


def credentials_of(view: View) -> list[Found]:
    """Every exclusive credential the profile's gateway would lock, in registry order (only a built
    adapter locks anything)."""
    return [found for plat in PLATFORMS if plat.credential is not None and _built(view, plat)
            for found in plat.credential(view)]


def ports_of(view: View) -> list[PortBinding]:
    """Every TCP listener the profile's gateway would open, in registry order."""
    return [b for plat in PLATFORMS
            if plat.port is not None and _built(view, plat) and (b := plat.port(view)) is not None]


def enabled_platforms(view: View) -> list[str]:
    """The platforms upstream's config loader enables for these files, in registry order.

    Requirement checks count as passing (see the module docstring): a configured platform whose
    library is missing is listed, so that :func:`requirements_of` can say what it lacks.
    """
    return [p.name for p in PLATFORMS if _on(view, p)]


def requirements_of(view: View, names: Iterable[str] | None = None) -> dict[str, Requirement]:
    """Each enabled platform's requirements (or those of ``names``), in registry order."""
    chosen = enabled_platforms(view) if names is None else [p.name for p in PLATFORMS if p.name in set(names)]
    return {n: requirement_of(view, n) for n in chosen if not view.plugin_off(n)}  # no adapter: nothing to install
