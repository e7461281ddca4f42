"""The commands that start, stop and restart the daemon or its profiles (``run`` is :mod:`supervisor.cli.run`).

Per-profile verbs (``start|stop|restart PROFILE…``) check every name first, then wait until each
profile reaches its state, as ``systemctl`` does (progress on a terminal; ``--no-wait`` and
``--timeout`` for scripts); the exit code says whether it got there. Asking whether a daemon runs
goes through the root's lock (:mod:`supervisor.control.client`), so a slow daemon is waited for,
never taken for an absent one.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from typing import Any

from profiles import safeio
from profiles.printable import printable
from profiles.progress import Progress
from supervisor.cli.common import Commands, check_names, layout_of, root_of
from supervisor.cli.request import call, client_of
from supervisor.cli.upgrade import add_gate_options
from supervisor.control.client import ControlError, DaemonNotAnswering, DaemonNotRunning
from supervisor.exits import EXIT_NOT_ANSWERING, Failure, UserError
from supervisor.plan.readiness import judge
from supervisor.processes.lockholder import owner_pid

# How long ``start``, ``stop`` and ``restart`` wait by default for named profiles (or, for ``stop``,
# the whole daemon) to reach their state: one rule, so a gateway slow to come up is waited for alike
# whether it is started or restarted. Long on purpose: a stop may take a gateway's whole stop timeout
# (max(60, drain + 30) s) and a start on a loaded machine, with platforms to connect, over a minute;
# the timeout ends the waiting only, never the operation, which the daemon carries on.
PROFILE_WAIT_S = 600.0
# How long ``hermesd start`` without names waits for the daemon itself: its control socket and its
# first start pass, not the gateways (they keep starting, and ``status`` shows them).
DAEMON_READY_S = 60.0

# --------------------------------------------------------------------------- start / stop (daemon)


def cmd_start(args: argparse.Namespace) -> int:
    if args.timeout is None:
        args.timeout = PROFILE_WAIT_S if args.profiles else DAEMON_READY_S
    if args.profiles:
        return _per_profile(args, "start")
    # Only starting the daemon spawns it, writes its log and takes its lock: stop and restart load
    # none of this (subprocess and logging were ~10 ms of every `hermesd stop`, measured).
    import subprocess  # run-time only (see above)

    from supervisor.daemon.pidlock import AlreadyRunning, PidLock  # run-time only (see above)
    from supervisor.processes import logs  # run-time only (see above)
    from supervisor.processes.program import hermesd_command  # run-time only (see above)

    root = root_of(args)
    layout = layout_of(args)
    lock = PidLock(layout)
    try:
        lock.acquire()  # held from this instant: a stop typed now waits for the daemon
    except AlreadyRunning:
        print(f"hermesd already running for {root} (PID {owner_pid(layout) or '?'})")
        return 0
    assert lock.fd is not None
    try:
        logfd = safeio.open_append(layout.beneath(layout.daemon_log), 0o600)
        with os.fdopen(logfd, "ab") as logf:
            os.fchmod(logfd, 0o600)
            proc = subprocess.Popen(
                [*hermesd_command(), "run", "--root", str(root), "--lock-fd", str(lock.fd)],
                stdin=subprocess.DEVNULL, stdout=logf, stderr=logf, start_new_session=True, cwd="/",
                pass_fds=(lock.fd,),
            )
    finally:
        os.close(lock.fd)  # the daemon holds its own copy of the locked descriptor now
        lock.fd = None
    deadline = time.monotonic() + args.timeout
    client = client_of(args)
    while time.monotonic() < deadline:
        if proc.poll() == 0:  # it stopped cleanly before it was ready: a stop came first
            raise Failure(f"hermesd was stopped before it was ready (a stop came first); log: {layout.daemon_log}")
        if proc.poll() is not None:
            tail = b"".join(logs.tail_lines(layout.beneath(layout.daemon_log), 5)).decode("utf-8", "replace").rstrip()
            raise Failure(f"hermesd exited with {proc.returncode} during start-up; last log lines:\n{tail}")
        try:
            up = client.ping(wait=1.0) if client.held() else None
        except DaemonNotAnswering:  # starting on a busy machine: its deadline is ours, not ping's
            up = None
        if up and up.get("ready"):
            print(f"hermesd started for {root} (PID {up['pid']}); log: {layout.daemon_log}")
            if up.get("config_problem"):  # not a bare "started" that status would contradict
                print(f"hermesd: warning: every profile is held until hermesd.yaml is fixed (hermesd reads it "
                      f"again when it changes): {printable(up['config_problem'])}", file=sys.stderr)
            return 0
        time.sleep(0.05)
    raise Failure(f"hermesd did not become ready within {args.timeout:.0f}s; see {layout.daemon_log}")


def cmd_stop(args: argparse.Namespace) -> int:
    if args.profiles:
        return _per_profile(args, "stop")
    client = client_of(args)
    shown = Progress("stopping gateways")
    try:
        try:
            up = client.ping(wait=args.timeout, progress=lambda s: shown.note(f"waiting for hermesd ({s:.0f}s)"))
        except DaemonNotAnswering as exc:
            raise Failure(str(exc), EXIT_NOT_ANSWERING) from None
        if not up:
            print(f"hermesd is not running for {root_of(args)}")
            return 0
        total = len(_running_pids(args)) if shown.enabled else 0
        # If it went away (or is going away) on its own, the lock below is the truth.
        with contextlib.suppress(DaemonNotRunning, DaemonNotAnswering, ControlError):
            client.call("shutdown", wait=args.timeout, keep_children=args.keep_children)
        deadline = time.monotonic() + args.timeout
        while time.monotonic() < deadline:
            if not client.held():
                shown.done()
                print("hermesd stopped" + (" (gateways left running)" if args.keep_children else ""))
                return 0
            if shown.enabled and total and not args.keep_children:
                shown.update(total - len(_running_pids(args)), total, "stopped")
            time.sleep(0.05)
    finally:
        shown.done()
    raise Failure(f"hermesd (PID {up['pid']}) still running after {args.timeout:.0f}s")


def _running_pids(args: argparse.Namespace) -> list[int]:
    """PIDs of the gateways the daemon still has (empty when it no longer answers)."""
    try:
        doc = client_of(args).call("status", wait=1.0)["status"]
    except (DaemonNotRunning, DaemonNotAnswering, ControlError, OSError, ValueError):
        return []
    return [r["pid"] for r in doc["profiles"] if r.get("pid")]


# --------------------------------------------------------------------------- per-profile verbs


def cmd_restart(args: argparse.Namespace) -> int:
    if args.all == bool(args.profiles):
        raise UserError("name the profiles to restart, or pass --all")
    if args.rolling:
        if args.force:
            raise UserError("--rolling restarts only what would start again: it takes no --force")
        from supervisor.cli.upgrade import cmd_rolling_restart  # run-time only (see cli/__init__)

        return cmd_rolling_restart(args, None if args.all else list(args.profiles))
    if args.all:
        args.profiles = [r["name"] for r in call(args, "status")["status"]["profiles"]]
    return _per_profile(args, "restart", graceful=args.graceful, force=args.force)


_GOALS = {"start": "running", "stop": "stopped", "restart": "running"}


def _per_profile(args: argparse.Namespace, verb: str, **extra: Any) -> int:
    """Check every name, send ``verb`` for each, then wait until each reaches its state.

    A profile that is held cannot get there by waiting: it is reported as held, with its reason,
    while the others are still waited for; a time printed is the time really waited.
    """
    began = time.monotonic()
    doc = call(args, "status")["status"]
    names = check_names(args.profiles, [r["name"] for r in doc["profiles"]])
    before = {r["name"]: r for r in doc["profiles"]}
    failed: list[str] = []
    for name in names:
        try:
            reply = call(args, verb, profile=name, **extra)
        except Failure as exc:
            said = printable(exc)  # the daemon's refusal may already name the profile
            print(said if said.startswith(f"{name}: ") else f"{name}: {said}", file=sys.stderr)
            failed.append(name)
            continue
        if args.no_wait:
            print(f"{name}: {reply['result']}")
    waiting = [n for n in names if n not in failed]
    if args.no_wait or not waiting:
        if failed:
            raise Failure(f"{verb} refused for {', '.join(failed)}")
        return 0
    reached = _wait_states(args, verb, waiting, before)
    waited = time.monotonic() - began
    held: list[str] = []
    for name in waiting:
        ok, row = reached[name]
        state = row.get("state", "?") if row else "?"
        reason = f": {printable(row['reason'])}" if row and row.get("reason") and not ok else ""
        serving = judge(row) if row is not None and _GOALS[verb] == "running" else None
        if ok:
            print(f"{name}: {printable(serving.why) if serving is not None else state}")
        elif state == "held":
            print(f"{name}: held{reason}", file=sys.stderr)
            held.append(name)
        elif serving is not None and state == "running" and not serving.ready:
            print(f"{name}: running, but not serving after {waited:.1f}s: {printable(serving.why)}", file=sys.stderr)
            failed.append(name)
        else:
            print(f"{name}: not {_GOALS[verb]} after {waited:.1f}s ({state}{reason})", file=sys.stderr)
            failed.append(name)
    if failed or held:
        goal = "serving" if _GOALS[verb] == "running" else _GOALS[verb]
        parts = ([f"{', '.join(failed)} did not reach {goal}"] if failed else []) + (
            [f"{', '.join(held)} held (see above; 'hermesd doctor' says how to fix it)"] if held else [])
        raise Failure(f"{verb}: {'; '.join(parts)}")
    return 0


def _wait_states(args: argparse.Namespace, verb: str, names: list[str],
                 before: dict[str, dict[str, Any]]) -> dict[str, tuple[bool, dict[str, Any] | None]]:
    """Poll until every profile has reached the goal of ``verb`` or cannot (held; running but not
    serving for a reason waiting will not cure), or until the timeout; per profile, whether it got
    there and its last row. "Running" means serving (:func:`supervisor.plan.readiness.judge`): a new
    gateway whose platforms have not connected, or whose API server does not answer, is waited for."""
    goal = _GOALS[verb]
    shown = Progress(f"{verb}ing {', '.join(names)}")
    deadline = time.monotonic() + args.timeout
    result: dict[str, tuple[bool, dict[str, Any] | None]] = {n: (False, None) for n in names}
    try:
        while True:
            rows = {r["name"]: r for r in call(args, "status")["status"]["profiles"]}
            settled = 0
            for name in names:
                row = rows.get(name)
                old_pid = before.get(name, {}).get("pid")
                there = row is not None and row["state"] == goal and (verb != "restart" or row.get("pid") != old_pid)
                serving = judge(row) if there and row is not None and goal == "running" else None
                ok = there and (serving is None or serving.ready)
                result[name] = (ok, row)
                settled += ok or (row is not None and goal == "running" and (
                    row["state"] == "held" or (serving is not None and serving.settled)))
            if settled == len(names) or time.monotonic() >= deadline:
                return result
            if shown.enabled:
                shown.update(sum(1 for ok, _ in result.values() if ok), len(names), goal)
            time.sleep(0.1)
    finally:
        shown.done()


# --------------------------------------------------------------------------- parser


def register(commands: Commands) -> None:
    p = commands.add("start", cmd_start,
                     "start the daemon in the background, or start named profiles and wait until they serve",
                     "hermesd start coder")
    p.add_argument("profiles", nargs="*", metavar="PROFILE")
    _wait_options(p, None, "seconds to wait for the profiles to run, or for the daemon to be ready "
                           f"(default {PROFILE_WAIT_S:g} for profiles, {DAEMON_READY_S:g} for the daemon)")

    p = commands.add("stop", cmd_stop, "stop named profiles (kept stopped) and wait, or every child and the daemon",
                     "hermesd stop coder")
    p.add_argument("profiles", nargs="*", metavar="PROFILE")
    p.add_argument("--keep-children", action="store_true", help="exit the daemon but leave gateways running")
    _wait_options(p, PROFILE_WAIT_S, "seconds to wait for the profiles (or the daemon) to stop")

    p = commands.add("restart", cmd_restart,
                     "restart named profiles and wait until they serve again; no other child is touched",
                     "hermesd restart coder")
    p.add_argument("profiles", nargs="*", metavar="PROFILE")
    p.add_argument("--all", action="store_true", help="every profile")
    p.add_argument("--graceful", action="store_true", help="drain first (SIGUSR1; the gateway exits 75)")
    p.add_argument("--force", action="store_true",
                   help="restart even when the profile's files would keep the new gateway from starting")
    _wait_options(p, PROFILE_WAIT_S, "seconds to wait for the profiles to run again")
    p.add_argument("--rolling", action="store_true",
                   help="one at a time, each health-gated as 'hermesd upgrade' does; stop at the first failure")
    add_gate_options(p)
    p.add_argument("--canary", metavar="PROFILE", help="with --rolling: the profile restarted first")
    p.add_argument("--json", action="store_true", help="with --rolling: one JSON document on stdout")


def _wait_options(p: argparse.ArgumentParser, timeout: float | None, help_: str) -> None:
    """``--timeout`` (``None``: the command picks its default, which ``help_`` then states) and ``--no-wait``."""
    p.add_argument("--timeout", type=float, default=timeout,
                   help=help_ if timeout is None else f"{help_} (default {timeout:g})")
    p.add_argument("--no-wait", action="store_true", help="return once the daemon accepted the request")
