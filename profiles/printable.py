"""Text from a profile's files or a gateway's state, made safe to show on a terminal or in a log line.

A platform's error message, an exit reason, a folder name, a description: all come from files the
profile's agent can write. Printed raw, ``\\r\\x1b[2K`` erases the line a person is reading and
``\\n`` starts a new one, so a forged row ("bravo running") appears in ``hermesd status`` for
another profile; other sequences retitle the terminal or write to the clipboard. :func:`printable`
is the one function every place that shows such text calls: every character Python does not
consider printable (C0 and C1 controls, DEL, line and paragraph separators, bidirectional
overrides, unassigned code points) is shown escaped, ``\\n`` as ``\\n``, ESC as ``\\x1b``,
U+202E as ``\\u202e``. Everything else, including non-ASCII letters and emoji, is left alone.
JSON output needs none of this: ``json.dumps`` escapes control characters itself.
"""

from __future__ import annotations

from typing import Any

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(ch: str) -> str:
    if ch in _NAMED:
        return _NAMED[ch]
    n = ord(ch)
    if n < 0x100:
        return f"\\x{n:02x}"
    return f"\\u{n:04x}" if n < 0x10000 else f"\\U{n:08x}"


def printable(text: object, limit: int | None = None) -> str:
    """``text`` (any object, as ``str``) with every non-printable character shown escaped: one line.

    ``limit``: at most that many characters of ``text`` are shown, then ``…`` (a field from a request
    or a process environment, whose length its sender chose).
    """
    s = text if isinstance(text, str) else str(text)
    cut = limit is not None and len(s) > limit
    if cut:
        s = s[:limit]
    if not s.isprintable():
        s = "".join(ch if ch.isprintable() else _escape(ch) for ch in s)
    return s + "…" if cut else s


def printable_lines(text: str) -> str:
    """:func:`printable` for text whose line breaks and tabs are meant (a gateway's log): ``\\n`` and
    ``\\t`` stay, every other control character (``\\r`` included) is shown escaped."""
    return "\n".join("\t".join(printable(cell) for cell in line.split("\t")) for line in text.split("\n"))


def printable_tree(value: Any) -> Any:
    """A copy of a JSON-like document with :func:`printable` applied to every string, keys included.

    ``status`` runs it over the daemon's whole answer (~20,000 strings at 100 profiles), nearly all
    printable already: those are taken as they are, without a call per string.
    """
    if isinstance(value, str):
        return value if value.isprintable() else printable(value)
    if isinstance(value, dict):
        return {(k if isinstance(k, str) and k.isprintable() else printable_tree(k)):
                (v if isinstance(v, str) and v.isprintable() else printable_tree(v)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [v if isinstance(v, str) and v.isprintable() else printable_tree(v) for v in value]
    return value
