"""What every doctor check reads from: the root, its settings, its profiles' facts, and the findings so far.

One :class:`Scan` is built per ``hermesd doctor`` run and handed to each check in turn; the
checks are plain functions in the sibling modules, one module per subject, so a new check is a
new function and a line in :func:`supervisor.doctor._checks`, never a bigger class.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from profiles.discovery import (
    REASON_INVALID,
    REASON_NO_IDENTITY,
    REASON_NOT_DIR,
    REASON_RESERVED,
    REASON_SYMLINK,
    profiles_to_serve,
    unserved_profile_dirs,
)
from profiles.names import RESERVED_NAMES, is_valid_name
from profiles.snapshot import read_profile
from profiles.upstream.lines import BASELINE, RuleLine
from supervisor.layout import Layout
from supervisor.plan.verdict import ERROR, INFO, WARNING

if TYPE_CHECKING:
    from profiles.snapshot import ProfileFacts
    from profiles.upstream.releases import Contract
    from supervisor.config import Config

DEFAULT = "default"
RANK = {ERROR: 0, WARNING: 1, INFO: 2}


@dataclass(frozen=True, slots=True)
class Finding:
    """One problem: how bad, a stable code, which profile (``None``: root-wide), what, and the fix."""

    severity: str
    code: str
    profile: str | None
    message: str
    fix: str


@dataclass
class ProfileEntry:
    """A served profile and, once read, its facts (the same ones the daemon judges)."""

    name: str
    home: Path
    facts: ProfileFacts | None = None

    @property
    def env(self) -> dict[str, str] | None:
        return self.facts.env if self.facts is not None else None

    @property
    def config(self) -> dict[str, Any] | None:
        return self.facts.config if self.facts is not None else None

    @property
    def ok(self) -> bool:
        return self.facts is not None and self.facts.ok


@dataclass
class Scan:
    """The shared state of one doctor run (see the module docstring)."""

    root: Path
    env: Mapping[str, str]
    service_dirs: Sequence[Path]
    findings: list[Finding] = field(default_factory=list)
    config: Config | None = None
    config_ok: bool = True
    # hermesd.yaml's command as written, when the file is invalid but still parses as YAML: its
    # command is checked too, so one run reports both problems instead of one per fix.
    fallback_command: list[str] | bool | None = False
    profiles: list[ProfileEntry] = field(default_factory=list)
    salt: bytes = b""
    salt_note: str = ""
    # The installed release as the gateway's interpreter reports it (check_gateway_interpreter sets them).
    version: str | None = None
    contract: Contract | None = None
    command: list[str] | None = None
    line: RuleLine = BASELINE  # how that release reads the profiles' files
    # Platforms the release ships that hermesd has no rules for, each with the variables that configure it.
    unmodelled: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def add(self, severity: str, code: str, profile: str | None, message: str, fix: str) -> None:
        self.findings.append(Finding(severity, code, profile, message, fix))

    def by_name(self, name: str) -> ProfileEntry | None:
        return next((p for p in self.profiles if p.name == name), None)

    def sorted_findings(self) -> list[Finding]:
        """Errors first; within a severity root-wide findings, then profiles in serving order, then
        the order the checks ran (cause before consequence: the config before the command)."""
        rank = {p.name: i for i, p in enumerate(self.profiles)}

        def key(f: Finding) -> tuple[int, int]:
            where = -1 if f.profile is None else rank.get(f.profile, len(rank))
            return RANK.get(f.severity, len(RANK)), where

        return sorted(self.findings, key=key)


def discover(scan: Scan) -> None:
    """The profiles hermesd would serve, and the folders under ``profiles/`` it never will."""
    identity = scan.contract.identity_markers if scan.contract is not None else ()
    scan.profiles = [ProfileEntry(n, Path(h)) for n, h in profiles_to_serve(True, root=scan.root, identity=identity)]
    for name, path, reason in unserved_profile_dirs(scan.root, identity=identity):
        if reason == REASON_NOT_DIR:
            scan.add(
                INFO, "stray_file_in_profiles", None,
                f"{path} is not a directory, so it is not a profile",
                "move it out of the profiles folder if it is not meant to be there",
            )
            continue
        if reason == REASON_NO_IDENTITY:
            scan.add(
                INFO, "unserved_profile_dir", None,
                f"{path} is no profile on hermes-agent {scan.version}: it holds none of {', '.join(identity)} "
                "(Hermes itself says 'does not exist' for it), so hermesd does not start a gateway for it",
                f"if it is meant to be a profile, create it with 'hermes profile create {name}' (or 'hermesd "
                f"profile create {name}')",
            )
            continue
        scan.add(
            WARNING, "unserved_profile_dir", None,
            f"{path} will never be served: {reason}" + _unserved_detail(reason),
            _unserved_fix(name, path, reason),
        )


def load_salt(scan: Scan) -> None:
    """The root's fingerprint salt, so fingerprints match what the daemon logs and reports.

    The doctor never creates it: run by another user (root checking someone's root, say) it
    would leave a ``.hermesd`` folder the daemon cannot open. Without a salt file (the daemon
    never ran) or without read access, a throw-away salt still finds every duplicate; only the
    fingerprints are valid for this report alone.
    """
    layout = Layout(scan.root)
    try:
        if layout.salt_file.is_file():
            scan.salt = layout.salt()
            return
    except OSError:
        pass

    scan.salt = secrets.token_bytes(16)
    scan.salt_note = " (fingerprint valid for this report only: hermesd has not salted this root yet)"


def read_profiles(scan: Scan) -> None:
    """Each profile's facts, read exactly as the daemon reads them (bounded, never blocking), with the
    rules of the release the gateway command runs."""
    for prof in scan.profiles:
        prof.facts = read_profile(prof.name, prof.home, scan.salt, scan.line)


def _unserved_detail(reason: str) -> str:
    return {
        REASON_INVALID: " (profile names are lower-case letters, digits, '-' and '_', 1-64 characters)",
        REASON_RESERVED: " (Hermes refuses 'hermes -p' with this name)",
        REASON_SYMLINK: " (hermesd never follows a link out of the profiles folder)",
    }.get(reason, "")


def _unserved_fix(name: str, path: Path, reason: str) -> str:
    if reason == REASON_SYMLINK:
        return f"move the profile's folder itself to {path} instead of linking to it"
    guess = "".join(c if c.isascii() and (c.isalnum() or c in "-_") else "-" for c in name.lower()).strip("-_")[:60]
    if not guess or not is_valid_name(guess) or guess in RESERVED_NAMES:
        guess = f"{guess or 'profile'}-1".lstrip("-_")
    return f"if it is a profile, rename the folder to a valid, unreserved name (for example {guess!r})"
