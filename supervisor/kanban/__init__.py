"""Upstream's kanban board under hermesd: who dispatches, and where the workers run.

Upstream (hermes-agent 0.19.0, contract section 7): every gateway tries to run the kanban
dispatcher; a machine-wide ``flock`` on ``<kanban home>/kanban/.dispatcher.lock`` lets the first
one win, and the winner spawns workers for *other* profiles as its own children
(``hermes -p <assignee> … chat -q "work kanban task <id>"``, ``HERMES_BIN`` first).

* :mod:`.dispatch` makes the dispatcher a choice (``kanban: {dispatcher: PROFILE | off}`` in
  hermesd.yaml) through the one switch upstream reads from the environment,
  ``HERMES_KANBAN_DISPATCH_IN_GATEWAY``, and reads who really holds the lock (``/proc/locks``,
  never a guess, never a probe that could take the lock).
* :mod:`.handoff` serves the chosen dispatcher's ``HERMES_BIN`` and a restricted socket (two verbs,
  only for that gateway's process tree); :mod:`.worker` is the messenger behind ``HERMES_BIN``;
  :mod:`.workers` runs each worker as ``hermesd exec <assignee>`` would, in hermesd's tree.
* :mod:`.observe` finds running workers (upstream tags them with ``HERMES_KANBAN_TASK`` and
  ``HERMES_PROFILE``) so ``status`` can list them per assignee, with the tree they live in.
"""
