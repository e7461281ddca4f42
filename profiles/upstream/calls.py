"""Running upstream's own profile code in the gateway's interpreter: the helper and its protocol.

``hermes profile create`` is several hundred lines of release-specific behaviour (the folders a
profile gets, what a clone copies and leaves out, the config migration, a seeded ``SOUL.md``, and
in newer releases the stripping of messaging channels from a clone). hermesd does not copy that
code; it runs it: :func:`create_profile` asks upstream's ``hermes_cli.profiles.create_profile``,
in a short-lived helper process, to do exactly what ``hermes profile create`` does.

DECISION — which interpreter. The one hermesd runs the root's gateways with (the caller passes
it as an argv prefix): the profile is made by the release that will read it, so a migrated
``config.yaml`` carries the schema version that release expects.

The helper is bounded and sees nothing of the user's machine it does not need:

* one JSON request on stdin, one marked JSON line back (what upstream prints is ignored);
* a clean environment: ``PATH`` and the locale, ``HOME`` and ``HERMES_HOME`` pointing into the
  caller's scratch folder (so upstream's root, its alias folder and anything it caches there are
  the scratch's), a user site-packages folder kept where it was;
* its own session, stdin and output in temporary files (a detached grandchild cannot make
  hermesd wait on a pipe), output read up to :data:`OUTPUT_CAP`, and the whole process group
  killed at the deadline or on Ctrl-C.

Upstream's functions change their keyword arguments between releases; the helper passes only the
ones the installed function accepts and says which it dropped, so a caller can refuse rather than
silently lose a flag.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from profiles.errors import ProfileError

CREATE_TIMEOUT_S = 600.0  # a --clone-all copies the whole source: minutes for a large one
OUTPUT_CAP = 256 * 1024
_MARK = "HERMESD-UPSTREAM "
_PASSED_VARIABLES = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "USER", "LOGNAME")

# What upstream's clone never copies from a source: history, for any source; the installation,
# the other profiles and (0.22+) re-downloadable runtimes, when the source is the root. The
# link-free copy hermesd makes for upstream to clone from leaves these out too.
NEVER_CLONED_TOP: frozenset[str] = frozenset(
    {"state.db", "state.db-wal", "state.db-shm", "sessions", "backups", "state-snapshots", "checkpoints"}
)
NEVER_CLONED_FROM_ROOT: frozenset[str] = frozenset(
    {"hermes-agent", ".worktrees", "profiles", "bin", "node_modules", "models", "runtimes", "node"}
)

# Runs in the gateway's interpreter. It must never raise: every outcome is the marked line.
HELPER = r"""
import inspect, json, sys
MARK = "HERMESD-UPSTREAM "
def reply(**fields):
    sys.stdout.write("\n" + MARK + json.dumps(fields) + "\n")
    sys.stdout.flush()
    raise SystemExit(0)
try:
    request = json.loads(sys.stdin.read())
    from hermes_constants import reset_hermes_home_override, set_hermes_home_override
    from hermes_cli import profiles
    from hermes_cli.config import check_config_version
except Exception as exc:
    reply(status="unavailable", error="%s: %s" % (type(exc).__name__, exc))
try:
    from hermes_cli import __version__ as release
except Exception:
    release = ""
def schema(home):
    if not home:
        return None
    token = set_hermes_home_override(home)
    try:
        return list(check_config_version())
    except Exception:
        return None
    finally:
        reset_hermes_home_override(token)
function = getattr(profiles, request["call"])
accepted = inspect.signature(function).parameters
kwargs = {k: v for k, v in request["kwargs"].items() if k in accepted}
dropped = sorted(set(request["kwargs"]) - set(kwargs))
if dropped:
    reply(status="failed", release=release, error="%s() of hermes-agent %s takes no %s" % (
        request["call"], release, ", ".join(dropped)))
before = schema(request.get("schema_of"))
try:
    result = function(**kwargs)
except Exception as exc:
    reply(status="failed", release=release, error="%s: %s" % (type(exc).__name__, exc))
reply(status="done", release=release, path=str(result), schema_before=before, schema_after=schema(str(result)))
"""


class UpstreamCallError(ProfileError):
    """Upstream's code could not be run, or refused: the message says which, in one line."""


@dataclass(frozen=True)
class Created:
    """What upstream's ``create_profile`` made, and the ``config.yaml`` schema before and after.

    ``schema_before``/``schema_after`` are ``(version, latest)`` as upstream's
    ``check_config_version`` reads them (``None`` when not asked or unreadable).
    """

    path: Path
    release: str
    schema_before: tuple[int, int] | None
    schema_after: tuple[int, int] | None


def helper_environment(work_root: Path, work_home: Path, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The helper's environment: a few harmless variables of ``env``, and homes inside the scratch.

    ``HOME`` moves into the scratch because upstream derives its root from it (a ``HERMES_HOME``
    under ``~/.hermes`` means ``~/.hermes``) and writes aliases and caches below it; a user
    site-packages folder (``pip install --user``) stays importable through ``PYTHONUSERBASE``.
    """
    source = os.environ if env is None else env
    out = {k: source[k] for k in _PASSED_VARIABLES if k in source}
    out.setdefault("PATH", os.defpath)
    user_base = source.get("PYTHONUSERBASE") or (f"{source['HOME']}/.local" if source.get("HOME") else None)
    if user_base:
        out["PYTHONUSERBASE"] = user_base
    out["HOME"] = str(work_home)
    out["HERMES_HOME"] = str(work_root)
    out["PYTHONDONTWRITEBYTECODE"] = "1"
    out["HERMES_DISABLE_LAZY_INSTALLS"] = "1"
    return out


def _run(argv: list[str], request: bytes, env: dict[str, str], cwd: Path, timeout: float) -> bytes:
    """Run ``argv`` with ``request`` on stdin to completion or the deadline; its capped output."""
    with tempfile.TemporaryFile() as stdin, tempfile.TemporaryFile() as out:
        stdin.write(request)
        stdin.seek(0)
        try:
            proc = subprocess.Popen(argv, stdin=stdin, stdout=out, stderr=subprocess.STDOUT, env=env,
                                    cwd=str(cwd), start_new_session=True)
        except OSError as exc:
            raise UpstreamCallError(f"cannot run {argv[0]}: {exc.strerror or exc}") from None
        try:
            proc.wait(timeout)
        except BaseException as exc:
            # Timeout or Ctrl-C: the leader is not reaped yet, so its group id is still ours.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            if isinstance(exc, subprocess.TimeoutExpired):
                raise UpstreamCallError(f"hermes-agent's profile code did not finish within {timeout:g} s") from None
            raise
        out.seek(0)
        return out.read(OUTPUT_CAP)


def _answer(output: bytes, python: Sequence[str]) -> dict[str, object]:
    text = output.decode("utf-8", "replace")
    line = next((ln for ln in reversed(text.splitlines()) if ln.startswith(_MARK)), None)
    if line is None:
        tail = (text.strip().splitlines() or ["no output"])[-1]
        raise UpstreamCallError(f"{' '.join(python)} is not a Python that can run hermes-agent: {tail[:200]}")
    try:
        answer = json.loads(line[len(_MARK):])
    except ValueError:
        raise UpstreamCallError(f"hermes-agent's profile helper answered garbage: {line[:200]}") from None
    if not isinstance(answer, dict):
        raise UpstreamCallError(f"hermes-agent's profile helper answered garbage: {line[:200]}")
    return answer


def _schema(value: object) -> tuple[int, int] | None:
    if isinstance(value, list) and len(value) == 2 and all(isinstance(v, int) for v in value):
        return value[0], value[1]
    return None


def call(
    python: Sequence[str],
    function: str,
    kwargs: Mapping[str, object],
    *,
    work_root: Path,
    work_home: Path,
    schema_of: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = CREATE_TIMEOUT_S,
) -> dict[str, object]:
    """Run ``hermes_cli.profiles.<function>(**kwargs)`` in ``python``; upstream's answer (status ``done``).

    ``work_root`` is its ``HERMES_HOME`` and ``work_home`` its ``HOME`` (and working folder);
    ``schema_of`` a home whose ``config.yaml`` schema is read before the call, the result's is
    read after. A keyword the installed function does not take is a refusal, never dropped.
    """
    request = {"call": function, "kwargs": dict(kwargs), "schema_of": str(schema_of) if schema_of else None}
    output = _run([*python, "-c", HELPER], json.dumps(request).encode(),
                  helper_environment(work_root, work_home, env), work_home, timeout)
    answer = _answer(output, python)
    status = answer.get("status")
    if status == "unavailable":
        raise UpstreamCallError(f"{' '.join(python)} cannot import hermes-agent ({str(answer.get('error'))[:200]})")
    if status != "done":
        raise UpstreamCallError(f"hermes-agent's {function} failed: {str(answer.get('error'))[:300]}")
    return answer


def create_profile(
    python: Sequence[str],
    name: str,
    *,
    work_root: Path,
    work_home: Path,
    clone_from: str | None,
    clone_all: bool,
    clone_config: bool,
    no_skills: bool,
    description: str | None,
    schema_of: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = CREATE_TIMEOUT_S,
) -> Created:
    """Upstream's ``create_profile`` for ``name`` under ``work_root``, without an alias (see :func:`call`)."""
    kwargs: dict[str, object] = {
        "name": name, "clone_from": clone_from, "clone_all": clone_all, "clone_config": clone_config,
        "no_alias": True, "no_skills": no_skills, "description": description,
    }
    answer = call(python, "create_profile", kwargs, work_root=work_root, work_home=work_home, schema_of=schema_of,
                  env=env, timeout=timeout)
    return Created(Path(str(answer.get("path"))), str(answer.get("release") or ""),
                   _schema(answer.get("schema_before")), _schema(answer.get("schema_after")))
