"""The confinement shim: apply a Plan in this process, then execve() the real command.

The daemon posix_spawns ``wrap_argv(plan, argv)`` instead of ``argv``::

    <python> -E -s -S <this file> <plan> -- <argv…>

The shim applies the plan (:mod:`confine`), closes every descriptor above 2, and execs
``argv`` with the environment it was given (read back from ``/proc/self/environ``, so not even
Python's locale coercion can add a variable), from the profile's home. The PID and its start
time do not change across ``execve``, so the Ident the daemon recorded at spawn stays valid, and
after the exec ``/proc/<pid>/cmdline`` is exactly ``argv``. Until then it is the shim's command
line: :func:`supervisor.isolation.shim_argv.unwrap` recognises it (the daemon should treat such a
child as "still entering").

``-E -s -S``: no ``PYTHON*`` variables, no user site, no ``site`` at all — a fresh interpreter
that imports only the stdlib and this folder's ``confine``/``kernel`` (start-up cost in the
report). ``python -m supervisor.isolation.enter PLAN -- argv…`` works too (with ``site``); PLAN is the
marshalled word :func:`~supervisor.isolation.shim_argv.wrap_argv` writes or, by hand, the plan's JSON.

Exit codes when the command never runs: **125** the plan could not be applied (one line on
stderr: ``hermesd: isolation (profile P): <step>: <reason>``; nothing ran unconfined), **126**
the command could not be executed, **127** it was not found. A plan whose mechanism is ``off``
is never wrapped (``wrap_argv`` returns ``argv`` itself).
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing (and re) costs the shim 2 ms
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from typing import Any

    from supervisor.isolation.planning import Plan

if __package__:
    from supervisor.isolation import confine, kernel
    from supervisor.isolation.shim_argv import (
        EXIT_CANNOT_CONFINE,
        EXIT_CANNOT_EXEC,
        EXIT_NOT_FOUND,
        PLAN_VERSION,
        decode_plan,
    )
else:  # pragma: no cover - script mode (-S): siblings are importable from sys.path[0]
    import confine  # type: ignore[no-redef,import-not-found]
    import kernel  # type: ignore[no-redef,import-not-found]
    from shim_argv import (  # type: ignore[no-redef,import-not-found]
        EXIT_CANNOT_CONFINE,
        EXIT_CANNOT_EXEC,
        EXIT_NOT_FOUND,
        PLAN_VERSION,
        decode_plan,
    )


def _initial_environ() -> dict[bytes, bytes]:
    """The environment this process was started with, byte for byte, in order."""
    try:
        with open("/proc/self/environ", "rb") as fh:
            raw = fh.read()
    except OSError:
        return dict(os.environb)
    env: dict[bytes, bytes] = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep and key not in env:
            env[key] = value
    return env


def _fail(profile: str, message: str, code: int) -> None:
    os.write(2, f"hermesd: isolation (profile {profile}): {message}\n".encode("utf-8", "replace"))
    os._exit(code)


def _exec(argv: Sequence[str], env: Mapping[bytes, bytes] | Mapping[str, str], profile: str) -> None:
    # Python ignores SIGPIPE and SIGXFSZ at start-up, and an ignored signal stays ignored across
    # execve: give the command the defaults the daemon spawned us with (posix_spawn setsigdef).
    import _signal  # type: ignore[import-not-found]  # the C module: the shim does not pay for signal's enums

    for sig in (_signal.SIGPIPE, _signal.SIGXFSZ):
        _signal.signal(sig, _signal.SIG_DFL)
    kernel.close_fds_from(3)
    try:
        os.execvpe(argv[0], list(argv), env)
    except FileNotFoundError:
        _fail(profile, f"cannot execute {argv[0]}: not found", EXIT_NOT_FOUND)
    except OSError as exc:
        _fail(profile, f"cannot execute {argv[0]}: {exc.strerror}", EXIT_CANNOT_EXEC)


def exec_in_place(plan: Plan | dict[str, Any], argv: Sequence[str], env: Mapping[str, str],
                  after: Callable[[], None] | None = None) -> None:
    """Confine *this* process and exec ``argv`` (for ``hermesd exec``: saves a second interpreter).

    ``after``: called once confined, before the exec (a kanban worker opens its log there, with
    the profile's rights); an ``OSError`` or ``ValueError`` from it ends the process with 126.
    Never returns: on failure prints the one line and exits 125/126/127 like the shim.
    """
    data = plan if isinstance(plan, dict) else plan.to_json()
    profile = str(data.get("profile", "?"))
    try:
        confine.apply(data)
    except confine.ConfineError as exc:
        _fail(profile, str(exc), EXIT_CANNOT_CONFINE)
    if after is not None:
        try:
            after()
        except (OSError, ValueError) as exc:
            _fail(profile, str(exc), EXIT_CANNOT_EXEC)
    tmpdir = confine.tmpdir_for(data, env.get("TMPDIR"))
    _exec(argv, env if tmpdir is None else {**env, "TMPDIR": tmpdir}, profile)


def main(args: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if args is None else args)
    if len(args) < 3 or args[1] != "--":
        _fail("?", "usage: enter PLAN -- COMMAND [ARG…]", EXIT_CANNOT_CONFINE)
    try:
        plan = decode_plan(args[0])
        profile = str(plan["profile"])
    except (ValueError, KeyError, TypeError, EOFError):
        _fail("?", "the isolation plan cannot be decoded", EXIT_CANNOT_CONFINE)
        return
    if plan.get("version") != PLAN_VERSION:
        _fail(profile, f"isolation plan version {plan.get('version')!r} is not {PLAN_VERSION}", EXIT_CANNOT_CONFINE)
    env = _initial_environ()
    try:
        confine.apply(plan)
    except confine.ConfineError as exc:
        _fail(profile, str(exc), EXIT_CANNOT_CONFINE)
    given = env.get(b"TMPDIR")
    tmpdir = confine.tmpdir_for(plan, None if given is None else os.fsdecode(given))
    if tmpdir is not None:
        env[b"TMPDIR"] = os.fsencode(tmpdir)
    _exec(args[2:], env, profile)


if __name__ == "__main__":
    main()
