"""The profile model: what a Hermes profile is on disk, read and changed without running anything.

One idea per module: ``paths`` (where), ``names`` (what may be called what), ``discovery``
(which profiles exist, are served, are active), ``lifecycle`` (create/delete/rename),
``meta`` (``profile.yaml``), ``archive`` (export/import), ``envfile`` and ``credentials``
(what a profile's gateway would claim), ``routes`` (``profile_routes``), ``info`` (what the
CLI shows), ``cli`` (``hermesd profile ...``), ``errors`` (everything a user can get wrong).
Nothing in this package starts or signals a process: the supervisor owns processes.
"""
