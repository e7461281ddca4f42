#!/usr/bin/env python3
"""The one child program both supervisors run in the benchmark: idle, silent, obeys SIGTERM at once.

Usage (hermesd appends the last part to its configured command; supervisord gets the same argv):

    child.py [-p NAME] gateway run [--external-supervisor]

With ``HERMES_HOME`` set it writes a minimal ``gateway.pid`` and ``gateway_state.json`` there (the
fields hermesd's ``status`` reads), so hermesd shows it ``running``; supervisord's copy does the
same work in its own folders, so both supervisors run exactly the same program doing the same work.
Then it sleeps in ``sigsuspend`` until SIGTERM/SIGINT (exit 0). Standard library only; meant to be
run with ``python -S`` so that start-up is a few milliseconds.
"""

from __future__ import annotations

import json
import os
import signal
import sys


def _usage() -> None:
    sys.stderr.write("usage: child.py [-p NAME] gateway run [--external-supervisor]\n")
    os._exit(2)


def _parse(argv: list[str]) -> None:
    rest = list(argv)
    if rest[:1] in (["-p"], ["--profile"]):
        if len(rest) < 2:
            _usage()
        rest = rest[2:]
    if rest and rest[:2] != ["gateway", "run"]:
        _usage()
    if any(a not in ("gateway", "run", "--external-supervisor") for a in rest):
        _usage()


def _start_time() -> int | None:
    """Field 22 of /proc/self/stat, as upstream records it in gateway.pid."""
    try:
        with open("/proc/self/stat", "rb") as fh:
            raw = fh.read()
        return int(raw[raw.rindex(b")") + 2 :].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _write_json(path: str, obj: dict[str, object]) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(obj, fh)
    os.replace(tmp, path)


def _stop(_sig: int, _frame: object) -> None:
    os._exit(0)


def main() -> None:
    _parse(sys.argv[1:])
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    home = os.environ.get("HERMES_HOME", "")
    if home:
        pid = os.getpid()
        record = {"pid": pid, "kind": "hermes-gateway", "argv": sys.argv, "start_time": _start_time()}
        _write_json(os.path.join(home, "gateway.pid"), record)
        _write_json(
            os.path.join(home, "gateway_state.json"),
            {**record, "gateway_state": "running", "exit_reason": None, "restart_requested": False, "platforms": {}},
        )
    while True:
        signal.pause()


if __name__ == "__main__":
    main()
