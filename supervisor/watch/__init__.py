"""Live reaction to the profile tree (see events.py for what matters, choose.py for which watcher)."""
