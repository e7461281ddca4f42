"""The hermesd command line: ``main`` (the parser and the entry point), ``common`` (how a command is
declared, and what every command shares), ``request`` (one request to the daemon), and one module
per group of commands, each declaring its commands with ``register(commands)`` (the table is
:data:`supervisor.cli.main.GROUPS`). The work a command does lives in its domain module
(:mod:`supervisor.ops.export`, :mod:`supervisor.doctor`, :mod:`profiles`…).

A command module imports at its top what declaring its commands needs; a handler imports the code it
runs (those lines say "run-time only"), because ``--help``, a mistyped command and every <TAB> of
shell completion build every command's parser: with every handler's code imported at the top, that
costs 260 ms of CPU instead of 90 (measured).

Importing this package keeps OpenSSL out of every hermesd command: no command speaks TLS, and
every hash hermesd takes (salted fingerprints, short digests) is built into CPython, which
``hashlib`` falls back to without OpenSSL's ``_hashlib``. Loading libcrypto would cost every
command ~2 ms and the daemon 3.5 MiB resident. It must happen before anything imports ``hashlib``,
hence here, the first module of every command; a process that already loaded ``hashlib`` keeps it.
"""

import sys

if "hashlib" not in sys.modules:
    sys.modules["_hashlib"] = None  # type: ignore[assignment]
