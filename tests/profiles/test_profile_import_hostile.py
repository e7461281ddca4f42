"""``profile import`` against hostile archives built in the test: masked modes, bounded names.

Issue 15: an archive could make folders and files world-writable (another user could then
change a profile root runs), and a GNU long-name entry of 400 MB cost 2.9 GB of memory and put
the whole name in the error message.
"""

from __future__ import annotations

import io
import stat
import tarfile
import tracemalloc
from pathlib import Path

import pytest
from profile_helpers import scratch_left

from profiles.archive import MAX_NAME_BYTES, import_profile
from profiles.errors import UnsafeArchiveError


def build(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]], fmt: int = tarfile.GNU_FORMAT) -> Path:
    with tarfile.open(path, "w:gz", format=fmt) as tar:
        for info, data in members:
            if data is None:
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return path


def entry(name: str, mode: int, kind: bytes = tarfile.REGTYPE) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.mode = mode
    info.type = kind
    return info


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_modes_are_masked(empty_root: Path, tmp_path: Path) -> None:
    archive = build(tmp_path / "a.tar.gz", [
        (entry("p", 0o777, tarfile.DIRTYPE), None),
        (entry("p/open", 0o777, tarfile.DIRTYPE), None),
        (entry("p/private", 0o700, tarfile.DIRTYPE), None),
        (entry("p/odd", 0o1757, tarfile.DIRTYPE), None),
        (entry("p/world.txt", 0o666), b"x"),
        (entry("p/setuid", 0o4777), b"#!/bin/sh\n"),
        (entry("p/readonly", 0o400), b"x"),
        (entry("p/.env", 0o644), b"TOKEN=x\n"),
        (entry("p/auth.json", 0o666), b"{}"),
        (entry("p/implied/deep/file", 0o644), b"x"),  # folders the archive never lists
        (entry("p/skills/.env", 0o666), b"not the profile's .env"),
    ])
    result = import_profile(archive, root=empty_root)
    home = result.path
    assert mode_of(home) == 0o755
    assert mode_of(home / "open") == 0o755
    assert mode_of(home / "private") == 0o700
    assert mode_of(home / "odd") == 0o755  # sticky bit and group/other write dropped
    assert mode_of(home / "world.txt") == 0o644
    assert mode_of(home / "setuid") == 0o755
    assert mode_of(home / "readonly") == 0o600
    assert mode_of(home / ".env") == 0o600 and mode_of(home / "auth.json") == 0o600
    assert mode_of(home / "implied") == 0o755 and mode_of(home / "implied" / "deep") == 0o755
    assert mode_of(home / "skills" / ".env") == 0o644
    for path in [home, *home.rglob("*")]:
        assert not mode_of(path) & (stat.S_IWGRP | stat.S_IWOTH | stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX), path


def test_upstream_keeps_world_writable_modes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The deliberate difference, pinned: upstream's import applies the archived bits as they are."""
    up = pytest.importorskip("hermes_cli.profiles")
    archive = build(tmp_path / "a.tar.gz", [(entry("p", 0o777, tarfile.DIRTYPE), None),
                                            (entry("p/world.txt", 0o666), b"x")])
    (tmp_path / "home" / ".hermes").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("HERMES_HOME", raising=False)
    home = up.import_profile(str(archive))
    assert mode_of(home / "world.txt") == 0o666


def refused(root: Path, archive: Path) -> str:
    tracemalloc.start()
    try:
        with pytest.raises(UnsafeArchiveError) as exc:
            import_profile(archive, root=root)
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2 * 1024 * 1024, f"import took {peak} bytes of memory"
    assert sorted(p.name for p in (root / "profiles").iterdir()) == [] and scratch_left(root) == []
    message = str(exc.value)
    assert len(message) < 400, message
    return message


def test_gnu_long_name_is_refused_unread(empty_root: Path, tmp_path: Path) -> None:
    huge = "p/" + "a" * (8 * 1024 * 1024)
    archive = build(tmp_path / "long.tar.gz", [(entry("p", 0o755, tarfile.DIRTYPE), None), (entry(huge, 0o644), b"x")])
    message = refused(empty_root, archive)
    assert "refused unread" in message and "aaaaaaaa" not in message


def test_gnu_long_link_is_refused_unread(empty_root: Path, tmp_path: Path) -> None:
    link = entry("p/link", 0o777, tarfile.SYMTYPE)
    link.linkname = "x" * (2 * 1024 * 1024)
    archive = build(tmp_path / "link.tar.gz", [(entry("p", 0o755, tarfile.DIRTYPE), None), (link, None)])
    assert "link target" in refused(empty_root, archive)


def test_huge_pax_header_is_refused_unread(empty_root: Path, tmp_path: Path) -> None:
    info = entry("p/file", 0o644)
    info.pax_headers = {"comment": "c" * (4 * 1024 * 1024)}
    archive = build(tmp_path / "pax.tar.gz", [(entry("p", 0o755, tarfile.DIRTYPE), None), (info, b"x")],
                    fmt=tarfile.PAX_FORMAT)
    assert "PAX header" in refused(empty_root, archive)


def test_pax_path_longer_than_a_path_is_refused_with_a_short_message(empty_root: Path, tmp_path: Path) -> None:
    name = "p/" + "b" * (MAX_NAME_BYTES + 10)
    members = [(entry("p", 0o755, tarfile.DIRTYPE), None), (entry(name, 0o644), b"x")]
    archive = build(tmp_path / "paxpath.tar.gz", members, fmt=tarfile.PAX_FORMAT)
    message = refused(empty_root, archive)
    assert "longer than 4096 bytes" in message and "characters)" in message


def test_long_unsafe_name_is_quoted_short(empty_root: Path, tmp_path: Path) -> None:
    name = "p/" + "../" * 1000 + "etc"
    archive = build(tmp_path / "dots.tar.gz", [(entry("p", 0o755, tarfile.DIRTYPE), None), (entry(name, 0o644), b"x")])
    assert "'..' component" in refused(empty_root, archive)


def test_sparse_member_is_refused_before_its_map_is_read(empty_root: Path, tmp_path: Path) -> None:
    archive = build(tmp_path / "sparse.tar.gz", [(entry("p", 0o755, tarfile.DIRTYPE), None),
                                                 (entry("p/s", 0o644, tarfile.GNUTYPE_SPARSE), None)])
    assert "sparse" in refused(empty_root, archive)
