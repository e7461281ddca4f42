"""``hermesd exec PROFILE -- COMMAND…``: run a command exactly as that profile's gateway is run.

Why it exists: a profile is a trust domain (it cannot read, change or signal another). A user typing
``hermes -p coder chat`` in a shell, an alias, a kanban worker or a test must get the same walls as
``coder``'s gateway, or the confinement only covers half of what an agent of that profile can do. So
this command builds what the daemon builds before a spawn, from the same inputs
(:func:`supervisor.daemon.domains.gateway_plan`):

* the environment contract of :func:`supervisor.processes.childspec.child_env` (hermesd.yaml's
  ``environment``, upstream's fixed variables, credentials scrubbed) *minus* hermesd's identity
  tags (``HERMESD_ROOT``/``HERMESD_PROFILE``): those tags mean "a gateway child of this daemon"
  (:mod:`supervisor.processes.identity`), and a tagged command would be adopted, swept as a stray or
  killed with the profile's tree by the daemon;
* the profile's isolation plan (:func:`supervisor.isolation.make_plan`), applied in a forked
  child by :func:`supervisor.isolation.exec_in_place` (no second interpreter), so the command
  and every descendant are confined, and the command starts in the profile's home;
* the profile's limits, as a session of their own (:mod:`supervisor.limits.session`): the command
  runs in a cgroup beside the gateway's (``exec.<profile>.<pid>``) with ``memory_max``,
  ``tasks_max`` and ``cpu_weight`` written on it, enforced by the kernel where the controllers
  exist and by this command otherwise (one line on stderr says which); a session over a limit is
  killed (exit 137, one line naming the limit), never the gateway. When the command ends, what it
  left running ends with it. Without a cgroup (hermesd not root and nothing delegated) the
  command's own process tree is watched the same way.

The parent stays unconfined only to wait: the command's exit status comes back unchanged
(a death by signal N becomes 128+N, as in a shell); SIGINT/SIGQUIT are left to the command (the
terminal sends them to both), SIGTERM/SIGHUP are passed on. When the command could not be
started the exit codes are the shim's: 125 not confinable (nothing ran), 126 not executable,
127 not found.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from supervisor.cli.common import Commands, check_names, root_of
from supervisor.exits import Failure, UserError
from supervisor.layout import Layout
from supervisor.processes.tags import TAG_PROFILE, TAG_ROOT

if TYPE_CHECKING:
    from types import FrameType

    from supervisor.isolation.planning import Plan
    from supervisor.limits.session import Session
    from supervisor.settings import Limits


def register(commands: Commands) -> None:
    p = commands.add("exec", cmd_exec, "run a command as PROFILE's gateway would run: its environment and confinement",
                     "hermesd exec coder -- hermes chat")
    p.add_argument("profile", metavar="PROFILE")
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND",
                   help="the command and its arguments (after --)")
    # For the daemon running a kanban worker (supervisor.kanban.workers): the exit code is also
    # written to this descriptor, because the daemon's reaper owns the keeper's wait status; the
    # session is a worker's (its cgroup and limits); the worker's log is opened by the confined
    # command itself, beneath the board's log folder (supervisor.kanban.worklog).
    p.add_argument("--status-fd", type=int, help=argparse.SUPPRESS)
    p.add_argument("--session", choices=("exec", "worker"), default="exec", help=argparse.SUPPRESS)
    p.add_argument("--worker-log", nargs=2, metavar=("BASE", "REL"), help=argparse.SUPPRESS)


# Options of ours that may stand between PROFILE and the command, with how many values each takes.
_OWN_OPTIONS = {"--root": 1, "--status-fd": 1, "--session": 1, "--worker-log": 2}


def _late_options(args: argparse.Namespace, command: list[str]) -> list[str]:
    """``hermesd exec coder --root R [--] cmd``: options between PROFILE and the command are ours.

    argparse hands everything after PROFILE to the command; take back the leading options of
    :data:`_OWN_OPTIONS` (``--opt VALUE`` or ``--opt=VALUE``), then an optional ``--``. Another
    option there is an error, never part of a command run in the wrong root.
    """
    rest = list(command)
    # argparse drops a "--" that directly follows PROFILE: then everything is the command.
    raw = getattr(args, "argv", None)
    n = len(command)
    if raw is not None and n and len(raw) > n and raw[-n - 1] == "--" and raw[-n:] == command:
        return rest
    while rest and rest[0] != "--":
        name, eq, value = rest[0].partition("=")
        if name not in _OWN_OPTIONS:
            if rest[0].startswith("-") and raw is not None:
                raise UserError(f"exec: unknown option {rest[0][:80]!r} before the command; "
                                "write it as: hermesd exec PROFILE [--root PATH] -- COMMAND [ARG…]")
            return rest
        count = _OWN_OPTIONS[name]
        if eq and count == 1:
            values, rest = [value], rest[1:]
        elif not eq and len(rest) > count:
            values, rest = rest[1:1 + count], rest[1 + count:]
        else:
            raise UserError(f"exec: {name} needs {count} value{'s' if count > 1 else ''}")
        _set_late(args, name, values)
    return rest[1:]


def _set_late(args: argparse.Namespace, name: str, values: list[str]) -> None:
    if name == "--status-fd":
        try:
            args.status_fd = int(values[0])
        except ValueError:
            raise UserError(f"exec: --status-fd needs a number, not {values[0][:40]!r}") from None
    elif name == "--session":
        if values[0] not in ("exec", "worker"):
            raise UserError(f"exec: --session is exec or worker, not {values[0][:40]!r}")
        args.session = values[0]
    elif name == "--worker-log":
        args.worker_log = values
    else:
        args.root = values[0]


def cmd_exec(args: argparse.Namespace) -> int:
    command = _late_options(args, list(args.command))
    if not command:
        raise UserError("exec needs a command: hermesd exec PROFILE -- COMMAND [ARG…]")
    root = root_of(args)
    prepared = prepare(root, args.profile, os.environ, kind=args.session, command=command)
    log = (Path(args.worker_log[0]), args.worker_log[1]) if args.worker_log else None
    code = run(prepared, command, log=log)
    if args.status_fd is not None:
        with contextlib.suppress(OSError):
            os.write(args.status_fd, f"{code}\n".encode())
    return code


@dataclass(frozen=True, slots=True)
class Prepared:
    """Everything ``exec`` applies, computed before any fork (so errors are plain messages)."""

    profile: str
    plan: Plan
    env: dict[str, str]
    nice: int | None
    root: Path
    limits: Limits  # the session's
    kind: str


def prepare(root: Path, raw_name: str, base_env: Mapping[str, str], *, kind: str = "exec",
            command: Sequence[str] = ()) -> Prepared:
    """The plan, environment, niceness and limits of ``raw_name``'s gateway, as the daemon would
    compute them (``kind`` ``worker``: a kanban worker's limits, :meth:`supervisor.config.Config.worker_limits_for`).
    What ``command`` executes is read-only in the plan like the gateway's own code, and so is still
    there when it lies below ``/tmp``, which the confinement makes private.

    An unknown profile is a :class:`UserError` with the shared "no such profile" wording; a plan
    that cannot be run (``isolation: required`` on a machine without a mechanism, an unknown
    account) is a :class:`Failure` with the shim's exit code 125.
    """
    from profiles.discovery import profiles_to_serve  # run-time only (see cli/__init__)
    from supervisor import config as config_mod  # run-time only (see cli/__init__)
    from supervisor.daemon.domains import gateway_plan  # run-time only (see cli/__init__)
    from supervisor.isolation import install  # run-time only (see cli/__init__)
    from supervisor.isolation.probing import probe  # run-time only (see cli/__init__)
    from supervisor.isolation.shim_argv import EXIT_CANNOT_CONFINE  # run-time only (see cli/__init__)
    from supervisor.limits.tree import nice_for_weight  # run-time only (see cli/__init__)
    from supervisor.processes.childspec import (  # run-time only (see cli/__init__)
        GatewayCommandError,
        child_env,
        resolve_gateway_command,
    )

    try:
        served = profiles_to_serve(True, root=root)
    except OSError as exc:
        raise UserError(f"cannot list profiles under {root}: {exc.strerror or exc}") from None
    homes = {n: Path(h) for n, h in served}
    (name,) = check_names([raw_name], list(homes))
    home = homes[name]
    layout = Layout(root)
    try:
        cfg = config_mod.load(layout.config)
    except config_mod.ConfigError as exc:
        raise UserError(str(exc)) from None
    env = child_env(base_env, root=root, profile=name, home=home, extra=cfg.child_environment(name))
    env.pop(TAG_ROOT, None)
    env.pop(TAG_PROFILE, None)
    # cfg.child_environment carries the kanban dispatcher choice: a `hermes gateway run` here obeys it
    if base_env.get("HERMES_KANBAN_TASK"):
        env["HERMES_PROFILE"] = name  # a kanban worker: upstream attributes its comments by this variable
    try:
        gateway = resolve_gateway_command(cfg.command, base_env.get("PATH"))
        install_paths = tuple(install.discover_install_paths(gateway))
    except GatewayCommandError:
        install_paths = ()  # no hermes here: only the command the user named has to run
    if command:
        install_paths += tuple(p for p in install.discover_install_paths(command, env.get("PATH"))
                               if p not in install_paths)
    plan = gateway_plan(layout, name, home, env, probe=probe(), isolation=cfg.isolation_for(name),
                        other_homes=tuple(h for n, h in homes.items() if n != name), install_paths=install_paths)
    if isinstance(plan, str):
        raise Failure(f"profile {name}: {plan}", EXIT_CANNOT_CONFINE)
    if not plan.runnable:
        raise Failure(f"profile {name}: isolation: {plan.reason}", EXIT_CANNOT_CONFINE)
    limits = cfg.worker_limits_for(name) if kind == "worker" else cfg.limits_for(name)
    nice = nice_for_weight(limits.cpu_weight) if limits.cpu_weight else None
    return Prepared(name, plan, env, nice, root, limits, kind)


def exit_code(status: int) -> int:
    """A wait status as a shell reports it: the exit code, or 128+N for a death by signal N."""
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.waitstatus_to_exitcode(status)


def run(prepared: Prepared, command: list[str], *, log: tuple[Path, str] | None = None) -> int:
    """Fork; the child joins the session, confines itself and execs ``command``; the parent keeps
    the session (its limits) and returns the command's code.

    ``log``: a kanban worker's ``(base, relative path)``; the child opens it after its confinement
    (:func:`supervisor.kanban.worklog.open_log`) as its stdout and stderr.
    """
    from supervisor.isolation.enter import exec_in_place  # run-time only (see cli/__init__)
    from supervisor.isolation.shim_argv import EXIT_CANNOT_CONFINE  # run-time only (see cli/__init__)

    session = _open_session(prepared)
    if session is not None and session.note:
        print(session.note, file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    hold_r, hold_w = os.pipe()  # the child waits until it is in the session's cgroup
    pid = os.fork()
    if pid == 0:  # pragma: no cover - replaced by exec (or exits 125-127)
        try:
            os.close(hold_w)
            if os.read(hold_r, 1) != b"1":  # the parent is gone: never run outside the session
                os._exit(EXIT_CANNOT_CONFINE)
            os.close(hold_r)
            if prepared.nice is not None and (session is None or session.dir is None or session.det is None
                                              or "cpu" not in session.det.controllers):
                # raising priority needs CAP_SYS_NICE: keep the current one then
                with contextlib.suppress(PermissionError):
                    os.setpriority(os.PRIO_PROCESS, 0, prepared.nice)
            exec_in_place(prepared.plan, command, prepared.env, after=_worker_log(log) if log else None)
        finally:
            os._exit(EXIT_CANNOT_CONFINE)
    os.close(hold_r)
    if session is not None:
        session.attach(pid)
    os.write(hold_w, b"1")
    os.close(hold_w)
    # The terminal delivers SIGINT/SIGQUIT to the whole foreground group: the command decides.
    for sig in (signal.SIGINT, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_IGN)

    def forward(signum: int, _frame: FrameType | None) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, forward)
    if session is None:
        return exit_code(os.waitpid(pid, 0)[1])  # a signal forwarded meanwhile: retried (PEP 475)
    try:
        status, breach = session.wait(pid)
    finally:
        session.close()
    if breach is not None:
        print(f"hermesd: {prepared.kind} {prepared.profile}: killed: {breach.describe()}", file=sys.stderr)
    return exit_code(status)


def _open_session(prepared: Prepared) -> Session | None:
    """The session's domain (supervisor.limits.session): a cgroup wherever profiles get one, limits
    or not, so that nothing the command starts (a ``setsid`` + ``env -i`` orphan included) outlives
    the session or its profile's stop. None only for a profile without limits where no cgroup can be
    made: its own process tree would then be watched for nothing to enforce."""
    from supervisor.limits.session import open_session  # run-time only (see cli/__init__)

    lim = prepared.limits
    limited = prepared.kind == "worker" or not lim.empty
    return open_session(prepared.root, prepared.profile, prepared.kind, lim, tree_without_cgroup=limited)


def _worker_log(log: tuple[Path, str]) -> Callable[[], None]:
    """After the confinement: the worker's log as stdout and stderr (or the reason it cannot be)."""

    from supervisor.kanban.worklog import open_log as open_worker_log  # run-time only (see cli/__init__)

    def open_log() -> None:
        fd = open_worker_log(*log)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)

    return open_log
