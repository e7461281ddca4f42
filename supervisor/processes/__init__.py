"""One gateway process and the primitives hermesd starts, names, identifies, signals and
stops it with: its child spec and tags, the PID guard, prctl, sd_notify, its log, its
sockets. Built on the pure plan and the isolation mechanism, beneath every other mechanism."""
