"""Fault injection against a real hermesd: real processes, signals, files, sockets and mounts.

Each scenario injects faults and checks that nothing is lost, duplicated or left running. Every
test records what it injected and observed in the ``faults`` ledger (see ``conftest.py``); the
run ends with a table of them, also written as markdown to ``$HERMESD_FAULT_TABLE`` when set.
Tests marked ``xfail(strict=True)`` reproduce known hermesd bugs: they start failing (XPASS) the
moment the bug is fixed, which is the cue to drop the marker.
"""
