"""Which interpreter a gateway command runs under, and how hermesd runs a child to ask it something.

:func:`interpreter_argv` reads the interpreter from the command (the hermes script's ``#!`` line, or
the ``python`` before ``-m``); :func:`supervisor.hermes.requirements.interpreter_facts` asks it for the
hermes-agent release (about 65 ms). ``hermes --version`` itself takes 250-400 ms, so
:func:`version_from_flag` is only the fallback, for a command whose interpreter cannot be read (a
binary launcher) or is not Python (a shell wrapper that execs hermes). :func:`run_capped` runs the
child in its own session with stdin closed and output to a temporary file (a detached grandchild
holding a pipe open cannot make hermesd wait); at the deadline its whole process group is
SIGKILLed, so a broken interpreter can never hang hermesd.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import stat
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from profiles.paths import which
from profiles.upstream.releases import interpreter_from_script
from supervisor import config as config_mod
from supervisor.layout import Layout
from supervisor.processes import childspec

_HEAD_BYTES = 1024
_OUTPUT_CAP = 64 * 1024
_VERSION_LINE = re.compile(r"Hermes Agent v?(\S+)")
_PYTHON_NAME = re.compile(r"python[0-9.]*")


class HermesVersionError(RuntimeError):
    """The installed release could not be read; the message is one line for doctor and status."""


def interpreter_argv(command: Sequence[str], path_env: str | None) -> list[str] | None:
    """The interpreter ``command`` runs under, as an argv prefix, or None when it cannot be read.

    The one answer for the daemon, status, doctor and ``probe``. ``command`` is a gateway command
    (the ``hermes`` script, ``python -m hermes_cli.main``, ``python …/hermes``) or a running
    gateway's command line, in which the kernel has already put the script's interpreter first:
    the interpreter is then the path it was started by, never the file that path links to (a
    virtual environment's ``bin/python`` is a link to the base interpreter, which lacks the
    environment's libraries).
    """
    if not command:
        raise HermesVersionError("the gateway command is empty")
    if "-m" in command[1:]:
        return _absolute(list(command[: list(command).index("-m", 1)]))
    exe = command[0]
    path = exe if "/" in exe else which(exe, path=path_env)
    if not path:
        raise HermesVersionError(f"gateway command {exe!r} not found on PATH")
    found = interpreter_from_script(_head(path))
    if found is None and len(command) > 1 and _PYTHON_NAME.fullmatch(os.path.basename(path)):
        return [os.path.abspath(path)]
    return found


def gateway_python(root: Path, env: Mapping[str, str]) -> list[str]:
    """The interpreter that runs ``root``'s gateways (argv prefix): where upstream's own profile code runs.

    The gateway command is hermesd.yaml's ``command``, else ``hermes`` on ``PATH``, else this
    interpreter's ``hermes_cli``, exactly as the daemon resolves it. Raises
    :class:`config_mod.ConfigError`, :class:`childspec.GatewayCommandError` or
    :class:`HermesVersionError` (a command that is not a Python script), each one line.
    """
    cfg = config_mod.load(Layout(root).config)
    command = childspec.resolve_gateway_command(cfg.command, env.get("PATH"))
    interp = interpreter_argv(command, env.get("PATH"))
    if interp is None:
        raise HermesVersionError(f"the gateway command {command[0]} is not a Python script, so hermes-agent's own "
                                 "profile code cannot run in its interpreter; point 'command' in hermesd.yaml at "
                                 "the hermes script or at [python, -m, hermes_cli.main]")
    return interp


def _absolute(argv: list[str]) -> list[str]:
    """``argv`` with a relative program path made absolute (the probe runs in ``/``)."""
    if "/" in argv[0] and not os.path.isabs(argv[0]):
        return [os.path.abspath(argv[0]), *argv[1:]]
    return argv


def _head(path: str) -> bytes:
    """The first bytes of ``path`` (never blocking on a FIFO, never reading a device)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise HermesVersionError(f"the gateway command {path} is not a regular file")
            return os.read(fd, _HEAD_BYTES)
        finally:
            os.close(fd)
    except OSError as e:
        raise HermesVersionError(f"cannot read the gateway command {path}: {e.strerror}") from None


def version_from_flag(command: Sequence[str], env: dict[str, str], timeout: float) -> str:
    # ``hermes --version`` checks for updates and opens its logs: it writes ``.update_check`` and
    # ``logs/`` into its HERMES_HOME (or ``~/.hermes``). Asked in a scratch home, it touches no
    # profile's files and no real home.
    import tempfile  # here: this fallback is rare, and tempfile brings shutil (see run_capped)

    with tempfile.TemporaryDirectory(prefix="hermesd-version-") as scratch:
        code, text = run_capped(_absolute([*command, "--version"]),
                                {**env, "HERMES_HOME": scratch, "HOME": scratch}, timeout)
    m = _VERSION_LINE.search(text)
    if m is None:
        last = text.strip().splitlines()[-1:] or ["no output"]
        raise HermesVersionError(f"'{' '.join(command)} --version' printed no Hermes Agent version "
                                 f"(exit {code}): {last[0][:200]}")
    return m.group(1)


def run_capped(argv: list[str], env: dict[str, str], timeout: float) -> tuple[int, str]:
    """Run ``argv`` to completion or the deadline; its exit code and (capped) output.

    The output goes to an anonymous file (a pipe would need a reader while waiting), made with
    ``memfd_create`` rather than ``tempfile.TemporaryFile``: ``tempfile`` imports ``shutil`` and with
    it ``bz2``, ``lzma`` and ``zlib``, ~0.5 MiB the daemon (which asks its interpreter) kept.
    """
    with os.fdopen(os.memfd_create("hermesd-run", os.MFD_CLOEXEC), "w+b") as out:
        try:
            proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env, cwd="/",
                start_new_session=True,
            )
        except OSError as e:
            raise HermesVersionError(f"cannot run {argv[0]}: {e.strerror or e}") from None
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            # The leader is not reaped yet, so its process group id cannot have been reused.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise HermesVersionError(f"{argv[0]} did not answer within {timeout:g} s") from None
        out.seek(0)
        return code, out.read(_OUTPUT_CAP).decode("utf-8", "replace")
