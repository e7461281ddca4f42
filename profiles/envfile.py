"""A profile's ``.env``, parsed with the grammar Hermes' loader (python-dotenv) accepts.

Supported, as upstream: ``KEY=value``, ``export KEY=value``, ``'single'`` (no escapes but
``\\'`` and ``\\\\``) and ``"double"`` quoted values (with backslash escapes) that may span
lines, unquoted values with a trailing `` # comment`` stripped, ``'quoted keys'``, comment
and blank lines, a ``KEY`` with no ``=`` (it sets nothing, and cancels an earlier ``KEY=``), and ``${VAR}`` /
``${VAR:-default}`` expansion.

Before parsing, the text gets the repair upstream writes back to ``.env`` before loading it
(``hermes_cli/config.py`` ``_sanitize_env_lines``): every line loses its surrounding blanks, and a
line holding two known settings run together (``TELEGRAM_BOT_TOKEN=123:abcAPI_SERVER_KEY=k``) is
split into one line each (:func:`repair`) on 0.19; from 0.20 on upstream only trims the lines (the
second "setting" stays part of the first value). hermesd never writes the repaired text back.

Two deliberate differences, both because hermesd judges a profile from its files alone:

* ``${VAR}`` expands only from keys defined *earlier in the same file*; the process
  environment is never consulted (it is the supervisor's, not the profile's).
* A line upstream would skip with a warning ("could not parse statement") is an error
  here, :class:`ProfileConfigError` with the line number: the skipped line is often the
  token line, and silently running a profile without its token is worse than holding it.

Parsed files are cached by ``(inode, size, mtime)`` so a rescan of 1,000 unchanged
profiles costs one ``stat`` each.
"""

from __future__ import annotations

import codecs
import re
from pathlib import Path

from profiles.errors import ProfileConfigError
from profiles.fileio import read_cached
from profiles.safeio import Beneath, beneath
from profiles.upstream.envkeys import KNOWN_ENV_KEYS

_WS = re.compile(r"[^\S\r\n]*")
_BLANK = re.compile(r"\s*")
_EXPORT = re.compile(r"export[^\S\r\n]+")
_QUOTED_KEY = re.compile(r"'([^']+)'")
_BARE_KEY = re.compile(r"([^=#\s]+)")
_SINGLE = re.compile(r"'((?:\\'|[^'])*)'")
_DOUBLE = re.compile(r'"((?:\\"|[^"])*)"')
_BARE_VALUE = re.compile(r"[^\r\n]*")
_TRAILER = re.compile(r"[^\S\r\n]*(?:#[^\r\n]*)?(?:\r\n|\n|\r|$)")
_DOUBLE_ESC = re.compile(r"\\[\\'\"abfnrtv]")
_SINGLE_ESC = re.compile(r"\\[\\']")
_INLINE_COMMENT = re.compile(r"\s+#.*")
_VARIABLE = re.compile(r"\$\{(?P<name>[^}:]*)(?::-(?P<default>[^}]*))?\}")

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

_cache: dict[str, tuple[tuple[int, int, int], dict[str, str]]] = {}
_cache_unsplit: dict[str, tuple[tuple[int, int, int], dict[str, str]]] = {}  # read without the split


def _unescape(pattern: re.Pattern[str], text: str) -> str:
    return pattern.sub(lambda m: codecs.decode(m.group(0), "unicode-escape"), text)


def _expand(value: str, known: dict[str, str]) -> str:
    if "${" not in value:
        return value
    return _VARIABLE.sub(lambda m: known.get(m.group("name")) or (m.group("default") or ""), value)


def _name(key: str) -> str:
    """How an error names the entry: by its key only when it looks like a variable name.

    A line such as ``123456789:AAH… (from BotFather)`` parses as a "key" that is really a token;
    no message may quote it, so anything but a plain identifier is left unnamed.
    """
    return f"the value of {key}" if _IDENTIFIER.fullmatch(key) and len(key) <= 64 else "the value on this line"


def _skip(pattern: re.Pattern[str], text: str, pos: int) -> int:
    """End of ``pattern`` at ``pos``, for patterns that always match (possibly empty)."""
    m = pattern.match(text, pos)
    return m.end() if m else pos


def parse_env_text(text: str, path: Path) -> dict[str, str]:
    """Parse ``.env`` text; ``path`` only labels errors."""
    values: dict[str, str] = {}
    pos = 0
    end = len(text)
    line, counted = 1, 0  # line number of ``counted``; newlines are counted once each (linear time)
    while True:
        pos = _skip(_BLANK, text, pos)
        if pos >= end:
            return values
        line += text.count("\n", counted, pos)
        counted = pos
        if text.startswith("#", pos):
            pos = _skip(_BARE_VALUE, text, pos)
            continue
        m = _EXPORT.match(text, pos)
        if m:
            pos = m.end()
        m = (_QUOTED_KEY if text.startswith("'", pos) else _BARE_KEY).match(text, pos)
        if m is None:
            raise ProfileConfigError(path, "cannot parse this line (expected KEY=value)", line=line)
        key = m.group(1)
        pos = _skip(_WS, text, m.end())
        value: str | None = None
        if text.startswith("=", pos):
            pos = _skip(_WS, text, pos + 1)
            ch = text[pos : pos + 1]
            if ch == "'" or ch == '"':
                m = (_SINGLE if ch == "'" else _DOUBLE).match(text, pos)
                if m is None:
                    raise ProfileConfigError(path, f"unterminated {ch} quote in {_name(key)}", line=line)
                value = _unescape(_SINGLE_ESC if ch == "'" else _DOUBLE_ESC, m.group(1))
                pos = m.end()
            else:
                stop = _skip(_BARE_VALUE, text, pos)
                value = _INLINE_COMMENT.sub("", text[pos:stop]).rstrip()
                pos = stop
        m = _TRAILER.match(text, pos)
        if m is None:
            raise ProfileConfigError(path, f"unexpected text after {_name(key)}", line=line)
        pos = m.end()
        if value is None:
            values.pop(key, None)  # a bare KEY unsets an earlier KEY=... (python-dotenv yields None)
        else:
            values[key] = _expand(value, values)


_STRUCTURED = ("://", "?", "&")


def _split_points(line: str) -> list[int]:
    """Where known ``NAME=`` settings start in ``line``, dropping matches inside a longer one."""
    ranges = []
    for name in KNOWN_ENV_KEYS:
        needle = name + "="
        i = line.find(needle)
        while i >= 0:
            ranges.append((i, i + len(needle)))
            i = line.find(needle, i + len(needle))
    return sorted({s for s, e in ranges if not any(s2 <= s and e2 >= e and (s2, e2) != (s, e) for s2, e2 in ranges)})


def _sanitized(lines: list[str], split: bool) -> list[str]:
    out = []
    for line in lines:
        raw = line.rstrip("\r\n")
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            out.append(raw + "\n")
            continue
        points = _split_points(stripped) if split and stripped.count("=") >= 2 else []  # two settings to split
        if len(points) > 1 and points[0] == 0:
            parts = [stripped[p:q] for p, q in zip(points, [*points[1:], len(stripped)], strict=True)]
            values = [seg.split("=", 1)[1] for seg in parts[:-1]]
            if not any(any(m in v for m in _STRUCTURED) or any(c.isspace() for c in v) for v in values):
                out.extend(part.strip() + "\n" for part in parts if part.strip())
                continue
        out.append(stripped + "\n")
    return out


def repair(text: str, split: bool = True) -> tuple[str, bool]:
    """Upstream's rewrite of ``.env`` text before it loads it, and whether it changes the file.

    ``split``: the release splits two known settings run together on one line (0.19; later
    releases only trim lines, see :attr:`profiles.upstream.lines.RuleLine.splits_run_together`).

    Lines are split as Python's text files split them (``\\n``, ``\\r\\n``, ``\\r``); NULs go.
    """
    parts = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    lines = [p + "\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])
    out = _sanitized([line.replace("\x00", "") for line in lines], split)
    return "".join(out), out != lines


def decode(raw: bytes, split: bool = True) -> str:
    """``.env`` bytes as upstream ends up loading them (``env_loader._sanitize_env_file_if_needed``).

    The repair is applied when it changes something (upstream then writes the repaired text back
    as UTF-8, so undecodable bytes stay replacement characters); otherwise the original bytes are
    read as UTF-8, else Latin-1. A UTF-16 file (with its BOM) is read as such; an undecodable
    first line or a UTF-32 BOM leaves the file as it is.
    """
    if raw.startswith((codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE)):
        return raw.decode("latin-1")
    if raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        try:
            return repair(raw.decode("utf-16"), split)[0]
        except UnicodeDecodeError:
            return raw.decode("latin-1")
    lenient = raw.decode("utf-8-sig", errors="replace")
    if not lenient.startswith("\ufffd"):
        text, changed = repair(lenient, split)
        if changed:
            return text
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def read_env_file(path: Beneath | Path | str, *, split: bool = True) -> dict[str, str]:
    """The variables a ``.env`` file sets; ``{}`` when it does not exist.

    UTF-8 with an optional BOM, falling back to Latin-1 like upstream's loader, after upstream's
    repair (:func:`decode`; ``split`` as there).
    Malformed content raises :class:`ProfileConfigError` naming the file and line; so does a
    ``.env`` that is a link (hermesd never reads one profile's file through another's).
    """
    spot = beneath(path)
    values = read_cached(spot, _cache if split else _cache_unsplit,
                         lambda raw: parse_env_text(decode(raw, split).replace("\x00", ""), spot.path))
    return {} if values is None else dict(values)
