"""The only module of ``supervisor.observe`` that imports the rest of hermesd's leaf modules.

Everything else in this package is self-contained; what it needs from elsewhere (the
platform-variable rule, hermesd's process tags, the CLI's error and root conventions, the control
client) is imported here, lazily, so a move elsewhere in the tree is one edit in one file. The
status document is the exception: it is read by :mod:`supervisor.observe.cli` itself, because
status depends on the configuration, which depends on this package's settings (importing it here
would close that loop).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import argparse


def is_platform_variable(name: str) -> bool:
    from profiles.upstream.platforms import is_platform_variable as rule

    return rule(name)


def never_inherited() -> frozenset[str]:
    """Variables a hook must not inherit from hermesd: its process tags and the service manager's."""
    from supervisor.childspec import TAG_PROFILE, TAG_ROOT
    from supervisor.notify import SERVICE_MANAGER_VARIABLES

    return frozenset({TAG_ROOT, TAG_PROFILE, *SERVICE_MANAGER_VARIABLES})


def user_error(message: str) -> Exception:
    """The CLI's usage error (``hermesd: error: …``, exit 2)."""
    from supervisor.cli.common import UserError

    return UserError(message)


def no_such_profile(name: str, known: list[str]) -> str:
    from profiles.names import no_such_profile as wording

    return str(wording(name, known))


def root_of(args: argparse.Namespace) -> Path:
    from supervisor.cli.common import root_of as resolve

    return resolve(args)


def use_color(stream: Any) -> bool:
    from supervisor.cli.common import use_color as decide

    return bool(decide(stream))


def hermesd_dir(root: Path) -> Path:
    from supervisor.layout import Layout

    return Layout(root).dir


def version() -> str:
    from supervisor import __version__

    return str(__version__)


def served_profiles(root: Path) -> list[str]:
    from profiles.discovery import profiles_to_serve

    return [name for name, _home in profiles_to_serve(True, root=root)]


class DaemonDown(Exception):
    """No daemon holds the root, or it does not answer."""


class RequestRefused(Exception):
    """The daemon answered with an error (for example: it does not know the request)."""


def daemon_call(root: Path, cmd: str, *, wait: float = 5.0) -> dict[str, Any]:
    """One control request; :class:`DaemonDown` or :class:`RequestRefused` instead of the client's errors."""
    from supervisor.control.client import Client, ControlError, DaemonNotAnswering, DaemonNotRunning
    from supervisor.layout import Layout

    try:
        return Client(Layout(root)).call(cmd, wait=wait)
    except (DaemonNotRunning, DaemonNotAnswering, FileNotFoundError) as exc:
        raise DaemonDown(str(exc)) from None
    except ControlError as exc:
        raise RequestRefused(str(exc)) from None
