"""The systemd notification protocol (``sd_notify``), spoken natively: one datagram per message.

Why not libsystemd or a PyPI binding: the protocol is a text datagram to the AF_UNIX socket named
by ``$NOTIFY_SOCKET`` (a path, or ``@name`` for an abstract socket), nothing more, and hermesd
must run unchanged where systemd is absent (launchd, s6, a container). A :class:`Notifier` built
from an environment without ``NOTIFY_SOCKET`` is a no-op, so the daemon calls it unconditionally.

A notification must never take hermesd down: a missing socket, a full receive buffer or a
restarted service manager only costs the message. The first failure is logged as a warning,
later ones at debug level, so a broken socket cannot flood the log at every watchdog ping.

With ``Type=notify`` and ``WatchdogSec=`` in hermesd's unit (see ``contrib/systemd``), the
daemon sends ``READY=1`` once its control socket is up and its first spawns are done,
``STATUS=`` whenever the summary changes, ``WATCHDOG=1`` from its event loop (so a frozen loop
is caught by systemd, which restarts hermesd; the gateways survive and are adopted), and
``STOPPING=1`` when it starts shutting down.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import asyncio

log = logging.getLogger("hermesd")

# Variables systemd sets for hermesd itself. A child that inherited them would believe it is
# the unit's main process: upstream's gateway sends its own READY=1/WATCHDOG=1 when its config
# enables the watchdog, which systemd rejects (NotifyAccess=main) with a log line per message.
SERVICE_MANAGER_VARIABLES = (
    "NOTIFY_SOCKET",
    "WATCHDOG_USEC",
    "WATCHDOG_PID",
    "LISTEN_FDS",
    "LISTEN_PID",
    "LISTEN_FDNAMES",
)


def _address(raw: str) -> str | bytes | None:
    """``$NOTIFY_SOCKET`` as a ``socket.sendto`` address; ``None`` when unusable.

    ``@name`` is systemd's spelling of the Linux abstract namespace (a leading NUL byte).
    Other schemes (``vsock:``) are not spoken here; hermesd never runs inside a VM guest
    whose manager is outside it.
    """
    if raw.startswith("@"):
        return b"\0" + os.fsencode(raw[1:])
    if raw.startswith("/"):
        return raw
    return None


class Notifier:
    """Sends state changes to the service manager that started hermesd, if any."""

    def __init__(self, address: str | bytes | None, *, watchdog_usec: int | None = None) -> None:
        self._address = address
        self._watchdog_usec = watchdog_usec
        self._sock: socket.socket | None = None
        self._failed_once = False
        self._last_status: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Notifier:
        """A notifier for ``env`` (default ``os.environ``); a no-op one when there is no socket.

        ``WATCHDOG_USEC`` counts only when ``WATCHDOG_PID`` is unset or names this process:
        systemd sets both for the main process, and a hermesd started by something that itself
        ran under a watchdog must not ping on that process's behalf.
        """
        e = os.environ if env is None else env
        raw = e.get("NOTIFY_SOCKET", "").strip()
        address = _address(raw) if raw else None
        if raw and address is None:
            log.warning("NOTIFY_SOCKET=%r is not a path or @abstract name; service notifications are off", raw)
        usec: int | None = None
        pid_text = e.get("WATCHDOG_PID", "").strip()
        if not pid_text or pid_text == str(os.getpid()):
            try:
                value = int(e.get("WATCHDOG_USEC", "").strip())
                usec = value if value > 0 else None
            except ValueError:
                usec = None
        return cls(address, watchdog_usec=usec)

    @property
    def enabled(self) -> bool:
        return self._address is not None

    # ----------------------------------------------------------------- messages

    def ready(self, status: str | None = None) -> bool:
        """Start-up finished (``READY=1``): systemd now considers the unit active."""
        lines = ["READY=1"]
        if status is not None:
            lines.append(f"STATUS={_one_line(status)}")
            self._last_status = _one_line(status)
        return self.send("\n".join(lines))

    def status(self, text: str) -> bool:
        """Free-form status shown by ``systemctl status``; an unchanged text is not resent."""
        line = _one_line(text)
        if line == self._last_status:
            return True
        self._last_status = line
        return self.send(f"STATUS={line}")

    def watchdog(self) -> bool:
        """Keep-alive (``WATCHDOG=1``); sent from the event loop, it proves the loop still turns."""
        return self.send("WATCHDOG=1")

    def stopping(self, status: str | None = None) -> bool:
        """Shutdown began (``STOPPING=1``): systemd shows the unit as deactivating."""
        lines = ["STOPPING=1"]
        if status is not None:
            lines.append(f"STATUS={_one_line(status)}")
        return self.send("\n".join(lines))

    def watchdog_interval(self) -> float | None:
        """Seconds between watchdog pings (half of ``WATCHDOG_USEC``, as systemd recommends), or ``None``."""
        if not self.enabled or self._watchdog_usec is None:
            return None
        return self._watchdog_usec / 2_000_000

    def schedule_watchdog(self, loop: asyncio.AbstractEventLoop) -> Callable[[], None]:
        """Ping from ``loop`` every :meth:`watchdog_interval` seconds; returns a cancel function.

        The pings are loop callbacks on purpose: if the loop blocks, they stop, and systemd
        restarts hermesd, which is the one failure a supervisor cannot report about itself.
        """
        interval = self.watchdog_interval()
        if interval is None:
            return lambda: None
        handle: list[asyncio.TimerHandle | None] = [None]

        def tick() -> None:
            self.watchdog()
            handle[0] = loop.call_later(interval, tick)

        tick()

        def cancel() -> None:
            if handle[0] is not None:
                handle[0].cancel()
                handle[0] = None

        return cancel

    # ----------------------------------------------------------------- transport

    def send(self, message: str) -> bool:
        """One datagram; ``False`` (never an exception) when it could not be delivered."""
        if self._address is None:
            return False
        try:
            if self._sock is None:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)  # close-on-exec by default
                sock.setblocking(False)  # a full receive buffer must not stall the event loop
                self._sock = sock
            self._sock.sendto(message.encode("utf-8", "replace"), self._address)
            return True
        except OSError as exc:
            if not self._failed_once:
                self._failed_once = True
                log.warning("cannot notify the service manager at %r: %s (further failures are not logged)",
                            _printable(self._address), exc)
            else:
                log.debug("service notification failed: %s", exc)
            return False

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


def _one_line(text: str) -> str:
    """A STATUS value: the protocol is newline-separated, so a newline would start a new field."""
    return " ".join(str(text).split())


def _printable(address: str | bytes) -> str:
    if isinstance(address, bytes):
        return "@" + address[1:].decode("utf-8", "replace")
    return address
