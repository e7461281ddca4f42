"""Run upstream's own gateway start-up on profile folders and record what it claims.

This script runs in the *gateway's* interpreter (hermes-agent installed; nothing of hermesd is
imported). For each profile folder it does what ``hermes -p NAME gateway run`` does up to the end
of the platform connect loop, with upstream's own code:

1. a fresh process (forked from a warm parent, see below) with the environment hermesd gives a
   child, ``HERMES_HOME`` and ``sys.argv`` as hermesd starts it;
2. ``import hermes_cli.main`` (profile resolution, ``.env`` loading: the file rewrite, the
   override load, ``.op.env``), then ``import gateway.run`` (its own ``.env`` load and the
   ``config.yaml`` → environment bridge of top-level scalars);
3. ``GatewayRunner()`` (upstream's ``load_gateway_config``, plugin discovery honouring
   ``plugins.disabled``, the registry pass), the open-policy start-up refusal, the relay
   registration, then for each enabled platform ``runner._create_adapter`` and
   ``adapter.connect()`` through the connect ``start()`` uses (the multiplex-default line's
   cold-start variant where it has one). An adapter that raises while being built stops
   upstream's gateway; here it is recorded (``crashed``) and the other platforms still run, so
   that a crash excuses only its own platform's claims.

Besides the platforms, the record holds the gateway's credential-lock folder (absolute), its drain
timeout and whether it may install libraries.

Recorded, and kept from leaving the machine:

* every ``gateway.status.acquire_scoped_lock`` call: scope, upstream's identity hash, whether it
  was acquired, and which platform was connecting;
* every TCP ``bind``: the address asked for is recorded, the socket is bound to an ephemeral
  port on loopback instead;
* every ``connect`` to an IP address fails at once (``ECONNREFUSED``), every name lookup that
  would need DNS fails at once: no network traffic, no wait on a resolver;
* every program start (``subprocess``, ``os.posix_spawn``, ``os.system``, ``os.exec*``) is
  recorded and replaced by ``/bin/true`` (the Buzz CLI's ``users get`` is answered as its relay
  would); every signal to another process is recorded and not sent;
* with stand-ins (the default), platform SDKs (python-telegram-bot, discord.py, slack-bolt,
  lark-oapi, …) are replaced whatever is installed, so results do not depend on which SDKs an
  environment has: an SDK call succeeds and returns another stand-in, and a call that the SDK
  documents as opening a listener (``start_webhook(listen=…, port=…)``) is recorded as a bind.
  ``"stand_ins": false`` keeps the real SDKs and upstream's real requirement checks (the release
  matrix runs that way, in environments holding each release's platform libraries);
* ``asyncio.sleep`` and the main thread's ``time.sleep`` are capped at 10 ms, every connect is
  bounded in processor time, and only the main thread may end the process (an upstream watchdog
  thread cannot).

Speed: the parent imports hermes-agent once and forks every child with it imported (see "the warm
parent" below); ``--cold`` runs a brand-new interpreter per profile instead (the slow,
unquestionable path the fast one is checked against).

Protocol: a JSON request on stdin ``{"profiles": [{"id", "home", "env", "argv"}], "jobs": N,
"connect_timeout": s}`` (``"cold": true`` for a fresh interpreter per profile, ``"stand_ins": false``
to keep the installed SDKs and upstream's real requirement checks); one JSON line per profile on
stdout, in request order.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import gc
import hashlib
import importlib.abc
import importlib.machinery
import importlib.metadata
import ipaddress
import json
import os
import select
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import traceback
import types
from pathlib import Path
from typing import Any

# --------------------------------------------------------------------------- recording

RECORD: dict[str, Any] = {}
CURRENT: list[str | None] = [None]  # the platform whose adapter is being created or connected
CONNECT = [True]  # False: stop after the config loader (for measuring what asking upstream costs)


def _reset_record() -> None:
    RECORD.clear()
    RECORD.update(
        locks=[], binds=[], spawns=[], signals=[], sdk_binds=[], connects=0, lookups=[],
        platforms={}, enabled=[], checks={}, errors=[], refused=None, crashed=[], lock_dir=None, drain=None, lazy=None,
    )


def _note(kind: str, item: dict[str, Any]) -> None:
    item.setdefault("platform", CURRENT[0])
    RECORD.setdefault(kind, []).append(item)


# --------------------------------------------------------------------------- network

_real_bind = socket.socket.bind
_real_getaddrinfo = socket.getaddrinfo
_INET = (socket.AF_INET, socket.AF_INET6)


def _is_literal(host: object) -> bool:
    if host is None or host in ("", b""):
        return True
    text = host.decode() if isinstance(host, bytes) else str(host)
    if text == "localhost":
        return True
    try:
        ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return False
    return True


def _bind(self: socket.socket, address: Any) -> None:
    if self.family in _INET and isinstance(address, tuple):
        _note("binds", {"host": address[0], "port": address[1]})
        loopback = "127.0.0.1" if self.family == socket.AF_INET else "::1"
        return _real_bind(self, (loopback, 0, *address[2:]))
    return _real_bind(self, address)


# A service every platform server URL can point at: ``http://127.0.0.1:9`` reaches a local
# responder that answers every HTTP request with ``200 {"data": {}}``, so that an adapter which
# pings its server before listening (BlueBubbles) gets as far as listening. Every other address
# is refused at once.
SERVICE = ("127.0.0.1", 9)
SERVICE_PORT: list[int] = []


def _redirect(self: socket.socket, address: Any) -> Any:
    if self.family == socket.AF_INET and tuple(address[:2]) == SERVICE and SERVICE_PORT:
        return ("127.0.0.1", SERVICE_PORT[0])
    RECORD["connects"] += 1
    return None


def _connect(self: socket.socket, address: Any) -> None:
    if self.family in _INET:
        target = _redirect(self, address)
        if target is None:
            raise ConnectionRefusedError(errno.ECONNREFUSED, "oracle: no network")
        return _real_connect(self, target)
    return _real_connect(self, address)


def _connect_ex(self: socket.socket, address: Any) -> int:
    if self.family in _INET:
        target = _redirect(self, address)
        if target is None:
            return errno.ECONNREFUSED
        return _real_connect_ex(self, target)
    return _real_connect_ex(self, address)


def _serve_forever(sock: socket.socket) -> None:
    while True:
        try:
            conn, _ = sock.accept()
        except OSError:
            return
        with conn:
            conn.settimeout(2)
            data = b""
            try:
                while b"\r\n\r\n" not in data and len(data) < 65536:
                    chunk = conn.recv(4096)
                    if not chunk:
                        break
                    data += chunk
                body = b'{"data": {}, "status": 200}'
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
                             b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
            except OSError:
                pass


def start_service() -> None:
    """The responder behind ``SERVICE``, on an ephemeral loopback port, in a daemon thread."""
    import threading

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    _real_bind(sock, ("127.0.0.1", 0))
    sock.listen(16)
    SERVICE_PORT[:] = [sock.getsockname()[1]]
    threading.Thread(target=_serve_forever, args=(sock,), daemon=True).start()


_real_connect = socket.socket.connect
_real_connect_ex = socket.socket.connect_ex


def _getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
    if not _is_literal(host):
        RECORD["lookups"].append(str(host)[:80])
        raise socket.gaierror(socket.EAI_NONAME, "oracle: no DNS")
    return _real_getaddrinfo(host, *args, **kwargs)


def _gethostbyname(host: str) -> str:
    if not _is_literal(host):
        raise socket.gaierror(socket.EAI_NONAME, "oracle: no DNS")
    return "127.0.0.1" if host in ("", "localhost") else host


# --------------------------------------------------------------------------- processes

_real_kill = os.kill
_real_killpg = os.killpg


_real_execute_child = subprocess.Popen._execute_child  # type: ignore[attr-defined]
_real_posix_spawn = os.posix_spawn
TRUE = "/bin/true"


def _record_spawn(argv: Any) -> None:
    if isinstance(argv, (str, bytes)):
        argv = [argv]
    _note("spawns", {"argv": [str(a)[:200] for a in list(argv)[:40]]})


def _buzz_answer(args: Any, env: Any) -> list[str] | None:
    """The Buzz CLI's ``users get``, answered as the relay would: the profile of the key it was given.

    Upstream's Buzz adapter locks ``<relay>:<public key>`` only after this answer; the public key
    comes from upstream's own Nostr code (``plugins/platforms/buzz/nostr_auth.py``). Any other
    Buzz command gets ``/bin/true`` like every program (no channels: the adapter stops after its lock).
    """
    argv = [str(a) for a in args] if isinstance(args, (list, tuple)) else []
    if len(argv) < 3 or os.path.basename(argv[0]) != "buzz" or argv[1:3] != ["users", "get"]:
        return None
    try:
        from plugins.platforms.buzz.nostr_auth import public_key_hex

        pubkey = public_key_hex(str((env or {}).get("BUZZ_PRIVATE_KEY", "")))
    except Exception:
        return None
    return [sys.executable, "-c", "import sys; sys.stdout.write(sys.argv[1])", json.dumps([{"pubkey": pubkey}])]


def _execute_child(self: subprocess.Popen, args: Any, executable: Any, *rest: Any) -> None:
    """Record the program, run ``/bin/true`` instead (so a version probe sees success, nothing runs)."""
    _record_spawn(args)
    rest_list = list(rest)
    rest_list[3] = None  # cwd: the program's own folder may not exist
    rest_list[7] = False  # shell
    answer = _buzz_answer(args, rest_list[4])
    return _real_execute_child(self, answer or [TRUE], None, *rest_list)


def _posix_spawn(path: Any, argv: Any, *a: Any, **k: Any) -> int:
    _record_spawn(argv)
    return _real_posix_spawn(TRUE, [TRUE], *a, **k)


def _system(command: str) -> int:
    _record_spawn(["/bin/sh", "-c", str(command)])
    return 0


def _exec(path: Any, args: Any, *rest: Any) -> None:
    _record_spawn(args)
    raise PermissionError(errno.EPERM, "oracle: this process may not be replaced")


def _kill(pid: int, sig: int) -> None:
    if pid == os.getpid() and sig == 0:
        return _real_kill(pid, sig)
    _note("signals", {"pid_is_self": pid == os.getpid(), "signal": int(sig)})
    if sig == 0:
        raise ProcessLookupError(errno.ESRCH, "oracle: no such process")
    return None


def _killpg(pgid: int, sig: int) -> None:
    _note("signals", {"pgid": True, "signal": int(sig)})


# --------------------------------------------------------------------------- time

_real_async_sleep = asyncio.sleep
_real_time_sleep = time.sleep
SLEEP_CAP = 0.01


async def _async_sleep(delay: float, result: Any = None) -> Any:
    return await _real_async_sleep(min(max(float(delay or 0), 0.0), SLEEP_CAP), result)


def _time_sleep(delay: float) -> None:
    """Capped on the main thread (connect paths); background threads (watchdogs) keep real time."""
    if threading.current_thread() is threading.main_thread():
        delay = min(max(float(delay or 0), 0.0), SLEEP_CAP)
    _real_time_sleep(delay)


_real_os_exit = os._exit


def _os_exit(code: int) -> None:
    """Only the main thread ends the process: an upstream watchdog thread must not end the oracle."""
    if threading.current_thread() is threading.main_thread():
        _real_os_exit(code)
    _note("signals", {"exit_from_thread": int(code), "signal": 0})
    raise SystemExit(code)


def install_guards() -> None:
    """Patch the process so nothing leaves the machine and nothing waits long."""
    socket.socket.bind = _bind  # type: ignore[method-assign]
    socket.socket.connect = _connect  # type: ignore[method-assign]
    socket.socket.connect_ex = _connect_ex  # type: ignore[method-assign]
    socket.getaddrinfo = _getaddrinfo
    socket.gethostbyname = _gethostbyname
    socket.gethostbyname_ex = lambda host: (_gethostbyname(host), [], [_gethostbyname(host)])
    socket.getfqdn = lambda name="": name or "localhost"
    subprocess.Popen._execute_child = _execute_child  # type: ignore[attr-defined]
    os.posix_spawn = _posix_spawn
    os.posix_spawnp = _posix_spawn  # type: ignore[assignment]
    os.system = _system
    for name in ("execv", "execve", "execvp", "execvpe", "execl", "execle", "execlp", "execlpe"):
        setattr(os, name, _exec)
    os.kill = _kill
    os.killpg = _killpg
    asyncio.sleep = _async_sleep
    time.sleep = _time_sleep
    os._exit = _os_exit
    # No connection is ever made, so no certificate is ever checked: skip reading CA bundles
    # (70 ms per HTTP client otherwise).
    ssl.SSLContext.load_verify_locations = lambda self, *a, **k: None  # type: ignore[method-assign]
    ssl.SSLContext.set_default_verify_paths = lambda self: None  # type: ignore[method-assign]
    ssl.SSLContext.load_default_certs = lambda self, purpose=None: None  # type: ignore[method-assign]


# --------------------------------------------------------------------------- SDK stand-ins

# Top-level import names of the platform SDKs. Every one is replaced, installed or not.
SDKS = frozenset({
    "telegram", "discord", "slack_bolt", "slack_sdk", "lark_oapi", "mautrix", "dingtalk_stream",
    "alibabacloud_dingtalk", "alibabacloud_tea_openapi", "alibabacloud_tea_util", "microsoft_teams",
    "googleapiclient", "google_auth_httplib2", "httplib2", "google", "qrcode", "defusedxml", "asyncpg",
    "aiosqlite", "nio", "olm", "brotlicffi", "davey", "nacl",
})
# Methods an SDK documents as opening a TCP listener: name -> (host keyword, port keyword).
SDK_LISTENERS = {"start_webhook": ("listen", "port"), "run_webhook": ("listen", "port")}


class Anything:
    """Whatever an SDK object is asked to be: callable, awaitable, iterable (empty), a context."""

    __slots__ = ("_path",)

    def __init__(self, path: str = "sdk") -> None:
        object.__setattr__(self, "_path", path)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return Anything(f"{self._path}.{name}")

    def __setattr__(self, name: str, value: Any) -> None:
        pass

    def __call__(self, *args: Any, **kwargs: Any) -> Anything:
        leaf = self._path.rsplit(".", 1)[-1]
        if leaf in SDK_LISTENERS:
            host_kw, port_kw = SDK_LISTENERS[leaf]
            _note("sdk_binds", {"call": leaf, "host": _plain(kwargs.get(host_kw, "0.0.0.0")),
                                "port": _plain(kwargs.get(port_kw))})
        return Anything(f"{self._path}()")

    def __await__(self) -> Any:
        return _done(Anything(f"{self._path}(awaited)")).__await__()

    def __iter__(self) -> Any:
        return iter(())

    def __aiter__(self) -> Anything:
        return self

    async def __anext__(self) -> Any:
        raise StopAsyncIteration

    def __enter__(self) -> Anything:
        return self

    def __exit__(self, *exc: Any) -> bool:
        return False

    async def __aenter__(self) -> Anything:
        return self

    async def __aexit__(self, *exc: Any) -> bool:
        return False

    def __bool__(self) -> bool:
        return True

    def __len__(self) -> int:
        return 0

    def __contains__(self, item: Any) -> bool:
        return False

    def __getitem__(self, key: Any) -> Anything:
        return Anything(f"{self._path}[]")

    def __int__(self) -> int:
        return 0

    __index__ = __int__

    def __float__(self) -> float:
        return 0.0

    def __str__(self) -> str:
        return self._path

    __repr__ = __str__

    def __mro_entries__(self, bases: tuple[Any, ...]) -> tuple[type, ...]:
        return (_stand_in_class(self._path),)

    def __or__(self, other: Any) -> Any:
        return self

    __ror__ = __and__ = __rand__ = __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __or__
    __truediv__ = __rtruediv__ = __floordiv__ = __mod__ = __xor__ = __rxor__ = __or__

    def __invert__(self) -> Any:
        return self

    __neg__ = __pos__ = __invert__

    def __lt__(self, other: Any) -> bool:
        return False

    __le__ = __gt__ = __ge__ = __lt__


async def _done(value: Any) -> Any:
    return value


def _plain(value: Any) -> Any:
    return value if isinstance(value, (int, str, type(None))) else str(value)[:80]


class _StandInMeta(type):
    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return Anything(f"{cls.__name__}.{name}")

    def __or__(cls, other: Any) -> Any:
        return cls

    __ror__ = __or__


class _StandInBase(metaclass=_StandInMeta):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return Anything(f"{type(self).__name__}().{name}")


_CLASSES: dict[str, type] = {}


def _stand_in_class(path: str) -> type:
    cls = _CLASSES.get(path)
    if cls is None:
        cls = _CLASSES[path] = _StandInMeta(path.rsplit(".", 1)[-1], (_StandInBase,), {"__module__": path})
    return cls


class _StandInModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            if name == "__version__":
                return "99.0.0"
            raise AttributeError(name)
        path = f"{self.__name__}.{name}"
        value: Any = _stand_in_class(path) if name[:1].isupper() else Anything(path)
        setattr(self, name, value)
        return value


class _StandInFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname.split(".", 1)[0] in SDKS:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: Any) -> types.ModuleType:
        module = _StandInModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


def install_stand_ins() -> None:
    for name in list(sys.modules):
        if name.split(".", 1)[0] in SDKS:
            del sys.modules[name]
    sys.meta_path.insert(0, _StandInFinder())


# --------------------------------------------------------------------------- one profile

def _own_top_levels() -> set[str]:
    """The top-level modules hermes-agent installs (they are re-imported per profile)."""
    names: set[str] = set()
    # The distribution that installs the ``gateway`` package (hermes-agent, or a repackaging of it).
    dist = importlib.metadata.distribution(importlib.metadata.packages_distributions()["gateway"][0])
    for f in dist.files or ():
        parts = f.parts
        if not parts or parts[0].endswith((".dist-info", ".data")) or parts[0] == "..":
            continue
        names.add(parts[0][:-3] if parts[0].endswith(".py") else parts[0])
    return names | {"hermes_plugins"}  # the namespace plugin discovery loads plugins under


def _hash(identity: Any) -> str | None:
    if not isinstance(identity, str):
        return None
    return hashlib.sha256(identity.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _wrap_locks() -> None:
    import gateway.status as status

    real = status.acquire_scoped_lock

    def acquire_scoped_lock(scope: str, identity: str, metadata: Any = None) -> Any:
        entry: dict[str, Any] = {"scope": scope, "identity_hash": _hash(identity),
                                 "identity_type": type(identity).__name__}
        _note("locks", entry)
        result = real(scope, identity, metadata)
        entry["acquired"] = bool(result[0]) if isinstance(result, tuple) else bool(result)
        return result

    status.acquire_scoped_lock = acquire_scoped_lock
    RECORD["lock_dir"] = str(status._get_lock_dir())


async def _bounded(coro: Any, cpu_budget: float) -> Any:
    """``await coro``, given up (``TimeoutError``) after ``cpu_budget`` processor-seconds of this
    process, or 30 times that in wall time: on a loaded machine a connect that computes (a real SDK
    reading its own source, importing a large API package) must not pass for one that hangs."""
    task = asyncio.ensure_future(coro)
    cpu0, wall0 = time.process_time(), time.monotonic()
    while True:
        done, _ = await asyncio.wait({task}, timeout=0.05)
        if done:
            return task.result()
        if time.process_time() - cpu0 > cpu_budget or time.monotonic() - wall0 > cpu_budget * 30:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
            raise TimeoutError


async def _connect_all(runner: Any, timeout: float) -> None:
    from gateway.run import _own_policy_open_startup_violation

    config = runner.config
    RECORD["enabled"] = sorted(p.value for p, pc in config.platforms.items() if pc.enabled)
    try:  # which plugin platforms' requirement checks pass here (they decide what upstream enables)
        from gateway.platform_registry import platform_registry

        RECORD["checks"] = {e.name: bool(e.check_fn()) for e in platform_registry.plugin_entries()}
    except Exception as exc:
        RECORD["errors"].append(f"checks: {type(exc).__name__}: {exc}"[:300])
    if not CONNECT[0]:
        return  # configuration only: what the config loader enables, no adapter built
    reason = _own_policy_open_startup_violation(config)
    if reason:
        RECORD["refused"] = str(reason)
        return
    try:  # GatewayRunner.start(): the relay adapter registers before the connect loop
        from gateway.relay import register_relay_adapter, self_provision_relay

        self_provision_relay()
        register_relay_adapter()
    except Exception as exc:
        RECORD["errors"].append(f"relay: {type(exc).__name__}: {exc}"[:300])
    # The multiplex-default line asks the runner; earlier lines read the config's flag.
    multiplex_on = getattr(runner, "_multiplex_on", None)
    multiplex = bool(multiplex_on() if callable(multiplex_on) else getattr(config, "multiplex_profiles", False))
    # The multiplex-default line's start() connects through its cold-start variant (lock takeover
    # intent visible during the await); earlier lines have the one.
    connect = getattr(runner, "_connect_initial_adapter_with_timeout", None) or runner._connect_adapter_with_timeout
    for platform, pc in config.platforms.items():
        if not pc.enabled:
            continue
        name = platform.value
        CURRENT[0] = name
        state: dict[str, Any] = {}
        RECORD["platforms"][name] = state
        if multiplex:
            state["skipped"] = "multiplex"
            continue
        try:
            adapter = runner._create_adapter(platform, pc)
        except Exception as exc:
            # start() does not catch this: the gateway exits and holds nothing. The oracle goes on
            # with the other platforms, so that the crash excuses only this platform's claims.
            state["create_error"] = f"{type(exc).__name__}: {exc}"[:300]
            RECORD["crashed"].append(name)
            continue
        if adapter is None:
            state["adapter"] = False
            continue
        state["adapter"] = True
        t0, cpu0 = time.monotonic(), time.process_time()
        try:
            ok = await _bounded(connect(adapter, platform), timeout)
            state["connected"] = bool(ok)
        except TimeoutError:
            state["connected"] = "timeout"
        except BaseException as exc:
            state["connect_error"] = f"{type(exc).__name__}: {exc}"[:300]
        state["seconds"] = round(time.monotonic() - t0, 3)
        state["cpu"] = round(time.process_time() - cpu0, 3)
        code = getattr(adapter, "fatal_error_code", None)
        if code:
            state["fatal"] = str(code)
            state["fatal_message"] = str(getattr(adapter, "fatal_error_message", ""))[:300]
    CURRENT[0] = None


def _record_settings(runner: Any) -> None:
    """What the gateway decided beside its platforms: its credential-lock folder (absolute, as the
    working folder makes a relative one), its drain timeout, and whether it may install libraries."""
    import gateway.status as status

    RECORD["lock_dir"] = os.path.abspath(str(status._get_lock_dir()))
    RECORD["drain"] = getattr(runner, "_restart_drain_timeout", None)
    try:
        from pm.install import lazy_installs_allowed  # the multiplex-default line's package manager
    except ImportError:
        try:
            from tools.lazy_deps import _allow_lazy_installs as lazy_installs_allowed
        except ImportError:
            return
    RECORD["lazy"] = bool(lazy_installs_allowed())


def run_profile(profile: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Upstream's start-up for one profile, in this process; returns the record.

    In a child forked from the warm parent hermes-agent is already imported: the module bodies
    whose import depends on the profile run again first (:func:`_refresh`), which is what
    importing ``hermes_cli.main`` and ``gateway.run`` from scratch would do for this profile.
    """
    _reset_record()
    os.environ.clear()
    os.environ.update(profile["env"])
    sys.argv = list(profile["argv"])
    os.chdir(profile["home"])
    import logging

    logging.disable(logging.CRITICAL)
    started = time.monotonic()
    try:
        _refresh()
        import hermes_cli.main  # noqa: F401  - profile resolution and the .env load, as `hermes` does
        _wrap_locks()
        RECORD["t_main"] = round(time.monotonic() - started, 3)
        RECORD["cpu_main"] = round(time.process_time(), 3)
        import gateway.run as gateway_run

        RECORD["t_run"] = round(time.monotonic() - started, 3)
        RECORD["cpu_run"] = round(time.process_time(), 3)
        runner = gateway_run.GatewayRunner()
        RECORD["t_runner"] = round(time.monotonic() - started, 3)
        RECORD["cpu_runner"] = round(time.process_time(), 3)
        _record_settings(runner)
        loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(_bounded(_connect_all(runner, timeout), timeout * 15))
        finally:
            with contextlib.suppress(Exception):
                for task in asyncio.all_tasks(loop):
                    task.cancel()
    except BaseException as exc:
        RECORD["errors"].append(f"{type(exc).__name__}: {exc}"[:500])
        if not isinstance(exc, (SystemExit, KeyboardInterrupt)):
            RECORD["errors"].append(traceback.format_exc()[-1500:])
    RECORD["seconds"] = round(time.monotonic() - started, 3)
    RECORD["cpu"] = round(time.process_time(), 3)
    return dict(RECORD)


# --------------------------------------------------------------------------- the warm parent
#
# The parent imports hermes-agent once, as a profile of a scratch root, and forks one child per
# profile with everything imported. Importing hermes-agent's own modules from scratch in every
# child cost most of a start-up (0.22: about 2.7 of 4 processor-seconds a profile). What a child
# must not inherit from the parent is whatever the parent's import took from *its* environment
# and home, so the warm-up records exactly that:
#
# * every module whose body read an environment variable while it ran (``HERMES_HOME``, the
#   profile's ``.env`` once loaded, ``HOME`` …), attributed to the module whose body was running;
# * every module whose globals (values, and one level into containers and objects) name the
#   scratch folder: a path, a cache keyed by one, an object bound to the scratch home.
#
# A child runs those module bodies again, in the order they finished in the parent, each in a
# fresh namespace: their side effects happen for this profile (``hermes_cli.main`` resolves the
# profile and loads its ``.env``, ``gateway.run`` bridges its config.yaml), and every value they
# compute replaces the parent's. Classes and functions keep their identity (other modules hold
# them and compare them); an object the parent's import bound to its home is replaced too.
# ``functools`` caches of every own module are cleared. ``--cold`` (a brand-new interpreter per
# profile) is the reference this is checked against (``test_warm_runs_match_fresh_interpreters``).

_CODE: dict[str, Any] = {}
AGAIN: list[str] = []  # the modules a child runs again, in the order their bodies finished
OWN: set[str] = set()
SCRATCH: list[str] = []
_DATA = (type(None), bool, int, float, complex, str, bytes, tuple, list, dict, set, frozenset)


# Modules of hermes-agent that adapters import only inside connect(); the warm-up imports them
# so that the third-party libraries they pull in (prompt_toolkit, …) are loaded once.
_LAZY = ("hermes_cli.commands", "gateway.platforms.api_server", "gateway.platforms.webhook",
         "gateway.platforms.msgraph_webhook", "gateway.platforms.bluebubbles", "gateway.platforms.whatsapp_cloud",
         "gateway.platforms.signal", "gateway.platforms.weixin", "gateway.platforms.qqbot",
         "gateway.platforms.yuanbao", "gateway.relay", "agent.redact")


# Parts of the real platform SDKs that adapters import only inside a requirement check or
# connect() (seconds each: lark-oapi's API package, Google's Pub/Sub client). Imported once in
# the parent, which changes no result (an SDK's import does not depend on the profile).
_SDK_LAZY = ("lark_oapi.api", "lark_oapi.ws", "google.cloud.pubsub_v1", "googleapiclient.discovery",
             "google_auth_httplib2", "microsoft_teams.apps", "slack_bolt.async_app",
             "slack_bolt.adapter.socket_mode.async_handler", "slack_sdk.web.async_client", "telegram.ext",
             "discord.ext.commands", "mautrix.client", "mautrix.crypto", "dingtalk_stream",
             "alibabacloud_dingtalk")


def _cheap_scrypt(password: bytes, *, salt: bytes, n: int, r: int, p: int, maxmem: int = 0, dklen: int = 64) -> bytes:
    """A stand-in for ``hashlib.scrypt``: a plugin hashes a random password at import (100 ms per
    start); nothing the oracle records depends on it."""
    return hashlib.sha512(bytes(password) + bytes(salt)).digest()[:dklen].ljust(dklen, b"\0")


_real_get_code = importlib.machinery.SourceFileLoader.get_code


def _cached_get_code(self: Any, fullname: str) -> Any:
    """The module's code object, unmarshalled once per parent (children re-run it, not re-read it)."""
    key = self.get_filename(fullname)
    code = _CODE.get(key)
    if code is None:
        code = _CODE[key] = _real_get_code(self, fullname)
    return code


def _is_own(name: object) -> bool:
    return isinstance(name, str) and name.split(".", 1)[0] in OWN


def _names_scratch(value: object, depth: int = 0) -> bool:
    """Whether ``value`` names the scratch folder: a path, or within two levels of containers or objects."""
    if isinstance(value, (str, os.PathLike)):
        return SCRATCH[0] in os.fspath(value) if not isinstance(value, bytes) else False
    if depth >= 2 or isinstance(value, (type, types.ModuleType, types.FunctionType)):
        return False
    if isinstance(value, (list, tuple, set, frozenset)):
        return any(_names_scratch(v, depth + 1) for v in list(value)[:500])
    if isinstance(value, dict):
        return any(_names_scratch(k, depth + 1) or _names_scratch(v, depth + 1) for k, v in list(value.items())[:500])
    try:  # an object of a library: its attributes, if it has plain ones
        attrs = None if isinstance(value, Anything) else vars(value)
    except Exception:
        return False
    return isinstance(attrs, dict) and any(_names_scratch(v, depth + 1) for v in list(attrs.values())[:200])


class _Recorder:
    """During the warm import: which own module bodies read the environment, and when each finished."""

    def __init__(self) -> None:
        self.read: set[str] = set()
        self.finished: list[str] = []
        self._environ = type(os.environ)
        self._real = {k: getattr(self._environ, k) for k in ("__getitem__", "__contains__", "__iter__")}

    def _body(self) -> str | None:
        frame = sys._getframe(2)
        while frame is not None:
            if frame.f_code.co_name == "<module>" and _is_own(frame.f_globals.get("__name__")):
                return str(frame.f_globals["__name__"])
            frame = frame.f_back
        return None

    def _wrap(self, name: str) -> Any:
        real = self._real[name]

        def read(environ: Any, *args: Any) -> Any:
            body = self._body()
            if body is not None:
                self.read.add(body)
            return real(environ, *args)

        return read

    def _profile(self, frame: Any, event: str, arg: Any) -> None:
        if event == "return" and frame.f_code.co_name == "<module>" and _is_own(frame.f_globals.get("__name__")):
            self.finished.append(str(frame.f_globals["__name__"]))

    def __enter__(self) -> _Recorder:
        for name in self._real:
            setattr(self._environ, name, self._wrap(name))
        sys.setprofile(self._profile)
        return self

    def __exit__(self, *exc: Any) -> None:
        sys.setprofile(None)
        for name, real in self._real.items():
            setattr(self._environ, name, real)


def warm_up(scratch: str, argv: list[str]) -> None:
    """Import hermes-agent once, as the profile ``warm`` of a scratch root, and note what a child re-runs."""
    OWN.update(_own_top_levels())
    SCRATCH[:] = [scratch]
    importlib.machinery.SourceFileLoader.get_code = _cached_get_code  # type: ignore[method-assign]
    hashlib.scrypt = _cheap_scrypt
    home = os.path.join(scratch, "roots", "warm", "profiles", "warm")
    os.makedirs(home, exist_ok=True)
    with open(os.path.join(home, "config.yaml"), "w") as f:  # an identity file: a profile on every line
        f.write("gateway:\n  standalone: true\n")
    env = {k: os.environ[k] for k in ("PATH", "LANG") if k in os.environ}
    env.update(HOME=scratch, HERMES_HOME=home, HERMES_DISABLE_LAZY_INSTALLS="1")
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    saved_argv = sys.argv
    sys.argv = list(argv)  # a profile's command line, naming the scratch profile instead
    if "-p" in sys.argv[:-1]:
        sys.argv[sys.argv.index("-p") + 1] = "warm"
    import logging

    logging.disable(logging.CRITICAL)
    recorder = _Recorder()
    try:
        with recorder:
            for entry in ("hermes_cli.main", "gateway.run"):  # in the order `hermes gateway run` imports them
                importlib.import_module(entry)
            import plugins.platforms as bundled

            # Import modules only: building a GatewayRunner here would start upstream's threads (a
            # start-up watchdog among them) in the parent, which no child inherits but the parent runs.
            adapters = [f"plugins.platforms.{d.name}.adapter" for d in Path(bundled.__path__[0]).iterdir()
                        if (d / "adapter.py").exists()]
            for name in (*adapters, *_LAZY, *_SDK_LAZY):  # the libraries platform code imports, loaded once
                with contextlib.suppress(Exception):
                    importlib.import_module(name)
    except BaseException as exc:
        print(f"oracle: warm-up failed: {exc!r}", file=sys.stderr)
    finally:
        sys.argv = saved_argv
        os.environ.clear()
        os.environ.update(saved)
        # Threads upstream starts at import (0.22's start-up watchdog, which writes its log and a
        # lifecycle record when it fires after 300 s) resolve the home when they write: in this
        # parent they must find the scratch, never the account's ~/.hermes. Children set their own.
        os.environ.update(HOME=scratch, HERMES_HOME=home)
    bound = {name for name, module in list(sys.modules.items()) if _is_own(name) and module is not None
             and any(_names_scratch(v) for k, v in list(vars(module).items()) if not k.startswith("__"))}
    again = recorder.read | bound | {"hermes_cli.main", "gateway.run"}
    AGAIN[:] = [n for n in dict.fromkeys(recorder.finished) if n in again]
    AGAIN.extend(sorted(again - set(AGAIN)))
    logging.disable(logging.NOTSET)
    for logger in [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]:
        if isinstance(logger, logging.Logger):
            for handler in list(logger.handlers):
                logger.removeHandler(handler)


def _refresh() -> None:
    """In a child: clear every own ``functools`` cache, then run the profile-dependent module bodies again."""
    for name, module in list(sys.modules.items()):
        if _is_own(name) and module is not None:
            for value in list(vars(module).values()):
                if isinstance(value, functools._lru_cache_wrapper):
                    value.cache_clear()
    for name in AGAIN:
        module = sys.modules.get(name)
        spec = getattr(module, "__spec__", None)
        if module is None or spec is None or spec.loader is None or not hasattr(spec.loader, "get_code"):
            continue
        code = spec.loader.get_code(name)
        live = vars(module)
        fresh = {k: live[k] for k in ("__name__", "__file__", "__package__", "__spec__", "__loader__", "__path__",
                                      "__builtins__", "__cached__", "__doc__") if k in live}
        exec(code, fresh)
        for key, value in fresh.items():
            if key.startswith("__"):
                continue
            old = live.get(key, _MISSING)
            if old is _MISSING or type(value) in _DATA or isinstance(value, os.PathLike) or _names_scratch(old):
                live[key] = value


_MISSING = object()


def _child(profile: dict[str, Any], timeout: float, fd: int) -> None:
    os.setpgid(0, 0)
    quiet = os.open(os.devnull, os.O_WRONLY)  # upstream prints banners; the result goes through ``fd``
    os.dup2(quiet, 1)
    os.dup2(quiet, 2)
    start_service()
    gc.disable()  # a short-lived process: collecting costs more than the memory it frees
    def overdue(signum: int, frame: Any) -> None:
        raise TimeoutError("oracle: this start-up did not finish in time")

    # One profile: a bounded start-up, whatever the release does. Bounded in processor time, which a
    # loaded machine does not stretch (the parent also gives up on a child after CHILD_WALL_S).
    signal.signal(signal.SIGPROF, overdue)
    signal.setitimer(signal.ITIMER_PROF, timeout * 20 + 5)
    try:
        dump = os.environ.get("ORACLE_CPROFILE")
        if dump:
            import cProfile
            prof = cProfile.Profile(time.process_time)  # processor time: the machine may be shared
            result = prof.runcall(run_profile, profile, timeout)
            prof.dump_stats(dump)
        else:
            result = run_profile(profile, timeout)
    except BaseException as exc:
        result = {"errors": [f"oracle: {exc!r}"]}
    data = json.dumps(result, default=str).encode()
    with contextlib.suppress(OSError):
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    os._exit(0)


CHILD_WALL_S = 900.0  # a child blocked (not computing) this long is killed and reported


def run_forked(profiles: list[dict[str, Any]], jobs: int, timeout: float) -> list[dict[str, Any]]:
    """Each profile in its own forked child, ``jobs`` at a time; results in request order."""
    results: list[dict[str, Any] | None] = [None] * len(profiles)
    gc.freeze()  # keep the warm parent's objects out of every child's collections (and copy-on-write)
    pending = list(enumerate(profiles))
    running: dict[int, tuple[int, int, bytearray, float]] = {}  # fd -> (index, pid, buffer, deadline)
    while pending or running:
        while pending and len(running) < jobs:
            index, profile = pending.pop(0)
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(r)
                _child(profile, timeout, w)
            os.close(w)
            running[r] = (index, pid, bytearray(), time.monotonic() + CHILD_WALL_S)
        ready, _, _ = select.select(list(running), [], [], 0.5)
        for fd in ready:
            index, pid, buf, deadline = running[fd]
            chunk = os.read(fd, 1 << 16)
            if chunk:
                buf.extend(chunk)
                continue
            os.close(fd)
            del running[fd]
            os.waitpid(pid, 0)
            try:
                results[index] = json.loads(bytes(buf)) if buf else {"errors": ["oracle: child wrote nothing"]}
            except ValueError:
                results[index] = {"errors": ["oracle: child wrote malformed JSON"]}
        now = time.monotonic()
        for fd, (index, pid, _buf, deadline) in list(running.items()):
            if now > deadline:
                with contextlib.suppress(ProcessLookupError):
                    _real_killpg(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                os.close(fd)
                del running[fd]
                results[index] = {"errors": ["oracle: child timed out"]}
    return [r or {} for r in results]


def run_cold(profiles: list[dict[str, Any]], timeout: float, stand_ins: bool) -> list[dict[str, Any]]:
    """Each profile in a brand-new interpreter (no warm parent): the reference for the fast path."""
    out = []
    for profile in profiles:
        request = json.dumps({"profiles": [profile], "jobs": 1, "connect_timeout": timeout, "single": True,
                              "stand_ins": stand_ins, "connect": CONNECT[0]})
        proc = subprocess.run([sys.executable, os.path.abspath(__file__)], input=request, capture_output=True,
                              text=True, timeout=CHILD_WALL_S, check=False)
        lines = proc.stdout.strip().splitlines()
        out.append(json.loads(lines[-1]) if lines else {"errors": [f"oracle: cold run failed: {proc.stderr[-500:]}"]})
    return out


def main() -> None:
    request = json.load(sys.stdin)
    profiles = request["profiles"]
    CONNECT[0] = bool(request.get("connect", True))
    timeout = float(request.get("connect_timeout", 3.0))
    stand_ins = request.get("stand_ins", True)
    if request.get("single"):
        if stand_ins:
            install_stand_ins()
        install_guards()
        start_service()
        result = run_profile(profiles[0], timeout)
        sys.stdout.write(json.dumps(result, default=str) + "\n")
        sys.stdout.flush()
        os._exit(0)
    if request.get("cold"):
        results = run_cold(profiles, timeout, stand_ins)
    else:
        if stand_ins:
            install_stand_ins()
        install_guards()
        if profiles:
            warm_up(request.get("scratch") or os.path.dirname(profiles[0]["home"]), profiles[0]["argv"])
        results = run_forked(profiles, int(request.get("jobs", 2)), timeout)
    for result in results:
        sys.stdout.write(json.dumps(result, default=str) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
