"""Text from a profile's side (a process's command line, a gateway's log or files), made safe to show.

A gateway, or an agent inside it, controls its command line, its output and its records: a string
from there may carry terminal escape sequences or newlines that would forge lines in hermesd's log
or repaint an operator's terminal. Every such string passes through :func:`printable` before it
reaches a terminal, a log line or an event.
"""

from __future__ import annotations


def printable(text: str, limit: int = 300) -> str:
    """``text`` with every control or non-printable character shown as an escape, cut to ``limit``."""
    out = []
    for ch in text[:limit]:
        if ch.isprintable():
            out.append(ch)
        else:
            out.append(ch.encode("unicode_escape").decode("ascii"))
    return "".join(out) + ("…" if len(text) > limit else "")
