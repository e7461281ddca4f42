"""Trust domains: each profile's gateway confined so it cannot read, change or signal another.

Self-contained; each piece is imported from its module (``probing.probe``, ``planning.make_plan``,
``shim_argv.wrap_argv``, ``enter.exec_in_place``, ``isolation_config.parse_isolation``…). What
the daemon (the loop) and the CLI call, and when:

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
                                   kanban_layout=shared_board.layout(root)))

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
8. Kanban: at daemon start, before spawning, ``shared_board.migrate(root)`` moves a legacy
   ``<root>/kanban.db`` into ``kanban/default-board/`` (raises ``KanbanBusyError`` while a process
   has it open: report it in doctor and retry on the next start).

Modules: ``probing`` (facts), ``isolation_config`` (hermesd.yaml), ``planning`` (pure), ``confine`` + ``kernel``
(applying, stdlib only), ``syscalls`` (the process-control filter), ``enter`` (the shim), ``shim_argv``
(the shim's command line), ``shared_board`` (the kanban board's layout), ``install`` (inputs).
"""
