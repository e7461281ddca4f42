"""What operators get out of hermesd besides the daemon: ``hermesd status``'s rendering, exports
to other engines, service units, container probes, and the stop that precedes moving a profile."""
