"""A gateway child as hermesd starts it: upstream's contract plus hermesd's own tags and scrubbing.

The facts come from :mod:`profiles.upstream.process` (argv, the fixed environment, stop rules) and
:mod:`profiles.upstream.platforms` (which variables configure a platform). What hermesd adds is
here: the environment tags that let it find its processes again, the variables it must never pass
on (platform credentials from its own environment, its service manager's channel), and how it
finds the ``hermes`` command.
"""

from __future__ import annotations

import importlib.util
import os
import stat
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from profiles.paths import which
from profiles.upstream.platforms import is_platform_variable
from profiles.upstream.process import FIXED_ENV, GATEWAY_ARGS, profile_args
from profiles.upstream.releases import interpreter_from_script
from supervisor.processes.notify import SERVICE_MANAGER_VARIABLES
from supervisor.processes.tags import TAG_PROFILE, TAG_ROOT, TAG_TOKEN, tag_token

if TYPE_CHECKING:
    from profiles.upstream.releases import Contract

# Process-identity variables that must come from hermesd, never from its own environment.
# Also hermesd's own service-manager channel: a child must not notify (or feed the watchdog) for it.
_DROPPED = frozenset({"HERMES_HOME", "HERMES_PROFILE", TAG_ROOT, TAG_PROFILE, TAG_TOKEN, *SERVICE_MANAGER_VARIABLES})


class GatewayCommandError(RuntimeError):
    """No way to run ``hermes`` was found."""


def child_argv(command: list[str], profile: str, contract: Contract | None = None, *,
               hidden: bool = False) -> list[str]:
    """``hermes [-p NAME] gateway run --external-supervisor``; never ``--replace``.

    ``contract`` (:class:`profiles.upstream.releases.Contract` of the installed release, None when
    unknown): a release without ``--external-supervisor`` (before 0.19.0) gets ``gateway run``
    alone, because there the flag is an argparse error (exit 2) and the child could never start.
    ``hidden``: the child's confinement hides the other profiles (see ``Contract.gateway_args_for``).
    """
    if contract is not None:
        return [*command, *profile_args(profile), *contract.gateway_args_for(hidden=hidden)]
    return [*command, *profile_args(profile), *GATEWAY_ARGS]


def scrubbed(name: str, scrub: Sequence[str]) -> bool:
    """Whether ``name`` is one of ``scrub``: a variable name, or a prefix ending in ``_``."""
    return any(name == s or (s.endswith("_") and name.startswith(s)) for s in scrub)


def scrub_list(unmodelled: Mapping[str, Sequence[str]]) -> str:
    """The variables of platforms hermesd cannot model, for people: ``BUZZ_*, A2A_TOKEN``."""
    entries = sorted({v for names in unmodelled.values() for v in names})
    prefixes = [e for e in entries if e.endswith("_")]
    shown = [f"{e}*" for e in prefixes] + [e for e in entries if not e.endswith("_") and not scrubbed(e, prefixes)]
    return ", ".join(shown)


def unmodelled_note(version: str | None, unmodelled: Mapping[str, Sequence[str]]) -> str | None:
    """What ``status`` and ``doctor`` say about platforms the release ships and hermesd has no rules for."""
    if not unmodelled:
        return None
    names = ", ".join(unmodelled)
    one = len(unmodelled) == 1
    return (f"hermes-agent {version or '?'} ships {names}, which hermesd has no rules for: two profiles sharing "
            f"{'its' if one else 'their'} credentials or ports are not held, and whether a profile enables "
            f"{'it' if one else 'them'} is unknown to hermesd; {scrub_list(unmodelled)} "
            "are kept out of every gateway hermesd starts")


def child_env(
    base: Mapping[str, str],
    *,
    root: Path,
    profile: str,
    home: Path,
    extra: Mapping[str, str] | None = None,
    salt: bytes | None = None,
    scrub: Sequence[str] = (),
) -> dict[str, str]:
    """The child's initial environment, built from hermesd's own minus what must not leak.

    HOME, XDG_STATE_HOME and HERMES_GATEWAY_LOCK_DIR pass through unchanged, so they are
    identical for every child and upstream's cross-profile credential locks keep working; an
    XDG_STATE_HOME that is empty or relative is dropped, because releases up to 0.21 would put the
    locks relative to each gateway's working folder (its own home under confinement).
    ``salt``: the daemon's per-root salt, for the tag's token (:data:`TAG_TOKEN`); without it the
    child carries tags no sweep or tree will trust. ``scrub``: the variables (names, or prefixes
    ending in ``_``) of platforms the installed release ships and hermesd has no rules for
    (:func:`profiles.upstream.lines.unmodelled`), removed like every known platform's.
    """
    env = {k: v for k, v in base.items()
           if k not in _DROPPED and not is_platform_variable(k) and not scrubbed(k, scrub)}
    if not os.path.isabs(env.get("XDG_STATE_HOME", "/")):
        del env["XDG_STATE_HOME"]
    env.update(extra or {})
    env.update(FIXED_ENV)
    env["HERMES_HOME"] = str(home)
    env[TAG_ROOT] = str(root)
    env[TAG_PROFILE] = profile
    if salt is not None:
        env[TAG_TOKEN] = tag_token(salt, root, profile)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def forbidden_extra_env(name: str) -> str | None:
    """Why an operator-supplied variable may not be set through hermesd.yaml, or ``None``."""
    if name in _DROPPED or name in FIXED_ENV:
        return "it is set by hermesd itself (upstream contract)"
    if is_platform_variable(name):
        return "platform settings belong in the profile's .env, where conflict checks can see them"
    return None


def resolve_gateway_command(configured: Sequence[str] | None, path_env: str | None = None) -> list[str]:
    """The command prefix that runs ``hermes``, as upstream itself would find it.

    Configured command first, then ``hermes`` on PATH, then this interpreter's ``hermes_cli.main``
    (hermes-agent installed beside hermesd), then the interpreter of a console script on PATH that
    runs ``hermes_cli.main`` under another name (a repackaging's ``hermesx``), run as
    ``PYTHON -m hermes_cli.main``: a command line upstream's duplicate-gateway guard recognises,
    which the renamed script's is not.
    """
    if configured:
        exe = configured[0]
        found = which(exe, path=path_env) if "/" not in exe else exe
        if not found or not Path(found).exists():
            raise GatewayCommandError(f"gateway command {exe!r} (from hermesd.yaml 'command') not found")
        return [found, *configured[1:]]
    found = which("hermes", path=path_env)
    if found:
        return [found]
    if importlib.util.find_spec("hermes_cli") and importlib.util.find_spec("hermes_cli.main"):
        return [sys.executable, "-m", "hermes_cli.main"]
    renamed = renamed_console_script(path_env)
    if renamed is not None:
        return renamed
    raise GatewayCommandError(
        "cannot find the hermes command: install hermes-agent (pip install 'hermesd-supervisor[hermes]'),"
        " put 'hermes' on PATH, or set 'command' in hermesd.yaml"
    )


_SCRIPT_HEAD = 1024


def renamed_console_script(path_env: str | None) -> list[str] | None:
    """``[PYTHON, -m, hermes_cli.main]`` for the first ``hermes*`` console script on PATH that runs
    ``hermes_cli.main`` (pip writes ``from hermes_cli.main import main`` under its ``#!`` line), or None."""
    for folder in (path_env if path_env is not None else os.defpath).split(os.pathsep):
        try:
            names = sorted(n for n in os.listdir(folder or ".") if n.startswith("hermes"))
        except OSError:
            continue
        for name in sorted(names, key=len):
            head = _head(os.path.join(folder or ".", name))
            if head is None or b"hermes_cli.main import main" not in head:
                continue
            interp = interpreter_from_script(head)
            if interp and len(interp) == 1 and os.path.isabs(interp[0]):
                return [interp[0], "-m", "hermes_cli.main"]
    return None


def _head(path: str) -> bytes | None:
    """The first bytes of an executable regular file (never blocking on a FIFO), or None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or not st.st_mode & 0o111:
            return None
        return os.read(fd, _SCRIPT_HEAD)
    except OSError:
        return None
    finally:
        os.close(fd)
