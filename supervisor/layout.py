"""Where hermesd keeps its own files under a root: the one place that knows this layout.

Everything lives in ``<root>/.hermesd/`` so that a profile export, a ``--clone-all`` and the file
watcher can exclude it with one name, and so that two roots never share anything.
"""

from __future__ import annotations

import contextlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from profiles.safeio import Beneath, at, mkdir, read_regular, replace_bytes

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

    def beneath(self, path: Path) -> Beneath:
        """One of hermesd's files (a path under the root) as :mod:`profiles.safeio` opens it: from the
        root, no link followed, so neither ``.hermesd`` nor anything in it can redirect a write."""
        return at(self.root, str(path.relative_to(self.root)))

    @property
    def upgrades(self) -> Path:
        """Records of fleet operations (``hermesd upgrade``): one folder each, with what a rollback needs."""
        return self.dir / "upgrades"

    @property
    def upgrade_lock(self) -> Path:
        """Held (``flock``) for the whole of a fleet operation: by ``hermesd upgrade`` and ``restart
        --rolling``, which take it, and by ``status``, which asks who holds it
        (:mod:`supervisor.processes.lockholder`)."""
        return self.dir / "upgrade.lock"

    @property
    def standalone_dir(self) -> Path:
        """Records of ``hermesd standalone``: every original byte of the user's files it changed."""
        return self.dir / "standalone"

    @property
    def standalone_dirs(self) -> tuple[Path, Path]:
        """Where ``--undo`` looks: :attr:`standalone_dir`, then ``adopt/``, where the command kept its
        records while it was called ``hermesd adopt``."""
        return self.standalone_dir, self.dir / "adopt"

    def ensure_standalone_dir(self) -> Path:
        self.ensure()
        with contextlib.suppress(FileExistsError):
            mkdir(self.beneath(self.standalone_dir), 0o700)
        check_private(self.standalone_dir)
        return self.standalone_dir

    @property
    def salt_file(self) -> Path:
        return self.dir / "fingerprint.salt"

    @property
    def socket(self) -> Path:
        """The control socket; moved to a short per-user path when the root's is too long."""
        direct = self.dir / "control.sock"
        if len(os.fsencode(direct)) <= _SUN_PATH_MAX:
            return direct
        import hashlib  # here: only long roots need it, and it costs every command ~1 ms to import

        digest = hashlib.sha256(os.fsencode(self.root)).hexdigest()[:16]
        return Path(f"/tmp/hermesd-{os.getuid()}") / f"{digest}.sock"

    def ensure(self) -> None:
        """Create hermesd's folders, private to the user, and refuse ones it cannot trust.

        Never follows a symlink and never changes the mode of a folder it did not create: a
        ``.hermesd`` that is a link to ``/tmp`` (or a plain file, or a folder another user can
        write) is refused with the fix, not repaired. The socket may live in a shared ``/tmp``
        folder (long roots); another user who created that folder first could otherwise stand in
        for the daemon.
        """
        for d in (self.dir, self.logs, self.socket.parent):
            with contextlib.suppress(FileExistsError):
                os.mkdir(d, 0o700)
            check_private(d)

    def socket_checked(self) -> Path:
        """The socket path, after checking that nobody else can have put it there (clients call this
        before connecting).

        The root's own ``.hermesd`` must be a real directory of ours that no other user can write: a
        link to a shared folder, or a folder others can write, would let them stand in for the
        daemon. Read bits are tolerated there (an operator's ``chmod 755`` does not let anyone plant
        a socket); the short-path fallback in a shared ``/tmp`` must be strictly private.
        """
        parent = self.socket.parent
        check_private(parent, allow_read=parent == self.dir)
        return self.socket

    def salt(self) -> bytes:
        """The per-root salt for credential fingerprints, created on first use.

        Salting per root keeps fingerprints comparable inside one root while making them
        useless for guessing a token across installations.
        """
        where = self.beneath(self.salt_file)
        try:
            data = read_regular(where, 4096)
            if len(data) >= 16:
                return data
        except FileNotFoundError:
            pass
        self.ensure()
        import secrets  # here: created once per root; importing it (hmac, random, base64) costs ~2 ms

        data = secrets.token_bytes(16)
        try:
            replace_bytes(where, data, 0o600, exclusive=True)  # first writer wins; a racing one reads the winner's
        except FileExistsError:
            data = read_regular(where, 4096)
        return data


class UnsafeFolderError(PermissionError):
    """A folder hermesd relies on is not a private directory of this user."""


def check_private(folder: Path, *, allow_read: bool = False) -> None:
    """Raise :class:`UnsafeFolderError` unless ``folder`` is a real directory of ours, mode 0700
    (``allow_read``: no group or other write bit, read and search allowed)."""
    st = folder.lstat()
    if stat.S_ISLNK(st.st_mode):
        raise UnsafeFolderError(
            f"{folder} is a symlink; hermesd never follows a link for its own folder (remove the link)"
        )
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafeFolderError(f"{folder} is not a directory; hermesd keeps its own files there (move it away)")
    if st.st_uid != os.getuid():
        raise UnsafeFolderError(
            f"permission denied: {folder} belongs to uid {st.st_uid}, not to uid {os.getuid()}; run hermesd as "
            "the user that owns this root"
        )
    if st.st_mode & (0o022 if allow_read else 0o077):
        raise UnsafeFolderError(
            f"{folder} must be owned by uid {os.getuid()} with mode 0700 (found uid {st.st_uid}, mode "
            f"{stat.S_IMODE(st.st_mode):04o}); hermesd does not change folders it did not create: "
            f"chmod 700 {folder}"
        )
