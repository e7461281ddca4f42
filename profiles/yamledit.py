"""Set one ``section: {key: value}`` in a user's YAML text, changing nothing else in it.

hermesd edits a user's config.yaml only with consent (``hermesd standalone``), and the change must be the
one line it shows: comments, order, quoting and blank lines stay as they were. PyYAML cannot write a
document back that way, so the edit is textual, guided by the parsed document: a missing section is
appended as a block, a block section gets the key as its first entry (indented like its other
entries), an existing scalar value is replaced on its own line. Anything else (a flow mapping, a
value spread over several lines, an anchor, a section that is no mapping) is refused with a reason,
and the caller shows the line to add by hand. The result is parsed again and must equal the original
document with exactly that key set, or the edit is refused.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from profiles.errors import ProfileConfigError
from profiles.fileio import parse_yaml, parse_yaml_tree


class EditRefused(ValueError):
    """The text cannot be edited safely; the message says why and what to write by hand."""


def _scalar_text(value: bool | int | str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _node_for(root: yaml.Node, key: str) -> tuple[yaml.Node, yaml.Node] | None:
    if not isinstance(root, yaml.MappingNode):
        return None
    found = [(k, v) for k, v in root.value if isinstance(k, yaml.ScalarNode) and k.value == key]
    if len(found) > 1:
        raise EditRefused(f"'{key}' appears {len(found)} times at the top level")
    return found[0] if found else None


def set_key(text: str, section: str, key: str, value: bool | int | str, *, where: str = "config.yaml") -> str:
    """``text`` with ``section.key`` set to ``value`` (see the module docstring); unchanged when already so."""
    hand = f"add by hand under '{section}:' the line '  {key}: {_scalar_text(value)}'"
    before, root = parse_yaml_tree(text, Path(where))
    if before is None:
        before = {}
    if not isinstance(before, dict):
        raise EditRefused(f"{where} is not a mapping; {hand}")
    current = before.get(section)
    if isinstance(current, dict) and current.get(key) == value and type(current.get(key)) is type(value):
        return text
    if root is not None and (not isinstance(root, yaml.MappingNode) or root.flow_style):
        raise EditRefused(f"{where} is written as a one-line mapping; {hand}")
    lines = text.splitlines(keepends=True)
    entry = f"{key}: {_scalar_text(value)}"
    pair = _node_for(root, section) if root is not None else None
    if pair is None:
        tail = "" if not text or text.endswith("\n") else "\n"
        new = f"{text}{tail}{section}:\n  {entry}\n"
    else:
        knode, vnode = pair
        if isinstance(vnode, yaml.ScalarNode) and vnode.value in ("", "~", "null") and vnode.tag.endswith(":null"):
            # "gateway:" with nothing under it: the section line gets the block
            line = lines[knode.start_mark.line]
            if line.rstrip("\r\n").rstrip() != line[: knode.end_mark.column].rstrip() + ":":
                raise EditRefused(f"{where}:{knode.start_mark.line + 1}: '{section}:' is followed by more on its "
                                  f"line; {hand}")
            eol = line[len(line.rstrip("\r\n")):] or "\n"
            indent = " " * (knode.start_mark.column + 2)
            lines[knode.start_mark.line] = line.rstrip("\r\n") + eol + f"{indent}{entry}{eol}"
            new = "".join(lines)
        elif isinstance(vnode, yaml.MappingNode) and not vnode.flow_style and vnode.value:
            sub = _node_for(vnode, key)
            if sub is not None:
                new = _replace_scalar(lines, sub[1], _scalar_text(value), where, hand)
            else:
                first_key = vnode.value[0][0]
                if first_key.start_mark.line == knode.start_mark.line:
                    raise EditRefused(f"{where}:{knode.start_mark.line + 1}: '{section}' is written on one line; "
                                      f"{hand}")
                indent = " " * first_key.start_mark.column
                eol = "\r\n" if lines[first_key.start_mark.line].endswith("\r\n") else "\n"
                lines.insert(first_key.start_mark.line, f"{indent}{entry}{eol}")
                new = "".join(lines)
        else:
            raise EditRefused(f"{where}:{knode.start_mark.line + 1}: '{section}' is not a block mapping; {hand}")
    try:
        after = parse_yaml(new, Path(where))
    except ProfileConfigError:
        raise EditRefused(f"{where}: the edit would not parse; {hand}") from None
    want = dict(before)
    old = before.get(section)
    want[section] = {**old, key: value} if isinstance(old, dict) else {key: value}
    if after != want:
        raise EditRefused(f"{where}: the edit would change more than '{section}.{key}'; {hand}")
    return new


def _replace_scalar(lines: list[str], node: yaml.Node, text: str, where: str, hand: str) -> str:
    if not isinstance(node, yaml.ScalarNode) or node.start_mark.line != node.end_mark.line or node.style in ("|", ">"):
        raise EditRefused(f"{where}:{node.start_mark.line + 1}: the value is not a one-line scalar; {hand}")
    n = node.start_mark.line
    line = lines[n]
    lines[n] = line[: node.start_mark.column] + text + line[node.end_mark.column:]
    return "".join(lines)
