"""Generated profile folders, upstream's verdict on them, and hermesd's: the pieces of the oracle test.

``generate`` writes profile folders from a seed (every platform is the main platform of some
profile); ``ask_upstream`` runs ``gateway_oracle.py`` in the gateway's interpreter on them;
``predict`` is hermesd's reading of the same folders (the functions the daemon, doctor, export
and status use); ``compare`` lists every field on which the two disagree.

Run ``python tests/profiles/oracle_profiles.py [COUNT] [SEED]`` from the repository root to print
the disagreements without pytest.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import resource
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from profiles.credentials import view_of
from profiles.snapshot import read_profile
from profiles.upstream.lines import BASELINE, RuleLine
from profiles.upstream.platforms import PLATFORMS, credentials_of, enabled_platforms, ports_of
from profiles.upstream.process import lock_dir
from supervisor.processes.childspec import child_env

DRIVER = Path(__file__).resolve().with_name("gateway_oracle.py")
CPU_SECONDS: list[float] = []  # processor time of each driver run (its children included)

# --------------------------------------------------------------------------- value pools

TOKENS = ("tok-aaaa-1111", "tok-bbbb-2222", " tok-aaaa-1111 ", "changeme", "", "abc")
SECRETS = ("sec-1111", "", " sec-2222 ")
KEYS = ("k-0123456789abcdef-long", "short-key", "", " k-0123456789abcdef-long ")
PORTS: tuple[Any, ...] = (8100, 8101, "8102", "abc", 0, "", None)
HOSTS: tuple[Any, ...] = ("127.0.0.1", "0.0.0.0", "", "127.0.0.2", "::", None)
BOOLS: tuple[Any, ...] = (True, False, "true", "false", "yes", "off", "1", "", None, " false", "true ")
IDS = ("id-1", "id-2", " id-1 ", "")
URLS = ("http://127.0.0.1:9", "https://x.example/hook", "")
ACCOUNTS = ("+15550001", "+15550002", " +15550001 ", "")
# One Nostr key as hex and as nsec (the same Buzz identity), another key, and two that are no key.
NOSTR_KEYS = ("0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f20",
              "nsec1qypqxpq9qcrsszg2pvxq6rs0zqg3yyc5z5tpwxqergd3c8g7rusqpqcc2y",
              "2102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f20", "abc", "")


@dataclass(frozen=True)
class Knob:
    """One setting: its environment name and/or its ``extra`` key, and the values to try."""

    env: str | None
    extra: str | None
    values: tuple[Any, ...]


@dataclass(frozen=True)
class Spec:
    """How to configure one platform: knobs, and whether its block takes ``token``."""

    knobs: tuple[Knob, ...]
    token: bool = False


def K(env: str | None, extra: str | None, values: tuple[Any, ...]) -> Knob:
    return Knob(env, extra, values)


SPECS: dict[str, Spec] = {
    "telegram": Spec((K("TELEGRAM_BOT_TOKEN", None, TOKENS), K("TELEGRAM_WEBHOOK_URL", None, URLS),
                      K("TELEGRAM_WEBHOOK_PORT", None, PORTS), K("TELEGRAM_WEBHOOK_SECRET", None, SECRETS)), True),
    "discord": Spec((K("DISCORD_BOT_TOKEN", None, TOKENS),), True),
    "slack": Spec((K("SLACK_BOT_TOKEN", None, TOKENS), K("SLACK_APP_TOKEN", None, TOKENS)), True),
    "signal": Spec((K("SIGNAL_HTTP_URL", "http_url", URLS), K("SIGNAL_ACCOUNT", "account", ACCOUNTS))),
    "weixin": Spec((K("WEIXIN_TOKEN", "token", TOKENS), K("WEIXIN_ACCOUNT_ID", "account_id", IDS)), True),
    "qqbot": Spec((K("QQ_APP_ID", "app_id", IDS), K("QQ_CLIENT_SECRET", "client_secret", SECRETS))),
    "yuanbao": Spec((K("YUANBAO_APP_ID", "app_id", IDS), K("YUANBAO_APP_KEY", None, IDS),
                     K("YUANBAO_APP_SECRET", "app_secret", SECRETS))),
    "feishu": Spec((K("FEISHU_APP_ID", "app_id", IDS), K("FEISHU_APP_SECRET", "app_secret", SECRETS),
                    K("FEISHU_CONNECTION_MODE", "connection_mode", ("webhook", "websocket", "", "Webhook", "bogus")),
                    K("FEISHU_VERIFICATION_TOKEN", "verification_token", SECRETS),
                    K("FEISHU_ENCRYPT_KEY", "encrypt_key", SECRETS),
                    K("FEISHU_WEBHOOK_PORT", "webhook_port", PORTS), K("FEISHU_WEBHOOK_HOST", "webhook_host", HOSTS))),
    "whatsapp": Spec((K("WHATSAPP_ENABLED", None, BOOLS), K(None, "session_path", ("<home>/wa-session", "")),
                      K(None, "bridge_port", (3000, 3001, None)), K(None, "bridge_script", ("<home>/bridge.js",)))),
    "whatsapp_cloud": Spec((K("WHATSAPP_CLOUD_PHONE_NUMBER_ID", "phone_number_id", IDS),
                            K("WHATSAPP_CLOUD_ACCESS_TOKEN", "access_token", TOKENS),
                            K("WHATSAPP_CLOUD_WEBHOOK_PORT", "webhook_port", PORTS),
                            K("WHATSAPP_CLOUD_WEBHOOK_HOST", "webhook_host", HOSTS),
                            K("WHATSAPP_CLOUD_VERIFY_TOKEN", "verify_token", SECRETS),
                            K("WHATSAPP_CLOUD_APP_SECRET", "app_secret", SECRETS))),
    "irc": Spec((K("IRC_SERVER", "server", ("irc.example", " irc.example ", "")),
                 K("IRC_CHANNEL", "channel", ("#c", "")), K("IRC_NICKNAME", "nickname", ("herm", " herm ", "")))),
    "line": Spec((K("LINE_CHANNEL_ACCESS_TOKEN", "channel_access_token", TOKENS),
                  K("LINE_CHANNEL_SECRET", "channel_secret", SECRETS), K("LINE_PORT", "port", PORTS),
                  K("LINE_HOST", "host", HOSTS))),
    "api_server": Spec((K("API_SERVER_ENABLED", None, BOOLS), K("API_SERVER_KEY", "key", KEYS),
                        K("API_SERVER_PORT", "port", PORTS), K("API_SERVER_HOST", "host", HOSTS))),
    "webhook": Spec((K("WEBHOOK_ENABLED", None, BOOLS), K("WEBHOOK_PORT", "port", PORTS),
                     K("WEBHOOK_SECRET", "secret", SECRETS), K(None, "host", HOSTS),
                     K(None, "routes", ({"r": {"secret": "s"}}, {"r": {}}, {})))),
    "msgraph_webhook": Spec((K("MSGRAPH_WEBHOOK_ENABLED", None, BOOLS), K("MSGRAPH_WEBHOOK_PORT", "port", PORTS),
                             K("MSGRAPH_WEBHOOK_CLIENT_STATE", "client_state", SECRETS), K(None, "host", HOSTS),
                             K("MSGRAPH_WEBHOOK_ALLOWED_SOURCE_CIDRS", None, ("10.0.0.0/8", "")))),
    "sms": Spec((K("TWILIO_ACCOUNT_SID", None, IDS), K("TWILIO_AUTH_TOKEN", None, SECRETS),
                 K("TWILIO_PHONE_NUMBER", None, ACCOUNTS), K("SMS_WEBHOOK_PORT", None, PORTS),
                 K("SMS_WEBHOOK_HOST", None, HOSTS), K("SMS_WEBHOOK_URL", None, URLS),
                 K("SMS_INSECURE_NO_SIGNATURE", None, ("true", "")))),
    "bluebubbles": Spec((K("BLUEBUBBLES_SERVER_URL", "server_url", URLS),
                         K("BLUEBUBBLES_PASSWORD", "password", SECRETS),
                         K("BLUEBUBBLES_WEBHOOK_PORT", "webhook_port", PORTS),
                         K("BLUEBUBBLES_WEBHOOK_HOST", "webhook_host", HOSTS))),
    "wecom_callback": Spec((K("WECOM_CALLBACK_CORP_ID", "corp_id", IDS), K("WECOM_CALLBACK_CORP_SECRET", "corp_secret",
                                                                                SECRETS),
                            K("WECOM_CALLBACK_PORT", "port", PORTS), K("WECOM_CALLBACK_HOST", "host", HOSTS),
                            K("WECOM_CALLBACK_TOKEN", "token", SECRETS),
                            K("WECOM_CALLBACK_ENCODING_AES_KEY", "encoding_aes_key", ("a" * 43, "")))),
    "matrix": Spec((K("MATRIX_ACCESS_TOKEN", None, TOKENS), K("MATRIX_HOMESERVER", None, URLS),
                    K("MATRIX_PASSWORD", None, SECRETS)), True),
    "mattermost": Spec((K("MATTERMOST_TOKEN", None, TOKENS), K("MATTERMOST_URL", None, URLS)), True),
    "email": Spec((K("EMAIL_ADDRESS", None, ("a@b.example", "")), K("EMAIL_PASSWORD", None, SECRETS),
                   K("EMAIL_IMAP_HOST", None, ("imap.example", "")), K("EMAIL_SMTP_HOST", None, ("smtp.example", "")))),
    "dingtalk": Spec((K("DINGTALK_CLIENT_ID", None, IDS), K("DINGTALK_CLIENT_SECRET", None, SECRETS))),
    "homeassistant": Spec((K("HASS_TOKEN", None, TOKENS), K("HASS_URL", None, URLS))),
    "wecom": Spec((K("WECOM_BOT_ID", "bot_id", IDS), K("WECOM_SECRET", "secret", SECRETS))),
    "teams": Spec((K("TEAMS_CLIENT_ID", "client_id", IDS), K("TEAMS_CLIENT_SECRET", "client_secret", SECRETS),
                   K("TEAMS_TENANT_ID", "tenant_id", IDS), K("TEAMS_PORT", "port", PORTS))),
    "google_chat": Spec((K("GOOGLE_CHAT_PROJECT_ID", "project_id", IDS),
                         K("GOOGLE_CHAT_SUBSCRIPTION_NAME", "subscription_name", IDS),
                         K("GOOGLE_CHAT_HTTP_EVENTS_URL", "http_events_url", URLS))),
    "ntfy": Spec((K("NTFY_TOPIC", "topic", ("alerts", " ", "")),)),
    "simplex": Spec((K("SIMPLEX_WS_URL", "ws_url", ("ws://127.0.0.1:5225", "")),)),
    "photon": Spec((K("PHOTON_PROJECT_ID", "project_id", IDS), K("PHOTON_PROJECT_SECRET", "project_secret", SECRETS),
                    K("PHOTON_SIDECAR_PORT", "sidecar_port", PORTS))),
    "raft": Spec((K("RAFT_PROFILE", None, ("me", "")), K(None, "port", PORTS), K(None, "host", HOSTS),
                  K(None, "bridge_token", SECRETS))),
    "relay": Spec((K("GATEWAY_RELAY_URL", "relay_url", ("wss://relay.example", " ", "")),
                   K("GATEWAY_RELAY_ALLOW_DIRECT_PLATFORMS", None, ("true", "", "false")))),
    # 0.20 on (a platform no earlier release has: there every setting must enable nothing)
    "buzz": Spec((K("BUZZ_RELAY_URL", "relay_url", ("https://relay.example", " https://relay.example ", "")),
                  K("BUZZ_PRIVATE_KEY", None, NOSTR_KEYS))),
    "a2a": Spec((K("A2A_PORT", "port", PORTS), K(None, "enabled", BOOLS), K("A2A_HOST", None, HOSTS),
                 K("A2A_BEARER_TOKEN", None, SECRETS))),
}
PLUGIN_KEYS = {  # plugins.disabled: only "<folder>-platform" switches a plugin off; the others must not
    p: f"platforms/{'wecom' if p == 'wecom_callback' else p}"
    for p in ("telegram", "discord", "slack", "irc", "line", "feishu", "whatsapp", "sms", "teams", "matrix",
              "mattermost", "email", "dingtalk", "homeassistant", "wecom", "google_chat", "ntfy", "simplex", "photon",
              "raft", "wecom_callback", "buzz", "a2a")
}


# --------------------------------------------------------------------------- generation

@dataclass
class Profile:
    """One generated profile: its folder, and the files as written (for messages)."""

    name: str
    home: Path
    env_text: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    op_env_text: str = ""
    files: list[str] = field(default_factory=list)
    child_env: dict[str, str] = field(default_factory=dict)  # what hermesd starts its gateway with

    def describe(self) -> str:
        out = [f"{self.name}: .env={self.env_text!r}"]
        if self.config:
            out.append(f"config.yaml={json.dumps(self.config, sort_keys=True, default=str)}")
        if self.op_env_text:
            out.append(f".op.env={self.op_env_text!r}")
        if self.files:
            out.append(f"files={self.files}")
        return " ".join(out)


def _env_line(rnd: random.Random, key: str, value: Any) -> str:
    text = "" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
    style = rnd.random()
    if style < 0.6 or "'" in text:
        return f'{key}="{text}"' if (" " in text or text == "") and rnd.random() < 0.7 else f"{key}={text}"
    if style < 0.8:
        return f"{key}='{text}'"
    return f"export {key}={text}" if " " not in text else f'export {key}="{text}"'


def _bare(line: str) -> str:
    """``KEY=value`` without quotes or ``export``, as a line loses its newline to a careless edit."""
    key, _, value = line.removeprefix("export ").partition("=")
    return f"{key}={value.strip(chr(34) + chr(39)).strip()}"


def _block(config: dict[str, Any], where: str, name: str) -> dict[str, Any]:
    if where == "gateway.<p>":  # a block straight under gateway: (0.20+ read it as a platform block)
        return config.setdefault("gateway", {}).setdefault(name, {})
    if where == "gateway.platforms":
        return config.setdefault("gateway", {}).setdefault("platforms", {}).setdefault(name, {})
    return config.setdefault("platforms", {}).setdefault(name, {})


def generate(base: Path, count: int, seed: int, *, standalone: bool = False) -> list[Profile]:
    """``count`` profile folders; profile ``i`` mainly configures platform ``i % n``.

    Each profile is the one named profile of its own root (``base/roots/p<i>/profiles/p<i>``): on
    the multiplex-default line every start-up reads every profile of its root (the multiplex
    verdict's migration plan), so one shared root would make a run quadratic in its size, and
    what a profile claims never depends on its neighbours. ``standalone`` writes
    ``gateway.standalone: true`` into every config.yaml, as a supervised named profile needs on
    the releases whose contract has ``standalone_key`` (hermesd holds one without it).
    """
    rnd = random.Random(seed)
    names = list(SPECS)
    profiles: list[Profile] = []
    for i in range(count):
        prof = Profile(f"p{i}", base / "roots" / f"p{i}" / "profiles" / f"p{i}")
        prof.home.mkdir(parents=True)
        chosen = [names[i % len(names)]]
        while rnd.random() < 0.45 and len(chosen) < 4:
            other = rnd.choice(names)
            if other not in chosen:
                chosen.append(other)
        env_lines: list[str] = []
        op_lines: list[str] = []
        config: dict[str, Any] = {}
        complete = rnd.random() < 0.4  # the main platform fully and validly configured (each pool's first value)
        for name in chosen:
            spec = SPECS[name]
            for knob in spec.knobs:
                good = complete and name == chosen[0]
                if not good and rnd.random() < 0.25:
                    continue
                value = knob.values[0] if good else rnd.choice(knob.values)
                if isinstance(value, str) and "<home>" in value:
                    value = value.replace("<home>", str(prof.home))
                places = []
                if good and knob.env:
                    places = ["env"]
                elif knob.env:
                    places += ["env"] * 6 + ["top", "op"]
                if knob.extra and not places:
                    places = ["extra"]
                elif knob.extra and not good:
                    places += ["extra"] * 3
                place = rnd.choice(places)
                if place in ("env", "op", "top") and knob.env:
                    if place == "top":
                        config[knob.env] = value if value is not None else ""
                    else:
                        (env_lines if place == "env" else op_lines).append(_env_line(rnd, knob.env, value))
                elif knob.extra:
                    where = rnd.choice(("platforms", "platforms", "gateway.platforms", "gateway.<p>"))
                    block = _block(config, where, name)
                    if not good and rnd.random() < 0.15:  # a block's own key (the adapter's on 0.20+)
                        block[knob.extra] = value
                    else:
                        block.setdefault("extra", {})[knob.extra] = value
            if spec.token and rnd.random() < 0.3:
                _block(config, rnd.choice(("platforms", "gateway.platforms")), name)["token"] = rnd.choice(TOKENS)
            if rnd.random() < 0.3:
                value = rnd.choice((True, False, "yes", "off", None))
                where = rnd.choice(("platforms", "gateway.platforms", "top"))
                if where == "top":
                    config[name] = {"enabled": value}
                else:
                    _block(config, where, name)["enabled"] = value
            if name in PLUGIN_KEYS and rnd.random() < 0.05:
                config.setdefault("plugins", {}).setdefault("disabled", []).append(
                    rnd.choice((PLUGIN_KEYS[name], f"{PLUGIN_KEYS[name].split('/')[1]}-platform",
                                f"{PLUGIN_KEYS[name].split('/')[1]}-platform", PLUGIN_KEYS[name].split("/")[1])))
            if name == "whatsapp":
                _whatsapp_files(rnd, prof, config)
        if rnd.random() < 0.25:
            _settings(rnd, base, i, config, env_lines, op_lines)
        if len(env_lines) >= 2 and rnd.random() < 0.1:  # two settings run together on one line
            second, first = env_lines.pop(), env_lines.pop()
            env_lines.append(_bare(first) + _bare(second))
        rnd.shuffle(env_lines)
        prof.env_text = "".join(line + "\n" for line in env_lines)
        prof.op_env_text = "".join(line + "\n" for line in op_lines)
        if standalone:
            gateway = config.setdefault("gateway", {})
            gateway["standalone"] = True
        prof.config = config
        if prof.env_text:
            (prof.home / ".env").write_text(prof.env_text)
        if prof.op_env_text:
            (prof.home / ".op.env").write_text(prof.op_env_text)
        if config:
            (prof.home / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        profiles.append(prof)
    return profiles


def _settings(rnd: random.Random, base: Path, i: int, config: dict[str, Any], env_lines: list[str],
              op_lines: list[str]) -> None:
    """Settings beside the platforms that upstream reads from the same files: where credential locks
    live, the drain timeout, lazy installs (each a field the comparison checks)."""
    state = str(base / "state" / f"s{i}")
    choices: dict[str, tuple[Any, ...]] = {
        "XDG_STATE_HOME": ("", "relative/state", state),
        "HERMES_GATEWAY_LOCK_DIR": ("", "relative-locks", state + "/locks"),
        "HOME": (str(base / "alt-home" / f"h{i}"),),
        "HERMES_RESTART_DRAIN_TIMEOUT": ("30", " 45 ", "abc", "", "-5"),
        "HERMES_DISABLE_LAZY_INSTALLS": ("0", "true", "1", " 1", ""),
        "HERMES_LAZY_INSTALL_TARGET": (str(base / "lazy" / f"l{i}"), " "),
    }
    for _ in range(rnd.choice((1, 1, 2))):
        key = rnd.choice([*choices, "agent.restart_drain_timeout", "security.allow_lazy_installs"])
        if key == "agent.restart_drain_timeout":
            config.setdefault("agent", {})[key.split(".")[1]] = rnd.choice((20, "25", "x", None, 0))
        elif key == "security.allow_lazy_installs":
            config.setdefault("security", {})[key.split(".")[1]] = rnd.choice((False, "no", True))
        else:
            value = rnd.choice(choices[key])
            place = rnd.choice(("env", "env", "env", "op", "top"))
            if place == "top":
                config[key] = value
            else:
                (env_lines if place == "env" else op_lines).append(_env_line(rnd, key, value))


def _whatsapp_files(rnd: random.Random, prof: Profile, config: dict[str, Any]) -> None:
    """A planted bridge script and a paired session (``creds.json``), sometimes."""
    extra = {}
    for src in (config.get("platforms"), (config.get("gateway") or {}).get("platforms")):
        if isinstance(src, dict) and isinstance(src.get("whatsapp"), dict):
            extra.update(src["whatsapp"].get("extra") or {})
    if extra.get("bridge_script"):
        Path(extra["bridge_script"]).write_text("// stand-in bridge: never run\n")
        prof.files.append("bridge.js")
    if rnd.random() < 0.15:  # a Hermes-managed Node folder holding npm but no node: PATH's node no longer counts
        managed = prof.home / "node" / "bin"
        managed.mkdir(parents=True, exist_ok=True)
        (managed / "npm").write_text("#!/bin/sh\nexit 0\n")
        (managed / "npm").chmod(0o755)
        prof.files.append("node/bin/npm")
    if rnd.random() < 0.6:
        session = Path(extra.get("session_path") or prof.home / "platforms" / "whatsapp" / "session")
        if rnd.random() < 0.2:
            session = prof.home / "whatsapp" / "session"  # the legacy location
        session.mkdir(parents=True, exist_ok=True)
        (session / "creds.json").write_text("{}")
        prof.files.append(str(session.relative_to(prof.home)) + "/creds.json" if session.is_relative_to(prof.home)
                          else str(session) + "/creds.json")


# --------------------------------------------------------------------------- running upstream

def oracle_python() -> str:
    """The interpreter that has the gateway: ``HERMESD_ORACLE_PYTHON``, else the one beside
    ``HERMESD_TEST_HERMES`` (the release matrix), else this one."""
    explicit = os.environ.get("HERMESD_ORACLE_PYTHON")
    if explicit:
        return explicit
    hermes = os.environ.get("HERMESD_TEST_HERMES")
    if hermes:
        beside = Path(hermes).resolve().parent / "python"
        if beside.exists():
            return str(beside)
    return sys.executable


# The programs requirement checks look for on PATH (WhatsApp's and Photon's node, the Raft and Buzz CLIs).
PROGRAMS = ("node", "raft", "buzz")


def request(profiles: Sequence[Profile], base: Path, *, jobs: int, timeout: float, stand_ins: bool = True,
            programs: bool | None = None, gateway_args: Sequence[str] = ("gateway", "run", "--external-supervisor"),
            ) -> dict[str, Any]:
    """What the driver is asked: each profile with the environment and argv hermesd would give it.

    ``stand_ins`` replaces the platform SDKs; ``programs`` (by default: with stand-ins) puts the
    programs requirement checks look for on PATH (never run: the driver substitutes every
    program start). With both, upstream enables what hermesd counts as enabled whatever is
    installed; with real SDKs and programs, upstream's requirement checks judge the SDKs really
    installed; with neither, upstream checks what this machine really has.
    """
    path = os.environ.get("PATH", "/usr/bin:/bin")
    if stand_ins if programs is None else programs:
        folder = base / "bin"
        folder.mkdir(exist_ok=True)
        for name in PROGRAMS:
            (folder / name).write_text("#!/bin/sh\nexit 0\n")
            (folder / name).chmod(0o755)
        path = f"{folder}:{path}"
    items = []
    for i, prof in enumerate(profiles):
        home_dir = base / "homes" / f"h{i}"
        home_dir.mkdir(parents=True, exist_ok=True)
        base_env = {"PATH": path, "HOME": str(home_dir), "LANG": "C.UTF-8"}
        env = child_env(base_env, root=prof.home.parent.parent, profile=prof.name, home=prof.home)
        prof.child_env = env
        items.append({"id": prof.name, "home": str(prof.home), "env": env,
                      "argv": ["hermes", "-p", prof.name, *gateway_args]})
    return {"profiles": items, "jobs": jobs, "connect_timeout": timeout, "scratch": str(base / "scratch"),
            "stand_ins": stand_ins}


DEFAULT_ARGS = ("gateway", "run", "--external-supervisor")


def ask_upstream(profiles: Sequence[Profile], base: Path, *, jobs: int = 2, timeout: float = 3.0,
                 python: str | None = None, cold: bool = False, stand_ins: bool = True,
                 programs: bool | None = None, gateway_args: Sequence[str] = DEFAULT_ARGS) -> list[dict[str, Any]]:
    """Upstream's record for each profile (see ``gateway_oracle.py``)."""
    req = request(profiles, base, jobs=jobs, timeout=timeout, stand_ins=stand_ins, programs=programs,
                  gateway_args=gateway_args)
    (base / "scratch").mkdir(exist_ok=True)
    req["cold"] = cold
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run([python or oracle_python(), str(DRIVER)], input=json.dumps(req), capture_output=True,
                          text=True, timeout=900 + len(profiles) * 60, check=False, cwd=str(base))
    if proc.returncode != 0:
        raise RuntimeError(f"oracle driver failed ({proc.returncode}): {proc.stderr[-3000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU_SECONDS.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    lines = proc.stdout.strip().splitlines()
    if len(lines) != len(profiles):
        raise RuntimeError(f"oracle driver gave {len(lines)} results for {len(profiles)} profiles: "
                           f"{proc.stderr[-2000:]}")
    return [json.loads(line) for line in lines]


# --------------------------------------------------------------------------- hermesd's prediction

def scope_hash(identity: str) -> str:
    """Upstream's lock-file identity hash (``gateway/status.py`` ``_scope_hash``)."""
    return hashlib.sha256(identity.encode("utf-8", "surrogatepass")).hexdigest()[:16]


@dataclass
class Prediction:
    enabled: set[str]
    locks: set[tuple[str, str, str]]  # platform, scope, identity hash
    ports: set[tuple[str, int, str]]  # platform, port, host class
    problems: tuple[str, ...]
    lock_dir: str | None = None  # where credential locks go (absolute)
    drain: float | None = None  # the drain timeout, seconds
    lazy: bool | None = None  # lazy installs allowed


def host_class(host: object) -> str:
    """Where a listener binds, as a class two binds can be compared by."""
    if host is None or host in ("", "0.0.0.0", "::"):
        return "*"
    if host in ("localhost", "127.0.0.1", "::1"):
        return "loopback"
    return str(host)


def predict(prof: Profile, line: RuleLine = BASELINE) -> Prediction:
    """hermesd's reading with the rules of ``line``: ``read_profile`` (what every consumer uses), with
    raw identities hashed."""
    facts = read_profile(prof.name, prof.home, b"oracle", line)
    if facts.problems:
        return Prediction(set(), set(), set(), facts.problems)
    view = view_of(prof.home, line=line)
    locks = {(p, kind, scope_hash(value)) for p, kind, value, _src in credentials_of(view)}
    ports = {(b.platform, b.port, host_class(b.host)) for b in ports_of(view)}
    assert {c.key for c in facts.claims if c.kind == "port"} == {str(p) for _, p, _ in ports}
    # The oracle runs each start-up in the profile's folder: a relative lock folder lands there.
    folder = lock_dir(facts.gateway_environment(prof.child_env), cwd=str(prof.home),
                      relative_state_ignored=line.relative_state_home_ignored)
    lazy = any(o.variable.name == "HERMES_DISABLE_LAZY_INSTALLS" for o in facts.overrides)
    return Prediction(set(enabled_platforms(view)), locks, ports, (), folder, facts.drain_s, lazy)


# --------------------------------------------------------------------------- upstream's record, read

def _bind_host_classes(hosts: set[object]) -> str:
    classes = {host_class(h) for h in hosts}
    if "*" in classes:
        return "*"
    return "loopback" if classes <= {"loopback"} else ",".join(sorted(classes))


def observed(record: Mapping[str, Any]) -> Prediction:
    """Upstream's record as the same three sets."""
    locks = {(e["platform"] or "?", e["scope"], e["identity_hash"])
             for e in record.get("locks", ()) if e["identity_hash"]}  # a non-text identity raises: no lock
    by_port: dict[tuple[str, int], set[object]] = {}
    for e in [*record.get("binds", ()), *record.get("sdk_binds", ())]:
        if isinstance(e.get("port"), int) and e["port"] != 0:  # port 0: any free port, nobody's to claim
            by_port.setdefault((e["platform"] or "?", e["port"]), set()).add(e.get("host"))
    for e in record.get("spawns", ()):  # a sidecar or bridge started with --port N listens on N
        argv = e["argv"]
        if "--port" in argv and argv.index("--port") + 1 < len(argv):
            try:
                port = int(argv[argv.index("--port") + 1])
            except ValueError:
                continue
            by_port.setdefault((e["platform"] or "?", port), set()).add("127.0.0.1")
    ports = {(p, port, _bind_host_classes(hosts)) for (p, port), hosts in by_port.items()}
    return Prediction(set(record.get("enabled", ())), locks, ports, tuple(record.get("errors", ())),
                      record.get("lock_dir"), record.get("drain"), record.get("lazy"))


# --------------------------------------------------------------------------- comparison

@dataclass(frozen=True)
class Difference:
    """One field on which hermesd and upstream disagree for one profile."""

    profile: str
    field: str  # enabled, lock, port
    platform: str
    hermesd: str
    upstream: str


def compare(prof: Profile, mine: Prediction, theirs: Prediction) -> tuple[int, list[Difference]]:
    """How many fields were compared, and those that differ (one per platform and field)."""
    out: list[Difference] = []
    # Every platform either side knows: hermesd's registry, and whatever upstream enabled, locked or
    # opened (a platform hermesd cannot model still has its "enabled" compared).
    names = list(dict.fromkeys([*(p.name for p in PLATFORMS), *sorted(theirs.enabled | mine.enabled),
                                *sorted(x[0] for x in theirs.locks | theirs.ports)]))
    fields = 0
    for name in names:
        a, b = name in mine.enabled, name in theirs.enabled
        fields += 1
        if a != b:
            out.append(Difference(prof.name, "enabled", name, str(a), str(b)))
        for what, mine_set, their_set in (("lock", mine.locks, theirs.locks), ("port", mine.ports, theirs.ports)):
            ours = sorted(str(x[1:]) for x in mine_set if x[0] == name)
            other = sorted(str(x[1:]) for x in their_set if x[0] == name)
            if ours or other:
                fields += 1
                if ours != other:
                    out.append(Difference(prof.name, what, name, ";".join(ours) or "-", ";".join(other) or "-"))
    # The settings beside the platforms (compared where upstream's record has them).
    for what, ours_v, their_v in (("lock_dir", mine.lock_dir, theirs.lock_dir), ("drain", mine.drain, theirs.drain),
                                  ("lazy", mine.lazy, theirs.lazy)):
        if their_v is None:
            continue
        fields += 1
        if ours_v != their_v:
            out.append(Difference(prof.name, what, "-", str(ours_v), str(their_v)))
    return fields, out


def main(argv: list[str]) -> None:
    import tempfile

    count = int(argv[0]) if argv else 62
    seed = int(argv[1]) if len(argv) > 1 else 1
    with tempfile.TemporaryDirectory(prefix="oracle-") as tmp:
        base = Path(tmp)
        profiles = generate(base, count, seed)
        t0 = time.monotonic()
        records = ask_upstream(profiles, base, jobs=int(os.environ.get("ORACLE_JOBS", "2")))
        took = time.monotonic() - t0
        total, diffs = 0, []
        for prof, rec in zip(profiles, records, strict=True):
            n, d = compare(prof, predict(prof), observed(rec))
            total += n
            for x in d:
                diffs.append((x, prof, rec))
        for x, prof, rec in diffs:
            print(f"{x.field:7} {x.platform:15} hermesd={x.hermesd} upstream={x.upstream}\n    {prof.describe()}\n"
                  f"    upstream: {json.dumps(rec.get('platforms', {}).get(x.platform))} "
                  f"errors={rec.get('errors')[:1]}")
        print(f"{count} profiles, {total} fields, {len(diffs)} differ; upstream took {took:.1f} s")


if __name__ == "__main__":
    main(sys.argv[1:])
