"""Bring a cloned ``config.yaml`` up to the schema of the Hermes that will run it, with upstream's own code.

``hermes profile create --clone`` does not copy ``config.yaml`` byte for byte: after copying it
runs ``_migrate_profile_config_if_outdated(profile_dir)``, which (scoped to the new profile)
calls ``migrate_config(interactive=False, quiet=True)`` when the file's ``_config_version`` is
older than the running release's. That pipeline is ~700 lines of release-specific steps (new
defaults, renamed keys, ``.env`` clean-ups), so hermesd does not reproduce it: it runs
upstream's function itself.

DECISION — which interpreter. The one that runs the profile's gateway: the schema version
belongs to the hermes-agent release, and the migration must be the one of the release that
will read the file. Migrating with another installation (say, the hermes-agent beside hermesd
when ``hermesd.yaml`` points ``command`` at another virtualenv) would stamp a version the
gateway does not know, or miss steps it expects. So the interpreter is derived from the gateway
command (:func:`gateway_interpreter`: ``python -m hermes_cli.main``, or the ``#!`` line of the
``hermes`` console script), and the migration runs there, in a short-lived helper process —
the one process this package ever starts; it is never a gateway and is killed (by PID, through
``subprocess.run``'s timeout) if it overruns.

The helper gets a scrubbed environment (``PATH``, ``HOME``, locale, and ``HERMES_HOME`` set to
the new profile so nothing Hermes binds at import time points at the user's real root) and no
stdin. When the interpreter cannot be found or cannot import ``hermes_cli``, the copy is kept
as is and the caller is told why (upstream, too, leaves the file alone when migration fails).

API: ``migrate_cloned_config(home, command) -> MigrationResult`` (``command`` is the gateway
command prefix, e.g. ``["/venv/bin/hermes"]``); ``gateway_interpreter(command) -> str | None``;
``default_gateway_command() -> list[str] | None`` (``hermes`` on ``PATH``, else this
interpreter's ``hermes_cli``) for callers that have no configured command.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

MIGRATE_TIMEOUT_S = 120.0
_SHEBANG_LIMIT = 4096
_PASSED_VARIABLES = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "USER", "LOGNAME")

# Runs in the gateway's interpreter. Prefers upstream's own helper (what `hermes profile create
# --clone` calls); on releases without it, the same three steps it performs.
_HELPER = r"""
import json, sys
from pathlib import Path
home = Path(sys.argv[1])
def out(**kw):
    sys.stdout.write(json.dumps(kw))
    sys.exit(0)
try:
    from hermes_constants import reset_hermes_home_override, set_hermes_home_override
    from hermes_cli.config import check_config_version, migrate_config
    import hermes_cli.profiles as profiles
except Exception as exc:
    out(status="unavailable", detail=f"{type(exc).__name__}: {exc}")
def version():
    token = set_hermes_home_override(str(home))
    try:
        return check_config_version()
    finally:
        reset_hermes_home_override(token)
before = version()
helper = getattr(profiles, "_migrate_profile_config_if_outdated", None)
if helper is not None:
    helper(home)
elif before[0] < before[1]:
    token = set_hermes_home_override(str(home))
    try:
        migrate_config(interactive=False, quiet=True)
    except Exception:
        pass
    finally:
        reset_hermes_home_override(token)
after = version()
try:
    from hermes_cli import __version__ as release
except Exception:
    release = ""
out(status="migrated" if after[0] > before[0] else "current", before=before[0], after=after[0],
    latest=after[1], release=release)
"""


@dataclass(frozen=True)
class MigrationResult:
    """What happened to a cloned config: ``migrated``, ``current``, ``unavailable`` or ``failed``.

    ``before``/``after``/``latest`` are ``_config_version`` numbers (``None`` when not run).
    """

    status: str
    detail: str = ""
    before: int | None = None
    after: int | None = None
    latest: int | None = None
    interpreter: str | None = None
    release: str = ""

    @property
    def ok(self) -> bool:
        """The config is at the release's schema (migrated now, or already current)."""
        return self.status in ("migrated", "current")

    def describe(self) -> str:
        """One line for the user."""
        if self.status == "migrated":
            return f"config.yaml migrated from schema v{self.before} to v{self.after} (hermes-agent {self.release})"
        if self.status == "current":
            return "config.yaml already at the current schema"
        return f"config.yaml copied without migration: {self.detail}"


def _first_line(path: Path) -> str:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError:
        return ""
    try:
        import stat

        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return ""
        head = os.read(fd, _SHEBANG_LIMIT)
    except OSError:
        return ""
    finally:
        os.close(fd)
    return head.decode("utf-8", "replace")


def _python_named(word: str, path_env: str | None) -> str | None:
    if not Path(word).name.startswith("python"):
        return None
    if "/" in word:
        return word if os.access(word, os.X_OK) else None
    return shutil.which(word, path=path_env)


def gateway_interpreter(command: Sequence[str], path_env: str | None = None) -> str | None:
    """The Python interpreter that runs the gateway command ``command``, or ``None`` if it cannot be told.

    ``[python, "-m", "hermes_cli.main", …]`` -> ``python``; a console script -> its ``#!``
    interpreter (``#!/usr/bin/env python3`` looked up on ``PATH``; pip's ``#!/bin/sh`` +
    ``'''exec' "/path/python"`` form for long paths understood); a Python binary itself -> it.
    """
    if not command:
        return None
    exe = command[0]
    if len(command) >= 3 and command[1] == "-m":
        return _python_named(exe, path_env) or (exe if os.access(exe, os.X_OK) else None)
    direct = _python_named(exe, path_env)
    if direct:
        return direct
    path = exe if "/" in exe else shutil.which(exe, path=path_env)
    if not path:
        return None
    text = _first_line(Path(path))
    lines = text.splitlines()
    if not lines or not lines[0].startswith("#!"):
        return None
    words = lines[0][2:].split()
    if words and Path(words[0]).name == "env":
        words = [w for w in words[1:] if not w.startswith("-")]
    if words and _python_named(words[0], path_env):
        return _python_named(words[0], path_env)
    if words and Path(words[0]).name == "sh":
        for line in lines[1:4]:  # pip: '''exec' "/very/long/path/python" "$0" "$@"
            if line.startswith("'''exec' "):
                quoted = line[len("'''exec' "):].split('"')
                if len(quoted) > 1:
                    return _python_named(quoted[1], path_env)
    return None


def default_gateway_command(path_env: str | None = None) -> list[str] | None:
    """``hermes`` on ``PATH``, else this interpreter's ``hermes_cli`` (what hermesd runs by default)."""
    found = shutil.which("hermes", path=path_env)
    if found:
        return [found]
    if importlib.util.find_spec("hermes_cli") is not None:
        return [sys.executable, "-m", "hermes_cli.main"]
    return None


def helper_environment(home: Path, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The helper's environment: a few harmless variables of ``env`` and ``HERMES_HOME=home``."""
    source = os.environ if env is None else env
    out = {k: source[k] for k in _PASSED_VARIABLES if k in source}
    out.setdefault("PATH", os.defpath)
    out["HERMES_HOME"] = str(home)
    out["PYTHONDONTWRITEBYTECODE"] = "1"
    out["HERMES_DISABLE_LAZY_INSTALLS"] = "1"
    return out


def migrate_cloned_config(
    home: Path,
    command: Sequence[str] | None,
    *,
    env: Mapping[str, str] | None = None,
    timeout: float = MIGRATE_TIMEOUT_S,
) -> MigrationResult:
    """Run upstream's clone migration on ``home`` (a profile folder) in the gateway's interpreter."""
    home = Path(home)
    if not (home / "config.yaml").is_file():
        return MigrationResult("current", "no config.yaml")
    if not command:
        return MigrationResult("unavailable", "no hermes command found to migrate it with")
    path_env = (os.environ if env is None else env).get("PATH")
    python = gateway_interpreter(command, path_env)
    if python is None:
        return MigrationResult(
            "unavailable", f"cannot tell which Python runs the gateway command {' '.join(command)!r}"
        )
    try:
        done = subprocess.run(
            [python, "-c", _HELPER, str(home)],
            env=helper_environment(home, env),
            cwd=str(home),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return MigrationResult("failed", f"the migration did not finish in {timeout:.0f}s", interpreter=python)
    except OSError as exc:
        return MigrationResult("unavailable", f"cannot run {python}: {exc.strerror or exc}", interpreter=python)
    try:
        report = json.loads(done.stdout.decode("utf-8", "replace").strip().splitlines()[-1])
    except (ValueError, IndexError):
        tail = done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or [f"exit status {done.returncode}"]
        return MigrationResult("failed", f"the migration helper failed: {tail[0][:200]}", interpreter=python)
    status = str(report.get("status", "failed"))
    if status == "unavailable":
        return MigrationResult(status, f"{python} cannot import hermes-agent ({str(report.get('detail'))[:200]})",
                               interpreter=python)
    before, after, latest = report.get("before"), report.get("after"), report.get("latest")
    if isinstance(after, int) and isinstance(latest, int) and after < latest:
        return MigrationResult("failed", f"upstream's migration stopped at schema v{after} of v{latest}",
                               before, after, latest, python, str(report.get("release", "")))
    return MigrationResult(status, "", before, after, latest, python, str(report.get("release", "")))
