"""How to run this very hermesd again: for ``hermesd start``'s daemon, a service unit, an export.

Its own module because ``start`` needs it on every call and must not pay for what the unit writers
import (doctor, the settings parser).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def hermesd_command() -> list[str]:
    """An absolute command that runs this very hermesd, for a unit, a hook or ``hermesd start`` to call.

    The ``hermesd`` script being run, else the one installed beside this interpreter (a venv's
    ``bin/``), else this interpreter with ``-m supervisor``; never one found on ``PATH``, which may
    be another installation. A script (``ps`` and ``pgrep`` name it) must be executable. Symlinks
    are not resolved: a venv's ``python`` is a symlink whose target has no hermesd installed.
    """
    run = [Path(sys.argv[0]).absolute()] if sys.argv and Path(sys.argv[0]).name == "hermesd" else []
    for script in (*run, Path(sys.executable).parent / "hermesd"):
        if script.is_file() and os.access(script, os.X_OK):
            return [str(script)]
    return [sys.executable, "-m", "supervisor"]
