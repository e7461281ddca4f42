"""Pure decisions: nothing here reads a clock, a file or a process (see docs/architecture.md)."""
