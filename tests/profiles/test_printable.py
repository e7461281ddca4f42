"""Text from a profile's files reaches a terminal escaped: a forged line cannot fake another profile's row."""

from __future__ import annotations

from profiles.printable import printable, printable_lines, printable_tree
from supervisor.daemon import status_rows
from supervisor.observe.events import render_line
from supervisor.ops import status

FORGED = "bad token\r\x1b[2K\nbravo     running   4242    3m      0         -"


def test_control_characters_are_shown_escaped():
    assert printable("a\r\x1b[2K\nb\t\x00\x7f\x85\u2028\u202e") == "a\\r\\x1b[2K\\nb\\t\\x00\\x7f\\x85\\u2028\\u202e"
    assert printable("ünïcödé 😀 emoji and C:\\path") == "ünïcödé 😀 emoji and C:\\path"
    assert printable_lines("one\ttab\r\x1b[31m\ntwo") == "one\ttab\\r\\x1b[31m\ntwo"
    assert printable_tree({"k\n": ["v\x1b", 1, None]}) == {"k\\n": ["v\\x1b", 1, None]}


def _row(name: str, **fields):
    row = {"name": name, "home": f"/r/profiles/{name}", **status_rows._DEFAULTS, "state": "running", "pid": 100,
           "platforms": {}, "gateway_state": "running", "heartbeat_age_s": 1.0, "cpu_percent": 0.0,
           "rss_bytes": 1 << 20}
    row.update(fields)
    return row


def test_status_cannot_show_a_forged_row():
    doc = {"root": "/r", "supervisor": {"running": True, "pid": 1}, "profiles": [
        _row("alpha", state="backoff", reason=FORGED, pid=None,
             platforms={"telegram": {"state": "fatal", "error_code": "auth", "error_message": FORGED}},
             last_exit={"description": FORGED, "at": 0}),
        _row("bravo", state="held", reason="credential_conflict", pid=None),
    ]}
    text = status.render(doc, now=10.0)
    assert "\r" not in text and "\x1b" not in text
    assert [ln.split()[1] for ln in text.splitlines() if ln.startswith("bravo ")] == ["held"]
    assert "\\r\\x1b[2K\\nbravo" in text
    colored = status.render(doc, now=10.0, color=True)  # hermesd's own colours only
    assert "\r" not in colored and "\x1b[2K" not in colored


def test_an_event_line_cannot_be_split():
    line = render_line({"ts": 0, "profile": "alpha", "type": "platform", "platform": "telegram", "state": "fatal",
                        "error_code": "auth", "error_message": FORGED}, width=8)
    shown = render_line(printable_tree({"ts": 0, "profile": "alpha", "type": "platform", "platform": "telegram",
                                        "state": "fatal", "error_code": "auth", "error_message": FORGED}), width=8)
    assert "\n" in line or "\r" in line or "\x1b" in line  # what the journal holds is the gateway's text
    assert "\n" not in shown and "\r" not in shown and "\x1b" not in shown


def test_printable_tree_is_printable_applied_to_every_string_at_every_depth():
    """Its fast path (strings already printable are kept as they are) changes no answer."""
    import random

    rnd = random.Random(38)
    alphabet = ["a", " ", "\n", "\r", "\x1b", "\u202e", "é", "\U0001f600", "\x00", "\x7f", "\u2028", "\t", "\\"]

    def text() -> str:
        return "".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 5)))

    def tree(depth: int = 0):
        kind = rnd.randint(0, 7 if depth < 4 else 3)
        if kind == 0:
            return text()
        if kind < 4:
            return [None, 7, 1.5][kind - 1]
        if kind < 6:
            return {text(): tree(depth + 1) for _ in range(rnd.randint(0, 4))}
        return (list if kind == 6 else tuple)(tree(depth + 1) for _ in range(rnd.randint(0, 4)))

    def expected(v):
        if isinstance(v, str):
            return printable(v)
        if isinstance(v, dict):
            return {printable(k): expected(x) for k, x in v.items()}
        return [expected(x) for x in v] if isinstance(v, list | tuple) else v

    for _ in range(2000):
        v = tree()
        assert printable_tree(v) == expected(v)
