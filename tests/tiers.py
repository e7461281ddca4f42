"""The two tiers of the suite, and the witness that keeps the fast one honest.

A test is **live** (the full tier only) when it is marked ``live`` or ``real_gateway``, lives under
``tests/faults``, ``tests/e2e`` or ``tests/engine``, or uses ``hermesd_factory``: it starts a hermesd
daemon, a gateway (the real one or ``tests/fakegw``) or a container. Every other test not marked
``slow`` gets the ``fast`` marker; ``pytest -m fast`` (``scripts/test.sh --fast``) is the tier a
developer runs while editing.

A classification kept by hand goes stale, so every fast test is watched while it runs, by two
witnesses cheap enough for every test:

- an audit hook (``sys.addaudithook``) sees every process this pytest process starts itself
  (``subprocess.Popen``, ``os.posix_spawn``, ``os.exec*``), however briefly it lives;
- a look at ``/proc`` when the test's body ends (its fixtures' processes are still up then) sees
  what those children started in turn: a daemon ``hermesd start`` left behind, a gateway behind a
  shell. Only processes started since the test began and belonging to this session count (their
  command line or environment names the session's temporary folder, or their parent is this
  process), so other suites running on the machine are never mistaken for this one's.

A fast test either saw starting one fails, naming the command. ``HERMESD_TIER_RECORD=FILE`` writes
one JSON line per test (what it started, its wall and CPU time, its worker, fixtures and markers), to
audit the tiers and find where the suite's time goes.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

_ENGINES = frozenset({"docker", "dockerd", "podman", "docker-compose", "containerd", "runc", "ctr"})
# What a container engine is asked that starts or touches no container.
_ENGINE_OFFLINE = frozenset({"version", "config", "info", "help", "compose"})
_HERMES = frozenset({"hermes", "hermesx"})
_VALUE_OPTIONS = frozenset({"--root", "--timeout"})


def classify(argv: Sequence[str]) -> str | None:
    """``daemon``, ``gateway`` or ``container`` when ``argv`` starts one, else None.

    A daemon is hermesd's ``run`` (``python -m supervisor run``, ``hermesd run``) or its ``start``
    without a profile (which spawns ``run``). A gateway is the fake gateway's script, or the real
    ``hermes`` asked for ``gateway run|start|restart``; a process that only looks like one in
    ``/proc`` (``python -c ... gateway run``, what the identity tests use) is not. A container is
    any command of a container engine but the few that start and touch none (``docker compose
    config``, ``docker version``).
    """
    args = [str(a) for a in argv]
    if not args:
        return None
    names = [os.path.basename(a) for a in args]
    if names[0] in _ENGINES:
        words = [a for a in args[1:] if not a.startswith("-") and "/" not in a and "." not in a]
        return "container" if any(w not in _ENGINE_OFFLINE for w in words) or not words else None
    program = _program(args, names)
    if program is None:
        return _classify_wrapped(args)
    kind, at = program
    rest = args[at + 1:]
    if kind == "fakegw":
        return "gateway"
    if kind == "hermes":
        for i, word in enumerate(rest[:-1]):
            if word == "gateway" and rest[i + 1] in ("run", "start", "restart"):
                return "gateway"
        return None
    verb, positional = _verb_and_positional(rest)
    if verb == "run" or (verb == "start" and not positional):
        return "daemon"
    return _classify_wrapped(rest)


def _classify_wrapped(args: list[str]) -> str | None:
    """What a wrapper runs after its ``--`` (the isolation shim, ``hermesd exec``)."""
    if "--" in args:
        return classify(args[args.index("--") + 1:])
    return None


def _program(args: list[str], names: list[str]) -> tuple[str, int] | None:
    """Which program ``args`` runs (``fakegw``, ``hermes`` or ``hermesd``) and the index of its entry
    point, looking through an interpreter (``python -m supervisor``, ``python script``)."""
    for i, name in enumerate(names[:4]):
        module = i > 0 and args[i - 1] == "-m"
        if name == "fakegw.py":
            return "fakegw", i
        if name in _HERMES or (module and name in ("hermes_cli.main", "hermes_cli")):
            return "hermes", i
        if name == "hermesd" or (module and name == "supervisor"):
            return "hermesd", i
        if i > 0 and args[i - 1] == "-c":
            return None  # ``python -c CODE ...``: what follows is the code's own arguments
    return None


def _verb_and_positional(rest: list[str]) -> tuple[str | None, list[str]]:
    """hermesd's command and its positional arguments (the values of ``--root``/``--timeout`` left out)."""
    words: list[str] = []
    skip = False
    for a in rest:
        if skip:
            skip = False
        elif a in _VALUE_OPTIONS:
            skip = True
        elif not a.startswith("-"):
            words.append(a)
    return (words[0], words[1:]) if words else (None, [])


class Witness:
    """What the current test started, by kind (reset by the plugin at the start of every test)."""

    def __init__(self, marks: Sequence[str]) -> None:
        self.marks = tuple(marks)
        self.seen: dict[str, list[str]] = {}
        self._pid = os.getpid()
        self._hooked = False
        self._since = _boot_ticks()
        self._floor = 0

    def install(self) -> None:
        if not self._hooked:
            sys.addaudithook(self._hook)
            self._hooked = True

    def reset(self) -> None:
        self.seen = {}
        self._since = _boot_ticks()
        self._floor = _last_pid()

    def _note(self, kind: str, argv: Sequence[str]) -> None:
        self.seen.setdefault(kind, []).append(" ".join(str(a) for a in argv)[:300])

    def _hook(self, event: str, args: tuple[object, ...]) -> None:
        if os.getpid() != self._pid:  # a forked child's own spawns are the /proc look's business
            return
        if event not in ("subprocess.Popen", "os.posix_spawn", "os.exec"):
            return
        argv = args[1]  # (executable, args, cwd, env) / (path, argv, env)
        if isinstance(argv, (str, bytes)):
            argv = [argv.decode() if isinstance(argv, bytes) else argv]
        try:
            kind = classify([a.decode() if isinstance(a, bytes) else str(a) for a in argv])  # type: ignore[union-attr]
        except TypeError:
            return
        if kind is not None:
            self._note(kind, argv)  # type: ignore[arg-type]

    def look(self) -> None:
        """Note this session's daemons, gateways and containers alive right now."""
        me = self._pid
        floor, last = self._floor, _last_pid()
        # PIDs are handed out in increasing order until they wrap: those started since the test
        # began lie in (floor, last], or beyond floor and up to last after a wrap.
        for pid in _pids():
            new = floor < pid <= last if floor <= last else (pid > floor or pid <= last)
            if not new or pid == me:
                continue
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    raw = f.read()
            except OSError:
                continue
            argv = [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a]
            kind = classify(argv)
            if kind is None or _started(pid) < self._since - 1:
                continue  # not one of those, or up since before this test (a session's fixture)
            if any(m in a for a in argv for m in self.marks) or _parent(pid) == me or self._env_marked(pid):
                self._note(kind, argv)

    def _env_marked(self, pid: int) -> bool:
        try:
            raw = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            return False
        return any(m.encode() in raw for m in self.marks)


_CLK_TCK = os.sysconf("SC_CLK_TCK")


def _boot_ticks() -> int:
    """Now, in the clock ticks since boot that ``/proc/<pid>/stat`` gives start times in."""
    return int(time.clock_gettime(time.CLOCK_BOOTTIME) * _CLK_TCK)


def _last_pid() -> int:
    """The PID the kernel handed out last (the last field of ``/proc/loadavg``)."""
    with open("/proc/loadavg") as f:
        return int(f.read().split()[-1])


def _pids() -> list[int]:
    return [int(n) for n in os.listdir("/proc") if n.isdigit()]


def _stat(pid: int) -> list[bytes]:
    with contextlib.suppress(OSError, ValueError):
        stat = Path(f"/proc/{pid}/stat").read_bytes()
        return stat[stat.rindex(b")") + 2:].split()
    return []


def _parent(pid: int) -> int:
    fields = _stat(pid)
    return int(fields[1]) if len(fields) > 1 else -1


def _started(pid: int) -> int:
    fields = _stat(pid)
    return int(fields[19]) if len(fields) > 19 else 0


# -- the pytest plugin (registered by tests/conftest.py)

# Folders whose every test starts a daemon, a gateway or a container: the fault suite, the
# end-to-end tests with the real gateway and the container engine tests.
LIVE_FOLDERS = ("faults", "e2e", "engine")
# The fixture that starts a daemon (a test using it, however indirectly, is live).
LIVE_FIXTURES = frozenset({"hermesd_factory"})
# Folders whose tests share one machine-wide thing (the engine tests: one dockerd, one swarm, one
# image build): under pytest-xdist's ``--dist loadgroup`` each runs on a single worker.
SERIAL_FOLDERS = ("engine",)
_TESTS = Path(__file__).resolve().parent

_WITNESS = Witness(())
_RECORD = os.environ.get("HERMESD_TIER_RECORD")
_T0 = pytest.StashKey[float]()
_CPU0 = pytest.StashKey[float]()


def _cpu() -> float:
    """CPU seconds of this process and of the children it has reaped (a daemon's gateways count
    once the daemon is reaped): what a test cost the machine, whatever else ran meanwhile."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _folder(item: pytest.Item) -> str | None:
    """The item's folder under tests/ (None for a file at its top or outside it)."""
    try:
        parts = item.path.resolve().relative_to(_TESTS).parts
    except ValueError:
        return None
    return parts[0] if len(parts) > 1 else None


def is_live(item: pytest.Item) -> bool:
    """Marked ``live`` or ``real_gateway``, under a live folder, or using a live fixture."""
    if item.get_closest_marker("live") is not None or item.get_closest_marker("real_gateway") is not None:
        return True
    if _folder(item) in LIVE_FOLDERS:
        return True
    return bool(LIVE_FIXTURES.intersection(getattr(item, "fixturenames", ())))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "live: starts a hermesd daemon, a gateway (real or fake) or a container; "
                                       "the full tier only")
    config.addinivalue_line("markers", "fast: neither live nor slow (set on every such test); the fast tier")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # First: pytest-xdist's own hook (3.8, in each worker) reads the xdist_group markers to name the
    # group in every test's ID, which is what --dist loadgroup schedules by; a marker added after it
    # is ignored and the engine tests ran on every worker at once (two swarms on one dockerd).
    for item in items:
        if _folder(item) in SERIAL_FOLDERS:
            item.add_marker(pytest.mark.xdist_group(_folder(item)))
        if is_live(item):
            if item.get_closest_marker("live") is None:
                item.add_marker(pytest.mark.live)
        elif item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.fast)


@pytest.fixture(autouse=True, scope="session")
def _tier_witness(tmp_path_factory: pytest.TempPathFactory) -> Witness:
    _WITNESS.marks = (str(tmp_path_factory.getbasetemp()),)
    _WITNESS.install()
    return _WITNESS


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    _WITNESS.reset()
    item.stash[_T0] = time.monotonic()
    item.stash[_CPU0] = _cpu()
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    yield
    if _RECORD or item.get_closest_marker("fast") is not None:
        _WITNESS.look()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A test of the fast tier that started a daemon, a gateway or a container fails, saying what."""
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if report.when != "call" or not _WITNESS.seen or item.get_closest_marker("fast") is None:
        return
    seen = "\n  ".join(f"{kind}: {argv}" for kind, argvs in sorted(_WITNESS.seen.items()) for argv in argvs[:3])
    text = (f"{item.nodeid} is in the fast tier but started processes of the full tier:\n  {seen}\n"
            "mark it @pytest.mark.live (or test the rule without them; see tests/tiers.py)")
    if report.passed:
        report.outcome = "failed"
        report.longrepr = text
    else:
        report.sections.append(("fast tier", text))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    yield
    if _RECORD:
        line = {"id": item.nodeid, "kinds": sorted(_WITNESS.seen),
                "seen": {k: v[:3] for k, v in _WITNESS.seen.items()},
                "seconds": round(time.monotonic() - item.stash.get(_T0, time.monotonic()), 3),
                "cpu": round(_cpu() - item.stash.get(_CPU0, _cpu()), 3),
                "worker": os.environ.get("PYTEST_XDIST_WORKER", ""),
                "fixtures": sorted(getattr(item, "fixturenames", ())),
                "marks": sorted({m.name for m in item.iter_markers()})}
        with open(_RECORD, "a") as f:
            f.write(json.dumps(line) + "\n")
