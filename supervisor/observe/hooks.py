"""Hooks: commands hermesd runs when chosen events happen (``hooks:`` in ``hermesd.yaml``).

::

    hooks:
      - name: page-me                       # optional, for the log
        on: [held, backoff, recovered]      # event types ("*": every event)
        after_failures: 3                   # backoff only: once per failure streak, from the 3rd
        profiles: [coder]                   # optional: only these profiles' events
        command: ["/usr/local/bin/notify", "--urgent"]   # argv, or a string run by /bin/sh -c
        timeout: 10                         # seconds, then the hook's process group is SIGKILLed

What a hook gets: the event as one JSON line on stdin, and in its environment
``HERMESD_EVENT_TYPE``, ``HERMESD_EVENT_PROFILE`` (empty for daemon-wide events),
``HERMESD_EVENT_SUMMARY`` (the line ``hermesd events`` prints), ``HERMESD_EVENT_TIME`` (ISO 8601),
``HERMESD_EVENT_JSON``, one ``HERMESD_EVENT_<FIELD>`` per field of the event (``_PID``, ``_KIND``,
``_REASON``, ``_FAILURES``, ``_MESSAGE`` …), ``HERMESD_HOOK_NAME`` and ``HERMESD_HOOK_ROOT``.
The rest of the environment is hermesd's own minus platform variables (``TELEGRAM_*`` …, so no bot
token leaks into a hook), minus the service manager's (``NOTIFY_SOCKET`` …) and minus hermesd's
process tags: a hook carrying ``HERMESD_ROOT``/``HERMESD_PROFILE`` would be taken for a stray of
that profile's gateway and killed by the sweep that follows the very exit it reports.

How it runs, and why:

- **Never on the loop's time.** ``fire`` only queues (microseconds); the hooks are spawned on the
  loop's next turn, after whatever the caller does next (a respawn), with ``posix_spawn`` (no fork
  of the daemon, well under a millisecond), then a pidfd and the output pipe are watched by the
  loop; nothing waits. hermesd keeps no
  ``subprocess`` objects (its own reaper calls ``waitpid(-1)``): the runner reaps its hooks with
  ``waitid(P_PIDFD)`` and accepts the status from the daemon's reaper via :meth:`child_reaped`
  when that one got there first.
- **Bounded.** At most ``max_concurrent`` hooks run at once (4), ``max_queued`` wait (100; more are
  dropped and counted); a hook's session (``setsid``) is SIGKILLed as a group at its timeout;
  stdout and stderr go, line by line, to hermesd's log (logger ``hermesd``) up to ``output_limit``
  bytes per run (8 KiB), after which the pipe is closed (further writes fail with EPIPE).
- **Once per event.** Every matching hook runs once per event; ``after_failures`` makes a
  ``backoff`` hook fire once per failure streak (the first backoff with ``failures >= N``, then
  not again until that profile recovers or its count starts over).

API (the daemon's loop)::

    runner = HookRunner(hooks, env=daemon.env, root=root, on_outcome=counters.hook_outcome)
    runner.fire(event)                     # after the event is journaled; returns at once
    runner.child_reaped(pid, status)       # from the SIGCHLD reaper, for a PID that is not a gateway
    runner.configure(new_hooks)            # after a config reload
    await runner.aclose(grace=5.0)         # at shutdown: wait a little, then kill what still runs
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import select
import signal
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from profiles.paths import which
from profiles.upstream.platforms import is_platform_variable
from supervisor.observe.events import summary
from supervisor.observe.sections import Hook
from supervisor.processes.notify import SERVICE_MANAGER_VARIABLES
from supervisor.processes.tags import TAG_PROFILE, TAG_ROOT

log = logging.getLogger("hermesd")

OUTPUT_LIMIT = 8192
LINE_LIMIT = 500
OUTCOMES = ("ok", "failed", "timeout", "spawn_error", "dropped", "unknown")


# --------------------------------------------------------------------------- matching (pure)


def matches(hook: Hook, event: Mapping[str, Any]) -> bool:
    """Whether ``hook`` wants ``event`` (without the once-per-streak rule, which needs history)."""
    if "*" not in hook.on and event.get("type") not in hook.on:
        return False
    if hook.profiles is not None and event.get("profile") not in hook.profiles:
        return False
    if hook.after_failures is not None and event.get("type") == "backoff":
        failures = event.get("failures")
        if not isinstance(failures, int) or failures < hook.after_failures:
            return False
    return True


def _flat(prefix: str, value: object, out: dict[str, str], depth: int = 0) -> None:
    if isinstance(value, Mapping) and depth < 1:
        for k, v in value.items():
            _flat(f"{prefix}_{_var(str(k))}", v, out, depth + 1)
        return
    if value is None:
        text = ""
    elif isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, str | int | float):
        text = str(value)
    else:
        text = json.dumps(value, separators=(",", ":"), default=str)
    out[prefix] = text[:4096].replace("\0", "")


# hermesd's process tags (a hook is no gateway of ours) and its service manager's channel.
_NEVER_INHERITED = frozenset({TAG_ROOT, TAG_PROFILE, *SERVICE_MANAGER_VARIABLES})


def _var(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name.upper())[:64]


def hook_environment(base: Mapping[str, str], event: Mapping[str, Any], *, root: Path, hook: Hook) -> dict[str, str]:
    """The hook's environment: hermesd's own minus what must not leak, plus the event. Pure."""
    env = {
        k: v for k, v in base.items()
        if not is_platform_variable(k) and k not in _NEVER_INHERITED
        and not k.startswith(("HERMESD_EVENT_", "HERMESD_HOOK_"))
    }
    fields: dict[str, str] = {}
    for key, value in event.items():
        _flat(f"HERMESD_EVENT_{_var(key)}", value, fields)
    env.update(fields)
    env["HERMESD_EVENT_PROFILE"] = event.get("profile") or ""
    env["HERMESD_EVENT_SUMMARY"] = summary(event)[:4096]
    ts = event.get("ts")
    if isinstance(ts, int | float) and not isinstance(ts, bool):
        env["HERMESD_EVENT_TIME"] = datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds")
    env["HERMESD_EVENT_JSON"] = json.dumps(event, separators=(",", ":"), default=str)[:16384]
    env["HERMESD_HOOK_NAME"] = hook.name
    env["HERMESD_HOOK_ROOT"] = str(root)
    return env


# --------------------------------------------------------------------------- the runner


@dataclass(slots=True)
class _Run:
    hook: Hook
    event: Mapping[str, Any]
    pid: int
    pidfd: int
    out_fd: int | None
    started: float
    label: str
    timer: asyncio.TimerHandle | None = None
    buf: bytes = b""
    logged: int = 0
    cut: bool = False
    exited: bool = False
    timed_out: bool = False
    status: int | None = None


@dataclass(slots=True)
class HookRunner:
    hooks: tuple[Hook, ...]
    env: Mapping[str, str]
    root: Path
    max_concurrent: int = 4
    max_queued: int = 100
    output_limit: int = OUTPUT_LIMIT
    on_outcome: Callable[[str], None] | None = None
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))
    _queue: deque[tuple[Hook, Mapping[str, Any]]] = field(default_factory=deque)
    _runs: dict[int, _Run] = field(default_factory=dict)
    _reaped: dict[int, int] = field(default_factory=dict)
    _streaks: dict[tuple[str, str], bool] = field(default_factory=dict)  # (hook, profile) -> fired
    _idle: asyncio.Event | None = None
    _closing: bool = False
    _pump_pending: bool = False

    @property
    def running(self) -> int:
        return len(self._runs)

    @property
    def queued(self) -> int:
        return len(self._queue)

    def configure(self, hooks: tuple[Hook, ...]) -> None:
        """New hooks from a reloaded configuration (running ones finish under their old settings)."""
        self.hooks = hooks
        names = {h.name for h in hooks}
        self._streaks = {k: v for k, v in self._streaks.items() if k[0] in names}

    def wanted(self, event: Mapping[str, Any]) -> list[Hook]:
        """The hooks ``event`` fires, applying the once-per-streak rule (updates that state)."""
        profile = event.get("profile")
        out = []
        for hook in self.hooks:
            if hook.after_failures is not None and isinstance(profile, str):
                key = (hook.name, profile)
                if event.get("type") == "recovered" or (
                    event.get("type") == "backoff" and isinstance(event.get("failures"), int)
                    and event["failures"] < hook.after_failures
                ):
                    self._streaks.pop(key, None)  # the streak ended or started over
            if not matches(hook, event):
                continue
            if hook.after_failures is not None and event.get("type") == "backoff" and isinstance(profile, str):
                if self._streaks.get((hook.name, profile)):
                    continue
                self._streaks[(hook.name, profile)] = True
            out.append(hook)
        return out

    def fire(self, event: Mapping[str, Any]) -> int:
        """Start (or queue) every hook ``event`` fires; returns how many. Never blocks, never raises."""
        if self._closing or not self.hooks:
            return 0
        n = 0
        for hook in self.wanted(event):
            n += 1
            room = self.max_queued + max(0, self.max_concurrent - len(self._runs))
            if len(self._queue) < room:
                self._queue.append((hook, event))
            else:
                self._outcome("dropped")
                log.warning("hook %s: dropped for %s (%d hooks queued already)", hook.name,
                            event.get("type"), len(self._queue))
        if self._queue and not self._pump_pending:
            # Spawning waits for the loop's next turn: whatever the caller does right after
            # emitting the event (a respawn) is not held up by a posix_spawn.
            try:
                asyncio.get_running_loop().call_soon(self._next)
                self._pump_pending = True
            except RuntimeError:  # no loop: nothing can run; say so instead of raising into the caller
                log.error("hooks fired outside the event loop; %d dropped", len(self._queue))
                for _ in range(len(self._queue)):
                    self._queue.popleft()
                    self._outcome("dropped")
        return n

    def child_reaped(self, pid: int, status: int) -> bool:
        """The daemon's reaper collected ``pid``: if it is a hook, keep its wait status."""
        if pid in self._runs:
            self._reaped[pid] = wait_status_to_code(status)
            return True
        return False

    def _outcome(self, outcome: str) -> None:
        self.counts[outcome] = self.counts.get(outcome, 0) + 1
        if self.on_outcome is not None:
            with contextlib.suppress(Exception):
                self.on_outcome(outcome)

    def _label(self, hook: Hook, event: Mapping[str, Any]) -> str:
        who = event.get("profile") or "hermesd"
        return f"hook {hook.name} ({event.get('type')} {who})"

    def _start(self, hook: Hook, event: Mapping[str, Any]) -> None:
        loop = asyncio.get_running_loop()
        label = self._label(hook, event)
        env = hook_environment(self.env, event, root=self.root, hook=hook)
        exe = hook.argv[0]
        if "/" not in exe:
            found = which(exe, path=env.get("PATH") or os.defpath)
            if found is None:
                self._outcome("spawn_error")
                log.warning("%s: command %r not found on PATH", label, exe)
                return
            exe = found
        fds: list[int] = []
        try:
            in_r, in_w = os.pipe2(os.O_CLOEXEC)
            fds += [in_r, in_w]
            out_r, out_w = os.pipe2(os.O_CLOEXEC)
            fds += [out_r, out_w]
            pid = os.posix_spawn(
                exe, list(hook.argv), env,
                file_actions=[
                    (os.POSIX_SPAWN_DUP2, in_r, 0),
                    (os.POSIX_SPAWN_DUP2, out_w, 1),
                    (os.POSIX_SPAWN_DUP2, out_w, 2),
                ],
                setsid=True,
                # Python ignores SIGPIPE and SIGXFSZ; an ignored signal stays ignored across exec.
                setsigdef=(signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, signal.SIGTERM, signal.SIGHUP),
            )
        except OSError as exc:
            for fd in fds:
                os.close(fd)
            self._outcome("spawn_error")
            log.warning("%s: cannot run %s: %s", label, exe, exc.strerror or exc)
            return
        os.close(in_r)
        os.close(out_w)
        self._feed_stdin(in_w, event)
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:  # gone and reaped already (a daemon reaper that ran in between cannot: same thread)
            pidfd = -1
        os.set_blocking(out_r, False)
        run = _Run(hook, event, pid, pidfd, out_r, time.monotonic(), label)
        self._runs[pid] = run
        if self._idle is not None:
            self._idle.clear()
        loop.add_reader(out_r, self._on_output, run)
        if pidfd >= 0:
            loop.add_reader(pidfd, self._on_exit, run)
        run.timer = loop.call_later(hook.timeout, self._on_timeout, run)
        log.debug("%s: started PID %d", label, pid)

    @staticmethod
    def _feed_stdin(fd: int, event: Mapping[str, Any]) -> None:
        """The event as one JSON line; a pipe holds 64 KiB, an event is at most 16, so this never waits."""
        data = json.dumps(event, separators=(",", ":"), default=str).encode() + b"\n"
        try:
            os.set_blocking(fd, False)
            os.write(fd, data)
        except OSError:
            pass  # the hook does not read stdin, or is gone already: not our problem
        finally:
            os.close(fd)

    def _on_output(self, run: _Run) -> None:
        assert run.out_fd is not None
        try:
            chunk = os.read(run.out_fd, 65536)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._close_output(run)
            self._maybe_finish(run)
            return
        self._feed(run, chunk)
        if len(run.buf) > LINE_LIMIT:
            self._log_line(run, run.buf)
            run.buf = b""
        if run.logged >= self.output_limit and not run.cut:
            run.cut = True
            log.info("%s: output cut at %d bytes", run.label, self.output_limit)
            self._close_output(run)
            self._maybe_finish(run)

    def _log_line(self, run: _Run, raw: bytes) -> None:
        if run.cut or run.logged >= self.output_limit:
            return
        run.logged += len(raw) + 1
        text = raw.decode("utf-8", "replace").rstrip("\r")
        if len(text) > LINE_LIMIT:
            text = text[:LINE_LIMIT] + "…"
        log.info("%s: %s", run.label, text)

    def _close_output(self, run: _Run) -> None:
        if run.out_fd is None:
            return
        if run.buf.strip():
            self._log_line(run, run.buf)
            run.buf = b""
        with contextlib.suppress(Exception):
            asyncio.get_running_loop().remove_reader(run.out_fd)
        os.close(run.out_fd)
        run.out_fd = None

    def _on_exit(self, run: _Run) -> None:
        loop = asyncio.get_running_loop()
        loop.remove_reader(run.pidfd)
        run.exited = True
        try:
            result = os.waitid(os.P_PIDFD, run.pidfd, os.WEXITED | os.WNOHANG)
        except ChildProcessError:
            result = None  # the daemon's reaper got it first (its status arrives via child_reaped)
        if result is not None:
            run.status = _status_from_waitid(result)
        os.close(run.pidfd)
        run.pidfd = -1
        if run.timer is not None:
            run.timer.cancel()
        # A hook's leftover background processes may hold the pipe open: stop listening now.
        if run.out_fd is not None:
            self._drain_output(run)
            self._close_output(run)
        self._maybe_finish(run)

    def _drain_output(self, run: _Run) -> None:
        for _ in range(16):  # what is already in the pipe, a bounded amount
            if run.out_fd is None:
                return
            try:
                chunk = os.read(run.out_fd, 65536)
            except OSError:
                return
            if not chunk:
                return
            self._feed(run, chunk)

    def _feed(self, run: _Run, chunk: bytes) -> None:
        run.buf += chunk
        *lines, run.buf = run.buf.split(b"\n")
        for line in lines:
            self._log_line(run, line)

    def _on_timeout(self, run: _Run) -> None:
        if self._kill(run):
            log.warning("%s: still running after %gs; killed its process group (PID %d)", run.label,
                        run.hook.timeout, run.pid)

    def _kill(self, run: _Run) -> bool:
        """SIGKILL the hook's session (its group: ``setsid`` made the hook its leader)."""
        if run.exited or _has_exited(run.pidfd):
            return False  # its exit is being handled (same loop: it cannot have been reaped in between)
        run.timed_out = True
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(run.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError, OSError):
            signal.pidfd_send_signal(run.pidfd, signal.SIGKILL)
        return True

    def _maybe_finish(self, run: _Run) -> None:
        if not run.exited or run.out_fd is not None or run.pid not in self._runs:
            return
        del self._runs[run.pid]
        status = run.status if run.status is not None else self._reaped.pop(run.pid, None)
        self._reaped.pop(run.pid, None)
        took = time.monotonic() - run.started
        if run.timed_out:
            outcome = "timeout"
        elif status is None:
            outcome = "unknown"
            log.info("%s: finished after %.1fs (exit status collected elsewhere)", run.label, took)
        elif status == 0:
            outcome = "ok"
            log.debug("%s: exit 0 after %.1fs", run.label, took)
        else:
            outcome = "failed"
            log.warning("%s: %s after %.1fs", run.label, _describe(status), took)
        self._outcome(outcome)
        self._next()

    def _next(self) -> None:
        self._pump_pending = False
        while self._queue and len(self._runs) < self.max_concurrent and not self._closing:
            hook, event = self._queue.popleft()
            try:
                self._start(hook, event)
            except Exception:  # a bug here must not reach the loop that emitted the event
                self._outcome("spawn_error")
                log.exception("%s: could not be started", self._label(hook, event))
        if not self._runs and self._idle is not None:
            self._idle.set()

    async def aclose(self, grace: float = 5.0) -> None:
        """Stop taking events; give running hooks ``grace`` seconds, then kill their groups."""
        self._closing = True
        for _ in range(len(self._queue)):
            self._queue.popleft()
            self._outcome("dropped")
        if not self._runs:
            return
        self._idle = asyncio.Event()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), grace)
        for run in list(self._runs.values()):
            if self._kill(run):
                log.warning("%s: still running at shutdown; killed its process group (PID %d)", run.label, run.pid)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), 2.0)


def _status_from_waitid(result: os.waitid_result) -> int:
    """A shell-style status: the exit code, or 128 + signal for a killed hook."""
    if result.si_code == os.CLD_EXITED:
        return int(result.si_status)
    return 128 + int(result.si_status)


def _describe(status: int) -> str:
    if status > 128:
        try:
            return f"killed by {signal.Signals(status - 128).name}"
        except ValueError:
            return f"killed by signal {status - 128}"
    return f"exit {status}"


def _has_exited(pidfd: int) -> bool:
    if pidfd < 0:
        return True
    p = select.poll()
    p.register(pidfd, select.POLLIN)
    return bool(p.poll(0))


def wait_status_to_code(status: int) -> int:
    """A ``waitpid`` status (as the daemon's reaper gets it) in the runner's convention."""
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.waitstatus_to_exitcode(status)
