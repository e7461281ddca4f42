"""Create, delete and rename profiles: folder operations that never leave half a profile behind.

Every change is built or dismantled under a dot-named scratch folder inside ``profiles/``
(ignored by discovery) and switched into place with one ``rename``: a concurrent scan by
the supervisor sees the profile fully present or fully absent, never a partial copy that
it might try to serve.

Creation follows upstream ``hermes profile create``:

* blank: the standard sub-folders and an empty owner-only ``.env`` (so the profile never
  silently inherits credentials from a shell); ``SOUL.md`` and bundled skills are left for
  Hermes to seed on first run, because that content belongs to the installed Hermes;
* ``--clone``: ``config.yaml``, ``.env``, ``SOUL.md``, the installed ``skills/`` and
  ``memories/MEMORY.md`` / ``memories/USER.md`` of the source;
* ``--clone-all``: everything except history (``state.db*``, ``sessions``, ``backups``,
  ``state-snapshots``, ``checkpoints``), the root's infrastructure when the source is
  ``default`` (``hermes-agent``, ``.worktrees``, ``profiles``, ``bin``, ``node_modules``,
  ``active_profile``), byte-code, sockets and temp files at any depth, special files, and —
  beyond upstream — hermesd's ``.hermesd`` folder and the gateway's runtime files
  (``gateway.pid``, ``gateway.lock``, ``gateway_state.json``, ``.gateway-planned-stop.json``,
  ``.drain_request.json``, ``processes.json``, ``state/gateway.heartbeat``), which would make
  the clone look like a running gateway.

The source defaults to the active profile. A copied ``.env`` always ends up ``0600``. Cloning
copies bot tokens, which is exactly how two profiles end up polling one token, so the
result names the credential kinds that were copied (never their values). ``--clone`` (not
``--clone-all``, as upstream) then migrates the copied ``config.yaml`` with upstream's own
code through the injected ``migrate(home)`` (see :mod:`profiles.migration`). ``no_skills``
writes upstream's ``.no-bundled-skills`` marker, so Hermes never seeds bundled skills there.

Aliases follow the profile as upstream's do: delete removes every alias of the profile
(hermesd's and upstream-style ones, custom names included); rename re-points them and, as
upstream, creates the profile-named alias for the new name when none collides (unless
``create_alias=False``).

Delete and rename refuse while the profile's gateway is alive (``gateway.pid`` verified by
start time) unless the caller injects ``stop_gateway(name, home)``; this package never
signals a process itself. ``default`` can be neither deleted nor renamed, and a profile
entry that is a symlink is refused rather than followed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

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
from profiles.meta import write_profile_meta
from profiles.migration import MigrationResult
from profiles.names import DEFAULT_PROFILE, parse_profile_name
from profiles.paths import ACTIVE_PROFILE_FILE, HERMESD_DIRNAME, PROFILES_DIRNAME, root_or_env
from profiles.upstream.files import HEARTBEAT_FILE, RUNTIME_TOP_FILES, live_gateway
from wrappers.scripts import (
    KIND_UPSTREAM,
    adopt_wrapper,
    alias_collision,
    aliases_for_profile,
    create_wrapper,
)

StopGateway = Callable[[str, Path], None]
MigrateConfig = Callable[[Path], MigrationResult]

PROFILE_SUBDIRS: tuple[str, ...] = (
    "memories", "sessions", "skills", "skins", "logs", "plans", "workspace", "cron", "home",
)
CLONE_FILES: tuple[str, ...] = ("config.yaml", ".env", "SOUL.md")
CLONE_SUBDIR_FILES: tuple[str, ...] = ("memories/MEMORY.md", "memories/USER.md")
CLONE_ALL_HISTORY: frozenset[str] = frozenset(
    {"state.db", "state.db-wal", "state.db-shm", "sessions", "backups", "state-snapshots", "checkpoints"}
)
ROOT_INFRASTRUCTURE: frozenset[str] = frozenset(
    {"hermes-agent", ".worktrees", PROFILES_DIRNAME, "bin", "node_modules", ACTIVE_PROFILE_FILE}
)
GATEWAY_RUNTIME_FILES: frozenset[str] = frozenset(
    {*RUNTIME_TOP_FILES, HERMESD_DIRNAME}
)
_HEARTBEAT_DIR, _HEARTBEAT_NAME = HEARTBEAT_FILE.split("/", 1)
# Runtime files that live below the top level, as (parent folder, name).
NESTED_RUNTIME_FILES: frozenset[tuple[str, str]] = frozenset({(_HEARTBEAT_DIR, _HEARTBEAT_NAME)})
_ANY_DEPTH_SUFFIXES = (".pyc", ".pyo", ".sock", ".tmp")

NO_BUNDLED_SKILLS_MARKER = ".no-bundled-skills"
NO_BUNDLED_SKILLS_TEXT = (  # upstream's text, byte for byte
    "This profile opted out of bundled-skill seeding "
    "(`hermes profile create --no-skills`).\n"
    "Delete this file to re-enable sync on the next `hermes update`.\n"
)

ENV_HEADER = (
    "# Per-profile secrets for this Hermes profile.\n"
    "# API keys and tokens set here override the shell environment.\n"
    "# Behavioral settings belong in config.yaml, not here.\n"
)


@dataclass
class CreateResult:
    """What ``create_profile`` did: where, from what, and what the user should know."""

    name: str
    path: Path
    mode: str
    source: str | None = None
    credential_kinds: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    migration: MigrationResult | None = None


@dataclass
class ChangeResult:
    """What a delete or rename did besides moving the folder."""

    name: str
    path: Path
    aliases_removed: list[str] = field(default_factory=list)
    aliases_created: list[str] = field(default_factory=list)
    active_changed: bool = False
    warnings: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------- helpers


def _scratch(root: Path, purpose: str, name: str) -> Path:
    folder = root / PROFILES_DIRNAME
    folder.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{purpose}-{name}-", dir=folder))


def _force_remove(path: Path) -> None:
    """``rmtree`` that also removes read-only entries (copies from immutable stores have them)."""

    def retry_writable(func: Callable[[str], object], failed: str, _exc: object) -> None:
        for target in (failed, os.path.dirname(failed)):
            with contextlib.suppress(OSError):
                os.chmod(target, os.lstat(target).st_mode | stat.S_IWUSR | stat.S_IXUSR)
        func(failed)

    shutil.rmtree(path, onerror=retry_writable)


def _tighten_env(home: Path) -> None:
    env = home / ".env"
    if env.is_file() and not env.is_symlink():
        os.chmod(env, 0o600)


def _clone_all_ignore(source: Path, is_root: bool) -> Callable[[str, list[str]], set[str]]:
    source_abs = os.path.abspath(source)

    def ignore(directory: str, names: list[str]) -> set[str]:
        skipped: set[str] = set()
        rel = os.path.relpath(os.path.abspath(directory), source_abs)
        for entry in names:
            if entry == "__pycache__" or entry.endswith(_ANY_DEPTH_SUFFIXES):
                skipped.add(entry)
                continue
            if rel == ".":
                if entry in CLONE_ALL_HISTORY or entry in GATEWAY_RUNTIME_FILES:
                    skipped.add(entry)
                    continue
                if is_root and entry in ROOT_INFRASTRUCTURE:
                    skipped.add(entry)
                    continue
            elif (rel, entry) in NESTED_RUNTIME_FILES:
                skipped.add(entry)
                continue
            try:
                mode = os.lstat(os.path.join(directory, entry)).st_mode
            except OSError:
                skipped.add(entry)
                continue
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode)):
                skipped.add(entry)  # fifos, sockets, devices: copying would block or fail
        return skipped

    return ignore


def _copy_if_file(src: Path, dst: Path) -> None:
    if src.is_file():
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst)


def _clone_config(source: Path, build: Path) -> None:
    for rel in CLONE_FILES:
        _copy_if_file(source / rel, build / rel)
    skills = source / "skills"
    if skills.is_dir():
        shutil.copytree(skills, build / "skills", symlinks=True, dirs_exist_ok=True)
    for rel in CLONE_SUBDIR_FILES:
        _copy_if_file(source / rel, build / rel)


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


# --------------------------------------------------------------------------- create


def create_profile(
    name: str,
    root: Path | str | None = None,
    *,
    clone: bool = False,
    clone_all: bool = False,
    clone_from: str | None = None,
    description: str | None = None,
    env: Mapping[str, str] | None = None,
    no_skills: bool = False,
    migrate: MigrateConfig | None = None,
) -> CreateResult:
    """Create profile ``name`` (blank, ``clone`` or ``clone_all``) atomically.

    ``clone_from`` implies ``clone`` unless ``clone_all`` is set (``clone_all`` wins over
    ``clone``, as upstream); without it the source is the active profile. ``no_skills`` cannot
    be combined with a clone. ``migrate(home)`` is called on the new folder after a config-only
    clone (never after ``clone_all``, as upstream); ``None`` leaves the copy as is. Raises
    :class:`ProfileExistsError`, :class:`InvalidNameError` or :class:`ProfileNotFoundError`.
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
    source_name: str | None = None
    source: Path | None = None
    if copying:
        if clone_from is not None:
            source_name = parse_profile_name(clone_from)
            source = existing_profile_home(clone_from, base)
        else:
            source_name = active_profile(base, env)
            if source_name == CUSTOM_PROFILE and not (base / PROFILES_DIRNAME / CUSTOM_PROFILE).is_dir():
                raise ProfileNotFoundError(
                    "HERMES_HOME is neither this root nor one of its profiles, so there is no active profile "
                    "to clone; name the source with --clone-from"
                )
            source = existing_profile_home(source_name, base)
    mode = "clone-all" if clone_all else ("clone" if copying else "blank")

    scratch = _scratch(base, "creating", canon)
    build = scratch / canon
    try:
        if clone_all and source is not None:
            shutil.copytree(
                source, build, symlinks=True, ignore=_clone_all_ignore(source, source_name == DEFAULT_PROFILE)
            )
        else:
            build.mkdir()
            for sub in PROFILE_SUBDIRS:
                (build / sub).mkdir(exist_ok=True)
            if source is not None:
                _clone_config(source, build)
        env_file = build / ".env"
        if not os.path.lexists(env_file):
            env_file.write_text(ENV_HEADER, encoding="utf-8")
        if no_skills:
            (build / NO_BUNDLED_SKILLS_MARKER).write_text(NO_BUNDLED_SKILLS_TEXT, encoding="utf-8")
        migration: MigrationResult | None = None
        if mode == "clone" and migrate is not None:
            migration = migrate(build)
        _tighten_env(build)
        if description and description.strip():
            write_profile_meta(build, description=description, description_auto=False)
        kinds: list[str] = []
        warnings: list[str] = []
        if source_name is not None:
            kinds, warnings = _credential_warning(canon, source_name, build, target)
        if migration is not None and not migration.ok:
            warnings.append(migration.describe())
        if os.path.lexists(target):
            raise ProfileExistsError(f"profile {canon!r} already exists at {target}")
        os.rename(build, target)
    finally:
        _force_remove(scratch)
    return CreateResult(canon, target, mode, source_name, kinds, warnings, migration)


# --------------------------------------------------------------------------- delete / rename


def _ensure_stopped(name: str, home: Path, stop_gateway: StopGateway | None) -> None:
    record = live_gateway(home)
    if record is None:
        return
    if stop_gateway is None:
        raise GatewayRunningError(
            f"a gateway is running for profile {name!r} (pid {record.pid}); stop it first "
            "(or pass --stop to have hermesd stop it)"
        )
    stop_gateway(name, home)
    again = live_gateway(home)
    if again is not None:
        raise GatewayRunningError(f"the gateway of profile {name!r} (pid {again.pid}) is still running after stop")


def _refuse_default(name: str, verb: str) -> None:
    if name == DEFAULT_PROFILE:
        raise InvalidNameError(f"cannot {verb} the default profile: it is the root folder itself")


def delete_profile(
    name: str,
    root: Path | str | None = None,
    *,
    stop_gateway: StopGateway | None = None,
    wrapper_dir: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> ChangeResult:
    """Delete profile ``name``, its aliases (hermesd's and upstream-style), and the sticky pointer to it."""
    canon = parse_profile_name(name)
    _refuse_default(canon, "delete")
    base = root_or_env(root, env)
    home = existing_profile_home(name, base)
    _ensure_stopped(canon, home, stop_gateway)
    result = ChangeResult(canon, home)
    scratch = _scratch(base, "deleting", canon)
    os.rename(home, scratch / canon)
    try:
        _force_remove(scratch)
    except OSError as exc:
        result.warnings.append(f"profile removed from the list, but {scratch} could not be fully deleted: {exc}")
    try:
        if read_active_profile(base) == canon:
            clear_active_profile(base)
            result.active_changed = True
    except ProfileConfigError as exc:
        result.warnings.append(str(exc))
    for wrapper in aliases_for_profile(canon, base, wrapper_dir, env, include_upstream=True):
        try:
            wrapper.path.unlink()
        except FileNotFoundError:
            continue
        except OSError as exc:
            result.warnings.append(f"alias {wrapper.alias!r} not removed: {exc.strerror or exc}")
            continue
        result.aliases_removed.append(_alias_label(wrapper.alias, wrapper.kind))
    return result


def _alias_label(alias: str, kind: str) -> str:
    return f"{alias} (upstream's)" if kind == KIND_UPSTREAM else alias


def rename_profile(
    old: str,
    new: str,
    root: Path | str | None = None,
    *,
    stop_gateway: StopGateway | None = None,
    wrapper_dir: Path | None = None,
    env: Mapping[str, str] | None = None,
    hermes: str | None = None,
    hermesd: str | None = None,
    create_alias: bool = True,
) -> ChangeResult:
    """Rename a profile's folder, then follow it with the sticky pointer and its aliases.

    Every alias of the old profile follows it: the one named after the old profile is replaced
    by one named after the new profile, a custom alias keeps its name and is pointed at the new
    profile; upstream-style ones become hermesd wrappers on the way. As upstream, when no alias
    named after the new profile results, one is created unless it collides (or ``create_alias``
    is false). A wrapper that cannot be written becomes a warning: the rename itself has happened.
    """
    old_canon = parse_profile_name(old)
    new_canon = parse_profile_name(new)
    _refuse_default(old_canon, "rename")
    _refuse_default(new_canon, "rename to")
    base = root_or_env(root, env)
    home = existing_profile_home(old, base)
    target = base / PROFILES_DIRNAME / new_canon
    if os.path.lexists(target):
        raise ProfileExistsError(f"profile {new_canon!r} already exists at {target}")
    wrappers = aliases_for_profile(old_canon, base, wrapper_dir, env, include_upstream=True)
    _ensure_stopped(old_canon, home, stop_gateway)
    os.rename(home, target)
    result = ChangeResult(new_canon, target)
    try:
        if read_active_profile(base) == old_canon:
            set_active_profile(new_canon, base)
            result.active_changed = True
    except ProfileError as exc:
        result.warnings.append(f"sticky active profile not updated: {exc}")
    made_new_name = False
    for wrapper in wrappers:
        alias = new_canon if wrapper.alias == old_canon else wrapper.alias
        try:
            if alias != wrapper.alias:
                wrapper.path.unlink(missing_ok=True)
                result.aliases_removed.append(_alias_label(wrapper.alias, wrapper.kind))
                create_wrapper(
                    alias, new_canon, base, wrapper.path.parent,
                    env=env, hermes=hermes, hermesd=hermesd,
                    windows=wrapper.path.suffix.lower() == ".bat", replace_own=False,
                )
            elif wrapper.kind == KIND_UPSTREAM:
                adopt_wrapper(wrapper, base, env=env, hermes=hermes, hermesd=hermesd, profile=new_canon)
            else:
                create_wrapper(
                    alias, new_canon, base, wrapper.path.parent,
                    env=env, hermes=hermes, hermesd=hermesd,
                    windows=wrapper.path.suffix.lower() == ".bat", replace_own=True,
                )
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
