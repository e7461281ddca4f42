"""The profile model: what a Hermes profile is on disk, read and changed by hermesd (created by upstream's own code).

One idea per module: ``paths`` (where), ``names`` (what may be called what), ``discovery``
(which profiles exist, are served, are active), ``lifecycle`` (create/delete/rename), ``meta``
(``profile.yaml``), ``archive`` (export/import), ``envfile`` and ``credentials`` (what a profile's
gateway would claim), ``routes`` (``profile_routes``), ``info`` (what the CLI shows), ``commands``
(``hermesd profile ...``), ``errors`` (everything a user can get wrong); ``safeio``, ``safetree`` and
``beneath`` are the file layer every one of them goes through. Nothing in this package signals a
process, and the one it starts is the short-lived helper that runs upstream's own ``create_profile``
(``upstream.calls``): the supervisor owns processes.
"""
