"""Create, delete and rename profiles: a profile appears or disappears whole, never half.

Every change is built or dismantled under a dot-named scratch folder inside ``profiles/``
(ignored by discovery) and switched into place with one ``rename``: a concurrent scan by
the supervisor sees the profile fully present or fully absent, never a partial copy that
it might try to serve.

Creation is upstream's own: :func:`create_profile` runs ``hermes_cli.profiles.create_profile``
in the gateway's interpreter (:mod:`profiles.upstream.calls`), with its root and home inside the
scratch folder, so the folders a profile gets, what ``--clone`` and ``--clone-all`` copy and
leave out, the migration of a cloned ``config.yaml``, the seeded ``SOUL.md``, ``--no-skills``
and the description are whatever the installed release does. hermesd adds only this:

* the source of a clone is the active profile of the root (upstream: whatever ``HERMES_HOME``
  is), and upstream clones from a copy of it that holds no link out of it
  (:func:`profiles.safetree.copy_tree`), never from the source itself: a ``.env`` that links to another
  profile's is left out and named, not followed. The copy sits in the scratch root's
  ``profiles/``, even a copy of the root: upstream imports its root's ``plugins/`` as code, so
  that root holds nothing a profile wrote. The copy also leaves out hermesd's ``.hermesd``
  folder, the gateway's runtime files (``gateway.lock``, the planned-stop and drain markers,
  ``state/gateway.heartbeat``, ...), which would make a clone look like a running gateway, and
  the root's ``active_profile``;
* the result's ``.env`` is ``0600`` and no file keeps a set-id bit, whatever the source had;
* cloning copies bot tokens, which is exactly how two profiles end up polling one token, so
  the result names the credential kinds that were copied (never their values).

Delete and rename are hermesd's: upstream's stop the gateway named by ``gateway.pid`` and write
through links as root, and the supervisor owns the process. They move the folder and the sticky
pointer; the aliases follow in :mod:`wrappers.follow`, which sits above this package (a wrapper
names a profile). Both refuse while the profile's gateway is alive (``gateway.pid`` verified by
start time) unless the caller injects ``stop_gateway(name, home)``; this package never signals a
process itself. ``default`` can be neither deleted nor renamed, and a profile entry that is a
symlink is refused rather than followed.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from profiles import safeio, safetree
from profiles.credentials import credential_kinds
from profiles.discovery import (
    CUSTOM_PROFILE,
    active_profile,
    clear_active_profile,
    existing_profile_home,
    read_active_profile,
    set_active_profile,
)
from profiles.errors import (
    GatewayRunningError,
    InvalidNameError,
    ProfileConfigError,
    ProfileError,
    ProfileExistsError,
    ProfileNotFoundError,
)
from profiles.names import DEFAULT_PROFILE, parse_profile_name, shown
from profiles.paths import ACTIVE_PROFILE_FILE, HERMESD_DIRNAME, PROFILES_DIRNAME, root_or_env
from profiles.safeio import Beneath
from profiles.upstream import calls
from profiles.upstream.files import HEARTBEAT_FILE, RUNTIME_TOP_FILES, PidRecord, live_gateway

StopGateway = Callable[[str, Path], None]

# Never copied out of a clone's source (besides what upstream never copies, skipped for speed).
NOT_CLONED_TOP: frozenset[str] = frozenset({*RUNTIME_TOP_FILES, HERMESD_DIRNAME, *calls.NEVER_CLONED_TOP})
NOT_CLONED_FROM_ROOT: frozenset[str] = frozenset({*calls.NEVER_CLONED_FROM_ROOT, ACTIVE_PROFILE_FILE})
_HEARTBEAT = tuple(HEARTBEAT_FILE.split("/"))


@dataclass
class CreateResult:
    """What ``create_profile`` did: where, from what, and what the user should know."""

    name: str
    path: Path
    mode: str
    source: str | None = None
    credential_kinds: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    migrated: str | None = None  # "config.yaml migrated from schema vN to vM (hermes-agent X)"
    release: str = ""


@dataclass
class ChangeResult:
    """What a delete or rename did besides moving the folder (the aliases: :mod:`wrappers.follow`)."""

    name: str
    path: Path
    aliases_removed: list[str] = field(default_factory=list)
    aliases_created: list[str] = field(default_factory=list)
    active_changed: bool = False
    warnings: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------- create


def _scratch(root: Path, purpose: str, name: str) -> Beneath:
    """A private dot-named folder in ``profiles/`` (discovery ignores it), reached without a link."""
    folder = safeio.at(root, PROFILES_DIRNAME)
    safeio.makedirs(folder, 0o755)
    return safeio.temp_folder(folder, f".{purpose}-{name}-")


def _clone_source(base: Path, clone_from: str | None, env: Mapping[str, str] | None) -> tuple[str, Path]:
    """The source's name and home: ``clone_from``, else the root's active profile."""
    if clone_from is not None:
        return parse_profile_name(clone_from), existing_profile_home(clone_from, base)
    name = active_profile(base, env)
    if name == CUSTOM_PROFILE and not (base / PROFILES_DIRNAME / CUSTOM_PROFILE).is_dir():
        raise ProfileNotFoundError(
            "HERMES_HOME is neither this root nor one of its profiles, so there is no active profile "
            "to clone; name the source with --clone-from"
        )
    return name, existing_profile_home(name, base)


def _skipper(from_root: bool) -> Callable[[tuple[str, ...]], bool]:
    def skip(parts: tuple[str, ...]) -> bool:
        if len(parts) == 1:
            return parts[0] in NOT_CLONED_TOP or (from_root and parts[0] in NOT_CLONED_FROM_ROOT)
        return parts == _HEARTBEAT

    return skip


def _stand_in(source: str, new: str) -> str:
    """The name the source's copy has in the scratch root: its own, or one for the root.

    The root is cloned as a named profile: upstream's own root (its ``HERMES_HOME``, whose
    ``plugins/`` it imports as code) must hold nothing a profile wrote. What upstream leaves out
    of a clone of the root only, the copy already leaves out (:data:`NOT_CLONED_FROM_ROOT`).
    """
    if source != DEFAULT_PROFILE:
        return source
    return "root-copy" if new != "root-copy" else "root-copy-2"


def _config_alone(home: Beneath, folder: Beneath) -> Path | None:
    """A folder holding only a copy of ``home``'s ``config.yaml``, where upstream reads its schema version
    (none when the mirror holds no regular ``config.yaml``)."""
    safeio.mkdir(folder, 0o700)
    try:
        safeio.replace_with_copy(folder / "config.yaml", home / "config.yaml", 0o600, preserve=True)
    except OSError:
        return None
    return folder.path


def _harden(home: Beneath) -> None:
    """``.env`` owner-only, and no set-id bit anywhere: the copy is root's, its content the source's."""
    for entry in safetree.walk(home):
        if not stat.S_ISREG(entry.st.st_mode):
            continue
        was = stat.S_IMODE(entry.st.st_mode)
        mode = 0o600 if entry.parts == (".env",) else was & ~(stat.S_ISUID | stat.S_ISGID)
        if mode != was:
            safetree.set_mode(entry, mode)


def _credential_warning(name: str, source: str, home: Path, final: Path) -> tuple[list[str], list[str]]:
    try:
        kinds = credential_kinds(home)
    except ProfileConfigError as exc:
        return [], [f"could not check which credentials were copied: {exc}"]
    if not kinds:
        return [], []
    return kinds, [
        f"copied platform credentials from {source!r}: {', '.join(kinds)}. Two gateways using one "
        f"token take turns with it; give {name!r} its own in {final / '.env'} or disable those platforms"
    ]


def _migration_note(made: calls.Created, result: CreateResult) -> None:
    """Say what upstream's migration of a cloned ``config.yaml`` did; warn when it stopped short."""
    before, after = made.schema_before, made.schema_after
    if before is None or after is None:
        return
    if after[0] < after[1]:
        result.warnings.append(f"config.yaml copied at schema v{after[0]}, older than this release's "
                               f"v{after[1]}: hermes-agent's migration did not finish")
    elif after[0] > before[0]:
        result.migrated = f"config.yaml migrated from schema v{before[0]} to v{after[0]} (hermes-agent {made.release})"


def create_profile(
    name: str,
    root: Path | str | None = None,
    *,
    python: Callable[[], Sequence[str]],
    clone: bool = False,
    clone_all: bool = False,
    clone_from: str | None = None,
    description: str | None = None,
    env: Mapping[str, str] | None = None,
    no_skills: bool = False,
) -> CreateResult:
    """Create profile ``name`` (blank, ``clone`` or ``clone_all``) with upstream's code, atomically.

    ``python()`` gives the gateway's interpreter (argv prefix); it is asked only once every name
    is checked and the source found, before anything is written. ``clone_from`` implies ``clone``;
    ``clone_all`` wins over ``clone``, as upstream. Raises :class:`ProfileExistsError`, :class:`InvalidNameError`,
    :class:`ProfileNotFoundError`, or :class:`profiles.upstream.calls.UpstreamCallError` when
    upstream's code cannot run or refuses.
    """
    copying = clone or clone_all or clone_from is not None
    if no_skills and copying:
        raise ProfileError(
            "--no-skills is mutually exclusive with --clone / --clone-from / --clone-all "
            "(cloning explicitly copies skills from the source profile)"
        )
    canon = parse_profile_name(name, allow_default=False)
    base = root_or_env(root, env)
    target = base / PROFILES_DIRNAME / canon
    if os.path.lexists(target):
        raise ProfileExistsError(f"profile {canon!r} already exists at {target}")
    source_name, source = _clone_source(base, clone_from, env) if copying else (None, None)
    mode = "clone-all" if clone_all else ("clone" if copying else "blank")
    result = CreateResult(canon, target, mode, source_name)
    interpreter = python()
    scratch = _scratch(base, "creating", canon)
    try:
        work_root, work_home = scratch / "root", scratch / "home"
        safeio.mkdir(work_home, 0o755)
        safeio.makedirs(work_root / PROFILES_DIRNAME, 0o755)
        stand_in = schema_of = None
        if source is not None and source_name is not None:
            stand_in = _stand_in(source_name, canon)
            mirrored = work_root / PROFILES_DIRNAME / stand_in
            try:
                left_out = safetree.copy_tree(safeio.home_file(source), mirrored,
                                              _skipper(source_name == DEFAULT_PROFILE))
            except safetree.TooDeepError as exc:
                raise ProfileError(f"cannot clone: {exc}") from None
            for rel in left_out:
                result.warnings.append(f"not copied from {source_name!r}: {shown(rel)} is a link that "
                                       "could lead out of the profile (hermesd follows none)")
            if mode == "clone":
                schema_of = _config_alone(mirrored, scratch / "schema")
        made = calls.create_profile(
            interpreter, canon, work_root=work_root.path, work_home=work_home.path, clone_from=stand_in,
            clone_all=clone_all, clone_config=mode == "clone", no_skills=no_skills, description=description,
            schema_of=schema_of, env=env,
        )
        build = work_root / PROFILES_DIRNAME / canon
        if build.path.is_symlink() or not build.path.is_dir() or made.path.resolve() != build.path.resolve():
            raise calls.UpstreamCallError(f"hermes-agent's create_profile made {made.path}, not {build.path}")
        result.release = made.release
        _harden(build)
        _migration_note(made, result)
        if source_name is not None:
            result.credential_kinds, warnings = _credential_warning(canon, source_name, build.path, target)
            result.warnings.extend(warnings)
        if os.path.lexists(target):
            raise ProfileExistsError(f"profile {canon!r} already exists at {target}")
        safeio.move(build, safeio.home_file(target))
    finally:
        safetree.remove_tree(scratch)
    return result


# --------------------------------------------------------------------------- delete / rename


def refuse_running(name: str, home: Path, stop_gateway: StopGateway | None) -> PidRecord | None:
    """Raise :class:`GatewayRunningError` when a gateway runs for ``home`` and nothing may stop it;
    else the running gateway's record, if any. ``profile delete`` asks this before its confirmation,
    so nobody types a profile's name only to be refused."""
    record = live_gateway(home)
    if record is not None and stop_gateway is None:
        raise GatewayRunningError(
            f"a gateway is running for profile {name!r} (pid {record.pid}); stop it first "
            "(or pass --stop to have hermesd stop it)"
        )
    return record


def _ensure_stopped(name: str, home: Path, stop_gateway: StopGateway | None) -> None:
    if refuse_running(name, home, stop_gateway) is None or stop_gateway is None:
        return
    stop_gateway(name, home)
    again = live_gateway(home)
    if again is not None:
        raise GatewayRunningError(f"the gateway of profile {name!r} (pid {again.pid}) is still running after stop")


def _refuse_default(name: str, verb: str) -> None:
    if name == DEFAULT_PROFILE:
        raise InvalidNameError(f"cannot {verb} the default profile: it is the root folder itself")


def delete_profile(name: str, root: Path | str | None = None, *, stop_gateway: StopGateway | None = None,
                   env: Mapping[str, str] | None = None) -> ChangeResult:
    """Delete profile ``name`` and the sticky pointer to it."""
    canon = parse_profile_name(name)
    _refuse_default(canon, "delete")
    base = root_or_env(root, env)
    home = existing_profile_home(name, base)
    _ensure_stopped(canon, home, stop_gateway)
    result = ChangeResult(canon, home)
    scratch = _scratch(base, "deleting", canon)
    safeio.move(safeio.home_file(home), scratch / canon)
    try:
        safetree.remove_tree(scratch)
    except OSError as exc:
        result.warnings.append(f"profile removed from the list, but {scratch} could not be fully deleted: {exc}")
    try:
        if read_active_profile(base) == canon:
            clear_active_profile(base)
            result.active_changed = True
    except ProfileConfigError as exc:
        result.warnings.append(str(exc))
    return result


def rename_profile(old: str, new: str, root: Path | str | None = None, *, stop_gateway: StopGateway | None = None,
                   env: Mapping[str, str] | None = None) -> ChangeResult:
    """Rename a profile's folder, then follow it with the sticky pointer."""
    old_canon = parse_profile_name(old)
    new_canon = parse_profile_name(new)
    _refuse_default(old_canon, "rename")
    _refuse_default(new_canon, "rename to")
    base = root_or_env(root, env)
    home = existing_profile_home(old, base)
    target = base / PROFILES_DIRNAME / new_canon
    if os.path.lexists(target):
        raise ProfileExistsError(f"profile {new_canon!r} already exists at {target}")
    _ensure_stopped(old_canon, home, stop_gateway)
    safeio.move(safeio.home_file(home), safeio.home_file(target))
    result = ChangeResult(new_canon, target)
    try:
        if read_active_profile(base) == old_canon:
            set_active_profile(new_canon, base)
            result.active_changed = True
    except ProfileError as exc:
        result.warnings.append(f"sticky active profile not updated: {exc}")
    return result
