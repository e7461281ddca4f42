"""Names, served profiles and the active profile: hermesd against upstream's own functions.

Upstream's functions read ``HOME``/``HERMES_HOME`` from the process environment, so each call
sets them (``monkeypatch``) to the same values hermesd is given as a mapping. The active profile
is what a bare ``hermes`` decides at start-up (``_apply_profile_override`` runs when
``hermes_cli.main`` is imported), so that oracle runs upstream in a subprocess.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from profiles.discovery import (
    active_profile,
    profile_exists,
    profiles_to_serve,
    unserved_profile_dirs,
    upstream_active_profile,
)
from profiles.errors import InvalidNameError, ProfileConfigError
from profiles.names import (
    HERMES_SUBCOMMANDS,
    RESERVED_NAMES,
    is_valid_name,
    no_such_profile,
    normalize_name,
    parse_profile_name,
    resolve_profile_names,
    validate_alias_name,
    validate_profile_name,
)
from profiles.paths import get_profile_dir

up = pytest.importorskip("hermes_cli.profiles")

# Text that stresses the rule: the id alphabet, case, whitespace (newlines included), separators,
# a dot, a colon and unicode whose lower-case form is ASCII (KELVIN SIGN -> "k").
NAME_ALPHABET = st.sampled_from([*"abz09_-.A/ Z:é\n\t\r\x0b", "\u212a", "\u0130", "\u00a0"])
messy_text = st.text(NAME_ALPHABET, max_size=70)
messy_value = st.one_of(
    messy_text,
    st.integers(-5, 10**70),
    st.floats(allow_nan=False),
    st.booleans(),
    st.none(),
    st.lists(st.integers(0, 3), max_size=2),
)


def upstream_parse(raw: object) -> str | None:
    """Upstream's way for a typed name: normalize, then validate; ``None`` if refused."""
    try:
        canon = up.normalize_profile_name(raw)
        up.validate_profile_name(canon)
    except ValueError:
        return None
    return canon


def hermesd_parse(raw: object) -> str | None:
    try:
        return parse_profile_name(raw)
    except InvalidNameError:
        return None


# --------------------------------------------------------------------------- names


@settings(max_examples=1500)
@given(messy_value)
def test_normalize_and_parse_agree_with_upstream(raw: Any) -> None:
    try:
        theirs: str | None = up.normalize_profile_name(raw)
    except ValueError:
        theirs = None
    try:
        mine: str | None = normalize_name(raw)
    except InvalidNameError:
        mine = None
    assert mine == theirs
    assert hermesd_parse(raw) == upstream_parse(raw)


@settings(max_examples=1500)
@given(messy_text)
def test_validate_differs_from_upstream_only_on_a_trailing_newline(name: str) -> None:
    """Upstream's ``^…$`` + ``re.match`` accepts ``'ok\\n'``; hermesd matches the whole string."""
    try:
        up.validate_profile_name(name)
        theirs = True
    except ValueError:
        theirs = False
    try:
        validate_profile_name(name)
        mine = True
    except InvalidNameError:
        mine = False
    if mine != theirs:
        assert theirs and not mine
        assert name.endswith("\n") and validate_profile_name(name[:-1]) == name[:-1]


@pytest.mark.parametrize("name", ["ok\n", "coder\n"])
def test_trailing_newline_is_not_a_name(name: str) -> None:
    assert not is_valid_name(name)
    with pytest.raises(InvalidNameError):
        validate_profile_name(name)
    up.validate_profile_name(name)  # upstream 0.19.0 accepts it (the deliberate difference)


@settings(max_examples=800)
@given(messy_text)
def test_alias_rules_agree_with_upstreams_collision_check(name: str) -> None:
    """Upstream refuses an alias in ``check_alias_collision``: id shape, reserved, subcommands."""
    try:
        up.validate_alias_name(name)
        theirs = name not in up._RESERVED_NAMES and name not in up._HERMES_SUBCOMMANDS
    except ValueError:
        theirs = False
    try:
        validate_alias_name(name)
        mine = True
    except InvalidNameError:
        mine = False
    assert mine == theirs or (theirs and name.endswith("\n"))


def test_rule_sets_are_upstreams() -> None:
    assert RESERVED_NAMES == up._RESERVED_NAMES
    assert HERMES_SUBCOMMANDS == up._HERMES_SUBCOMMANDS


# Ported from upstream tests/hermes_cli/test_profiles.py (TestNormalizeProfileName, TestValidateProfileName).
def test_upstream_normalize_cases() -> None:
    assert normalize_name("Jules") == "jules" and normalize_name("  Librarian ") == "librarian"


@pytest.mark.parametrize("name", ["coder", "work-bot", "a1", "my_agent"])
def test_upstream_valid_names(name: str) -> None:
    assert validate_profile_name(name) == name


@pytest.mark.parametrize("name", ["UPPER", "has space", ".hidden", "-leading"])
def test_upstream_invalid_names(name: str) -> None:
    with pytest.raises(ValueError):
        validate_profile_name(name)


@pytest.mark.parametrize("name", ["..", "../outside", "../../tmp", "a/b", "a\\b", ".hidden", "has space"])
def test_traversal_and_invalid_names_rejected_by_get_profile_dir(name: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        get_profile_dir(name, root=tmp_path)


@pytest.mark.parametrize("name", ["..", "../outside", "a/b", "", "   ", "ok\n", "test", 5, None])
def test_profile_exists_is_false_for_invalid_names(name: object, tmp_path: Path) -> None:
    (tmp_path / "profiles").mkdir()
    assert profile_exists(name, tmp_path) is False  # type: ignore[arg-type]


def test_no_such_profile_wording_and_suggestion() -> None:
    exc = no_such_profile("alpah", ["default", "alpha", "beta"])
    assert str(exc) == "no such profile: 'alpah' (did you mean 'alpha'?)"
    assert str(no_such_profile("zzz", ["default", "alpha"])) == "no such profile: 'zzz'"
    long = no_such_profile("x" * 5000, [])
    assert len(str(long)) < 200
    with pytest.raises(type(exc)) as raised:
        resolve_profile_names(["alpha", "alpah", "Beta", "gamma"], ["default", "alpha", "beta"])
    assert str(raised.value) == "no such profile: 'alpah' (did you mean 'alpha'?); no such profile: 'gamma'"
    assert resolve_profile_names(["Alpha", " beta "], ["alpha", "beta"]) == ["alpha", "beta"]


# --------------------------------------------------------------------------- which folders are served

ENTRY_NAMES = ["alpha", "beta", "a1", "z_z-9", "test", "hermes", "default", "tmp", "Upper", "ok\n", "has space",
               ".hidden", "-lead", "x" * 64, "x" * 65, "é", "a.b"]
KINDS = ["dir", "file", "link-dir", "link-file", "dangling"]


def build_tree(root: Path, outside: Path, entries: dict[str, str]) -> None:
    (root / "profiles").mkdir(parents=True)
    outside.mkdir(parents=True, exist_ok=True)
    (outside / "adir").mkdir(exist_ok=True)
    (outside / "afile").write_text("x")
    for name, kind in entries.items():
        path = root / "profiles" / name
        if kind == "dir":
            path.mkdir()
        elif kind == "file":
            path.write_text("x")
        elif kind == "link-dir":
            path.symlink_to(outside / "adir", target_is_directory=True)
        elif kind == "link-file":
            path.symlink_to(outside / "afile")
        else:
            path.symlink_to(outside / "missing")


def upstream_served(
    monkeypatch: pytest.MonkeyPatch, home: Path, hermes_home: Path, multiplex: bool = True
) -> list[tuple[str, Path]]:
    with monkeypatch.context() as m:
        m.setenv("HOME", str(home))
        m.setenv("HERMES_HOME", str(hermes_home))
        return up.profiles_to_serve(multiplex)


@settings(max_examples=120, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.dictionaries(st.sampled_from(ENTRY_NAMES), st.sampled_from(KINDS), max_size=8))
def test_served_profiles_agree_with_upstream(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch, entries: dict[str, str]
) -> None:
    base = tmp_path_factory.mktemp("tree")
    root, home = base / "root", base / "home"
    build_tree(root, base / "outside", entries)
    theirs = upstream_served(monkeypatch, home, root)
    assert dict(theirs) == {**dict(theirs), **{n: p for n, p in profiles_to_serve(True, root=root)}}
    mine = [name for name, _ in profiles_to_serve(True, root=root)]
    assert set(mine) <= {name for name, _ in theirs}
    # What upstream serves and hermesd does not is a deliberate refusal, never a disagreement.
    reasons = {name: reason for name, _path, reason in unserved_profile_dirs(root)}
    for name, _path in theirs:
        if name not in mine:
            assert reasons[name] in {"reserved name", "symlink", "invalid name"}
            if reasons[name] == "invalid name":
                assert name.endswith("\n")  # upstream's $ lets exactly this through


# Ported from upstream TestProfilesToServe / TestGetActiveProfileName / TestInternalHelpers.
def test_upstream_profiles_to_serve_cases(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / ".hermes"
    for name in ("coder", "writer"):
        (root / "profiles" / name).mkdir(parents=True)
    env = {"HOME": str(tmp_path), "HERMES_HOME": str(root / "profiles" / "coder")}
    assert profiles_to_serve(False, env=env) == [("coder", root / "profiles" / "coder")]
    assert upstream_served(monkeypatch, tmp_path, root / "profiles" / "coder", multiplex=False) == [
        ("coder", root / "profiles" / "coder")
    ]
    served = dict(profiles_to_serve(True, env={"HOME": str(tmp_path), "HERMES_HOME": str(root)}))
    assert set(served) == {"default", "coder", "writer"} and served["default"] == root
    custom = tmp_path / "some" / "other" / "path"
    custom.mkdir(parents=True)
    assert active_profile(env={"HOME": str(tmp_path), "HERMES_HOME": str(custom)}) == "default"


# --------------------------------------------------------------------------- the active profile

UPSTREAM_ACTIVE = r"""
import json, sys
sys.argv = ["hermes"]
try:
    import hermes_cli.main  # runs _apply_profile_override() as a bare `hermes` does
except SystemExit as exc:
    print(json.dumps({"exit": exc.code}))
    raise SystemExit(0)
from hermes_cli.profiles import get_active_profile_name
print(json.dumps({"name": get_active_profile_name()}))
"""


def upstream_active(env: dict[str, str], cwd: Path) -> dict[str, Any]:
    full = {"PATH": os.defpath, **env}
    done = subprocess.run([sys.executable, "-c", UPSTREAM_ACTIVE], env=full, cwd=cwd, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def hermesd_active(env: dict[str, str]) -> dict[str, Any]:
    try:
        return {"name": active_profile(env=env)}
    except ProfileConfigError:
        return {"exit": 1}


def make_world(base: Path, native: bool) -> tuple[Path, Path, Path]:
    """A root (``~/.hermes`` or a custom one) with coder, writer and a reserved-named folder."""
    home = base / "home"
    root = home / ".hermes" if native else base / "data"
    for name in ("coder", "writer", "hermes"):
        (root / "profiles" / name).mkdir(parents=True, exist_ok=True)
    link = base / "link-to-coder"
    if not link.exists():
        link.symlink_to(root / "profiles" / "coder", target_is_directory=True)
    (root / "elsewhere").mkdir(exist_ok=True)
    return home, root, link


HOMES = ["unset", "root", "coder", "link", "reserved", "coder/", "coder ", "ghost", "elsewhere", "nested"]
STICKY = [None, "", "writer", "Writer ", "ghost", "Not Valid", "Default", "hermes"]


def hermes_home_value(kind: str, root: Path, link: Path) -> str | None:
    return {
        "unset": None, "root": str(root), "coder": str(root / "profiles" / "coder"), "link": str(link),
        "reserved": str(root / "profiles" / "hermes"), "coder/": str(root / "profiles" / "coder") + "/",
        "coder ": str(root / "profiles" / "coder") + " ", "ghost": str(root / "profiles" / "ghost"),
        "elsewhere": str(root / "elsewhere"), "nested": str(root / "profiles" / "coder" / "sub"),
    }[kind]


def scenario(base: Path, native: bool, home_kind: str, sticky: str | None, s6: bool) -> tuple[dict[str, str], Path]:
    home, root, link = make_world(base, native)
    (root / "active_profile").unlink(missing_ok=True)
    if sticky is not None:
        (root / "active_profile").write_text(sticky + "\n")
    env = {"HOME": str(home)}
    value = hermes_home_value(home_kind, root, link)
    if value is not None:
        env["HERMES_HOME"] = value
    elif not native:
        env["HERMES_HOME"] = str(root)  # a custom root is only found through HERMES_HOME
    if s6:
        env["HERMES_S6_SUPERVISED_CHILD"] = "1"
    return env, root


@pytest.mark.parametrize(
    ("native", "home_kind", "expected"),
    [(True, "link", "coder"), (False, "reserved", "hermes"), (True, "reserved", "hermes"), (True, "coder", "coder")],
)
def test_issue_10_active_profile_cases(tmp_path: Path, native: bool, home_kind: str, expected: str) -> None:
    env, _root = scenario(tmp_path, native, home_kind, None, False)
    mine = hermesd_active(env)
    assert mine == {"name": expected}
    assert upstream_active(env, tmp_path) == mine


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.booleans(), st.sampled_from(HOMES), st.sampled_from(STICKY), st.booleans())
def test_active_profile_agrees_with_upstream(
    tmp_path_factory: pytest.TempPathFactory, native: bool, home_kind: str, sticky: str | None, s6: bool
) -> None:
    base = tmp_path_factory.mktemp("active")
    env, _root = scenario(base, native, home_kind, sticky, s6)
    mine = hermesd_active(env)  # before upstream runs: it creates folders (logs/) under HERMES_HOME
    theirs = upstream_active(env, base)
    assert mine == theirs, (env, mine, theirs)


def test_explicit_other_root_uses_its_sticky_file(tmp_path: Path) -> None:
    env, root = scenario(tmp_path, True, "coder", None, False)
    other = tmp_path / "other"
    (other / "profiles" / "beta").mkdir(parents=True)
    (other / "active_profile").write_text("beta\n")
    assert active_profile(root, env) == "coder"
    assert active_profile(other, env) == "beta"
    assert upstream_active_profile(env).root == root
