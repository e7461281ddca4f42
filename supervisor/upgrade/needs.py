"""The pre-flight of an upgrade: what does the target release need that this root lacks?

From 0.22 on upstream runs one gateway per host: a named profile's own gateway refuses to start
unless its config.yaml says ``gateway.standalone: true``, and ``hermes update`` folds a per-profile
fleet into one multiplexed gateway unless the default profile opts out (upstream-contract.md §8).
An upgrade that restarts a fleet onto such a release without those settings folds the fleet. The
settings each release needs are declared once, with the releases
(:func:`profiles.upstream.releases.settings_needed`); this module reads the root's files against
them. ``hermesd upgrade`` asks :func:`missing_for` before it installs or restarts anything, and
again after the last restart (a migration must not have undone them).

:func:`settle` is the one place where a missing setting is put in place, and only with the user's
consent (``hermesd upgrade --yes``): it writes through ``hermesd standalone``'s code
(:mod:`profiles.standalone`), so each change is printed as a diff, every original byte is kept under
``<root>/.hermesd/standalone/`` and ``hermesd standalone --undo`` puts them back. Without consent the upgrade
refuses, naming each file, key and value, and ``hermesd standalone``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from profiles.errors import ProfileError
from profiles.fileio import load_yaml_mapping
from profiles.upstream.process import DEFAULT_PROFILE
from profiles.upstream.releases import NeededSetting, settings_needed
from supervisor.layout import Layout

CONFIG = "config.yaml"


@dataclass(frozen=True, slots=True)
class Need:
    """One setting the target release needs and this root lacks."""
    profile: str
    file: Path
    setting: NeededSetting
    found: str  # what the file holds now, for the message ("absent", "true", "cannot read: …")

    def describe(self) -> str:
        value = "true" if self.setting.value else "false"
        return f"{self.profile}: {self.file} needs {self.setting.key}: {value} (now {self.found}): {self.setting.why}"


def _lookup(config: dict[str, Any], dotted: str) -> tuple[bool, object]:
    node: object = config
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return False, None
        node = node[part]
    return True, node


def missing_for(target: str, profiles: Sequence[tuple[str, Path]]) -> list[Need]:
    """Every setting ``target`` needs that the served ``profiles`` (name, home) lack, in serving order.

    An unreadable config.yaml counts as lacking it (the message says why), so a broken file can never
    let an upgrade through.
    """
    needed = settings_needed(target)
    if not needed:
        return []
    out: list[Need] = []
    for name, home in profiles:
        relevant = [s for s in needed if (s.scope == "default") == (name == DEFAULT_PROFILE)]
        if not relevant:
            continue
        path = Path(home) / CONFIG
        try:
            config = load_yaml_mapping(path)
        except (ProfileError, OSError) as exc:
            out += [Need(name, path, s, f"cannot read: {exc}") for s in relevant]
            continue
        for s in relevant:
            present, raw = _lookup(config, s.key)
            if not s.satisfied(raw):
                out.append(Need(name, path, s, repr(raw) if present else "absent"))
    return out


def settle(needs: Sequence[Need], root: Path, say: Callable[[str], None]) -> Path | None:
    """Write the missing settings of ``needs`` (the user consented) as ``hermesd standalone`` would; the
    adoption record (None: nothing written).

    Each change is said as a diff, then written with its original kept in a new adoption record; a
    file that cannot be changed is said with why. The caller reads the files again for what is left.
    The settings restart no running gateway (:data:`profiles.upstream.multiplex.CONSENT_KEYS`).
    """
    from profiles import standalone  # the upgrade's rare path; status and the daemon never need it

    changes, refusals = standalone.plan(root, sorted({n.profile for n in needs}))
    for c in changes:
        say(f"# {c.profile}: {c.why}\n{c.diff().rstrip()}")
    for refused in refusals:
        say(f"# {refused.profile}: cannot change {refused.path}: {refused.reason}")
    if not changes:
        return None
    record = standalone.apply(changes, Layout(root).ensure_standalone_dir())
    say(f"wrote {len(changes)} file(s); originals kept in {record} (undo: hermesd standalone --undo --root {root})")
    return record
