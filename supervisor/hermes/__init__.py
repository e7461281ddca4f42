"""The Hermes a gateway runs: the interpreter and release behind a gateway command, the
libraries that interpreter has, and which hermes-agent code a running gateway executes."""
