"""The bounds on a profile's YAML: alias expansion, self-reference and depth, checked once composed.

Every file is hostile input, so a refusal names the file, the line and the problem; a plain file
(no alias) is accepted by one cheap pass, and the property below holds that pass to the full
alias-expanding count: whatever the pass accepts, the full count accepts too.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from profiles import fileio
from profiles.errors import ProfileConfigError

F = Path("/p/config.yaml")


def _refusal(text: str) -> str:
    with pytest.raises(ProfileConfigError) as caught:
        fileio.parse_yaml(text, F)
    return str(caught.value)


def test_a_plain_document_at_both_limits_is_read() -> None:
    flat = "[" + ",".join(["1"] * (fileio.MAX_YAML_NODES - 1)) + "]"  # the list and its items: the limit
    assert len(fileio.parse_yaml(flat, F)) == fileio.MAX_YAML_NODES - 1  # type: ignore[arg-type]
    deep = "[" * (fileio.MAX_YAML_DEPTH - 1) + "1" + "]" * (fileio.MAX_YAML_DEPTH - 1)
    assert fileio.parse_yaml(deep, F) is not None


def test_one_node_or_level_more_is_refused_naming_the_file() -> None:
    flat = "[" + ",".join(["1"] * fileio.MAX_YAML_NODES) + "]"
    assert _refusal(flat) == f"{F}:1: refused YAML: expands to more than {fileio.MAX_YAML_NODES:,} nodes (alias bomb?)"
    deep = "[" * fileio.MAX_YAML_DEPTH + "1" + "]" * fileio.MAX_YAML_DEPTH
    assert f"nested more than {fileio.MAX_YAML_DEPTH} levels deep" in _refusal(deep)


def test_an_alias_bomb_and_a_self_reference_are_refused() -> None:
    bomb = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, 9):
        bomb.append(f"{chr(97 + i)}: &{chr(97 + i)} [" + ",".join([f"*{chr(96 + i)}"] * 9) + "]")
    assert "(alias bomb?)" in _refusal("\n".join(bomb))
    assert "an alias refers to the node that contains it" in _refusal("a: &x [1, *x]\n")


def test_aliases_within_the_budget_are_read() -> None:
    assert fileio.parse_yaml("base: &b {x: 1}\none: *b\ntwo: *b\n", F) == {"base": {"x": 1}, "one": {"x": 1},
                                                                         "two": {"x": 1}}


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


def _outcome(check: object, node: yaml.Node) -> str | None:
    try:
        check(node, F)  # type: ignore[operator]
    except ProfileConfigError as exc:
        return str(exc)
    return None


@settings(max_examples=300, deadline=None)
@given(node_graphs(), st.integers(3, 30), st.integers(2, 6))
def test_the_cheap_pass_accepts_only_what_the_full_count_accepts(node: yaml.Node, budget: int, depth: int) -> None:
    with pytest.MonkeyPatch.context() as mp:  # small limits, so generated graphs reach them
        mp.setattr(fileio, "MAX_YAML_NODES", budget)
        mp.setattr(fileio, "MAX_YAML_DEPTH", depth)
        assert _outcome(fileio._check_size, node) == _outcome(fileio._check_expanded, node)
