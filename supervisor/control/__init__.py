"""The control socket: the protocol, the one client every command uses, and the daemon's server."""
