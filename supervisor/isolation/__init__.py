"""Trust domains: each profile's gateway confined so it cannot read, change or signal another.

Self-contained; each piece is imported from its module. The daemon and the CLI call:

1. At daemon start and in ``doctor``: ``probing.probe()`` (~3 ms, two short forks) and
   ``doctor_lines``; ``shared_board.migrate(root)`` moves a legacy ``<root>/kanban.db`` into
   ``kanban/default-board/`` (``BoardNotMovedError`` naming the file, ``KanbanBusyError`` while a
   process has it open: logged, retried at the next start).
2. Reading hermesd.yaml: ``supervisor.settings.parse_isolation`` per level, ``merge_isolation``.
3. Before every spawn: ``planning.make_plan`` (pure, microseconds; inputs from :mod:`install`).
   ``plan.runnable`` False: hold the profile with ``plan.reason``. Else spawn
   ``shim_argv.wrap_argv(plan, argv)`` (``off`` returns ``argv`` itself). A child that exits
   **125** could not be confined: its last log line says why (hold it, do not restart-loop);
   126/127: the command could not be executed.
4. Identity: until the shim execs, ``/proc/<pid>/cmdline`` is the shim's; ``shim_argv.unwrap``
   returns the gateway argv it will become (treat as "entering", not as foreign). PID and start
   time are unchanged by the exec.
5. ``hermesd exec PROFILE -- CMD``: the same plan, applied in the CLI process itself
   (``enter.exec_in_place``), which then execs.

Modules: ``probing`` (facts), ``planning`` (pure), ``confine`` + ``kernel``
(applying, stdlib only), ``syscalls`` (the process-control filter), ``enter`` (the shim), ``shim_argv``
(the shim's command line), ``shared_board`` (the kanban board's layout), ``install`` (inputs).
"""
