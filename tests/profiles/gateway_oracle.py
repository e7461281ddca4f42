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
   ``adapter.connect()`` through ``runner._connect_adapter_with_timeout``, as ``start()`` does.

Recorded, and kept from leaving the machine:

* every ``gateway.status.acquire_scoped_lock`` call: scope, upstream's identity hash, whether it
  was acquired, and which platform was connecting;
* every TCP ``bind``: the address asked for is recorded, the socket is bound to an ephemeral
  port on loopback instead;
* every ``connect`` to an IP address fails at once (``ECONNREFUSED``), every name lookup that
  would need DNS fails at once: no network traffic, no wait on a resolver;
* every program start (``subprocess``, ``os.posix_spawn``, ``os.system``, ``os.exec*``) is
  recorded and refused as if the program were missing; every signal to another process is
  recorded and not sent;
* platform SDKs (python-telegram-bot, discord.py, slack-bolt, lark-oapi, …) are replaced by
  stand-ins whatever is installed, so results do not depend on which SDKs an environment has: an
  SDK call succeeds and returns another stand-in, and a call that the SDK documents as opening a
  listener (``start_webhook(listen=…, port=…)``) is recorded as a bind;
* ``asyncio.sleep`` and the main thread's ``time.sleep`` are capped at 10 ms, every connect is
  bounded, and only the main thread may end the process (an upstream watchdog thread cannot).

Speed: importing hermes-agent costs about 0.4 s. The parent imports it once (into a scratch
home), then drops every module hermes-agent owns from ``sys.modules`` and keeps the third-party
ones; each profile's child re-imports hermes-agent's own modules from scratch. ``--cold`` runs a
brand-new interpreter per profile instead (the slow, unquestionable path the fast one is checked
against).

Protocol: a JSON request on stdin ``{"profiles": [{"id", "home", "env", "argv"}], "jobs": N,
"connect_timeout": s}`` (``"cold": true`` for a fresh interpreter per profile, ``"stand_ins": false``
to keep the installed SDKs and upstream's real requirement checks); one JSON line per profile on
stdout, in request order.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
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
        platforms={}, enabled=[], checks={}, errors=[], refused=None, crashed=None, lock_dir=None,
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


def _execute_child(self: subprocess.Popen, args: Any, executable: Any, *rest: Any) -> None:
    """Record the program, run ``/bin/true`` instead (so a version probe sees success, nothing runs)."""
    _record_spawn(args)
    rest_list = list(rest)
    rest_list[3] = None  # cwd: the program's own folder may not exist
    rest_list[7] = False  # shell
    return _real_execute_child(self, [TRUE], None, *rest_list)


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
    multiplex = bool(getattr(config, "multiplex_profiles", False))
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
        except Exception as exc:  # start() does not catch this: the gateway exits, nothing stays claimed
            state["create_error"] = f"{type(exc).__name__}: {exc}"[:300]
            RECORD["crashed"] = name
            break
        if adapter is None:
            state["adapter"] = False
            continue
        state["adapter"] = True
        t0 = time.monotonic()
        try:
            ok = await asyncio.wait_for(runner._connect_adapter_with_timeout(adapter, platform), timeout)
            state["connected"] = bool(ok)
        except TimeoutError:
            state["connected"] = "timeout"
        except BaseException as exc:
            state["connect_error"] = f"{type(exc).__name__}: {exc}"[:300]
        state["seconds"] = round(time.monotonic() - t0, 3)
        code = getattr(adapter, "fatal_error_code", None)
        if code:
            state["fatal"] = str(code)
            state["fatal_message"] = str(getattr(adapter, "fatal_error_message", ""))[:300]
    CURRENT[0] = None


def run_profile(profile: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Upstream's start-up for one profile, in this (fresh) process; returns the record."""
    _reset_record()
    os.environ.clear()
    os.environ.update(profile["env"])
    sys.argv = list(profile["argv"])
    os.chdir(profile["home"])
    import logging

    logging.disable(logging.CRITICAL)
    started = time.monotonic()
    try:
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
        RECORD["lock_dir"] = str(__import__("gateway.status").status._get_lock_dir())
        loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(asyncio.wait_for(_connect_all(runner, timeout), timeout * 15))
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


# --------------------------------------------------------------------------- batching

def _drop_own_modules(own: set[str]) -> None:
    for name in list(sys.modules):
        if name.split(".", 1)[0] in own:
            del sys.modules[name]


# Modules of hermes-agent that adapters import only inside connect(); the warm-up imports them
# so that the third-party libraries they pull in (prompt_toolkit, …) are loaded once.
_LAZY = ("hermes_cli.commands", "gateway.platforms.api_server", "gateway.platforms.webhook",
         "gateway.platforms.msgraph_webhook", "gateway.platforms.bluebubbles", "gateway.platforms.whatsapp_cloud",
         "gateway.platforms.signal", "gateway.platforms.weixin", "gateway.platforms.qqbot",
         "gateway.platforms.yuanbao", "gateway.relay", "agent.redact")
_CODE: dict[str, Any] = {}


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


def warm_up(scratch: str) -> set[str]:
    """Import hermes-agent once into a scratch home, then forget its own modules (keep the rest)."""
    own = _own_top_levels()
    importlib.machinery.SourceFileLoader.get_code = _cached_get_code  # type: ignore[method-assign]
    hashlib.scrypt = _cheap_scrypt
    env = {k: os.environ[k] for k in ("PATH", "LANG") if k in os.environ}
    env.update(HOME=scratch, HERMES_HOME=os.path.join(scratch, "warm"), HERMES_DISABLE_LAZY_INSTALLS="1")
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    argv = sys.argv
    sys.argv = ["hermes", "gateway", "run"]
    import logging

    logging.disable(logging.CRITICAL)
    try:
        import gateway.run  # noqa: F401
        import hermes_cli.main  # noqa: F401
        import plugins.platforms as bundled

        # Import modules only: building a GatewayRunner here would start upstream's threads (a
        # start-up watchdog among them) in the parent, which no child inherits but the parent runs.
        adapters = [f"plugins.platforms.{d.name}.adapter" for d in Path(bundled.__path__[0]).iterdir()
                    if (d / "adapter.py").exists()]
        for name in (*adapters, *_LAZY):  # the libraries platform code imports, loaded once
            with contextlib.suppress(Exception):
                importlib.import_module(name)
    except BaseException as exc:
        print(f"oracle: warm-up failed: {exc!r}", file=sys.stderr)
    finally:
        sys.argv = argv
        os.environ.clear()
        os.environ.update(saved)
        # Threads upstream starts at import (0.22's start-up watchdog, which writes its log and a
        # lifecycle record when it fires after 300 s) resolve the home when they write: in this
        # parent they must find the scratch, never the account's ~/.hermes. Children set their own.
        os.environ.update(HOME=scratch, HERMES_HOME=os.path.join(scratch, "warm"))
    _drop_own_modules(own)
    logging.disable(logging.NOTSET)
    for logger in [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]:
        if isinstance(logger, logging.Logger):
            for handler in list(logger.handlers):
                logger.removeHandler(handler)
    return own


def _child(profile: dict[str, Any], timeout: float, fd: int) -> None:
    os.setpgid(0, 0)
    quiet = os.open(os.devnull, os.O_WRONLY)  # upstream prints banners; the result goes through ``fd``
    os.dup2(quiet, 1)
    os.dup2(quiet, 2)
    start_service()
    gc.disable()  # a short-lived process: collecting costs more than the memory it frees
    def overdue(signum: int, frame: Any) -> None:
        raise TimeoutError("oracle: this start-up did not finish in time")

    signal.signal(signal.SIGALRM, overdue)
    signal.alarm(int(timeout * 20) + 5)  # one profile: a bounded start-up, whatever the release does
    try:
        dump = os.environ.get("ORACLE_CPROFILE")
        if dump:
            import cProfile
            prof = cProfile.Profile()
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
            running[r] = (index, pid, bytearray(), time.monotonic() + timeout * 20 + 10)
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
                              text=True, timeout=timeout * 20 + 30, check=False)
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
        warm_up(request.get("scratch") or os.path.dirname(profiles[0]["home"]) if profiles else "/tmp")
        results = run_forked(profiles, int(request.get("jobs", 2)), timeout)
    for result in results:
        sys.stdout.write(json.dumps(result, default=str) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
