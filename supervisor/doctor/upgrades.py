"""Doctor checks for what upstream does to a per-profile fleet behind hermesd's back on the multiplex-default
line: ``hermes update`` folding the fleet into one gateway, and a gateway that already rewrote the root's
config.yaml. Both read only the root's own files; what they say is upstream's behaviour as measured
(``profiles.upstream.multiplex``).
"""

from __future__ import annotations

from profiles.upstream import multiplex as mx
from supervisor.doctor.scan import DEFAULT, Scan
from supervisor.plan.verdict import WARNING


def check_upgrades(scan: Scan) -> None:
    """``hermes update`` would auto-migrate the fleet; a gateway rewrote config.yaml (its marker is there)."""
    default = scan.by_name(DEFAULT)
    config = default.config if default is not None else None
    contract = scan.contract
    if contract is not None and contract.auto_migration and mx.auto_migration_on(config):
        scan.add(
            WARNING, "auto_multiplex_migration", DEFAULT,
            f"'hermes update' with hermes-agent {scan.version} migrates a fleet with per-profile gateways onto one "
            f"multiplexing gateway unless {scan.root / 'config.yaml'} says gateway.auto_multiplex_migration: false "
            "(its guards look at service managers, UNIX users and home folders, never at hermesd): one update and "
            "every profile would be served by the default profile's process",
            f"run 'hermesd standalone --root {scan.root}' (it adds the line, shows the diff, keeps a backup), or add "
            "'gateway: {auto_multiplex_migration: false}' to that file yourself",
        )
    marker = scan.root / mx.REWRITTEN_MARKER
    if marker.is_file() or marker.is_symlink():
        scan.add(
            WARNING, "config_rewritten_by_gateway", DEFAULT,
            f"{marker} is there: a gateway of the multiplex-default line rewrote {scan.root / 'config.yaml'} "
            f"(gateway.multiplex_profiles: false became true; the key now reads "
            f"{mx.multiplex_flag(config)!r}) and served every profile it could see",
            "check which gateway did it ('hermesd events'), run 'hermesd standalone', then remove the marker",
        )
