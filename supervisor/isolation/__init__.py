"""Trust domains (issue 13): each profile's gateway confined so it cannot read, change or signal another.

API for the daemon (the loop) and the CLI — everything below this line is self-contained::

    from supervisor.isolation import (probe, doctor_lines, parse_isolation, merge_isolation,
                                      PlanInputs, make_plan, wrap_argv, unwrap, exec_in_place)

1. Once at daemon start (and in ``doctor``): ``facts = probe()`` (~3 ms, two short forks).
   ``doctor_lines(facts)`` -> ``[(level, text)]`` for ``hermesd doctor``; ``facts.to_json()`` for
   ``doctor --json``.
2. When reading hermesd.yaml: ``parse_isolation(value, "isolation")`` for the top level and
   ``parse_isolation(value, f"profiles.{name}.isolation")`` per profile (``IsolationConfigError``
   is a ``ValueError`` whose message starts with the key); ``merge_isolation(top, own)`` gives
   one profile's :class:`IsolationSettings`.
3. When resolving the gateway command: ``install.discover_install_paths(command)`` (read-only
   for every profile). When settings name an account: ``install.resolve_user(name)``.
4. Before every spawn (pure, microseconds)::

       plan = make_plan(PlanInputs(root=root, profile=name, home=home, probe=facts,
                                   settings=settings, hermesd_dir=layout.dir,
                                   control_socket=layout.socket,
                                   other_homes=tuple(other profiles' homes),
                                   install_paths=install_paths,
                                   lock_dir=install.credential_lock_dir(child_env),
                                   user_home=Path(child_env["HOME"]),
                                   user_ids=resolved account or None,
                                   kanban_layout=kanban.layout(root)))

   ``plan.runnable`` False: hold the profile, reason ``plan.reason``. Else spawn
   ``wrap_argv(plan, argv)`` with the same environment (``off`` returns ``argv`` itself).
   A child that exits **125** could not be confined: its last log line says why (hold it,
   do not restart-loop); 126/127: the command could not be executed.
5. Identity: until the shim execs, ``/proc/<pid>/cmdline`` is the shim's; ``unwrap(cmdline)``
   returns the gateway argv it will become (treat as "entering", not as foreign). PID and start
   time are unchanged by the exec.
6. ``status``: ``plan.summary()`` (one line), ``plan.status_json()`` under key ``isolation``.
7. ``hermesd exec PROFILE -- CMD``: same plan, then ``exec_in_place(plan, argv, env)`` (applies
   the plan in the CLI process itself and execs; never returns).
8. Kanban: at daemon start, before spawning, ``kanban.migrate(root)`` moves a legacy
   ``<root>/kanban.db`` into ``kanban/default-board/`` (raises ``KanbanBusyError`` while a process
   has it open: report it in doctor and retry on the next start).

Modules: ``probing`` (facts), ``isolation_config`` (hermesd.yaml), ``plan`` (pure), ``confine`` + ``kernel``
(applying, stdlib only), ``syscalls`` (the process-control filter), ``enter`` (the shim), ``kanban``
(board layout), ``install`` (inputs).
"""

from __future__ import annotations

import importlib
from typing import Any

# Lazy: ``python -m supervisor.isolation.enter`` and ``exec_in_place`` must not pay for the
# planner's imports (dataclasses, pathlib…) they do not use.
_WHERE = {
    "EXIT_CANNOT_CONFINE": "enter", "EXIT_CANNOT_EXEC": "enter", "EXIT_NOT_FOUND": "enter",
    "exec_in_place": "enter", "unwrap": "enter", "wrap_argv": "enter",
    "Plan": "plan", "PlanInputs": "plan", "UserIds": "plan", "make_plan": "plan",
    "Probe": "probing", "best_mechanism": "probing", "doctor_lines": "probing", "probe": "probing",
    "IsolationConfigError": "isolation_config", "IsolationSettings": "isolation_config",
    "merge_isolation": "isolation_config", "parse_isolation": "isolation_config",
}
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
