"""Small file primitives every module needs the same way: YAML in, atomic text out.

YAML errors become :class:`ProfileConfigError` with the file and 1-based line, because a
person fixing a broken ``config.yaml`` needs the line more than the parser's internals.
Writes go through a temp file in the same directory and ``os.replace`` so a crash or a
concurrent reader never sees half a file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from profiles.errors import ProfileConfigError

try:  # libyaml is an order of magnitude faster; scanning 1,000 profiles depends on it.
    _Loader: type = yaml.CSafeLoader
    _Dumper: type = yaml.CSafeDumper
except AttributeError:  # pragma: no cover - PyYAML built without libyaml
    _Loader = yaml.SafeLoader
    _Dumper = yaml.SafeDumper


def parse_yaml(text: str, path: Path) -> Any:
    """Parse YAML ``text`` read from ``path``; a syntax error names the file and line."""
    try:
        return yaml.load(text, Loader=_Loader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        problem = exc.problem or exc.context or "invalid YAML"
        raise ProfileConfigError(path, f"invalid YAML: {problem}", line=line) from exc
    except yaml.YAMLError as exc:
        raise ProfileConfigError(path, f"invalid YAML: {exc}") from exc


def read_text(path: Path) -> str:
    """File text as UTF-8 (a leading BOM dropped); undecodable bytes are a config error."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ProfileConfigError(path, "not valid UTF-8", line=line) from exc


def load_yaml_mapping(path: Path) -> dict[str, Any]:
    """A YAML file that must hold a mapping; missing or empty means ``{}``."""
    try:
        text = read_text(path)
    except (FileNotFoundError, NotADirectoryError):
        return {}
    data = parse_yaml(text, path)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ProfileConfigError(path, f"top level must be a mapping, not {type(data).__name__}", line=1)
    return data


def dump_yaml(data: object) -> str:
    """Block-style YAML in insertion order, the way upstream writes ``profile.yaml``."""
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, default_flow_style=False, allow_unicode=True)


def atomic_write_text(path: Path, text: str, mode: int = 0o644) -> None:
    """Replace ``path`` with ``text`` so readers see the old file or the new one, never a torn one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
