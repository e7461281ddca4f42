"""Would hermesd run this profile, and if not, why: one answer for the daemon, doctor, export and status.

:func:`judge` is a pure function of the profiles' file facts (:class:`profiles.snapshot.ProfileFacts`),
hermesd's settings and which profiles are active. Every kind of hold is one :class:`HoldKind`
member that carries what each consumer needs: the name ``status`` shows, the code ``doctor``
reports with its severity and its fix. A new kind of hold is one new member here and one rule in
:func:`judge`; nothing else decides.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from profiles.names import DEFAULT_PROFILE
from profiles.upstream.multiplex import PARKED_MARKER
from supervisor.plan.conflicts import find_conflicts

if TYPE_CHECKING:
    from profiles.snapshot import Claim, ProfileFacts
    from profiles.upstream.releases import Contract

ERROR = "error"
WARNING = "warning"
INFO = "info"


class HoldKind(enum.Enum):
    """Why a profile that should run is kept down. Value: the name ``status`` and the state file use."""

    # From the profile's files (judge decides these).
    CONFIG_ERROR = "config_error"
    ENV_OVERRIDE = "env_override"
    CREDENTIAL_CONFLICT = "credential_conflict"
    PORT_CONFLICT = "port_conflict"
    # From the profiles' files as the installed release reads them (the multiplex-default line).
    STANDALONE_REQUIRED = "standalone_required"
    WOULD_MULTIPLEX = "would_multiplex"
    PARKED = "parked"
    # From the root as a whole (judge applies them to every profile).
    NO_CONFIG = "hermesd_config_error"
    NO_COMMAND = "command_error"
    UNSUPPORTED_RELEASE = "unsupported_release"
    # Seen at run time by the daemon only.
    FOREIGN_GATEWAY = "foreign_gateway"
    STARTUP_FAILED = "startup_failed"
    ISOLATION = "isolation_unavailable"
    SERVED_ELSEWHERE = "served_elsewhere"  # exit 75 before start-up, again and again: another gateway serves it
    MULTIPLEXING = "multiplexing"  # its gateway reported serving other profiles too

    @property
    def doctor_code(self) -> str:
        return _DOCTOR[self][0]

    @property
    def severity(self) -> str:
        return _DOCTOR[self][1]

    @property
    def fix(self) -> str:
        return _DOCTOR[self][2]


_DOCTOR: dict[HoldKind, tuple[str, str, str]] = {
    HoldKind.CONFIG_ERROR: (
        "profile_config_invalid", ERROR, "fix the file at the line named above; the gateway would misread it too"),
    HoldKind.ENV_OVERRIDE: (
        "env_overrides_hermesd", ERROR,
        "remove the variable from the profile's .env: hermesd sets it for every child, and Hermes loads .env "
        "with override"),
    HoldKind.CREDENTIAL_CONFLICT: (
        "duplicate_credential", ERROR,
        "give the held profile its own credential in its .env/config.yaml, or remove that platform's settings"),
    HoldKind.PORT_CONFLICT: ("duplicate_port", ERROR, "give the held profile's listener a free port"),
    HoldKind.NO_CONFIG: ("hermesd_config_invalid", ERROR, "fix the line named above in hermesd.yaml"),
    HoldKind.NO_COMMAND: (
        "gateway_command_not_found", ERROR,
        "install hermes-agent beside hermesd, put 'hermes' on PATH, or set 'command' in hermesd.yaml"),
    HoldKind.UNSUPPORTED_RELEASE: (
        "unsupported_release", ERROR,
        "upgrade hermes-agent (pip install -U hermes-agent) in the environment that runs the gateway"),
    HoldKind.FOREIGN_GATEWAY: (
        "foreign_gateway", WARNING,
        "stop the other gateway (or disable the service that runs it) and let hermesd run the profile"),
    HoldKind.STARTUP_FAILED: (
        "startup_failed", ERROR, "fix the profile's configuration; hermesd retries when its files change"),
    HoldKind.ISOLATION: (
        "isolation_unavailable", ERROR,
        "see 'hermesd doctor' for what the kernel lacks, or set isolation: auto (or off) for the profile"),
    HoldKind.STANDALONE_REQUIRED: (
        "standalone_required", ERROR,
        "run 'hermesd standalone' (it shows the change to each config.yaml first, keeps a backup under "
        "<root>/.hermesd/standalone/, and 'hermesd standalone --undo' restores the files byte for byte)"),
    HoldKind.WOULD_MULTIPLEX: (
        "default_would_multiplex", ERROR,
        "run 'hermesd standalone' (gateway.standalone: true in each named profile), or turn isolation on so the "
        "default profile's gateway cannot see the other profiles"),
    HoldKind.PARKED: (
        "profile_parked", WARNING,
        "'hermes -p NAME gateway stop' parked it; remove <home>/gateway.parked (or run 'hermes -p NAME gateway "
        "start') to have it served again"),
    HoldKind.SERVED_ELSEWHERE: (
        "served_elsewhere", ERROR,
        "stop the other gateway that serves this profile (its PID is in the message), then 'hermesd start NAME'"),
    HoldKind.MULTIPLEXING: (
        "gateway_multiplexing", ERROR,
        "run 'hermesd standalone' so every named profile keeps to its own gateway, or turn isolation on; hermesd "
        "starts it again when files or hermesd.yaml change, or on 'hermesd start NAME'"),
}


@dataclass(frozen=True, slots=True)
class Hold:
    """A profile is kept down: the kind, and a message naming files, keys, platforms and profiles (never values)."""

    kind: HoldKind
    message: str

    def to_json(self) -> dict[str, str]:
        return {"kind": self.kind.value, "message": self.message}


@dataclass(frozen=True, slots=True)
class Candidate:
    """One profile as the judge sees it.

    ``active``: its gateway runs, or is between two runs (a restart, a crash, a backoff): it
    keeps what its gateway had; ``running``: a gateway process exists now (if not given: the
    same as ``active``); ``wants``: enabled, not stopped by the operator and not held at run
    time, so it competes for its claims; ``in_use``: what its gateway was started with, which it
    keeps whatever its files say now, until it stops for good; ``doing``: what its gateway process
    is doing (``starting``, ``running``, ``stopping``), the word a conflict it wins names it by.
    """

    facts: ProfileFacts | None
    name: str
    active: bool = False
    wants: bool = True
    in_use: tuple[Claim, ...] = field(default=())
    running: bool | None = None
    doing: str = "running"

@dataclass(frozen=True, slots=True)
class ReleaseRules:
    """What the installed release asks of the profiles' files before a per-profile fleet can run.

    Built by the daemon (and doctor) from the release's contract and the default profile's
    confinement. ``standalone_required``: a named profile's gateway keeps to itself only with
    ``gateway.standalone: true`` in its own config.yaml; ``default_sees_named``: the default
    profile's gateway can see the named profiles' folders (no private mount namespace), so it would
    serve every one that lacks the key (and rewrite the root's config.yaml). ``retry_attach``: every
    attach exit is a transient verdict (upstream main after 0.22.2): back off, never hold on it.
    """

    release: str = ""
    standalone_required: bool = False
    default_sees_named: bool = True
    parked_marker: bool = False
    retry_attach: bool = False

    @classmethod
    def of(cls, contract: Contract | None, version: str | None, *, default_hidden: bool) -> ReleaseRules | None:
        """The rules of the release ``contract`` describes; ``default_hidden``: the default profile's
        confinement shows it no other profile (see ``supervisor.isolation.planning.hides_other_profiles``)."""
        if contract is None:
            return None
        return cls(release=version or contract.release, standalone_required=contract.standalone_key,
                   default_sees_named=not default_hidden, parked_marker=contract.parked_marker,
                   retry_attach=contract.attach_transient)


def release_hold(facts: ProfileFacts, rules: ReleaseRules, others: Sequence[ProfileFacts]) -> Hold | None:
    """The hold the installed release earns a profile whose own files are fine (see :class:`ReleaseRules`)."""
    named = facts.name != DEFAULT_PROFILE
    if named and rules.parked_marker and facts.parked:
        return Hold(HoldKind.PARKED, f"{facts.home / PARKED_MARKER} says upstream parked this profile ('hermes -p "
                                     f"{facts.name} gateway stop'); hermesd leaves it stopped while the file is there")
    if not rules.standalone_required:
        return None
    root = facts.home.parent.parent if named else facts.home
    if named and not facts.standalone:
        return Hold(HoldKind.STANDALONE_REQUIRED, (
            f"hermes-agent {rules.release} runs one gateway per host: a named profile gets a gateway of its own "
            f"only with 'gateway.standalone: true' in {facts.home / 'config.yaml'}, which is your file and "
            f"hermesd does not change it without your consent; to keep this profile in its own gateway run: "
            f"hermesd standalone --root {root}"))
    if not named and rules.default_sees_named:
        folded = sorted(o.name for o in others if o.name != DEFAULT_PROFILE and not o.standalone and not o.parked)
        if folded:
            return Hold(HoldKind.WOULD_MULTIPLEX, (
                f"hermes-agent {rules.release}'s default gateway would serve {', '.join(folded)} as well (they "
                f"lack 'gateway.standalone: true' and isolation does not hide them from it) and rewrite "
                f"{facts.home / 'config.yaml'}; run: hermesd standalone --root {root}"))
    return None


def file_hold(facts: ProfileFacts) -> Hold | None:
    """The hold a profile's own files earn, before any comparison with other profiles."""
    if facts.problems:
        return Hold(HoldKind.CONFIG_ERROR, "; ".join(facts.problems))
    if facts.overrides:
        sets = "; ".join(f"{facts.home / o.source} sets {o.name}" for o in facts.overrides)
        why = "; ".join(f"{o.variable.name}: {o.why}" for o in facts.overrides)
        return Hold(
            HoldKind.ENV_OVERRIDE,
            f"{sets}, overriding what hermesd gives every child (Hermes loads .env with override, and "
            f"reads .op.env and config.yaml's top-level settings for what is unset): {why}",
        )
    return None


def judge(candidates: Sequence[Candidate], root_hold: Hold | None = None,
          rules: ReleaseRules | None = None) -> dict[str, Hold | None]:
    """Per candidate (in serving order), the hold that keeps it down, or ``None`` to run it.

    A root-wide hold (no valid hermesd.yaml yet, no gateway command, an unsupported release)
    applies to everyone. Otherwise a profile is held for its own files first, then for what the
    installed release makes of them (``rules``: a named profile without ``gateway.standalone`` on
    the multiplex-default line, a default gateway that would fold the others in); then, among the
    profiles that compete (active ones, and wanting ones whose files are fine), a contested
    credential or port goes to the profile whose gateway uses it, else to an active profile
    that wants it, else to the first in serving order, and every other claimant is held.

    Ownership moves only when its holder stops for good: a profile between two runs keeps what
    its gateway had unless it would itself be held (its own files, the operator, a run-time
    hold, or another claim it now wants and cannot have), and a running gateway whose files
    now want a claim someone else keeps is reported held: it is not restarted into that
    conflict, its gateway keeps running on its last good configuration. Gateways that already
    share a claim both keep running (hermesd never stops a working bot because another profile
    copied its token).
    """
    out: dict[str, Hold | None] = {}
    everyone = [c.facts for c in candidates if c.facts is not None]
    for c in candidates:
        own = root_hold or (file_hold(c.facts) if c.facts is not None else None)
        if own is None and rules is not None and c.facts is not None:
            own = release_hold(c.facts, rules, everyone)
        out[c.name] = own
    lost: set[str] = set()  # between two runs but held now: they keep nothing
    while True:
        order: list[str] = []
        claims: dict[str, tuple[Claim, ...]] = {}
        in_use: dict[str, tuple[Claim, ...]] = {}
        active: set[str] = set()
        states: dict[str, str] = {}
        for c in candidates:
            usable = c.facts is not None and out[c.name] is None
            running = c.active if c.running is None else c.running
            keeps = running or (c.active and c.wants and out[c.name] is None and c.name not in lost)
            fresh = c.facts.claims if usable and c.wants and c.facts is not None else ()
            if keeps or (c.wants and usable):
                order.append(c.name)
                claims[c.name] = (c.in_use if keeps else ()) + fresh
                if keeps:
                    active.add(c.name)
                    in_use[c.name] = c.in_use
                    states[c.name] = c.doing if running else "restarting"
        conflicts = find_conflicts(order, claims, active, in_use, states)
        newly_lost = {name for name in conflicts if states.get(name) == "restarting"} - lost
        if not newly_lost:
            break
        lost |= newly_lost
    for name, conflict in conflicts.items():
        if out.get(name) is None:
            out[name] = Hold(HoldKind(conflict.reason), conflict.message)
    return out
