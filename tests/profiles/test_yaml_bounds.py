"""The bounds on every YAML file hermesd reads: depth, alias expansion and self-reference, checked
from the parser's events before any composer builds a tree.

Every file is hostile input, so a refusal names the file, the line and the problem. Nesting is the
one bound that must hold *before* composing: libyaml's composer recurses in C, and a 300 KB
``config.yaml`` nested 150,000 levels killed the process with SIGSEGV (issue 33). Each form of
nesting is tried at that size in each kind of file hermesd parses as YAML, in this process: before
the fix these tests killed the worker running them.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from profiles import fileio
from profiles.errors import ProfileConfigError
from profiles.info import read_distribution
from profiles.meta import read_profile_meta
from profiles.snapshot import read_profile
from profiles.yamledit import set_key
from supervisor import config as config_mod

F = Path("/p/config.yaml")
REPO = Path(__file__).resolve().parents[2]
DEEP = 150_000  # the levels of the 300 KB config.yaml


def _refusal(text: str) -> str:
    with pytest.raises(ProfileConfigError) as caught:
        fileio.parse_yaml(text, F)
    return str(caught.value)


def _alias_chain(levels: int) -> str:
    """Each anchored list holds an alias of the one before: flat text, a tree ``levels`` deep (the top
    mapping, then ``levels - 2`` lists, then the scalar), one line per list."""
    return "a0: &a0 [1]\n" + "".join(f"a{i}: &a{i} [*a{i - 1}]\n" for i in range(1, levels - 2))


# form -> the text of a document nested about ``n`` levels that way (each one fits the 1 MiB file cap)
FORMS: dict[str, Callable[[int], str]] = {
    "flow sequences": lambda n: "agent: " + "[" * n + "]" * n + "\n",
    "flow mappings": lambda n: "agent: " + "{a: " * n + "1" + "}" * n + "\n",
    "block sequences": lambda n: "agent:\n" + "- " * n + "x\n",
    "complex keys": lambda n: "? " * n + "x\n",
    # indentation alone costs n²/2 bytes: 1,000 levels is about what 1 MiB holds
    "block indentation": lambda n: "".join(" " * i + "a:\n" for i in range(min(n, 1000))) + " " * 1000 + "x\n",
    "anchors and aliases": lambda n: _alias_chain(min(n, 20_000)),
}


@pytest.mark.parametrize("form", list(FORMS))
def test_every_form_of_deep_nesting_is_refused_before_composing(form: str) -> None:
    text = FORMS[form](DEEP)
    assert len(text.encode()) <= fileio.MAX_PROFILE_FILE
    assert f"refused YAML: nested more than {fileio.MAX_YAML_DEPTH} levels deep" in _refusal(text)
    # The pure-Python loader (hermesd.yaml's) refuses it the same way, never through a RecursionError.
    with pytest.raises(ProfileConfigError, match="nested more than"):
        fileio.compose_yaml(text, F, loader=yaml.SafeLoader)


def _profile_config(tmp: Path, text: str) -> str:
    home = tmp / "profiles" / "p"
    home.mkdir(parents=True)
    (home / "config.yaml").write_text(text)
    facts = read_profile("p", home, b"salt")
    assert facts.config is None
    return " ".join(facts.problems)


def _profile_meta(tmp: Path, text: str) -> str:
    (tmp / "profile.yaml").write_text(text)
    with pytest.raises(ProfileConfigError) as caught:
        read_profile_meta(tmp)
    return str(caught.value)


def _hermesd_yaml(tmp: Path, text: str) -> str:
    (tmp / "hermesd.yaml").write_text(text)
    with pytest.raises(config_mod.ConfigError) as caught:
        config_mod.load(tmp / "hermesd.yaml")
    return str(caught.value)


def _distribution(tmp: Path, text: str) -> str:
    (tmp / "distribution.yaml").write_text(text)
    with pytest.raises(ProfileConfigError) as caught:
        read_distribution(tmp)
    return str(caught.value)


def _adopted(tmp: Path, text: str) -> str:
    """``hermesd standalone`` editing a config.yaml in place (it keeps the text, so it composes the tree)."""
    with pytest.raises(ProfileConfigError) as caught:
        set_key(text, "gateway", "standalone", True, where=str(tmp / "config.yaml"))
    return str(caught.value)


# file kind -> (its name, how hermesd reads it and what it says)
KINDS: dict[str, tuple[str, Callable[[Path, str], str]]] = {
    "config.yaml": ("config.yaml", _profile_config),
    "profile.yaml": ("profile.yaml", _profile_meta),
    "hermesd.yaml": ("hermesd.yaml", _hermesd_yaml),
    "distribution.yaml": ("distribution.yaml", _distribution),
    "config.yaml edited by standalone": ("config.yaml", _adopted),
}


@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("kind", list(KINDS))
def test_each_file_kind_names_itself_for_each_form(tmp_path: Path, kind: str, form: str) -> None:
    name, read = KINDS[kind]
    said = read(tmp_path, FORMS[form](DEEP))
    assert "refused YAML: nested more than" in said and name in said, said


def test_no_module_but_fileio_composes_yaml() -> None:
    """Every YAML document hermesd reads goes through :func:`profiles.fileio.compose_yaml`, whose
    bounds run first; a loader called anywhere else would be the gap issue 33 found (doctor's own
    ``yaml.safe_load`` of a hermesd.yaml that failed validation was one)."""
    loads = {"load", "safe_load", "full_load", "unsafe_load", "load_all", "safe_load_all", "full_load_all",
             "unsafe_load_all", "compose", "compose_all", "parse", "scan", "get_single_node", "get_node",
             "get_event", "get_data", "get_single_data"}
    found = []
    for path in sorted(p for pkg in ("profiles", "supervisor", "wrappers") for p in (REPO / pkg).rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        if rel == "profiles/fileio.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), rel)):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in loads:
                base = node.func.value
                if node.func.attr.startswith("get_") or (isinstance(base, ast.Name) and base.id == "yaml"):
                    found.append(f"{rel}:{node.lineno}: {ast.unparse(node.func)}")
    assert found == []


def test_a_plain_document_at_both_limits_is_read() -> None:
    flat = "[" + ",".join(["1"] * (fileio.MAX_YAML_NODES - 1)) + "]"  # the list and its items: the limit
    assert len(fileio.parse_yaml(flat, F)) == fileio.MAX_YAML_NODES - 1  # type: ignore[arg-type]
    deep = "[" * (fileio.MAX_YAML_DEPTH - 1) + "1" + "]" * (fileio.MAX_YAML_DEPTH - 1)
    assert fileio.parse_yaml(deep, F) is not None
    assert fileio.parse_yaml(_alias_chain(fileio.MAX_YAML_DEPTH), F) is not None


def test_one_node_or_level_more_is_refused_naming_the_file() -> None:
    flat = "[" + ",".join(["1"] * fileio.MAX_YAML_NODES) + "]"
    assert _refusal(flat) == f"{F}:1: refused YAML: expands to more than {fileio.MAX_YAML_NODES:,} nodes (alias bomb?)"
    deep = "[" * fileio.MAX_YAML_DEPTH + "1" + "]" * fileio.MAX_YAML_DEPTH
    assert f"nested more than {fileio.MAX_YAML_DEPTH} levels deep" in _refusal(deep)
    said = _refusal(_alias_chain(fileio.MAX_YAML_DEPTH + 1))  # its last line is the one too deep
    limit = fileio.MAX_YAML_DEPTH
    assert said == f"{F}:{limit - 1}: refused YAML: nested more than {limit} levels deep"


def test_an_alias_bomb_and_a_self_reference_are_refused() -> None:
    bomb = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, 9):
        bomb.append(f"{chr(97 + i)}: &{chr(97 + i)} [" + ",".join([f"*{chr(96 + i)}"] * 9) + "]")
    assert "(alias bomb?)" in _refusal("\n".join(bomb))
    assert "an alias refers to the node that contains it" in _refusal("a: &x [1, *x]\n")


def test_aliases_within_the_budget_are_read() -> None:
    assert fileio.parse_yaml("base: &b {x: 1}\none: *b\ntwo: *b\n", F) == {"base": {"x": 1}, "one": {"x": 1},
                                                                         "two": {"x": 1}}


def test_syntax_errors_are_still_the_composers_to_word() -> None:
    assert "found undefined alias" in _refusal("a: *nope\n")
    assert "never closes" in _refusal("a: [[[1\n")


@st.composite
def node_graphs(draw: st.DrawFn) -> yaml.Node:
    """A graph of YAML nodes as a composer builds them: later nodes take earlier ones as children
    (a child taken twice is an alias); sometimes a sequence also takes the root (a self-reference)."""
    nodes: list[yaml.Node] = []
    for _ in range(draw(st.integers(1, 14))):
        kind = draw(st.sampled_from(["scalar", "seq", "map"])) if nodes else "scalar"
        if kind == "scalar":
            nodes.append(yaml.ScalarNode("tag:yaml.org,2002:str", "v"))
            continue
        picks = draw(st.lists(st.integers(0, len(nodes) - 1), max_size=4))
        if kind == "seq":
            nodes.append(yaml.SequenceNode("tag:yaml.org,2002:seq", [nodes[i] for i in picks]))
        else:
            key = yaml.ScalarNode("tag:yaml.org,2002:str", "k")
            nodes.append(yaml.MappingNode("tag:yaml.org,2002:map", [(key, nodes[i]) for i in picks]))
    root = nodes[-1]
    seqs = [n for n in nodes if isinstance(n, yaml.SequenceNode)]
    if seqs and draw(st.booleans()) and draw(st.booleans()):
        draw(st.sampled_from(seqs)).value.append(root)
    return root


def _expanded(node: yaml.Node) -> tuple[int, int] | None:
    """The oracle: (height, size) of ``node`` with every alias expanded, by plain recursion over the
    small graphs below; ``None`` for a node that contains itself."""
    memo: dict[int, tuple[int, int] | None] = {}
    active: set[int] = set()

    def walk(n: yaml.Node) -> tuple[int, int] | None:
        if id(n) in active:
            return None
        if id(n) not in memo:
            active.add(id(n))
            kids: list[yaml.Node] = []
            if isinstance(n, yaml.SequenceNode):
                kids = list(n.value)
            elif isinstance(n, yaml.MappingNode):
                kids = [k for pair in n.value for k in pair]
            got = [walk(k) for k in kids]
            active.discard(id(n))
            memo[id(n)] = None if None in got else (1 + max((g[0] for g in got if g), default=0),
                                                     1 + sum(g[1] for g in got if g))
        return memo[id(n)]

    return walk(node)


@settings(max_examples=300)
@given(node_graphs(), st.integers(3, 30), st.integers(2, 6))
def test_the_event_walk_refuses_exactly_what_the_expanded_tree_exceeds(node: yaml.Node, budget: int,
                                                                      depth: int) -> None:
    """The graph, written out as YAML (a node reached twice becomes an anchor and aliases, a cycle an
    alias inside its own anchor), is refused by the event walk exactly when its expansion is too deep,
    too large or infinite."""
    text = yaml.serialize(node)
    size = _expanded(node)
    with pytest.MonkeyPatch.context() as mp:  # small limits, so generated graphs reach them
        mp.setattr(fileio, "MAX_YAML_NODES", budget)
        mp.setattr(fileio, "MAX_YAML_DEPTH", depth)
        try:
            fileio.compose_yaml(text, F)[0].dispose()
            refused = None
        except ProfileConfigError as exc:
            refused = str(exc)
    # the walk stops at the first limit it meets, so a cycle may be refused as too deep or too large first
    if size is None or size[0] > depth or size[1] > budget:
        assert refused is not None and any(w in refused for w in ("nested more", "(alias bomb?)", "contains it"))
    else:
        assert refused is None, (text, size)



# Plain scalars that each resolver of SafeLoader claims (and some it refuses to build), beside strings.
TRICKY = ["yes", "No", "off", "TRUE", "0x1F", "0x_", "1_000", "0o17", "017", "0b101", "+12", "-0", "1e3",
          "6.8523015e+5", ".inf", "-.Inf", ".NaN", "190:20:30", "2001-12-14", "2001-12-14t21:59:43.10-05:00",
          "2002-13-45", "~", "null", "", "<<", "=", "!", "x", "hermes-cli", "127.0.0.1", "a b", "1.2.3", "0."]


@st.composite
def yaml_trees(draw: st.DrawFn, depth: int = 0) -> yaml.Node:
    """A node tree as a composer builds one, with the scalars, styles, tags, anchors, merge keys and
    collection keys that the plain path must either build exactly as the full path or hand to it."""
    kind = draw(st.sampled_from(["scalar", "scalar", "seq", "map"] if depth < 4 else ["scalar"]))
    flow = draw(st.sampled_from([None, True, False]))
    if kind == "scalar":
        value = draw(st.sampled_from(TRICKY) | st.text(max_size=6))
        style = draw(st.sampled_from([None, None, "'", '"', "|"]))
        implicit = yaml.SafeLoader("").resolve(yaml.ScalarNode, value, (True, False))
        tag = draw(st.sampled_from([implicit, implicit, implicit, "tag:yaml.org,2002:str", "!custom"]))
        return yaml.ScalarNode(tag, value, style=style)
    if kind == "seq":
        return yaml.SequenceNode("tag:yaml.org,2002:seq", draw(st.lists(yaml_trees(depth + 1), max_size=4)),
                                 flow_style=flow)
    pairs = draw(st.lists(st.tuples(yaml_trees(depth + 3), yaml_trees(depth + 1)), max_size=4))
    return yaml.MappingNode("tag:yaml.org,2002:map", pairs, flow_style=flow)


def _outcome(read: Callable[[str, Path], object], text: str) -> tuple[str, object]:
    try:
        return "read", read(text, F)
    except ProfileConfigError as exc:
        return "refused", str(exc)


def _typed(value: object) -> object:
    """``value`` with every type spelled out (``1 == True == 1.0`` in Python; NaN equal to itself)."""
    if isinstance(value, dict):
        return [("map", _typed(k), _typed(v)) for k, v in value.items()]
    if isinstance(value, list):
        return [("seq", *map(_typed, value))]
    return type(value).__name__, value if value == value else "nan"


@settings(max_examples=100)
@given(yaml_trees(), st.sampled_from([None, "anchor", "cut", "second document"]), st.integers(0, 10_000))
def test_the_plain_path_reads_every_document_as_the_full_path(node: yaml.Node, twist: str | None, at: int) -> None:
    """:func:`fileio.parse_yaml` builds plain documents straight from the parser's events; for every
    document (tagged, anchored, cut short, two of them, keys that are collections or merge keys,
    values a constructor refuses) it answers what composing and constructing answers: the same
    types, keys in the same order, the same error worded the same way."""
    text = yaml.serialize(node, Dumper=yaml.SafeDumper)
    if twist == "anchor":
        text = yaml.serialize(yaml.SequenceNode("tag:yaml.org,2002:seq", [node, node]), Dumper=yaml.SafeDumper)
    elif twist == "cut":
        text = text[: at % (len(text) + 1)]
    elif twist == "second document":
        text += "---\nx: 1\n"
    full = _outcome(lambda t, p: fileio.parse_yaml_tree(t, p)[0], text)
    plain = _outcome(fileio.parse_yaml, text)
    assert plain[0] == full[0], text
    assert (_typed(plain[1]) if plain[0] == "read" else plain[1]) == (
        _typed(full[1]) if full[0] == "read" else full[1]), text


def test_the_plain_path_takes_a_profiles_config_and_hands_on_the_rest() -> None:
    """What the scan's speed rests on: an ordinary config.yaml is built in the one pass (no second
    parse, no node tree), and what that pass does not model goes to the full path."""
    plain = "model: x\nagent: {max_turns: 60, gateway_timeout: 1.5e3}\ntoolsets: [hermes-cli]\nday: 2001-12-14\n"
    assert fileio._plain_document(plain, yaml.CSafeLoader) == fileio.parse_yaml_tree(plain, F)[0]
    for text in ("a: &x 1\nb: *x\n", "a: !!str 1\n", "<<: {a: 1}\n", "? [a]\n: 1\n", "a: 1\n---\nb: 2\n",
                 "a: [1\n", "=: 1\n", "a: 0x_\n", "[" * fileio.MAX_YAML_DEPTH + "1" + "]" * fileio.MAX_YAML_DEPTH):
        assert fileio._plain_document(text, yaml.CSafeLoader) is fileio._FULL, text
