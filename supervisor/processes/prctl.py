"""The two ``prctl`` calls hermesd makes on itself: reap its descendants' orphans, and name itself.

Linux only, through libc (no extension module): where ``prctl`` is missing both are no-ops, which
costs a name in ``ps`` and, for the subreaper, that a ``setsid``'d grandchild is reaped by init
instead of by hermesd (its exit is then seen by polling, not by ``SIGCHLD``).
"""

from __future__ import annotations

import contextlib
import ctypes

_PR_SET_CHILD_SUBREAPER = 36
_PR_SET_NAME = 15


def become_subreaper() -> bool:
    """Adopt our descendants' orphans (Linux), so setsid'd grandchildren are reaped by us."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def set_process_name(name: str) -> None:
    """Name this process in ``ps``/``pgrep`` (the kernel's ``comm``), whatever interpreter runs it."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_NAME, name.encode()[:15], 0, 0, 0)
