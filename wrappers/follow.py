"""Aliases follow their profile, as upstream's do: a delete takes them, a rename re-points them.

This sits above :mod:`profiles` (a wrapper names a profile, a profile knows no wrapper):
:mod:`profiles.lifecycle` moves the folder and the sticky pointer, then this moves every alias of
the profile, hermesd's and upstream-style ones, custom names included.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from profiles import lifecycle, safeio
from profiles.errors import ProfileError
from profiles.info import ProfileSummary
from profiles.lifecycle import ChangeResult, StopGateway
from profiles.names import parse_profile_name
from profiles.paths import root_or_env
from wrappers.scripts import (
    KIND_UPSTREAM,
    alias_collision,
    aliases_for_profile,
    all_wrappers,
    convert_wrapper,
    create_wrapper,
)


def name_aliases(summaries: Sequence[ProfileSummary], root: Path, wrapper_dir: Path | None = None) -> None:
    """Fill each summary's aliases: hermesd's wrappers for ``root`` and the upstream-style ones acting on it."""
    wrappers = all_wrappers(root, wrapper_dir)
    for s in summaries:
        s.aliases = [w.alias for w in wrappers if w.profile == s.name]
        s.upstream_aliases = [w.alias for w in wrappers if w.profile == s.name and w.kind == KIND_UPSTREAM]


def _alias_label(alias: str, kind: str) -> str:
    return f"{alias} (upstream's)" if kind == KIND_UPSTREAM else alias


def delete_profile(name: str, root: Path | str | None = None, *, stop_gateway: StopGateway | None = None,
                   wrapper_dir: Path | None = None, env: Mapping[str, str] | None = None) -> ChangeResult:
    """Delete profile ``name`` (:func:`profiles.lifecycle.delete_profile`), then its aliases."""
    result = lifecycle.delete_profile(name, root, stop_gateway=stop_gateway, env=env)
    for wrapper in aliases_for_profile(result.name, root_or_env(root, env), wrapper_dir, env, include_upstream=True):
        try:
            safeio.unlink(safeio.at(wrapper.path.parent, wrapper.path.name), missing_ok=False)
        except FileNotFoundError:
            continue
        except OSError as exc:
            result.warnings.append(f"alias {wrapper.alias!r} not removed: {exc.strerror or exc}")
            continue
        result.aliases_removed.append(_alias_label(wrapper.alias, wrapper.kind))
    return result


def rename_profile(old: str, new: str, root: Path | str | None = None, *, stop_gateway: StopGateway | None = None,
                   wrapper_dir: Path | None = None, env: Mapping[str, str] | None = None, hermes: str | None = None,
                   hermesd: str | None = None, create_alias: bool = True) -> ChangeResult:
    """Rename a profile (:func:`profiles.lifecycle.rename_profile`), then re-point its aliases.

    The alias named after the old profile is replaced by one named after the new profile, a custom
    alias keeps its name and is pointed at the new profile; upstream-style ones become hermesd
    wrappers on the way. As upstream, when no alias named after the new profile results, one is
    created unless it collides (or ``create_alias`` is false). A wrapper that cannot be written
    becomes a warning: the rename itself has happened.
    """
    old_canon = parse_profile_name(old)
    base = root_or_env(root, env)
    wrappers = aliases_for_profile(old_canon, base, wrapper_dir, env, include_upstream=True)
    result = lifecycle.rename_profile(old, new, root, stop_gateway=stop_gateway, env=env)
    new_canon = result.name
    made_new_name = False
    for wrapper in wrappers:
        alias = new_canon if wrapper.alias == old_canon else wrapper.alias
        renamed = alias != wrapper.alias
        try:
            if renamed:
                safeio.unlink(safeio.at(wrapper.path.parent, wrapper.path.name))
                result.aliases_removed.append(_alias_label(wrapper.alias, wrapper.kind))
            if not renamed and wrapper.kind == KIND_UPSTREAM:
                convert_wrapper(wrapper, base, env=env, hermes=hermes, hermesd=hermesd, profile=new_canon)
            else:
                create_wrapper(alias, new_canon, base, wrapper.path.parent, env=env, hermes=hermes, hermesd=hermesd,
                               windows=wrapper.path.suffix.lower() == ".bat", replace_own=not renamed)
            result.aliases_created.append(alias)
            made_new_name = made_new_name or alias == new_canon
        except ProfileError as exc:
            result.warnings.append(f"alias {alias!r} not updated: {exc}")
    if create_alias and not made_new_name:
        problem = alias_collision(new_canon, new_canon, base, wrapper_dir, env=env)
        if problem is None:
            try:
                create_wrapper(new_canon, new_canon, base, wrapper_dir, env=env, hermes=hermes, hermesd=hermesd)
                result.aliases_created.append(new_canon)
            except ProfileError as exc:
                result.warnings.append(f"alias {new_canon!r} not created: {exc}")
        else:
            result.warnings.append(f"alias {new_canon!r} not created: {problem}")
    return result
