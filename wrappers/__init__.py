"""Command aliases (``coder`` -> ``hermes -p coder``) that hand gateway verbs to hermesd while it runs."""
