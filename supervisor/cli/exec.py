"""``hermesd exec PROFILE -- COMMAND…``: run a command exactly as that profile's gateway is run.

Why it exists: a profile is a trust domain (issue 13). A user typing ``hermes -p coder chat`` in a
shell, an alias, a kanban worker or a test must get the same walls as ``coder``'s gateway, or the
confinement only covers half of what an agent of that profile can do. So this command builds what
the daemon builds before a spawn, from the same inputs (:mod:`supervisor.daemon.domains`
``prepare``):

* the environment contract of :func:`supervisor.childspec.child_env` (hermesd.yaml's
  ``environment``, upstream's fixed variables, credentials scrubbed) *minus* hermesd's identity
  tags (``HERMESD_ROOT``/``HERMESD_PROFILE``): those tags mean "a gateway child of this daemon"
  (:mod:`supervisor.identity`), and a tagged command would be adopted, swept as a stray or
  killed with the profile's tree by the daemon;
* the profile's isolation plan (:func:`supervisor.isolation.make_plan`), applied in a forked
  child by :func:`supervisor.isolation.exec_in_place` (no second interpreter), so the command
  and every descendant are confined, and the command starts in the profile's home;
* the profile's ``cpu_weight`` as a nice value. Memory and task limits are properties of the
  gateway's cgroup, which a command started outside the daemon does not join: they do not
  apply here.

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
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from supervisor.cli.common import Failure, UserError, check_names, root_of

EXIT_CANNOT_CONFINE = 125  # supervisor.isolation.enter: nothing ran (not imported: keep start-up lean)


def register(sub: argparse._SubParsersAction, add: Any) -> None:
    """Add ``exec``; ``add(name, func, help, example)`` makes a subparser with ``--root``."""
    p = add("exec", cmd_exec, "run a command as PROFILE's gateway would run: its environment and confinement",
            "hermesd exec coder -- hermes chat")
    p.add_argument("profile", metavar="PROFILE")
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND",
                   help="the command and its arguments (after --)")
    # For the daemon running a kanban worker (supervisor.kanban.workers): the exit code is also
    # written to this descriptor, because the daemon's reaper owns the keeper's wait status.
    p.add_argument("--status-fd", type=int, help=argparse.SUPPRESS)


_OWN_OPTIONS = ("--root", "--status-fd")


def _late_options(args: argparse.Namespace, command: list[str]) -> list[str]:
    """``hermesd exec coder --root R [--] cmd``: options between PROFILE and the command are ours.

    argparse hands everything after PROFILE to the command; take back the leading ``--root`` and
    ``--status-fd`` options (``--opt VALUE`` or ``--opt=VALUE``), then an optional ``--``. Another
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
        if not eq:
            if len(rest) < 2:
                raise UserError(f"exec: {name} needs a value")
            value, rest = rest[1], rest[2:]
        else:
            rest = rest[1:]
        if name == "--status-fd":
            try:
                args.status_fd = int(value)
            except ValueError:
                raise UserError(f"exec: --status-fd needs a number, not {value[:40]!r}") from None
        else:
            args.root = value
    return rest[1:]


def cmd_exec(args: argparse.Namespace) -> int:
    command = _late_options(args, list(args.command))
    if not command:
        raise UserError("exec needs a command: hermesd exec PROFILE -- COMMAND [ARG…]")
    root = root_of(args)
    prepared = prepare(root, args.profile, os.environ)
    code = run(prepared, command)
    if args.status_fd is not None:
        with contextlib.suppress(OSError):
            os.write(args.status_fd, f"{code}\n".encode())
    return code


class Prepared:
    """Everything ``exec`` applies, computed before any fork (so errors are plain messages)."""

    __slots__ = ("env", "nice", "plan", "profile")

    def __init__(self, profile: str, plan: Any, env: dict[str, str], nice: int | None) -> None:
        self.profile = profile
        self.plan = plan
        self.env = env
        self.nice = nice


def prepare(root: Path, raw_name: str, base_env: Mapping[str, str]) -> Prepared:
    """The plan, environment and niceness of ``raw_name``'s gateway, as the daemon would compute them.

    An unknown profile is a :class:`UserError` with the shared "no such profile" wording; a plan
    that cannot be run (``isolation: required`` on a machine without a mechanism, an unknown
    account) is a :class:`Failure` with the shim's exit code 125.
    """
    from profiles.discovery import profiles_to_serve
    from supervisor import config as config_mod
    from supervisor import isolation as iso
    from supervisor.childspec import TAG_PROFILE, TAG_ROOT, GatewayCommandError, child_env, resolve_gateway_command
    from supervisor.isolation import install, kanban
    from supervisor.layout import Layout

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
        gateway = resolve_gateway_command(list(cfg.command) if cfg.command else None, base_env.get("PATH"))
        install_paths = tuple(install.discover_install_paths(gateway))
    except GatewayCommandError:
        install_paths = ()  # no hermes here: only the command the user named has to run
    isolation = cfg.isolation_for(name)
    user = None
    if isolation.user:
        try:
            user = install.resolve_user(isolation.user)
        except (KeyError, ValueError, OSError) as exc:
            raise Failure(f"profile {name}: isolation user {isolation.user!r}: {exc}", EXIT_CANNOT_CONFINE) from None
    plan = iso.make_plan(iso.PlanInputs(
        root=root, profile=name, home=home, probe=iso.probe(), settings=isolation,
        hermesd_dir=layout.dir, control_socket=layout.socket,
        other_homes=tuple(h for n, h in homes.items() if n != name),
        install_paths=install_paths, lock_dir=install.credential_lock_dir(env),
        user_home=Path(env["HOME"]) if env.get("HOME") else None, user_ids=user,
        kanban_layout=kanban.layout(root), linked=install.linked_channels(root),
    ))
    if not plan.runnable:
        raise Failure(f"profile {name}: isolation: {plan.reason}", EXIT_CANNOT_CONFINE)
    nice = None
    weight = cfg.limits_for(name).cpu_weight
    if weight:
        from supervisor.limits.tree import nice_for_weight

        nice = nice_for_weight(weight)
    return Prepared(name, plan, env, nice)


def exit_code(status: int) -> int:
    """A wait status as a shell reports it: the exit code, or 128+N for a death by signal N."""
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.waitstatus_to_exitcode(status)


def run(prepared: Prepared, command: list[str]) -> int:
    """Fork; the child confines itself and execs ``command``; the parent waits and returns its code."""
    from supervisor.isolation import exec_in_place

    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - replaced by exec (or exits 125-127)
        try:
            if prepared.nice is not None:
                # raising priority needs CAP_SYS_NICE: keep the current one then
                with contextlib.suppress(PermissionError):
                    os.setpriority(os.PRIO_PROCESS, 0, prepared.nice)
            exec_in_place(prepared.plan, command, prepared.env)
        finally:
            os._exit(EXIT_CANNOT_CONFINE)
    # The terminal delivers SIGINT/SIGQUIT to the whole foreground group: the command decides.
    for sig in (signal.SIGINT, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_IGN)

    def forward(signum: int, _frame: Any) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, forward)
    while True:
        try:
            _, status = os.waitpid(pid, 0)
        except InterruptedError:  # pragma: no cover - PEP 475 retries; kept for clarity
            continue
        return exit_code(status)
