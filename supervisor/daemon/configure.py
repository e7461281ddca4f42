"""Reading the settings in force: hermesd.yaml, the gateway command it names (or upstream's), and the
release that command's interpreter runs, all off the loop.

The file is read and the interpreter asked in the daemon's reader pool, so a slow disk or a slow
interpreter never delays a respawn or a control request; :func:`supervisor.daemon.effective.build`
then merges what was found. A malformed file raises :class:`~supervisor.config.ConfigError` (the
loop keeps the settings it had); a command that cannot be found is no error of the file: it holds
every profile, with the reason, until it appears.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from concurrent.futures import Executor
from typing import TYPE_CHECKING

from supervisor import childspec
from supervisor import config as config_mod
from supervisor.daemon import effective, interpreter
from supervisor.layout import Layout

if TYPE_CHECKING:
    from supervisor.isolation.probing import Probe

log = logging.getLogger("hermesd")


async def load(layout: Layout, env: Mapping[str, str], pool: Executor, probe: Probe | None) -> effective.InForce:
    """hermesd.yaml of ``layout``'s root merged with its command and release (``env``: hermesd's own
    environment, whose PATH finds the command; ``probe``: the kernel's confinement facts)."""
    loop = asyncio.get_running_loop()
    cfg = await loop.run_in_executor(pool, config_mod.load, layout.config)
    command, command_error, release = None, None, None
    try:
        command = tuple(childspec.resolve_gateway_command(list(cfg.command) if cfg.command else None,
                                                          env.get("PATH")))
    except childspec.GatewayCommandError as exc:
        command_error = str(exc)
        log.error("%s", exc)
    if command is not None:
        release = interpreter.read_release(await loop.run_in_executor(pool, interpreter.ask, command, env))
    return effective.build(cfg, command=command, command_error=command_error, release=release, probe=probe)
