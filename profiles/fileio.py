"""Small file primitives every module needs the same way: bounded YAML in, atomic text out.

Profile files belong to whoever can write the profile, and the supervisor reads them on the loop
that serves every profile, so reading is bounded three ways: only regular files of a capped size
(:mod:`profiles.safeio`), YAML whose aliases cannot expand past a node budget (a 612-byte
"billion laughs" document is a tree of 10⁹ nodes to anything that walks it, such as a digest or a
deep copy), and no nesting deeper than a fixed limit, found from the parser's events before a
composer builds anything (libyaml's composer recurses in C: 150,000 levels of ``[`` in 300 KB kill
the process with SIGSEGV, which no ``except`` can catch). Every refusal is a
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


def _check_events(text: str, path: Path, loader: type[YamlLoader]) -> None:
    """Refuse a document nested deeper than the depth limit, expanding past the node budget, or with
    an alias inside the node it names, from the parser's events, before any composer sees them.

    The composers recurse once per level (libyaml's in C, so a 300 KB ``[[[…`` overflows the C stack
    and kills the process; PyYAML's own in Python), while the parsers keep their stacks on the heap
    and this walk keeps one frame per open collection: nothing here recurses. An alias counts as the
    whole node it names, its size and its height, so an alias chain is as deep and as large as its
    expansion; the walk stops at the first event past a limit, so a bomb costs a few hundred events.
    """
    parser = loader(text)
    try:
        _walk_events(parser, path)
    except yaml.YAMLError:
        pass  # the composer meets the same error at the same event and words it (see compose_yaml)
    finally:
        parser.dispose()


def _walk_events(parser: YamlLoader, path: Path) -> None:
    named: dict[str, tuple[int, int] | None] = {}  # anchor -> (height, expanded size); None while open
    frames: list[tuple[str | None, int, int]] = []  # per open collection: anchor, count and peak before it
    level = count = peak = 0  # open collections; nodes so far, aliases expanded; deepest level in this frame
    get_event, max_depth, max_nodes = parser.get_event, MAX_YAML_DEPTH, MAX_YAML_NODES
    while True:
        event: Any = get_event()  # a NodeEvent carries the anchor; the kind is tested below
        kind = type(event)
        if kind is yaml.ScalarEvent:
            count += 1
            depth = level + 1
            if event.anchor is not None:
                named[event.anchor] = (1, 1)
        elif kind is yaml.MappingStartEvent or kind is yaml.SequenceStartEvent:
            frames.append((event.anchor, count, peak))
            count += 1
            level = depth = peak = level + 1
            if event.anchor is not None:
                named[event.anchor] = None
        elif kind is yaml.MappingEndEvent or kind is yaml.SequenceEndEvent:
            anchor, before, outer = frames.pop()
            if anchor is not None:
                named[anchor] = (peak - level + 1, count - before)
            level -= 1
            peak = max(peak, outer)
            continue
        elif kind is yaml.AliasEvent:
            if event.anchor in named and named[event.anchor] is None:
                raise _refusal(event, path, "an alias refers to the node that contains it")
            height, size = named.get(event.anchor) or (1, 1)  # an undefined alias is the composer's to word
            count += size
            depth = level + height
        elif kind is yaml.StreamEndEvent:
            return
        else:  # stream and document boundaries
            continue
        if depth > peak:
            peak = depth
        if depth > max_depth:
            raise _refusal(event, path, f"nested more than {max_depth} levels deep")
        if count > max_nodes:
            raise _refusal(event, path, f"expands to more than {max_nodes:,} nodes (alias bomb?)")


def _refusal(event: yaml.NodeEvent, path: Path, problem: str) -> ProfileConfigError:
    mark = event.start_mark
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
    _check_events(text, path, loader)
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
    return ldr, node


def parse_yaml(text: str, path: Path) -> object:
    """Parse YAML ``text`` read from ``path``, bounded; a syntax error names the file and line."""
    data = _plain_document(text, _Loader)
    if data is _FULL:
        return parse_yaml_tree(text, path)[0]
    return data


_FULL = object()  # what _plain_document answers for a document it leaves to the full path
_YAML_STR = "tag:yaml.org,2002:str"
# The scalar types a plain (untagged, unquoted) scalar can resolve to that are built as SafeLoader
# builds them; the others a resolver can name (merge ``<<``, value ``=``, the ``!``/``&``/``*``
# "yaml" tag) mean something only to the constructor's mapping rules or are errors.
_YAML_BUILT = frozenset(f"tag:yaml.org,2002:{t}" for t in ("bool", "int", "float", "null", "timestamp"))


def _plain_document(text: str, loader: type[YamlLoader]) -> object:
    """The document of ``text`` built straight from the parser's events, in the one pass that checks
    the bounds, or :data:`_FULL` when the full path must read it.

    Nearly every real ``config.yaml`` is one document of untagged mappings, sequences and scalars
    without anchors; for those, composing a node tree and then constructing it (two more passes, a
    second parse of the text, a node object per value) is most of the cost of a 1,000-profile scan.
    The result is the full path's: each scalar resolved by the loader's own implicit resolvers and
    built by its own constructors, keys in document order, a repeated key's last value kept. Anything
    else (an anchor, an alias, a tag, a merge or value key, a collection as a key, a second document,
    a syntax error, a value its constructor refuses, a bound reached) answers :data:`_FULL`, so every
    refusal and error is the full path's, worded as it words it. The bounds hold here too: at most
    ``MAX_YAML_NODES`` values, ``MAX_YAML_DEPTH`` levels, and no alias to expand.
    """
    if loader.yaml_path_resolvers or None in loader.yaml_implicit_resolvers:
        return _FULL  # a resolver this pass does not model
    parser = loader(text)
    try:
        return _build_plain(parser)
    except Exception:  # every error is the full path's to word
        return _FULL
    finally:
        parser.dispose()


def _build_plain(parser: YamlLoader) -> object:
    get_event, resolvers, constructors = parser.get_event, parser.yaml_implicit_resolvers, parser.yaml_constructors
    max_depth, max_nodes = MAX_YAML_DEPTH, MAX_YAML_NODES
    open_: list[list[Any]] = []  # per open collection: [the dict or list, the key waiting for its value]
    no_key = _FULL
    root: object = None
    count = 0
    documents = 0
    while True:
        event: Any = get_event()
        kind = type(event)
        if kind is yaml.ScalarEvent:
            if event.anchor is not None or event.tag is not None:
                return _FULL
            value: Any = event.value
            if event.implicit[0]:  # plain: the resolvers decide (quoted and block scalars are strings)
                for tag, regexp in resolvers.get(value[:1], ()):
                    if regexp.match(value):
                        if tag not in _YAML_BUILT:
                            return _FULL
                        value = constructors[tag](parser, yaml.ScalarNode(tag, value, event.start_mark,
                                                                          event.end_mark, event.style))
                        break
            container = False
        elif kind is yaml.MappingStartEvent or kind is yaml.SequenceStartEvent:
            if event.anchor is not None or event.tag is not None:
                return _FULL
            value = {} if kind is yaml.MappingStartEvent else []
            container = True
        elif kind is yaml.MappingEndEvent or kind is yaml.SequenceEndEvent:
            open_.pop()
            continue
        elif kind is yaml.DocumentStartEvent:
            documents += 1
            if documents > 1:
                return _FULL
            continue
        elif kind is yaml.StreamEndEvent:
            return root
        elif kind is yaml.AliasEvent:
            return _FULL
        else:  # the stream's start, a document's end
            continue
        count += 1
        if count > max_nodes or len(open_) >= max_depth:
            return _FULL
        if not open_:
            root = value
        else:
            top = open_[-1]
            into = top[0]
            if type(into) is list:
                into.append(value)
            elif top[1] is no_key:
                if container:
                    return _FULL  # a collection as a key: unhashable, the full path's error
                top[1] = value
            else:
                into[top[1]] = value
                top[1] = no_key
        if container:
            open_.append([value, no_key])


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
    except (KeyError, IndexError):  # SafeConstructor reading a tagged value that is none (``!!bool x``, ``!!int ''``)
        raise ProfileConfigError(path, "invalid YAML value: a value tagged !!bool or !!int that is not one") from None
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
