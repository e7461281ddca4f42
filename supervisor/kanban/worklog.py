"""A kanban worker's log: where it may be (its board's log folder, nowhere else) and how it is opened.

Why this is its own rule: upstream's dispatcher writes each worker's output to
``<board>/logs/<task>.log`` and hands that file to the worker as its stdout. Under hermesd the
dispatcher's messenger *names* the file in its request, and the dispatcher is another profile:
a path taken from it could name another profile's ``.env``, its ``MEMORY.md`` (a lasting prompt
injection) or hermesd's own event journal. So the daemon never opens what the request names:

* :func:`log_parts` derives the only acceptable path from the task id and the board slug
  (both checked against upstream's own patterns) under the kanban home, and the request's path
  must be exactly that;
* :func:`open_log` is called by the worker's keeper *after* the assignee's confinement is in
  force (:func:`supervisor.cli.exec.run`): the file is opened with the assignee's rights, beneath
  the root by the file rule (:mod:`profiles.safeio`: ``kanban/`` and everything below it without
  following any link), and only a regular file is accepted. A link planted in ``logs/`` fails,
  and even a path the check let through could reach nothing the assignee itself cannot.
"""

from __future__ import annotations

import errno
import re
from pathlib import Path

from profiles import safeio
from profiles.safeio import UnsafeFileError

# Upstream's task ids (kanban_db: "t_" + hex) and board slugs (_BOARD_SLUG_RE: 1-64 lowercase
# alphanumerics, hyphens, underscores, not starting with - or _). Dots are refused outright, so
# neither can be "." or "..".
_TASK_RE = re.compile(r"[A-Za-z0-9_-]{1,80}")
_SLUG_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
DEFAULT_BOARD = "default"


class LogError(ValueError):
    """The log a worker request names is not its board's; the message says why."""


def log_parts(kanban_home: Path, board: str | None, task: str) -> tuple[Path, str]:
    """``(<kanban home>/kanban, relative path of the task's log)``: the base every component of
    which must be a real folder, and the part below it (upstream's ``worker_logs_dir``)."""
    if not _TASK_RE.fullmatch(task):
        raise LogError(f"task id {task[:40]!r} is not one of upstream's")
    slug = (board or "").strip().lower() or DEFAULT_BOARD
    if not _SLUG_RE.fullmatch(slug):
        raise LogError(f"board {slug[:40]!r} is not a valid board slug")
    rel = f"logs/{task}.log" if slug == DEFAULT_BOARD else f"boards/{slug}/logs/{task}.log"
    return kanban_home / "kanban", rel


def open_log(base: Path, rel: str) -> int:
    """Open the task's log ``base/rel`` (:func:`log_parts`) for appending, created if missing, and
    only if it is a regular file. Returns a descriptor (close-on-exec).

    ``base`` is ``<kanban home>/kanban``: the kanban home (the root, the operator's) is trusted, and
    everything from ``kanban`` down is the board's, resolved beneath it without following any link
    (:func:`profiles.safeio.open_append`; a FIFO neither blocks the open nor is written to).
    """
    if not base.is_absolute() or any(p in ("", ".", "..") for p in rel.split("/")):
        raise LogError(f"{base}/{rel}: not a plain path")
    where = safeio.at(base.parent, base.name, rel)
    try:
        return safeio.open_append(where, 0o644)
    except OSError as exc:
        raise LogError(f"{base}/{rel}: {_why(exc)}") from None


def _why(exc: OSError) -> str:
    if isinstance(exc, UnsafeFileError):
        return exc.problem
    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
        return "is a link or not a folder (links are never followed)"
    return exc.strerror or str(exc)
