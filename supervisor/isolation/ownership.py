"""Whether a profile's files belong to the account its gateway runs as (``isolation.user``), and
making them so when the operator asks.

A profile created while hermesd ran it as root has a home owned by root. Switched to its own
account, its gateway then cannot enter or write that home, and upstream names nothing useful
(``chdir <home>: Permission denied``, or a crash loop). :func:`problems` says, before a spawn,
what keeps the account from its home (the daemon holds the profile with that message and the
command that cures it; ``doctor`` reports the same). :func:`chown_home` is that cure, run only by
``hermesd isolate-user`` after showing what it changes.

The home is the profile's: hostile input. The walk (:func:`profiles.safetree.walk`) never follows
a link and changes nothing outside the home: the home is resolved from the root, every entry is
opened relative to its folder's descriptor without following links (``O_PATH|O_NOFOLLOW``),
checked on that descriptor, and changed through it, so a name swapped meanwhile changes nothing
else. Symbolic links are left as they are; a file with another
hard link is left alone (the other name may be outside the home: ``/etc/shadow`` linked in by a
gateway that ran as root); a device node is never given away; another file system mounted inside
is not entered.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from profiles import safeio, safetree
from profiles.upstream.files import RUNTIME_TOP_FILES
from supervisor.watch.classify import PROFILE_FILES

MAX_ENTRIES = 1_000_000  # a home with more is reported as not done, never walked forever
MAX_DEPTH = 256


class Account(Protocol):
    """An account as :func:`supervisor.isolation.install.resolve_user` resolves it."""

    @property
    def name(self) -> str: ...
    @property
    def uid(self) -> int: ...
    @property
    def gid(self) -> int: ...
    @property
    def groups(self) -> tuple[int, ...]: ...


def can_search(st: os.stat_result, account: Account) -> bool:
    """Whether ``account`` may pass through a folder with this ``stat`` (the kernel's permission rule)."""
    if account.uid == 0:
        return True
    if st.st_uid == account.uid:
        return bool(st.st_mode & stat.S_IXUSR)
    if st.st_gid == account.gid or st.st_gid in account.groups:
        return bool(st.st_mode & stat.S_IXGRP)
    return bool(st.st_mode & stat.S_IXOTH)


def _owner(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def fix_command(profile: str, account: Account, root: Path) -> str:
    return f"hermesd isolate-user {profile} {account.name} --root {root}"


# What the gateway must read or write at the top of its home: its own runtime files, the profile's
# files, the folders it writes in (upstream's facts: profiles.upstream.files, supervisor.watch.classify).
_NEEDED = frozenset({*RUNTIME_TOP_FILES, *PROFILE_FILES, "state", "logs"})


def problems(home: Path, account: Account) -> list[str]:
    """What keeps ``account`` from running a gateway in ``home`` (empty: nothing). Cheap enough for
    every spawn: the folders on the way, the home itself, and the few entries in it the gateway
    must read or write."""
    for folder in reversed(home.parents):
        try:
            st = os.stat(folder)
        except OSError as exc:
            return [f"{folder}: {exc.strerror or exc}"]
        if not can_search(st, account):
            return [f"{folder} is closed to {account.name} (mode {stat.S_IMODE(st.st_mode):04o}, owner "
                    f"{_owner(st.st_uid)}): keep the root where every profile's account can reach it "
                    "(hermesd changes nothing outside a profile's home)"]
    try:
        st = os.lstat(home)
    except OSError as exc:
        return [f"{home}: {exc.strerror or exc}"]
    if not stat.S_ISDIR(st.st_mode):
        return [f"{home} is not a folder"]
    if st.st_uid != account.uid:
        return [f"{home} belongs to {_owner(st.st_uid)}, not to {account.name}: its gateway cannot write its own "
                "files there"]
    foreign = []
    for name in sorted(_NEEDED):
        with contextlib.suppress(OSError):
            est = os.lstat(home / name)
            if est.st_uid != account.uid:
                foreign.append(name)
    if foreign:
        return [f"{home}: {', '.join(foreign)} belong{'s' if len(foreign) == 1 else ''} to another account than "
                f"{account.name}: its gateway cannot read or write {'it' if len(foreign) == 1 else 'them'}"]
    return []


@dataclass
class Report:
    """What :func:`chown_home` changed (or, in a dry run, would change)."""
    changed: int = 0
    unchanged: int = 0
    links: int = 0  # symbolic links: never followed, left as they are
    hardlinked: list[str] = field(default_factory=list)  # files with another name somewhere: left alone
    mounts: list[str] = field(default_factory=list)  # other file systems mounted inside: not entered
    devices: list[str] = field(default_factory=list)  # device nodes: never given to the account
    errors: list[str] = field(default_factory=list)
    truncated: bool = False

    def lines(self) -> list[str]:
        out = []
        if self.links:
            out.append(f"{self.links} symbolic link(s) left as they are (never followed)")
        for path in self.hardlinked[:20]:
            out.append(f"{path}: has another hard link (perhaps outside the home): left alone; "
                       "change it yourself if it is the profile's own file")
        if len(self.hardlinked) > 20:
            out.append(f"… and {len(self.hardlinked) - 20} more file(s) with other hard links")
        out += [f"{path}: another file system mounted there: not entered" for path in self.mounts[:20]]
        out += [f"{path}: a device node: left alone (its owner could use the device)" for path in self.devices[:20]]
        out += self.errors[:20]
        if self.truncated:
            out.append(f"stopped after {MAX_ENTRIES} entries or {MAX_DEPTH} folders deep: run it again")
        return out


def chown_home(home: Path, uid: int, gid: int, *, apply: bool) -> Report:
    """Give every entry of ``home`` (the home included) to ``uid:gid``; ``apply=False``: only count.

    See the module docstring for what is never touched. Raises ``OSError`` when the home itself
    cannot be opened as a folder (a link there, or on the way from the root, is refused).
    """
    report = Report()
    dev: int | None = None

    def enter(entry: safetree.Entry) -> bool:
        if entry.st.st_dev != dev:
            return False
        if len(entry.parts) >= MAX_DEPTH:
            report.truncated = True
            return False
        return True

    def failed(parts: tuple[str, ...], exc: OSError, listing: bool) -> None:
        path = "/".join((str(home), *parts))
        report.errors.append(f"{path}: {'cannot list: ' if listing else ''}{exc.strerror or exc}")

    for entry in safetree.walk(safeio.beneath(home), enter=enter, on_error=failed):
        if dev is None:
            dev = entry.st.st_dev
        if report.changed + report.unchanged + report.links >= MAX_ENTRIES:
            report.truncated = True
            break
        path = "/".join((str(home), *entry.parts))
        mode = entry.st.st_mode
        if stat.S_ISLNK(mode):
            report.links += 1
        elif entry.st.st_dev != dev:
            report.mounts.append(path)
        elif stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
            report.devices.append(path)  # owning a device node is owning the device
        elif not stat.S_ISDIR(mode) and entry.st.st_nlink > 1:
            report.hardlinked.append(path)
        else:
            _settle(entry, uid, gid, apply, report, path)
    return report


def _settle(entry: safetree.Entry, uid: int, gid: int, apply: bool, report: Report, shown: str) -> None:
    """Change one entry through the descriptor that pins the inode just checked."""
    if entry.st.st_uid == uid and entry.st.st_gid == gid:
        report.unchanged += 1
        return
    report.changed += 1
    if not apply:
        return
    try:
        safetree.set_owner(entry, uid, gid)
    except OSError as exc:
        report.changed -= 1
        report.errors.append(f"{shown}: {exc.strerror or exc}")
