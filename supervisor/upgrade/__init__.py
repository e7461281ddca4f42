"""Fleet operations: ``hermesd upgrade`` (new hermes-agent code, one gateway at a time, each gated on
health), its ``--rollback``, and ``hermesd restart --rolling`` (the same gate without new code).

Why a rolling, gated restart: upstream's own ``hermes update`` restarts every gateway two seconds
apart, so a shared token's winner flips and one broken release takes the whole fleet down before
anyone sees it. Here a canary goes first, each profile must come back serving as before (running,
heartbeat fresh, its platforms connected and its API server answering as before, no new holds)
before the next is touched, and the first failure stops the operation with the rest untouched.
Everything the new release may rewrite is saved first, so a rollback puts the old code and the old
files back byte for byte.

- ``decisions``: the decisions, pure (order, canary, the health gate), tested with an injected clock;
- ``needs``: what a target release needs in the root's files before it may run (the pre-flight);
- ``backup``: saving and restoring the profile files a release migrates, never through a link;
- ``environment``: the interpreter side: pip, and a byte copy of the distributions pip replaces;
- ``record``: the operation's record under ``<root>/.hermesd/upgrades/<id>/``;
- ``run``: the I/O: the daemon's control socket, progress, the event journal;
- ``operations``: the three operations, step by step.
"""
