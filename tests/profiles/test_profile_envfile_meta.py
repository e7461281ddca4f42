"""The .env grammar (as python-dotenv reads it) and profile.yaml metadata."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from profiles.envfile import parse_env_text, read_env_file
from profiles.errors import ProfileConfigError, ProfileNotFoundError
from profiles.meta import read_profile_meta, write_profile_meta

SAMPLE = """\
# comment line
  # indented comment

PLAIN=value
export EXPORTED=exp
SPACED = spaced value   # trailing comment
HASH=abc#not-a-comment
SINGLE='single # kept'
ESCAPED_SINGLE='it\\'s'
DOUBLE="line1\\nline2 \\"q\\""
MULTI="first
second"
EMPTY=
EMPTY_QUOTED=""
KEY_ONLY
'QUOTED KEY'=qk
REF=${PLAIN}-${MISSING:-fallback}-${MISSING}
CRLF=crlf\r
LAST=no newline"""

EXPECTED = {
    "PLAIN": "value",
    "EXPORTED": "exp",
    "SPACED": "spaced value",
    "HASH": "abc#not-a-comment",
    "SINGLE": "single # kept",
    "ESCAPED_SINGLE": "it's",
    "DOUBLE": 'line1\nline2 "q"',
    "MULTI": "first\nsecond",
    "EMPTY": "",
    "EMPTY_QUOTED": "",
    "QUOTED KEY": "qk",
    "REF": "value-fallback-",
    "CRLF": "crlf",
    "LAST": "no newline",
}


def test_dotenv_grammar(tmp_path: Path) -> None:
    path = tmp_path / ".env"
    path.write_bytes(SAMPLE.encode())
    assert read_env_file(path) == EXPECTED


def test_matches_python_dotenv_when_available(tmp_path: Path) -> None:
    """python-dotenv (a hermes-agent dependency) parses the sample the same way."""
    path = tmp_path / ".env"
    path.write_bytes(SAMPLE.encode())
    code = (
        "import json, os, sys\n"
        "from dotenv import dotenv_values\n"
        "os.environ.clear()\n"
        "print(json.dumps({k: v for k, v in dotenv_values(sys.argv[1]).items() if v is not None}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        pytest.skip("python-dotenv is not installed")
    import json

    assert json.loads(proc.stdout) == EXPECTED


def test_missing_file_is_empty(tmp_path: Path) -> None:
    assert read_env_file(tmp_path / "nope") == {}


def test_bom_and_latin1(tmp_path: Path) -> None:
    path = tmp_path / ".env"
    path.write_bytes(b"\xef\xbb\xbfA=1\n")
    assert read_env_file(path) == {"A": "1"}
    path.write_bytes(b"B=caf\xe9\n")
    assert read_env_file(path) == {"B": "caf\u00e9"}


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("A=1\nB='open\n", 2),
        ('A=1\n\nC="open\n', 3),
        ("just words here\n", 1),
        ("A='x' trailing\n", 1),
        ("=novalue\n", 1),
    ],
)
def test_malformed_lines_raise_with_line(tmp_path: Path, text: str, line: int) -> None:
    path = tmp_path / ".env"
    path.write_text(text)
    with pytest.raises(ProfileConfigError) as exc:
        read_env_file(path)
    assert exc.value.path == path and exc.value.line == line
    assert f"{path}:{line}" in str(exc.value)


env_keys = st.from_regex(r"[A-Z_][A-Z0-9_]{0,12}", fullmatch=True)
env_values = st.text(st.characters(codec="utf-8", exclude_characters="\r\x00"), max_size=30)


@settings(max_examples=150)
@given(st.dictionaries(env_keys, env_values, max_size=8))
def test_single_quoted_values_round_trip(values: dict[str, str]) -> None:
    """Any value without a single quote or backslash survives ``KEY='value'``."""
    values = {k: v for k, v in values.items() if "'" not in v and "\\" not in v and "${" not in v}
    text = "".join(f"{k}='{v}'\n" for k, v in values.items())
    assert parse_env_text(text, Path(".env")) == values


@given(st.dictionaries(env_keys, st.from_regex(r"[A-Za-z0-9:_./+-]{1,20}", fullmatch=True), max_size=8))
def test_unquoted_values_round_trip(values: dict[str, str]) -> None:
    text = "".join(f"export {k} = {v}  # note\n" for k, v in values.items())
    assert parse_env_text(text, Path(".env")) == values


# --------------------------------------------------------------------------- profile.yaml


def test_meta_defaults_when_missing(tmp_path: Path) -> None:
    assert read_profile_meta(tmp_path) == {"description": "", "description_auto": False}


def test_meta_merge_write_preserves_unknown_keys(tmp_path: Path) -> None:
    (tmp_path / "profile.yaml").write_text("role: reviewer\ntags: [a, b]\ndescription: old\n")
    data = write_profile_meta(tmp_path, description="  New one.  ")
    assert data == {"role": "reviewer", "tags": ["a", "b"], "description": "New one."}
    write_profile_meta(tmp_path, description_auto=True)
    on_disk = yaml.safe_load((tmp_path / "profile.yaml").read_text())
    assert on_disk == {"role": "reviewer", "tags": ["a", "b"], "description": "New one.", "description_auto": True}
    assert read_profile_meta(tmp_path)["description_auto"] is True
    assert [p.name for p in tmp_path.iterdir()] == ["profile.yaml"]


def test_meta_malformed_is_an_error_and_is_not_overwritten(tmp_path: Path) -> None:
    bad = "description: ok\nrole: [unclosed\n"
    (tmp_path / "profile.yaml").write_text(bad)
    with pytest.raises(ProfileConfigError) as exc:
        read_profile_meta(tmp_path)
    assert exc.value.path == tmp_path / "profile.yaml" and exc.value.line is not None
    with pytest.raises(ProfileConfigError):
        write_profile_meta(tmp_path, description="x")
    assert (tmp_path / "profile.yaml").read_text() == bad
    (tmp_path / "profile.yaml").write_text("- a list\n")
    with pytest.raises(ProfileConfigError, match="mapping"):
        read_profile_meta(tmp_path)


def test_meta_write_needs_the_profile(tmp_path: Path) -> None:
    with pytest.raises(ProfileNotFoundError):
        write_profile_meta(tmp_path / "ghost", description="x")
    assert not (tmp_path / "ghost").exists()
    assert os.listdir(tmp_path) == []


@settings(max_examples=400)
@given(st.text(st.sampled_from("AB_=' \"#\n\\\texport ab$1"), max_size=40))
def test_agrees_with_python_dotenv_on_arbitrary_text(text: str) -> None:
    """Fuzz against python-dotenv: same values, and an error exactly where it would skip a line."""
    dotenv = pytest.importorskip("dotenv")
    from dotenv.parser import parse_stream

    if "${" in text:
        return  # dotenv expands from the process environment; we never do
    import io

    skipped = any(b.error for b in parse_stream(io.StringIO(text)))
    try:
        mine = parse_env_text(text, Path(".env"))
    except ProfileConfigError:
        assert skipped, f"we refused {text!r} but python-dotenv parses it"
        return
    assert not skipped, f"python-dotenv skips a line of {text!r} that we accepted"
    theirs = {k: v for k, v in dotenv.dotenv_values(stream=io.StringIO(text), interpolate=False).items()}
    assert mine == {k: v for k, v in theirs.items() if v is not None}
