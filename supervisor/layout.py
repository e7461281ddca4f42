"""Where hermesd keeps its own files under a root: the one place that knows this layout.

Everything lives in ``<root>/.hermesd/`` so that a profile export, a ``--clone-all`` and the file
watcher can exclude it with one name, and so that two roots never share anything.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path

DIRNAME = ".hermesd"
CONFIG_NAME = "hermesd.yaml"
# A unix socket path must fit in sun_path (108 bytes including the NUL).
_SUN_PATH_MAX = 107


@dataclass(frozen=True, slots=True)
class Layout:
    """Paths of one root's hermesd files."""

    root: Path

    @property
    def dir(self) -> Path:
        return self.root / DIRNAME

    @property
    def config(self) -> Path:
        return self.root / CONFIG_NAME

    @property
    def lock(self) -> Path:
        return self.dir / "hermesd.lock"

    @property
    def pidfile(self) -> Path:
        return self.dir / "hermesd.pid"

    @property
    def state(self) -> Path:
        return self.dir / "state.json"

    @property
    def daemon_log(self) -> Path:
        return self.dir / "hermesd.log"

    @property
    def logs(self) -> Path:
        return self.dir / "logs"

    def child_log(self, profile: str) -> Path:
        return self.logs / f"{profile}.log"

    @property
    def salt_file(self) -> Path:
        return self.dir / "fingerprint.salt"

    @property
    def socket(self) -> Path:
        """The control socket; moved to a short per-user path when the root's is too long."""
        direct = self.dir / "control.sock"
        if len(os.fsencode(direct)) <= _SUN_PATH_MAX:
            return direct
        digest = hashlib.sha256(os.fsencode(self.root)).hexdigest()[:16]
        return Path(f"/tmp/hermesd-{os.getuid()}") / f"{digest}.sock"

    def ensure(self) -> None:
        """Create hermesd's folders, private to the user, and refuse ones someone else controls.

        The socket may live in a shared ``/tmp`` folder (long roots); another user who created
        that folder first could otherwise stand in for the daemon.
        """
        for d in (self.dir, self.logs, self.socket.parent):
            d.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = self.dir.lstat()
        if st.st_uid == os.getuid() and st.st_mode & 0o077:
            self.dir.chmod(0o700)  # our own folder, created loosely by hand: tighten it
        check_private(self.socket.parent)

    def socket_checked(self) -> Path:
        """The socket path, after checking its folder is ours (clients call this before connecting)."""
        if self.socket.parent != self.dir:
            check_private(self.socket.parent)
        return self.socket


    def salt(self) -> bytes:
        """The per-root salt for credential fingerprints, created on first use.

        Salting per root keeps fingerprints comparable inside one root while making them
        useless for guessing a token across installations.
        """
        try:
            data = self.salt_file.read_bytes()
            if len(data) >= 16:
                return data
        except FileNotFoundError:
            pass
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        data = secrets.token_bytes(16)
        tmp = self.salt_file.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        try:
            os.link(tmp, self.salt_file)  # first writer wins; a racing one reads the winner's
        except FileExistsError:
            data = self.salt_file.read_bytes()
        finally:
            tmp.unlink(missing_ok=True)
        return data


class UnsafeFolderError(PermissionError):
    """A folder hermesd relies on is not a private directory of this user."""


def check_private(folder: Path) -> None:
    st = folder.lstat()
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        kind = "" if stat.S_ISDIR(st.st_mode) else ", not a directory"
        raise UnsafeFolderError(
            f"{folder} must be a directory owned by uid {os.getuid()} with mode 0700 "
            f"(found uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):04o}{kind})"
        )
