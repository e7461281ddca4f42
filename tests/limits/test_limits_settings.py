"""limits / hung_after / startup_grace: parsing, validation (key in every message), merging."""

import math

import pytest
import yaml

from supervisor.config import parse
from supervisor.doctor.domain_checks import hung_after_warning
from supervisor.settings import (
    BY_KEY,
    HungSettings,
    Limits,
    LimitsSpec,
    SettingError,
    format_size,
    merge_limits,
    parse_limits,
    parse_size,
)
from supervisor.settings import parse_tasks as parse_tasks_max
from supervisor.settings import parse_weight as parse_cpu_weight

parse_hung_after, parse_startup_grace = BY_KEY["hung_after"].read, BY_KEY["startup_grace"].read

M = 1 << 20
G = 1 << 30


def y(text):
    """What PyYAML's safe loader makes of a scalar, as the config reader will hand it over."""
    return yaml.safe_load(f"v: {text}")["v"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("512M", 512 * M), ("2G", 2 * G), ("1.5G", 3 * G // 2), ("512m", 512 * M), ("2Gi", 2 * G),
        ("2GiB", 2 * G), ("2GB", 2 * G), ("1T", 1 << 40), ("1048576", M), ("2097152B", 2 * M),
        ("1024K", M), ("'3 M'", 3 * M), ("max", None), ("null", None), ("~", None), ("0x100000", M),
        ("1_048_576", M), ("1048576.0", M), ("0.5G", G // 2),
    ],
)
def test_sizes(text, expected):
    assert parse_size(y(text), "limits.memory_max") == expected


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("-1", "negative"), ("'-512M'", "negative"), (".nan", "expected a size"), (".inf", "expected a size"),
        ("-.inf", "expected a size"), ("yes", "expected a size"), ("true", "expected a size"),
        ("12X", "expected a size"),
        ("1e9", "expected a size"), ("512", "did you mean 512M"), ("0", "below the 1M minimum"),
        ("'1.5'", "whole number of bytes"), ("1.5", "whole number of bytes"), ("[1]", "expected a size"),
        ("{a: 1}", "expected a size"), ("'nan'", "expected a size"), ("'inf'", "expected a size"),
        ("2000000T", "over 1 EiB"), ("''", "expected a size"), ("'M'", "expected a size"),
    ],
)
def test_bad_sizes_name_the_key(text, fragment):
    with pytest.raises(SettingError) as err:
        parse_size(y(text), "profiles.coder.limits.memory_max")
    assert str(err.value).startswith("profiles.coder.limits.memory_max: "), err.value
    assert fragment in str(err.value)
    assert err.value.key == "profiles.coder.limits.memory_max"
    assert isinstance(err.value, ValueError)


@pytest.mark.parametrize(("text", "expected"), [("1", 1), ("512", 512), ("max", None), ("null", None), ("100.0", 100)])
def test_tasks_max(text, expected):
    assert parse_tasks_max(y(text), "limits.tasks_max") == expected


@pytest.mark.parametrize("text", ["0", "-5", "1.5", "yes", ".nan", ".inf", "'100'", "5000000", "[1]"])
def test_bad_tasks_max(text):
    with pytest.raises(SettingError, match=r"^limits\.tasks_max: "):
        parse_tasks_max(y(text), "limits.tasks_max")


@pytest.mark.parametrize(("text", "expected"), [("1", 1), ("100", 100), ("10000", 10000), ("null", None), ("50.0", 50)])
def test_cpu_weight(text, expected):
    assert parse_cpu_weight(y(text), "limits.cpu_weight") == expected


@pytest.mark.parametrize("text", ["0", "10001", "-1", "max", "yes", ".nan", "1.5", "'100'"])
def test_bad_cpu_weight(text):
    with pytest.raises(SettingError, match=r"^limits\.cpu_weight: expected a whole number from 1 to 10000"):
        parse_cpu_weight(y(text), "limits.cpu_weight")


@pytest.mark.parametrize("parse", [parse_hung_after, parse_startup_grace])
def test_seconds(parse):
    assert parse(120, "k") == 120.0
    assert parse(0.5, "k") == 0.5
    assert parse(None, "k") is None
    for bad in (-1, 0, 0.01, math.nan, math.inf, -math.inf, True, "120", "120s", [1]):
        with pytest.raises(SettingError, match=r"^k: "):
            parse(bad, "k")


def test_limits_mapping_and_unknown_key():
    spec = parse_limits(y("{memory_max: 1G, tasks_max: 200}"), "limits")
    assert spec == LimitsSpec((("memory_max", G), ("tasks_max", 200)))
    assert parse_limits(None) == LimitsSpec()
    with pytest.raises(SettingError) as err:
        parse_limits(y("{memory: 1G}"), "profiles.a.limits")
    assert err.value.key == "profiles.a.limits.memory" and "unknown key" in str(err.value)
    with pytest.raises(SettingError, match=r"^profiles\.a\.limits\.tasks_max: "):
        parse_limits(y("{tasks_max: -3}"), "profiles.a.limits")
    with pytest.raises(SettingError, match=r"^limits: expected a mapping"):
        parse_limits(y("512M"), "limits")


def test_merge_profile_over_top_key_by_key():
    top = parse_limits({"memory_max": "1G", "tasks_max": 500})
    own = parse_limits({"tasks_max": 50, "memory_max": "max"})
    assert merge_limits(top, own) == Limits(memory_max=None, tasks_max=50, cpu_weight=None)
    assert merge_limits(top, None) == Limits(memory_max=G, tasks_max=500)
    assert merge_limits(top, parse_limits({"cpu_weight": 20})) == Limits(G, 500, 20)
    assert merge_limits(LimitsSpec()).empty
    assert Limits(G, None, 10).as_dict() == {"memory_max": G, "tasks_max": None, "cpu_weight": 10}


def test_merge_hung(tmp_path):
    def hung(text, name="coder"):
        return parse(text, tmp_path / "hermesd.yaml").hung_for(name)

    assert hung("") == HungSettings(120.0, 300.0)
    assert hung("hung_after: 60\n") == HungSettings(60.0, 300.0)
    assert hung("hung_after: 60\nprofiles: {coder: {hung_after: null}}\n").hung_after is None
    assert hung("startup_grace: null\nprofiles: {coder: {startup_grace: 10}}\n").startup_grace == 10.0


def test_hung_after_warning():
    assert hung_after_warning(120, 30.0) is None and hung_after_warning(None, 30.0) is None
    assert "heartbeat period" in hung_after_warning(20, 30.0)
    assert hung_after_warning(20, 10.0) is None


def test_format_size():
    assert [format_size(x) for x in (None, 512 * M, 3 * G // 2, 2 * G, 100)] == ["max", "512M", "1.5G", "2G", "100B"]


def test_sizes_roundtrip_property():
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies

    @hypothesis.given(st.integers(min_value=1, max_value=1 << 20), st.sampled_from(["K", "M", "G"]))
    @hypothesis.settings(max_examples=200)
    def prop(n, unit):
        scale = {"K": 1 << 10, "M": M, "G": G}[unit]
        if n * scale < M:
            return
        assert parse_size(f"{n}{unit}", "k") == n * scale
        assert parse_size(n * scale, "k") == n * scale

    prop()
