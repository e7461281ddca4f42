"""hermesd's supervisor: the daemon, its control socket and the command line."""

__version__ = "0.1.0"
