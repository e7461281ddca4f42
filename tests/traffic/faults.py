"""The faults one profile suffers while every profile is under load, each injected the same way on
every side.

| fault | how | repaired by the harness |
|---|---|---|
| ``sigkill`` | SIGKILL to the process serving the victim | no: the side must restart it |
| ``sigstop`` | SIGSTOP to that process (hung) | no: the side must notice (SIGCONT at the end, for clean-up) |
| ``memory`` | the victim's agent runs a command that allocates 320 MiB/s up to a cap | no |
| ``forkbomb`` | the agent runs a fork bomb bounded to a process budget | no |
| ``cpu`` | the agent runs a CPU burner (two processes per core) for a while | no |
| ``llm_hang`` | the victim's model stops answering | yes, after ``hold`` s |
| ``config`` | the victim's config.yaml becomes YAML that does not parse | yes, after ``hold`` s |
| ``fifo`` | the victim's config.yaml becomes a FIFO (the fault suite's ``fifo`` kind) | yes, after ``hold`` s |

The first two signal a process: on a multiplexed gateway that process serves every profile, so
they are not one profile's fault there (:attr:`Fault.whole_process`). The tool-run faults take
effect when the victim's next request reaches its model (the stub answers it with the command);
each command is bounded by itself (cap, budget, lifetime, ``alarm``) so that nothing runs away on a
side that does not stop it, and every process it starts is killed by PID at the end.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.e2e.helpers import PidFiles
from tests.faults.test_hostile_files import plant
from tests.limits.helpers import FORK_BOMB
from tests.traffic.llm import LLMStub
from tests.traffic.sides import Side

# Bounds of the tool-run faults (each a safety net for a side that does not stop them).
MEMORY_CAP_MB = 2048
MEMORY_STEP_MB = 16  # every 50 ms
FORK_BUDGET = 400
CPU_SECONDS = 40
LIFETIME = 60  # seconds any process of a tool-run fault lives at most

MEMORY = r"""
import signal, sys, time
cap_mb, step_mb, lifetime = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
signal.alarm(lifetime)
held, end = [], time.monotonic() + lifetime
while time.monotonic() < end:
    if len(held) * step_mb < cap_mb:
        held.append(b"\x01" * (step_mb << 20))  # filled, so every page is really taken
    time.sleep(0.05)
"""

CPU = r"""
import os, signal, sys, time
procs, seconds = int(sys.argv[1]), int(sys.argv[2])
for _ in range(procs - 1):
    if os.fork() == 0:
        break
signal.alarm(seconds + 2)
end = time.monotonic() + seconds
while time.monotonic() < end:
    pass
"""

BROKEN_YAML = "model:\n  provider: custom\n  base_url: [unclosed\n"


@dataclass
class Context:
    """What a fault acts on, and what it leaves for :func:`clean_up`."""

    side: Side
    victim: str
    stub: LLMStub
    scripts: Path
    pidfiles: PidFiles = field(default_factory=PidFiles)
    stopped: list[int] = field(default_factory=list)
    saved: dict[Path, bytes] = field(default_factory=dict)

    @property
    def config(self) -> Path:
        return self.side.home(self.victim) / "config.yaml"


@dataclass(frozen=True)
class Fault:
    name: str
    title: str
    inject: Callable[[Context], None]
    repair: Callable[[Context], None] | None = None  # None: the side has to heal by itself
    via_tool: bool = False  # happens when the victim's agent runs a command
    whole_process: bool = False  # signals the process serving the victim (every profile's, multiplexed)


def _signal(sig: int) -> Callable[[Context], None]:
    def inject(ctx: Context) -> None:
        pid = ctx.side.gateway_pid(ctx.victim)
        if pid is None:
            raise RuntimeError(f"{ctx.side.name}: no process serves {ctx.victim}")
        if sig == signal.SIGSTOP:
            ctx.stopped.append(pid)
        os.kill(pid, sig)
    return inject


def _script(ctx: Context, name: str, code: str) -> Path:
    ctx.scripts.mkdir(parents=True, exist_ok=True)
    path = ctx.scripts / f"{name}.py"
    path.write_text(code)
    return path


def _memory(ctx: Context) -> None:
    script = _script(ctx, "memory", MEMORY)
    ctx.stub.arm_tool(ctx.victim, f"{sys.executable} {script} {MEMORY_CAP_MB} {MEMORY_STEP_MB} {LIFETIME}",
                      timeout=LIFETIME + 10)


def _forkbomb(ctx: Context) -> None:
    script = _script(ctx, "forkbomb", FORK_BOMB)
    pids = ctx.pidfiles.add(ctx.scripts / f"forkbomb-{ctx.side.name}.pids")
    ctx.stub.arm_tool(ctx.victim, f"{sys.executable} {script} {pids} {FORK_BUDGET} 0.05", timeout=LIFETIME + 10)


def _cpu(ctx: Context) -> None:
    script = _script(ctx, "cpu", CPU)
    procs = 2 * (os.cpu_count() or 1)
    ctx.stub.arm_tool(ctx.victim, f"{sys.executable} {script} {procs} {CPU_SECONDS}", timeout=LIFETIME + 10)


def _llm_hang(ctx: Context) -> None:
    ctx.stub.behave(ctx.victim, hang=True)


def _llm_release(ctx: Context) -> None:
    ctx.stub.release(ctx.victim)


def _save(ctx: Context) -> None:
    ctx.saved.setdefault(ctx.config, ctx.config.read_bytes())


def _restore(ctx: Context) -> None:
    """Put the saved config.yaml back in one rename (over a FIFO too)."""
    for path, data in ctx.saved.items():
        tmp = path.with_name(path.name + ".traffic-restore")
        tmp.write_bytes(data)
        os.replace(tmp, path)
    ctx.saved.clear()


def _break_config(ctx: Context) -> None:
    _save(ctx)
    tmp = ctx.config.with_name("config.yaml.traffic-broken")
    tmp.write_text(BROKEN_YAML)
    os.replace(tmp, ctx.config)


def _fifo(ctx: Context) -> None:
    _save(ctx)
    plant("fifo", ctx.side.home(ctx.victim), ctx.scripts / "unused")


def _unfifo(ctx: Context) -> None:
    """Open the FIFO read-write first (every reader blocked in ``open`` gets through), put the
    config back, then close it: every reader sees end-of-file, none waits forever."""
    fd = None
    with contextlib.suppress(OSError):
        fd = os.open(ctx.config, os.O_RDWR | os.O_NONBLOCK)
    try:
        _restore(ctx)
    finally:
        if fd is not None:
            os.close(fd)


FAULTS: dict[str, Fault] = {f.name: f for f in (
    Fault("sigkill", "SIGKILL of its gateway", _signal(signal.SIGKILL), whole_process=True),
    Fault("sigstop", "SIGSTOP of its gateway (hung)", _signal(signal.SIGSTOP), whole_process=True),
    Fault("memory", f"memory runaway by its agent's tool (to {MEMORY_CAP_MB} MiB)", _memory, via_tool=True),
    Fault("forkbomb", f"fork bomb by its agent's tool ({FORK_BUDGET} processes)", _forkbomb, via_tool=True),
    Fault("cpu", f"CPU burner by its agent's tool (2 per core, {CPU_SECONDS} s)", _cpu, via_tool=True),
    Fault("llm_hang", "its model stops answering", _llm_hang, _llm_release),
    Fault("config", "config.yaml edited into YAML that does not parse", _break_config, _restore),
    Fault("fifo", "config.yaml replaced by a FIFO (hostile file)", _fifo, _unfifo),
)}


def clean_up(ctx: Context) -> None:
    """Undo whatever is left: stopped processes continued, the model answering, files restored,
    the fork bomb's processes killed by PID."""
    for pid in ctx.stopped:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
    ctx.stub.reset(ctx.victim)
    if ctx.saved:
        _unfifo(ctx)
    ctx.pidfiles.kill_all()
