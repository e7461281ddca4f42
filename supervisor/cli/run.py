"""``hermesd run``: the daemon itself, in the foreground (what ``start``, the service units and the
container images run).

A module of its own so the daemon's process loads none of the client side: ``start``, ``stop`` and
``restart`` talk to a daemon (control client, waits, progress, rolling restarts) and stay in
:mod:`supervisor.cli.daemon`.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from concurrent.futures import Executor, ThreadPoolExecutor

from supervisor import config as config_mod
from supervisor.cli.common import Commands, layout_of
from supervisor.daemon.pidlock import AlreadyRunning, PidLock
from supervisor.exits import UserError
from supervisor.hermes import requirements
from supervisor.layout import Layout
from supervisor.processes import childspec, logs


def cmd_run(args: argparse.Namespace) -> int:
    layout = layout_of(args)
    lock = PidLock(layout)
    try:
        if args.lock_fd is not None:
            lock.adopt_fd(args.lock_fd)  # taken by 'hermesd start', which waits for us to be ready
        else:
            lock.acquire()
    except AlreadyRunning as exc:
        raise UserError(str(exc)) from None
    try:
        return _supervise(layout, args.verbose)
    finally:
        lock.release()


def _ask_ahead(layout: Layout, pool: Executor) -> None:
    """Ask the gateway command's interpreter now, in the daemon's reader thread, while the daemon's
    own code is still being imported: the daemon needs the answer before its first spawn, and the
    probe (~0.1 s of another process's CPU) then costs its start-up nothing on a second core. The
    daemon's own question, queued behind this one, is answered from its cache. A file or command
    that cannot be read is left to the daemon, which reads hermesd.yaml again and reports it."""
    try:
        command = childspec.resolve_gateway_command(config_mod.load(layout.config).command, os.environ.get("PATH"))
    except (config_mod.ConfigError, childspec.GatewayCommandError):
        return
    pool.submit(requirements.interpreter_facts, command, env=os.environ)


def _supervise(layout: Layout, verbose: bool) -> int:
    # The daemon's one reader thread: profiles' files, hermesd.yaml and the interpreter's answer, in
    # the order asked, off the loop; one, so a hostile profile's slow files cannot make it spawn more.
    pool = ThreadPoolExecutor(1, thread_name_prefix="hermesd-read")
    _ask_ahead(layout, pool)
    # The daemon never speaks TLS, yet asyncio imports ssl (libssl, libcrypto) the moment it is
    # loaded, and the watcher below loads it: blocked first, it costs nothing (measured: 6 MiB of
    # the daemon's resident memory). Only watchfiles (where inotify is missing) needs ssl itself.
    blocked = "ssl" not in sys.modules
    if blocked:
        sys.modules["ssl"] = None  # type: ignore[assignment]
    from supervisor.watch import inotify  # ctypes and the watcher: only the daemon watches files

    if blocked and not inotify.available():
        del sys.modules["ssl"]  # asyncio stays without TLS; watchfiles' own import finds the real one
    # After the ssl block, and only here: the daemon's loop and asyncio are what 'run' is; the
    # parser of every other command must not load them.
    import asyncio  # after the ssl block

    from supervisor.daemon.loop import Daemon  # only 'run' loads the daemon, after _ask_ahead
    from supervisor.processes.prctl import set_process_name  # run-time only (see cli/__init__): ctypes

    set_process_name("hermesd")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s hermesd[%(process)d] %(levelname)s %(message)s"))
    handler.addFilter(logs.PrintableFilter())
    handler.addFilter(logs.RepeatFilter())
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, handlers=[handler])
    logging.getLogger("watchfiles").setLevel(logging.WARNING)
    daemon = Daemon(layout.root, pool)
    try:
        return asyncio.run(daemon.run())
    finally:
        daemon.close()


def register(commands: Commands) -> None:
    p = commands.add("run", cmd_run, "supervise every profile of the root in the foreground",
                     "hermesd run --root ~/.hermes")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    p.add_argument("--lock-fd", type=int, help=argparse.SUPPRESS)  # handed down by 'hermesd start'
