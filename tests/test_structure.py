"""The shape the code promised: layers that import only downwards, no import cycle among the
project's modules (imports inside functions count too), unique module names, and no class over
500 lines.

Read from the source with ``ast``, so a lazy import that closes a loop or reaches upwards is caught
as surely as a top-level one, and nothing is imported to find out.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("supervisor", "profiles", "wrappers")
MAX_CLASS_LINES = 500

# The layers, lowest first; each is a folder, but for the third: the few modules that are
# hermesd's own words. A module may import its own layer and the layers below it, never one above:
# what Hermes' files say knows nothing of hermesd, and an alias names a profile; the pure plan, the
# trust domain and the tree watch know no process of ours; a gateway process knows no mechanism
# built over processes; the settings file reads what those mechanisms accept; the Hermes a gateway
# runs is read through the settings; the daemon is built from all of those; the operations and the
# command line sit on top. A module belongs to the longest prefix that names it.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Hermes' files and facts", ("profiles",)),
    ("wrapper aliases", ("wrappers",)),
    ("hermesd's own words", ("supervisor", "supervisor.exits", "supervisor.layout", "supervisor.settings")),
    ("self-contained mechanisms", ("supervisor.plan", "supervisor.isolation", "supervisor.watch")),
    ("one gateway process", ("supervisor.processes",)),
    ("mechanisms over processes", (
        "supervisor.limits", "supervisor.observe", "supervisor.control", "supervisor.kanban",
    )),
    ("the settings file", ("supervisor.config",)),
    ("the Hermes a gateway runs", ("supervisor.hermes",)),
    ("the daemon", ("supervisor.daemon",)),
    ("operations", ("supervisor.ops", "supervisor.doctor", "supervisor.upgrade")),
    ("the command line", ("supervisor.cli", "supervisor.__main__")),
)


def _modules() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for pkg in PACKAGES:
        for path in sorted((REPO / pkg).rglob("*.py")):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The project module an import names (``a.b.c`` may be module ``a.b`` with attribute ``c``)."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def _imports(module: str, path: Path, modules: dict[str, Path], *, typing: bool = False) -> set[str]:
    """The project modules ``module`` imports; ``typing``: also those only its annotations name."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    is_pkg = path.name == "__init__.py"
    found: set[str] = set()
    # ``if TYPE_CHECKING:`` imports never run: they are annotations, not dependencies.
    typing_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
        for stmt in node.body
        for inner in ast.walk(stmt)
    }
    for node in ast.walk(tree):
        if id(node) in typing_only and not typing:
            continue
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base if is_pkg else base[:-1]
                base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                prefix = ".".join(base)
                head = f"{prefix}.{node.module}" if node.module else prefix
            else:
                head = node.module or ""
            names = [f"{head}.{a.name}" for a in node.names] or [head]
        for name in names:
            target = _resolve(name, modules)
            if target and target != module:
                found.add(target)
    found.discard(module)
    return found


def _graph(*, typing: bool = False) -> dict[str, set[str]]:
    modules = _modules()
    return {m: _imports(m, p, modules, typing=typing) for m, p in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in graph:
                    continue
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    break
                if child in on:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        top = stack.pop()
                        on.discard(top)
                        comp.append(top)
                        if top == node:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def _package_cycle_free(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Drop the edges from a package's ``__init__`` to its own submodules (it re-exports them)."""
    return {m: {t for t in ts if not t.startswith(m + ".")} for m, ts in graph.items()}


def test_the_cycle_finder_finds_a_cycle():
    """The check itself can fail: a two-module loop and a three-module loop are both reported."""
    graph = {"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"e"}, "e": {"c"}, "f": {"a"}}
    assert sorted(_cycles(graph)) == [["a", "b"], ["c", "d", "e"]]


def test_imports_inside_functions_count(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from supervisor.config import Config\n"
                    "def f():\n    from supervisor.layout import Layout\n    return Layout\n")
    assert _imports("supervisor.fake", path, _modules()) == {"supervisor.layout"}


def test_no_import_cycles():
    cycles = _cycles(_package_cycle_free(_graph()))
    assert not cycles, "import cycles (imports inside functions count):\n" + "\n".join(
        " <-> ".join(c) for c in cycles
    )


def _two_module_circles(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{a} <-> {b}" for a, targets in graph.items() for b in targets
                  if a < b and a in graph.get(b, set()) and not b.startswith(a + "."))


def test_no_two_modules_import_each_other_even_for_annotations():
    """The cycle rule leaves out ``if TYPE_CHECKING:`` imports (they never run), so a module that
    imports another for its code while that one names it back in an annotation was no cycle to it
    (``daemon/effective`` <-> ``daemon/interpreter`` stood so). Two modules that each need the
    other's names are one idea split in two, whichever way the imports run."""
    assert _two_module_circles({"a": {"b"}, "b": {"a"}, "a.x": {"a"}, "c": {"a"}}) == ["a <-> b"]
    circles = _two_module_circles(_package_cycle_free(_graph(typing=True)))
    assert not circles, "modules that import each other (annotations included):\n" + "\n".join(circles)


def _layer(module: str, layers: tuple[tuple[str, tuple[str, ...]], ...] = LAYERS) -> int | None:
    """The index of the layer ``module`` belongs to: the one with the longest prefix naming it."""
    best: tuple[int, int] | None = None
    for i, (_name, prefixes) in enumerate(layers):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and (best is None or len(p) > best[1]):
                best = (i, len(p))
    return None if best is None else best[0]


def _upward(graph: dict[str, set[str]], layers: tuple[tuple[str, tuple[str, ...]], ...] = LAYERS) -> list[str]:
    out = []
    for module, targets in sorted(graph.items()):
        low = _layer(module, layers)
        for target in sorted(targets):
            high = _layer(target, layers)
            if low is not None and high is not None and high > low:
                out.append(f"{module} ({layers[low][0]}) imports {target} ({layers[high][0]})")
    return out


def test_the_layer_check_finds_an_upward_import():
    """The check itself can fail: a low module importing a high one is reported, the other way is not."""
    layers = (("low", ("a",)), ("high", ("a.top", "b")))
    graph = {"a.x": {"b.y"}, "b.y": {"a.x"}, "a.top.z": {"a.x"}, "a.x2": {"a.top.z"}}
    assert _upward(graph, layers) == ["a.x (low) imports b.y (high)", "a.x2 (low) imports a.top.z (high)"]


def test_every_module_has_a_layer():
    assert [m for m in _modules() if _layer(m) is None] == []


def test_no_import_reaches_a_higher_layer():
    upward = _upward(_graph())
    assert not upward, "imports from a lower layer into a higher one:\n" + "\n".join(upward)


def test_module_names_are_unique():
    """Two modules with one name make every import, traceback and search ambiguous. The command
    modules are the exception by design: ``supervisor/cli/doctor.py`` is the ``doctor`` command
    of the ``supervisor/doctor`` checks."""
    seen: dict[str, set[str]] = {}
    for module in _modules():
        if module.startswith("supervisor.cli.") or module == "supervisor.__main__":
            continue
        seen.setdefault(module.rsplit(".", 1)[-1], set()).add(module)
    twice = {name: sorted(mods) for name, mods in seen.items() if len(mods) > 1}
    assert not twice, f"module names used twice: {twice}"


# What may stay loose in supervisor/: the entry point and what every floor shares. Everything else
# lives in the folder of its floor, so the folder list reads as the architecture.
TOP_LEVEL = {
    "supervisor.__main__": "``python -m supervisor``",
    "supervisor.exits": "how every command ends: the exit codes and the errors that carry them",
    "supervisor.layout": "where hermesd's own files are under a root, for every floor",
    "supervisor.settings": "every hermesd.yaml key declared once: the types every mechanism reads",
    "supervisor.config": "hermesd.yaml read into those settings, with file, line and key in its errors",
}


def test_supervisor_keeps_only_its_top_level_modules():
    loose = {m for m, path in _modules().items()
             if m.count(".") == 1 and m.startswith("supervisor.") and path.name != "__init__.py"}
    assert loose == set(TOP_LEVEL), f"loose modules in supervisor/ against TOP_LEVEL: {sorted(loose ^ set(TOP_LEVEL))}"



def test_only_a_package_init_declares_all():
    """``__all__`` declares what a package's ``__init__`` re-exports; nothing star-imports a module,
    so a list in one would only repeat its public names, and go stale with the next rename."""
    listed = [str(path.relative_to(REPO)) for path in _modules().values()
              if path.name != "__init__.py" and re.search(r"^__all__\b", path.read_text(), re.M)]
    assert not listed, f"__all__ outside a package's __init__.py: {listed}"

def _unexplained_lazy_imports(path: Path, rel: str) -> list[str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    tree = ast.parse("\n".join(lines))
    typing_only = {id(x) for n in ast.walk(tree) if isinstance(n, ast.If) and isinstance(n.test, ast.Name)
                   and n.test.id == "TYPE_CHECKING" for x in ast.walk(n)}
    out: list[str] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            lazy = isinstance(child, ast.Import | ast.ImportFrom) and in_function and id(child) not in typing_only
            if lazy and "#" not in lines[child.lineno - 1] and "#" not in lines[child.end_lineno - 1]:
                out.append(f"{rel}:{child.lineno}: {lines[child.lineno - 1].strip()}")
            visit(child, in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef))

    visit(tree, False)
    return out


def test_an_import_inside_a_function_says_why():
    """Imports belong at the top of a module; one that is not (a measured start-up cost, the shim's
    bare interpreter, a command handler's run-time code) says why on its own line."""
    found = []
    for path in _modules().values():
        found += _unexplained_lazy_imports(path, str(path.relative_to(REPO)))
    assert not found, "imports inside functions without a reason on their line:\n" + "\n".join(found)


def test_the_lazy_import_check_finds_one(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("def f():\n    import json  # the reason\n    import os\n    return json, os\n")
    assert _unexplained_lazy_imports(path, "m.py") == ["m.py:3: import os"]


def test_no_class_over_500_lines():
    big = []
    for path in _modules().values():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno + 1 > MAX_CLASS_LINES:
                big.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1})")
    assert not big, "classes over 500 lines: " + ", ".join(big)


# The daemon's state has one writer, its loop. Its helpers are given what they need and hand back
# results (a launch's outcome, a guard's verdict, a survey of what a previous hermesd left); none
# holds the Daemon, and nothing assigns or mutates the daemon's state through it. The command that
# starts the daemon is the one other module that may import the class, to build and run it.
DAEMON_LOOP = "supervisor.daemon.loop"
DAEMON_BUILDERS = {"supervisor.cli.run"}
DAEMON_NAMES = {"d", "daemon", "_daemon", "_d"}
MUTATORS = {"append", "add", "clear", "discard", "extend", "insert", "pop", "popitem", "remove", "setdefault",
            "update"}


def _through_daemon(node: ast.expr) -> bool:
    """Whether ``node`` reaches an attribute *of* the daemon: ``d.x…``, ``daemon.x…``, ``self.d.x…``."""
    chain = []
    while isinstance(node, ast.Attribute | ast.Subscript):
        chain.append(node)
        node = node.value
    if not chain or not isinstance(chain[-1], ast.Attribute):
        return False
    base = chain[-1].value
    if isinstance(base, ast.Name) and base.id in DAEMON_NAMES:
        return True
    return (len(chain) >= 2 and isinstance(base, ast.Name) and base.id == "self"
            and chain[-1].attr in DAEMON_NAMES and isinstance(chain[-2], ast.Attribute | ast.Subscript))


def _daemon_writes(tree: ast.AST) -> list[int]:
    """Lines that assign, delete or mutate the daemon's state through a name for the daemon."""
    lines = []
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = [t for tgt in node.targets for t in (tgt.elts if isinstance(tgt, ast.Tuple) else [tgt])]
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = list(node.targets)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS:
            targets = [node.func.value]
        lines += [node.lineno for t in targets if _through_daemon(t)]
    return sorted(lines)


def _imports_daemon(tree: ast.AST) -> bool:
    return any(isinstance(node, ast.ImportFrom) and node.module == DAEMON_LOOP
               and any(a.name == "Daemon" for a in node.names) for node in ast.walk(tree))


def test_the_daemon_write_check_finds_writes():
    """The check itself can fail: each way of writing through the daemon is found, reading is not."""
    source = ("def f(d, daemon, x):\n"
              "    d.ready = True\n"
              "    daemon.children[1] = x\n"
              "    d.domains.facts = x\n"
              "    d.state_problem, y = None, 1\n"
              "    d.pidfds.pop(x)\n"
              "    del d.timers[x]\n"
              "class H:\n"
              "    def g(self, x):\n"
              "        self.d.seq += 1\n"
              "        self.d.planner.profiles[x].extra['a'] = 1\n"
              "        return d.planner.profiles.get(x), self.d.ready, self.count\n"
              "    def h(self, x):\n"
              "        self.items.pop(x)\n"
              "        self.d = x\n")
    assert _daemon_writes(ast.parse(source)) == [2, 3, 4, 5, 6, 7, 10, 11]
    assert _imports_daemon(ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                     "    from supervisor.daemon.loop import Daemon\n"))


def test_only_the_loop_writes_the_daemon_state():
    found = []
    for module, path in _modules().items():
        if module == DAEMON_LOOP:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        found += [f"{path.relative_to(REPO)}:{line}" for line in _daemon_writes(tree)]
        if _imports_daemon(tree) and module not in DAEMON_BUILDERS:
            found.append(f"{path.relative_to(REPO)} imports the Daemon (give it what it needs instead)")
    assert not found, "the daemon's state written outside supervisor/daemon/loop.py:\n" + "\n".join(found)


def test_no_symlink_is_committed():
    """A committed link points into the machine it was made on: `.venv-supervisord` once went in as a
    link to a worktree, and a clean clone's benchmark then failed on "File exists"."""
    import shutil
    import subprocess

    import pytest

    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout: nothing is committed here")
    listing = subprocess.run(["git", "-C", str(REPO), "ls-files", "-s"], capture_output=True, text=True,
                             check=True).stdout
    links = [line.split("\t", 1)[1] for line in listing.splitlines() if line.startswith("120000 ")]
    assert links == []
