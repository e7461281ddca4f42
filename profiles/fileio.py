"""Small file primitives every module needs the same way: bounded YAML in, atomic text out.

Profile files belong to whoever can write the profile, and the supervisor reads them on the loop
that serves every profile, so reading is bounded three ways: only regular files of a capped size
(:mod:`profiles.safeio`), YAML whose aliases cannot expand past a node budget (a 612-byte
"billion laughs" document is a tree of 10⁹ nodes to anything that walks it, such as a digest or a
deep copy), and no nesting deeper than Python's stack can walk. Every refusal is a
:class:`ProfileConfigError` naming the file (and the line, when YAML knows it), because a person
fixing a broken ``config.yaml`` needs the line more than the parser's internals.

Every path is resolved by :mod:`profiles.safeio`'s rule: beneath its folder, never through a link a
profile could plant. A caller passes a :class:`~profiles.safeio.Beneath`, or a ``Path`` naming a
file directly in a folder (resolved with :func:`~profiles.safeio.home_file`: from the root when the
folder is a profile home). Writes go through an ``O_EXCL`` temp file in the same directory and a
``renameat`` so a crash or a concurrent reader never sees half a file.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import yaml

from profiles.errors import ProfileConfigError
from profiles.safeio import Beneath, Stamp, UnsafeFileError, beneath, read_if_changed, read_regular, replace_bytes

if TYPE_CHECKING:  # the loaders built here: libyaml's where PyYAML has it, the pure-Python one otherwise
    YamlLoader = yaml.SafeLoader | yaml.CSafeLoader

try:  # libyaml is an order of magnitude faster; scanning 1,000 profiles depends on it.
    _Loader: type[YamlLoader] = yaml.CSafeLoader
    _Dumper: type = yaml.CSafeDumper
except AttributeError:  # pragma: no cover - PyYAML built without libyaml
    _Loader = yaml.SafeLoader
    _Dumper = yaml.SafeDumper

# Upstream's own files are a few KiB; these leave room for every real one and nothing absurd.
MAX_PROFILE_FILE = 1 << 20  # .env, config.yaml, hermesd.yaml
MAX_YAML_NODES = 100_000  # nodes after alias expansion
MAX_YAML_DEPTH = 200
T = TypeVar("T")


def read_cached(where: Beneath, cache: dict[str, tuple[Stamp, T]], parse: Callable[[bytes], T]) -> T | None:
    """``parse`` of ``where``'s bytes, reused from ``cache`` while the file keeps its stamp; ``None`` when
    it does not exist. Unsafe or unreadable is a :class:`ProfileConfigError` (as :func:`read_text`)."""
    hit = cache.get(where.text)
    try:
        stamp, raw = read_if_changed(where, MAX_PROFILE_FILE, hit[0] if hit is not None else None)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except UnsafeFileError as exc:
        raise ProfileConfigError(where.path, exc.problem) from None
    except OSError as exc:
        raise ProfileConfigError(where.path, f"cannot read: {exc.strerror}") from None
    if raw is None and hit is not None:
        return hit[1]
    assert raw is not None
    value = parse(raw)
    cache[where.text] = (stamp, value)
    return value


def decode_text(data: bytes, where: Beneath) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ProfileConfigError(where.path, "not valid UTF-8", line=line) from exc


def read_text(where: Beneath | Path, limit: int = MAX_PROFILE_FILE) -> str:
    """File text as UTF-8 (a leading BOM dropped); a link, FIFO, device, oversized or undecodable file is a
    :class:`ProfileConfigError`."""
    spot = beneath(where)
    try:
        data = read_regular(spot, limit)
    except UnsafeFileError as exc:
        raise ProfileConfigError(spot.path, exc.problem) from None
    return decode_text(data, spot)


def _check_size(node: yaml.Node, path: Path) -> None:
    """Refuse a document whose alias-expanded tree exceeds the node budget or the depth limit, or
    that refers to itself.

    Almost every file is a plain tree (no alias), which one cheap pass accepts; the expanded count
    runs only for a document with a node reached twice, or one the pass cannot accept, and is what
    words every refusal.
    """
    if not _plain_tree_within_limits(node):
        _check_expanded(node, path)


def _plain_tree_within_limits(node: yaml.Node) -> bool:
    """Whether no node is reached twice and the tree is within both limits. A plain tree's expanded
    size is its node count, so :func:`_check_expanded` would accept it; False decides nothing."""
    seen: set[int] = set()
    stack: list[tuple[yaml.Node, int]] = [(node, 1)]
    while stack:
        current, depth = stack.pop()
        key = id(current)
        if depth > MAX_YAML_DEPTH or key in seen or len(seen) >= MAX_YAML_NODES:
            return False
        seen.add(key)
        if isinstance(current, yaml.MappingNode):
            for pair in current.value:
                stack.append((pair[0], depth + 1))
                stack.append((pair[1], depth + 1))
        elif isinstance(current, yaml.SequenceNode):
            stack.extend([(c, depth + 1) for c in current.value])
    return True


def _check_expanded(node: yaml.Node, path: Path) -> None:
    """Count every node as often as aliases make it appear, in time linear in the distinct nodes
    (sizes are memoised per node object), so the check itself cannot be the bomb."""
    sizes: dict[int, int] = {}
    active: set[int] = set()
    stack: list[tuple[yaml.Node, int, bool]] = [(node, 1, False)]
    while stack:
        current, depth, done = stack.pop()
        key = id(current)
        if done:
            active.discard(key)
            sizes[key] = 1 + sum(sizes[id(c)] for c in _children(current))
            if sizes[key] > MAX_YAML_NODES:
                raise _refusal(current, path, f"expands to more than {MAX_YAML_NODES:,} nodes (alias bomb?)")
            continue
        if key in sizes:
            continue
        if key in active:
            raise _refusal(current, path, "an alias refers to the node that contains it")
        if depth > MAX_YAML_DEPTH:
            raise _refusal(current, path, f"nested more than {MAX_YAML_DEPTH} levels deep")
        active.add(key)
        stack.append((current, depth, True))
        stack.extend((c, depth + 1, False) for c in _children(current) if id(c) not in sizes)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def _refusal(node: yaml.Node, path: Path, problem: str) -> ProfileConfigError:
    mark = getattr(node, "start_mark", None)
    return ProfileConfigError(path, f"refused YAML: {problem}", line=mark.line + 1 if mark is not None else None)


def _syntax_error(exc: yaml.MarkedYAMLError, text: str) -> tuple[str, int | None]:
    """What to tell the person fixing the file, and the line to fix.

    PyYAML marks an unclosed bracket or quote where the file ends, often a line past the last one
    (``model: [oops`` is reported at line 2 of a one-line file); the line to fix is the one where the
    construct opened, which the error carries as its context."""
    problem = exc.problem or exc.context or "invalid YAML"
    end = len(text.rstrip())
    if exc.problem_mark is not None and exc.problem_mark.index >= end:
        opened = exc.context_mark
        if opened is not None and exc.context and opened.index < end:
            return f"{exc.context} that the file never closes ({problem})", opened.line + 1
        return f"the file ends too early ({problem})", max(1, len(text[:end].splitlines()))
    mark = exc.problem_mark or exc.context_mark
    return problem, mark.line + 1 if mark is not None else None


def compose_yaml(text: str, path: Path, loader: type[YamlLoader] = _Loader) -> tuple[YamlLoader, yaml.Node | None]:
    """The bounded node tree of ``text`` and a loader positioned to construct it; errors name file and line."""
    ldr = loader(text)
    try:
        node = ldr.get_single_node()
    except yaml.MarkedYAMLError as exc:
        ldr.dispose()
        problem, line = _syntax_error(exc, text)
        raise ProfileConfigError(path, f"invalid YAML: {problem}", line=line) from None
    except yaml.YAMLError as exc:
        ldr.dispose()
        raise ProfileConfigError(path, f"invalid YAML: {exc}") from None
    except RecursionError:
        ldr.dispose()
        raise ProfileConfigError(path, "refused YAML: nested too deeply") from None
    if node is not None:
        try:
            _check_size(node, path)
        except ProfileConfigError:
            ldr.dispose()
            raise
    return ldr, node


def parse_yaml(text: str, path: Path) -> object:
    """Parse YAML ``text`` read from ``path``, bounded; a syntax error names the file and line."""
    return parse_yaml_tree(text, path)[0]


def parse_yaml_tree(text: str, path: Path) -> tuple[object, yaml.Node | None]:
    """:func:`parse_yaml`'s document and the node tree it was built from, for an edit that keeps the text."""
    ldr, node = compose_yaml(text, path)
    try:
        if node is None:
            return None, None
        return ldr.construct_document(node), node
    except yaml.MarkedYAMLError as exc:
        problem, line = _syntax_error(exc, text)
        raise ProfileConfigError(path, f"invalid YAML: {problem}", line=line) from None
    except (yaml.YAMLError, ValueError, TypeError, OverflowError) as exc:
        # An impossible date or a tag PyYAML refuses is still the user's file: a config error.
        raise ProfileConfigError(path, f"invalid YAML value: {exc}") from None
    finally:
        ldr.dispose()


def load_yaml_mapping(where: Beneath | Path, limit: int = MAX_PROFILE_FILE) -> dict[str, Any]:
    """A YAML file that must hold a mapping; missing or empty means ``{}``."""
    spot = beneath(where)
    path = spot.path
    try:
        text = read_text(spot, limit)
    except (FileNotFoundError, NotADirectoryError):
        return {}
    return as_mapping(parse_yaml(text, path), path)


def as_mapping(data: object, path: Path) -> dict[str, Any]:
    """A parsed document that must be a mapping; empty means ``{}``."""
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ProfileConfigError(path, f"top level must be a mapping, not {type(data).__name__}", line=1)
    return data


def dump_yaml(data: object) -> str:
    """Block-style YAML in insertion order, the way upstream writes ``profile.yaml``."""
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, default_flow_style=False, allow_unicode=True)


def atomic_write_text(where: Beneath | Path, text: str, mode: int = 0o644) -> None:
    """Replace ``where`` with ``text`` so readers see the old file or the new one, never a torn one."""
    replace_bytes(beneath(where), text.encode("utf-8"), mode)
