"""A PID namespace per profile, as a measured alternative to the process-control filter (bench only).

``python -E -s -S pidns_shim.py PLAN -- argv…`` (root only): unshare a PID and a mount namespace,
fork; the child is PID 1 of the new namespace, mounts its own ``/proc``, applies the plan as the
real shim does and execs ``argv``; the parent stays outside to relay signals and the exit status
(the daemon's recorded PID is the parent's, never the gateway's). Not product code: it exists so
``tests.isolation.bench`` can put numbers on the design hermesd did not choose (what it costs to
spawn, how long a real gateway takes to run, and which PID upstream writes into ``gateway.pid``).
"""

from __future__ import annotations

import os
import signal
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                "supervisor", "isolation"))

import contextlib

import confine
import enter
import kernel

CLONE_NEWPID = 0x20000000


def main() -> None:
    args = sys.argv[1:]
    plan = enter.decode_plan(args[0])
    argv = args[2:]
    env = enter._initial_environ()
    kernel.unshare(CLONE_NEWPID | kernel.CLONE_NEWNS)
    pid = os.fork()
    if pid == 0:
        kernel.mount(None, "/", None, kernel.MS_REC | kernel.MS_SLAVE)
        kernel.mount("proc", "/proc", "proc", kernel.MS_NOSUID | kernel.MS_NODEV | kernel.MS_NOEXEC)
        confine.apply(plan)
        enter._exec(argv, env, str(plan.get("profile")))
        os._exit(127)

    def relay(signum: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1):
        signal.signal(sig, relay)
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    if os.WIFSIGNALED(status):
        os._exit(128 + os.WTERMSIG(status))
    os._exit(os.waitstatus_to_exitcode(status))


if __name__ == "__main__":
    main()
