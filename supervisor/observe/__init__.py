"""Observability for hermesd: the event journal, ``hermesd events``, hooks and Prometheus metrics.

Self-contained: the daemon's loop talks to one :class:`supervisor.observe.observer.Observer`;
``hermesd events`` and ``hermesd metrics`` (:mod:`supervisor.cli.observe`) read the journal and the
counters; ``hermesd status PROFILE`` gets its detail from :func:`supervisor.observe.detail.render_detail`.
Importing this package imports nothing: the config reader loads ``sections`` alone.

What the loop calls, and when::

    from supervisor.observe.observer import Observer
    from supervisor.observe.sections import parse_sections, ObserveConfigError

    settings = parse_sections(plain_yaml_top)          # config reader: events/hooks/metrics sections
    obs = Observer(root, settings, env=daemon.env, version=__version__)
    obs.open()                                          # at start-up, before the first event (sync)
    obs.record(action.event)                            # every planner Emit action (stamped here, or
                                                        # as the loop stamps it: ts, seq, daemon kept)
    obs.emit("exited", "coder", pid=1, code=None, signal="SIGKILL", kind="crash", reason="…", uptime_s=3.2)
    await obs.start(status=lambda: document(daemon))   # once the loop runs: metrics listener, if configured
    obs.control_request(verb, "ok" | "error" | "denied")   # per control request
    obs.child_reaped(pid, status)                       # SIGCHLD reaper, for a PID that is no gateway
    obs.metrics_text(document(daemon))                  # control verb "metrics" (hermesd metrics)
    await obs.reconfigure(new_settings)                 # after hermesd.yaml was re-read and applied
    obs.housekeeping()                                  # optional, from the periodic tick
    await obs.aclose()                                  # at shutdown, after "daemon_stopping"

Modules: ``events`` (schema, stamping, one-line rendering), ``journal`` (the writer), ``reader``
(iterate, filter, follow, ``--since``), ``detail`` (status detail), ``hooks``, ``metrics``
(counters, text format, listener), ``sections`` (hermesd.yaml sections).
"""
