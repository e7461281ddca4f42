"""What upstream Hermes decides, declared once: the gateway's process contract, its files, the
platform registry and the per-release differences. When upstream changes, this package changes."""
