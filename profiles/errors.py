"""The exceptions a user can cause, kept in one place so the top-level CLI can catch them all.

Everything a person can get wrong (a bad name, a missing profile, a hostile archive, a
malformed config file) raises a subclass of :class:`ProfileError`. The CLI turns those into
one ``hermesd: error: ...`` line; anything else is a bug and is allowed to surface as a
traceback. Each message names the offending value and the rule it broke, because the
person reading it usually has only that line to go on.
"""

from __future__ import annotations

from pathlib import Path


class ProfileError(Exception):
    """Base of every user-facing error raised by ``profiles`` and ``wrappers``."""


class InvalidNameError(ProfileError, ValueError):
    """A profile or alias name that breaks the naming rules."""


class ProfileNotFoundError(ProfileError, FileNotFoundError):
    """The named profile (or archive, or clone source) does not exist."""


class ProfileExistsError(ProfileError, FileExistsError):
    """The target profile name is already taken."""


class GatewayRunningError(ProfileError):
    """A gateway is live for the profile, so moving or removing its folder would orphan it."""


class UnsafePathError(ProfileError):
    """A path that would leave the profiles folder (a symlink, usually)."""


class UnsafeArchiveError(ProfileError, ValueError):
    """An archive member that could escape the target, or an archive that is too big."""


class WrapperError(ProfileError):
    """A wrapper alias that cannot be created, replaced or removed safely."""


class ProfileConfigError(ProfileError, ValueError):
    """A malformed ``.env``, ``config.yaml`` or ``profile.yaml``.

    Carries the file and (when known) the 1-based line so the supervisor can hold only
    the profile that owns the file and tell the user exactly where to look.
    """

    def __init__(self, path: Path, message: str, line: int | None = None) -> None:
        self.path = Path(path)
        self.line = line
        self.reason = message
        where = f"{self.path}:{line}" if line is not None else str(self.path)
        super().__init__(f"{where}: {message}")
