"""A one-line progress display for long operations: redrawn on a terminal, silent when piped.

Scripts that pipe hermesd's output get only the final result lines, never carriage returns.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """``update(done, total)`` redraws ``label: done/total`` at most every ``every`` seconds."""

    def __init__(self, label: str, stream: TextIO | None = None, every: float = 0.1) -> None:
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = self.stream.isatty()
        self.every = every
        self._last = 0.0
        self._shown = False

    def update(self, done: int, total: int | None = None, note: str = "") -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self._last < self.every and (total is None or done < total):
            return
        self._last = now
        count = f"{done}/{total}" if total is not None else str(done)
        self.stream.write(f"\r\x1b[K{self.label}: {count}{' ' + note if note else ''}")
        self.stream.flush()
        self._shown = True

    def note(self, text: str) -> None:
        """Redraw a free-form line (waiting for something that has no count)."""
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self._last < self.every:
            return
        self._last = now
        self.stream.write(f"\r\x1b[K{self.label}: {text}")
        self.stream.flush()
        self._shown = True

    def done(self) -> None:
        if self._shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self._shown = False
