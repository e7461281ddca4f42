"""Names (normalise, validate, aliases) and root/profile path resolution."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from profiles.errors import InvalidNameError
from profiles.names import (
    HERMES_SUBCOMMANDS,
    RESERVED_NAMES,
    normalize_name,
    parse_profile_name,
    validate_alias_name,
    validate_profile_name,
)
from profiles.paths import get_profile_dir, hermes_home, resolve_root

UPSTREAM_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
NAME_CHARS = st.sampled_from("abcxyz019_-.A/ Z:é")


# --------------------------------------------------------------------------- names


@pytest.mark.parametrize(
    ("raw", "canon"),
    [("coder", "coder"), ("  Coder ", "coder"), ("Default", "default"), ("DEFAULT", "default"), ("a-B_1", "a-b_1")],
)
def test_normalize(raw: str, canon: str) -> None:
    assert normalize_name(raw) == canon


@pytest.mark.parametrize("raw", ["", "   ", "\t\n"])
def test_normalize_rejects_empty(raw: str) -> None:
    with pytest.raises(InvalidNameError, match="empty"):
        normalize_name(raw)


@pytest.mark.parametrize("bad", ["-lead", "_lead", "has space", "dot.ted", "a/b", "..", "x" * 65, "ümlaut"])
def test_invalid_name_error_names_value_and_rule(bad: str) -> None:
    with pytest.raises(InvalidNameError) as exc:
        validate_profile_name(bad)
    assert repr(bad) in str(exc.value)
    assert "[a-z0-9][a-z0-9_-]{0,63}" in str(exc.value)


@pytest.mark.parametrize("name", sorted(RESERVED_NAMES - {"default"}))
def test_reserved_names_refused(name: str) -> None:
    with pytest.raises(InvalidNameError, match="reserved"):
        validate_profile_name(name)


def test_default_is_a_reference_not_a_new_name() -> None:
    assert validate_profile_name("default") == "default"
    with pytest.raises(InvalidNameError, match="built-in root"):
        validate_profile_name("default", allow_default=False)


def test_alias_rules_add_subcommands() -> None:
    assert validate_alias_name("coder") == "coder"
    for name in ("gateway", "chat", "profile", "doctor"):
        with pytest.raises(InvalidNameError, match="subcommand"):
            validate_alias_name(name)
    with pytest.raises(InvalidNameError, match="reserved"):
        validate_alias_name("sudo")
    with pytest.raises(InvalidNameError, match="invalid alias"):
        validate_alias_name("../../.bashrc")


@given(st.text(NAME_CHARS, max_size=70))
def test_validation_agrees_with_upstream_rule(name: str) -> None:
    """A name is accepted iff it matches upstream's regex and is not reserved (default aside)."""
    expected = name == "default" or (UPSTREAM_RE.match(name) is not None and name not in RESERVED_NAMES)
    try:
        validate_profile_name(name)
        accepted = True
    except InvalidNameError:
        accepted = False
    assert accepted == expected


@given(st.text(NAME_CHARS, max_size=70))
def test_alias_validation_is_profile_validation_minus_subcommands(name: str) -> None:
    try:
        validate_alias_name(name)
        accepted = True
    except InvalidNameError:
        accepted = False
    assert accepted == (UPSTREAM_RE.match(name) is not None and name not in RESERVED_NAMES | HERMES_SUBCOMMANDS)


@given(st.text(NAME_CHARS, min_size=1, max_size=70))
def test_normalize_is_idempotent(name: str) -> None:
    try:
        once = normalize_name(name)
    except InvalidNameError:
        return
    assert normalize_name(once) == once
    assert once == once.strip()


@given(st.from_regex(UPSTREAM_RE, fullmatch=True))
def test_every_upstream_shaped_name_parses_unless_reserved(name: str) -> None:
    if name in RESERVED_NAMES - {"default"}:
        with pytest.raises(InvalidNameError):
            parse_profile_name(name)
    else:
        assert parse_profile_name(name.upper()) == name


# --------------------------------------------------------------------------- paths


def env(home: Path, hermes_home_value: str | None = None) -> dict[str, str]:
    e = {"HOME": str(home)}
    if hermes_home_value is not None:
        e["HERMES_HOME"] = hermes_home_value
    return e


def test_root_defaults_to_dot_hermes(tmp_path: Path) -> None:
    assert resolve_root(env(tmp_path)) == tmp_path / ".hermes"
    assert resolve_root(env(tmp_path, "   ")) == tmp_path / ".hermes"


def test_root_is_dot_hermes_when_home_is_inside_it(tmp_path: Path) -> None:
    inside = tmp_path / ".hermes" / "profiles" / "coder"
    inside.mkdir(parents=True)
    assert resolve_root(env(tmp_path, str(inside))) == tmp_path / ".hermes"
    assert resolve_root(env(tmp_path, str(tmp_path / ".hermes"))) == tmp_path / ".hermes"


def test_root_is_grandparent_of_a_custom_profile(tmp_path: Path) -> None:
    custom = tmp_path / "opt" / "data" / "profiles" / "coder"
    assert resolve_root(env(tmp_path, str(custom))) == tmp_path / "opt" / "data"


def test_custom_root_is_hermes_home_itself(tmp_path: Path) -> None:
    custom = tmp_path / "opt" / "data"
    assert resolve_root(env(tmp_path, str(custom))) == custom


def test_profiles_folder_anchored_at_root_not_current_profile(tmp_path: Path) -> None:
    current = tmp_path / "data" / "profiles" / "coder"
    e = env(tmp_path, str(current))
    assert hermes_home(e) == current
    assert resolve_root(e) == tmp_path / "data"
    assert get_profile_dir("writer", env=e) == tmp_path / "data" / "profiles" / "writer"


def test_get_profile_dir_default_is_root(tmp_path: Path) -> None:
    assert get_profile_dir("Default", root=tmp_path) == tmp_path
    assert get_profile_dir(" Coder ", root=tmp_path) == tmp_path / "profiles" / "coder"
    with pytest.raises(InvalidNameError):
        get_profile_dir("../etc", root=tmp_path)


def test_environment_is_read_on_every_call(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "one"))
    assert resolve_root() == tmp_path / "one"
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "two" / "profiles" / "x"))
    assert resolve_root() == tmp_path / "two"


def test_which_finds_what_shutil_which_finds(tmp_path, monkeypatch):
    """``profiles.paths.which`` stands in for ``shutil.which`` (kept out of the daemon): same answers."""
    import shutil

    from profiles.paths import which

    prog = tmp_path / "prog"
    prog.write_text("#!/bin/sh\n")
    prog.chmod(0o755)
    (tmp_path / "noexec").write_text("")
    (tmp_path / "adir").mkdir()
    d = str(tmp_path)
    cases = [("prog", d), ("noexec", d), ("adir", d), ("prog", ""), ("prog", f"/nonexistent:{d}:{d}"),
             ("missing", d), (str(prog), None), (str(tmp_path / "noexec"), None), ("sh", None), ("./prog", None)]
    for cmd, path in cases:
        assert which(cmd, path) == shutil.which(cmd, path=path), (cmd, path)
    assert which("prog", d) == str(prog)
    monkeypatch.delenv("PATH")
    assert which("sh") == shutil.which("sh")
