"""``HERMES_BIN`` for a dispatching gateway: hand each kanban worker to the daemon, wait, pass the code on.

Upstream's dispatcher runs ``$HERMES_BIN -p ASSIGNEE … chat -q "work kanban task ID"`` with its
output on ``<board>/logs/ID.log`` and records the PID it started as the task's worker. Pointed at
this entry (through the one-line launcher the daemon writes into the dispatcher's hand-off folder,
since ``HERMES_BIN`` must be one executable path; :mod:`supervisor.kanban.handoff`), that PID is a
messenger which:

1. asks the daemon of its root (``HERMESD_ROOT``, inherited from the gateway) to start the worker,
   through the hand-off socket named by ``HERMESD_KANBAN_SOCKET`` (the control socket otherwise)
   (request ``kanban_worker``: the assignee, upstream's arguments, upstream's per-task variables
   and the path of the log file this process writes to) — see :mod:`supervisor.kanban.workers`;
2. records the daemon's worker PID as the task's ``worker_pid`` once the dispatcher has recorded
   ours, so the dispatcher's crash check follows the real worker, also after the dispatcher
   restarts and this messenger is gone with its tree;
3. waits (request ``kanban_wait``) and exits with the worker's code, unchanged.

When there is no daemon to ask (hermesd stopped, no tag), it runs the worker itself as upstream
would, so pointing ``HERMES_BIN`` here never stops the board.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

from profiles.paths import which
from supervisor.kanban.dispatch import HANDOFF_ENV
from supervisor.kanban.workers import task_env
from supervisor.layout import Layout

PID_HANDOVER_S = 10.0


def _request(sock_path: Path, payload: dict[str, Any], timeout: float | None) -> dict[str, Any]:
    """One control request (one JSON line each way); ``timeout`` None waits as long as the worker runs."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(5.0)
        s.connect(str(sock_path))
        s.sendall(json.dumps(payload).encode() + b"\n")
        s.settimeout(timeout)
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    reply = json.loads(buf or b"{}")
    if not isinstance(reply, dict):
        raise ValueError("malformed reply")
    return reply


def _real_hermes() -> list[str]:
    """The ``hermes`` upstream would have run (``HERMES_BIN`` is us, so PATH, then this interpreter)."""
    found = which("hermes")
    if found and Path(found).resolve() != Path(sys.argv[0]).resolve():
        return [found]
    return [sys.executable, "-m", "hermes_cli.main"]


def _run_unsupervised(argv: list[str]) -> NoReturn:
    os.execvp(_real_hermes()[0], [*_real_hermes(), *argv])


def _hand_over_pid(task: str, keeper: int) -> None:
    """Replace our PID with the keeper's as the task's ``worker_pid``, after the dispatcher wrote ours.

    Uses upstream's own ``_set_worker_pid`` (it also logs a ``spawned`` event with the new PID).
    Best effort: without it the dispatcher still sees this messenger, alive exactly as long as
    the worker while the dispatcher runs.
    """
    try:
        from hermes_cli import kanban_db as kb  # type: ignore[import-untyped]
    except Exception:
        return
    me = os.getpid()
    deadline = time.monotonic() + PID_HANDOVER_S
    with contextlib.suppress(Exception):
        conn = kb.connect(Path(os.environ["HERMES_KANBAN_DB"]) if os.environ.get("HERMES_KANBAN_DB") else None)
        try:
            while time.monotonic() < deadline:
                row = conn.execute("SELECT worker_pid FROM tasks WHERE id = ?", (task,)).fetchone()
                if row is None:
                    return
                if row[0] == me:
                    kb._set_worker_pid(conn, task, keeper)
                    return
                time.sleep(0.05)
        finally:
            conn.close()


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    root = os.environ.get("HERMESD_ROOT")
    assignee = args[1] if len(args) > 1 and args[0] == "-p" else None
    task = os.environ.get("HERMES_KANBAN_TASK", "")
    if not root or not assignee or not task:
        return _run_unsupervised(args)

    # The dispatcher's restricted hand-off socket (supervisor.kanban.handoff; the only one a confined
    # dispatcher can reach), else the control socket (an operator running this by hand).
    sock = Path(os.environ[HANDOFF_ENV]) if os.environ.get(HANDOFF_ENV) else Layout(Path(root)).socket
    try:
        log = os.readlink("/proc/self/fd/1")
    except OSError:
        log = ""
    try:
        reply = _request(sock, {"cmd": "kanban_worker", "assignee": assignee, "argv": args,
                                "env": task_env(os.environ), "log": log}, timeout=30.0)
    except (OSError, ValueError) as exc:
        print(f"hermesd: daemon for {root} not reachable ({exc}); running the worker here", file=sys.stderr)
        sys.stderr.flush()
        return _run_unsupervised(args)
    if not reply.get("ok"):
        print(f"hermesd: kanban worker refused: {reply.get('error')}", file=sys.stderr)
        return 1
    keeper = int(reply["pid"])

    def forward(signum: int, _frame: Any) -> None:  # the dispatcher ending the worker (timeout, reclaim)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(keeper, signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    _hand_over_pid(task, keeper)
    while True:
        try:
            done = _request(sock, {"cmd": "kanban_wait", "pid": keeper}, timeout=None)
        except InterruptedError:  # pragma: no cover
            continue
        except (OSError, ValueError) as exc:
            print(f"hermesd: lost the daemon while worker PID {keeper} runs: {exc}", file=sys.stderr)
            return 1
        if not done.get("ok"):
            print(f"hermesd: {done.get('error')}", file=sys.stderr)
            return 1
        return int(done["code"])


if __name__ == "__main__":
    sys.exit(main())
