"""Which profiles must not start because another profile already claims the same resource.

Pure: given every profile's claims (credential fingerprints, TCP ports), the serving order, who is
active and what each active gateway uses, decide who holds each contested resource and who is
held. Upstream does not stop a second gateway that polls the same bot token (it retries forever
while the wrong profile answers), so hermesd must decide before anything starts.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from profiles.snapshot import Claim


@dataclass(frozen=True, slots=True)
class Conflict:
    """``profile`` may not start: ``claim`` is held by ``holder`` (``holder_state`` says how)."""

    profile: str
    claim: Claim
    holder: str
    holder_state: str  # "starting", "running", "stopping", "restarting" or "first in serving order"

    @property
    def reason(self) -> str:
        return "credential_conflict" if self.claim.kind == "credential" else "port_conflict"

    @property
    def message(self) -> str:
        return (f"{self.claim.describe()} is also configured in profile {self.holder!r} ({self.holder_state}), "
                "which keeps it")


def find_conflicts(
    order: Sequence[str],
    claims: Mapping[str, Iterable[Claim]],
    running: Collection[str],
    in_use: Mapping[str, Collection[Claim]] | None = None,
    states: Mapping[str, str] | None = None,
) -> dict[str, Conflict]:
    """Map each profile that must be held to its first conflict.

    ``running``: the active profiles (their gateway runs, or is between two runs);
    ``in_use``: per active profile, what its gateway was started with (default: all its claims);
    ``states``: per active profile, the word a conflict it wins names it by (default "running").
    The holder of a contested claim is a profile whose gateway uses it, else an active profile
    that wants it, else the first in ``order``; so a profile keeps what its gateway has through
    restarts, and a file edit never hands a claim in use to someone else. Profiles whose gateways
    all use the claim already keep running; none of them is held.
    """
    contested = all_conflicts(order, claims)
    if not contested:  # the usual case, asked at every step of the planner: nothing below to work out
        return {}
    used = {n: {_key(c) for c in (claims.get(n, ()) if in_use is None else in_use.get(n, ()))} for n in running}
    rank = {name: i for i, name in enumerate(order)}

    def right(name: str, claim: Claim) -> tuple[int, int]:
        strength = 0 if _key(claim) in used.get(name, ()) else 1 if name in running else 2
        return strength, rank.get(name, len(rank))

    held: dict[str, Conflict] = {}
    for claim, names in contested:
        holders = sorted(names, key=lambda n: right(n, claim))
        first = holders[0]
        state = (states or {}).get(first, "running") if first in running else "first in serving order"
        for other in holders[1:]:
            if _key(claim) not in used.get(other, ()) and other not in held:
                held[other] = Conflict(other, claim, first, state)
    return held


def _key(claim: Claim) -> tuple[str, str, str]:
    """What makes two claims the same resource (a port is one port whichever platform binds it)."""
    return claim.kind, claim.what, claim.key


def all_conflicts(order: Sequence[str], claims: Mapping[str, Iterable[Claim]]) -> list[tuple[Claim, list[str]]]:
    """Every contested claim with all its profiles in serving order (for doctor and export)."""
    rank = {name: i for i, name in enumerate(order)}
    owners: dict[tuple[str, str, str], tuple[Claim, list[str], list[Claim]]] = {}
    for name, items in claims.items():
        for claim in items:
            _, names, made = owners.setdefault((claim.kind, claim.what, claim.key), (claim, [], []))
            if names and names[-1] == name:  # this profile again: an equal claim counts once (no hashing
                if claim in made:            # every claim: this runs at every step of the planner)
                    continue
            else:
                made.clear()
            made.append(claim)
            names.append(name)
    out = []
    for claim, names, _ in owners.values():
        if len(names) > 1:
            out.append((claim, sorted(names, key=lambda n: (rank.get(n, len(rank)), n))))
    return sorted(out, key=lambda item: (item[0].kind, item[0].platform, item[0].key))
