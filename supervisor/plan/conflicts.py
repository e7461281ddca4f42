"""Which profiles must not start because another profile already claims the same resource.

Pure: given every profile's claims (credential fingerprints, TCP ports), the serving order and
who is running, decide who holds each contested resource and who is held. Upstream does not
stop a second gateway that polls the same bot token (it retries forever while the wrong
profile answers), so hermesd must decide before anything starts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from profiles.snapshot import Claim


@dataclass(frozen=True, slots=True)
class Conflict:
    """``profile`` may not start: ``claim`` is held by ``holder``."""

    profile: str
    claim: Claim
    holder: str
    holder_running: bool

    @property
    def reason(self) -> str:
        return "credential_conflict" if self.claim.kind == "credential" else "port_conflict"

    @property
    def message(self) -> str:
        state = "running" if self.holder_running else "first in serving order"
        return f"{self.claim.describe()} is also configured in profile {self.holder!r} ({state}), which keeps it"


def find_conflicts(
    order: Sequence[str],
    claims: Mapping[str, Iterable[Claim]],
    running: set[str],
) -> dict[str, Conflict]:
    """Map each profile that must be held to its first conflict.

    The holder of a contested claim is the running profile that has it (hermesd never stops a
    working bot because another profile copied its token), else the first in ``order``. Two
    profiles that both already run keep running; neither is held.
    """
    held: dict[str, Conflict] = {}
    for claim, names in all_conflicts(order, claims):
        holders = sorted(names, key=lambda n: n not in running)  # stable: order within each group
        for other in holders[1:]:
            if other not in running and other not in held:
                held[other] = Conflict(other, claim, holders[0], holders[0] in running)
    return held


def all_conflicts(order: Sequence[str], claims: Mapping[str, Iterable[Claim]]) -> list[tuple[Claim, list[str]]]:
    """Every contested claim with all its profiles in serving order (for doctor and export)."""
    rank = {name: i for i, name in enumerate(order)}
    owners: dict[tuple[str, str, str], tuple[Claim, list[str]]] = {}
    for name, items in claims.items():
        for claim in set(items):
            owners.setdefault((claim.kind, claim.what, claim.key), (claim, []))[1].append(name)
    out = []
    for claim, names in owners.values():
        if len(names) > 1:
            out.append((claim, sorted(names, key=lambda n: (rank.get(n, len(rank)), n))))
    return sorted(out, key=lambda item: (item[0].kind, item[0].platform, item[0].key))
