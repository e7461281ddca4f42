"""Export exclusions and hostile-archive import, with real tar files in temporary roots."""

from __future__ import annotations

import io
import os
import stat
import tarfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from profile_helpers import make_profile, scratch_left

from profiles.archive import export_profile, import_profile, member_parts
from profiles.errors import InvalidNameError, ProfileExistsError, ProfileNotFoundError, UnsafeArchiveError


def names_in(archive: Path) -> set[str]:
    with tarfile.open(archive) as tar:
        return set(tar.getnames())


def build_tar(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]], mode: str = "w:gz") -> Path:
    with tarfile.open(path, mode) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def file_member(name: str, data: bytes = b"x", mode: int = 0o644) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = mode
    return info, data


def dir_member(name: str) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE
    info.mode = 0o755
    return info, None


def special_member(name: str, kind: bytes, target: str = "") -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    return info, None


# --------------------------------------------------------------------------- export


def test_export_named_profile_excludes_secrets_databases_and_runtime(empty_root: Path, tmp_path: Path) -> None:
    home = make_profile(
        empty_root,
        "coder",
        {
            "config.yaml": "a: 1\n", "SOUL.md": "soul", "memories/MEMORY.md": "m", "sessions/s.json": "{}",
            "skills/x/SKILL.md": "s", "skills/x/.env": "SECRET=1", "skills/x/auth.json": "{}",
            ".env": "TOKEN=1", "auth.json": "{}", "state.db": "", "state.db-wal": "", "kb/index.sqlite": "",
            "gateway.pid": "{}", "gateway.lock": "", "gateway_state.json": "{}", "x/run.pid": "", "x/y.lock": "",
            "logs/gateway.log": "", "image_cache/a.png": "", "cache/images/b": "", ".hermesd/s": "",
            "state/gateway.heartbeat": "{}", "plugins/__pycache__/a.pyc": "", "w.tmp": "",
        },
    )
    (home / "link").symlink_to(home / "SOUL.md")
    os.mkfifo(home / "pipe")
    result = export_profile("coder", tmp_path / "out" / "coder-backup", empty_root)
    assert result.path == tmp_path / "out" / "coder-backup.tar.gz"
    assert names_in(result.path) == {
        "coder", "coder/config.yaml", "coder/SOUL.md", "coder/memories", "coder/memories/MEMORY.md",
        "coder/sessions", "coder/sessions/s.json", "coder/skills", "coder/skills/x", "coder/skills/x/SKILL.md",
        "coder/kb", "coder/x", "coder/state", "coder/plugins",
    }
    assert sorted(result.skipped) == ["link: symlink", "pipe: special file"]
    assert result.members == len(names_in(result.path))
    assert [p.name for p in result.path.parent.iterdir()] == ["coder-backup.tar.gz"]


def test_export_default_uses_the_allow_list(empty_root: Path, tmp_path: Path) -> None:
    for rel in ("config.yaml", "SOUL.md", "skills/a/SKILL.md", ".env", "auth.json", "state.db", "notes.txt",
                "hermes-agent/x.py", "x11-dev/file", "active_profile"):
        (empty_root / rel).parent.mkdir(parents=True, exist_ok=True)
        (empty_root / rel).write_text("x")
    make_profile(empty_root, "coder", {"SOUL.md": "other profile"})
    result = export_profile("default", tmp_path / "d.tgz", empty_root)
    assert result.path == tmp_path / "d.tar.gz"  # upstream: ".tgz" stripped, ".tar.gz" added
    assert names_in(result.path) == {
        "default", "default/config.yaml", "default/SOUL.md", "default/skills", "default/skills/a",
        "default/skills/a/SKILL.md",
    }


def test_export_missing_profile(empty_root: Path, tmp_path: Path) -> None:
    with pytest.raises(ProfileNotFoundError):
        export_profile("ghost", tmp_path / "g.tar.gz", empty_root)
    assert not (tmp_path / "g.tar.gz").exists()


def test_export_then_import_round_trip(empty_root: Path, tmp_path: Path) -> None:
    make_profile(empty_root, "coder",
                 {"config.yaml": "a: 1\n", "skills/x/SKILL.md": "skill", "bin/run.sh": "#!/bin/sh\n"})
    os.chmod(empty_root / "profiles" / "coder" / "bin" / "run.sh", 0o755)
    archive = export_profile("coder", tmp_path / "c.tar.gz", empty_root).path
    result = import_profile(archive, "copy", empty_root)
    home = empty_root / "profiles" / "copy"
    assert result.path == home and result.name == "copy"
    assert (home / "config.yaml").read_text() == "a: 1\n"
    assert (home / "skills" / "x" / "SKILL.md").read_text() == "skill"
    assert stat.S_IMODE((home / "bin" / "run.sh").stat().st_mode) == 0o755
    with pytest.raises(ProfileExistsError):
        import_profile(archive, "copy", empty_root)
    with pytest.raises(ProfileExistsError):
        import_profile(archive, None, empty_root)  # inferred name "coder" exists
    assert scratch_left(empty_root) == []


def test_export_reads_what_it_listed_not_a_link_swapped_in_after(empty_root: Path, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Between the listing and the read, the profile swaps ``SOUL.md`` for a link to a root-only file
    and ``MEMORY.md`` for a FIFO: the archive holds the files that were listed, the export never
    blocks, and nothing of the link's target is read."""
    from profiles import archive, safetree

    home = make_profile(empty_root, "coder", {"SOUL.md": "soul", "memories/MEMORY.md": "memory"})
    secret = tmp_path / "shadow"
    secret.write_text("root-only secret")
    real_walk = safetree.walk

    def racing_walk(*args, **kwargs):
        for entry in real_walk(*args, **kwargs):
            if entry.rel == "SOUL.md":
                os.rename(home / "SOUL.md", home / "SOUL.old")
                os.symlink(secret, home / "SOUL.md")
            if entry.rel == "memories/MEMORY.md":
                os.rename(home / "memories" / "MEMORY.md", home / "memories" / "MEMORY.old")
                os.mkfifo(home / "memories" / "MEMORY.md")
            yield entry

    monkeypatch.setattr(archive.safetree, "walk", racing_walk)
    result = export_profile("coder", tmp_path / "c.tar.gz", empty_root)
    with tarfile.open(result.path) as tar:
        soul = tar.extractfile("coder/SOUL.md")
        memory = tar.extractfile("coder/memories/MEMORY.md")
        assert soul is not None and memory is not None
        assert soul.read() == b"soul" and memory.read() == b"memory"


def test_export_of_hard_linked_files_imports_again(empty_root: Path, tmp_path: Path) -> None:
    """Two names of one file are archived as two files (import refuses hard-link members)."""
    home = make_profile(empty_root, "coder", {"skills/a/SKILL.md": "same"})
    (home / "skills" / "b").mkdir()
    os.link(home / "skills" / "a" / "SKILL.md", home / "skills" / "b" / "SKILL.md")
    archive_file = export_profile("coder", tmp_path / "c.tar.gz", empty_root).path
    import_profile(archive_file, "copy", empty_root)
    assert (empty_root / "profiles" / "copy" / "skills" / "b" / "SKILL.md").read_text() == "same"


def test_export_and_import_refuse_a_linked_profiles_folder(empty_root: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    make_profile(other, "coder", {"config.yaml": "a: 1\n"})
    archive_file = export_profile("coder", tmp_path / "c.tar.gz", other).path
    os.rmdir(empty_root / "profiles")
    (empty_root / "profiles").symlink_to(other / "profiles", target_is_directory=True)
    with pytest.raises(OSError, match="symbolic link"):
        export_profile("coder", tmp_path / "d.tar.gz", empty_root)
    with pytest.raises(OSError, match="symbolic link"):
        import_profile(archive_file, "copy", empty_root)
    assert sorted(p.name for p in (other / "profiles").iterdir()) == ["coder"]


def test_import_of_default_export_needs_a_name(empty_root: Path, tmp_path: Path) -> None:
    (empty_root / "config.yaml").write_text("a: 1\n")
    archive = export_profile("default", tmp_path / "d.tar.gz", empty_root).path
    with pytest.raises(InvalidNameError, match="--name"):
        import_profile(archive, None, empty_root)
    with pytest.raises(InvalidNameError):
        import_profile(archive, "default", empty_root)
    assert import_profile(archive, "restored", empty_root).path.joinpath("config.yaml").read_text() == "a: 1\n"


def test_import_modes_are_sanitised(empty_root: Path, tmp_path: Path) -> None:
    archive = build_tar(
        tmp_path / "m.tar.gz",
        [dir_member("p"), file_member("p/setuid", mode=0o4755), file_member("p/noperm", mode=0o000),
         file_member("p/.env", b"A=1\n", mode=0o644)],
    )
    home = import_profile(archive, None, empty_root).path
    assert stat.S_IMODE((home / "setuid").stat().st_mode) == 0o755
    assert stat.S_IMODE((home / "noperm").stat().st_mode) == 0o600
    assert stat.S_IMODE((home / ".env").stat().st_mode) == 0o600


def test_import_accepts_windows_separators(empty_root: Path, tmp_path: Path) -> None:
    archive = build_tar(tmp_path / "w.tar.gz", [file_member("p\\memories\\MEMORY.md", b"m")])
    home = import_profile(archive, None, empty_root).path
    assert (home / "memories" / "MEMORY.md").read_bytes() == b"m"


def test_import_missing_or_corrupt_archive(empty_root: Path, tmp_path: Path) -> None:
    with pytest.raises(ProfileNotFoundError):
        import_profile(tmp_path / "nope.tar.gz", None, empty_root)
    (tmp_path / "junk.tar.gz").write_bytes(b"\x1f\x8b not really gzip")
    with pytest.raises(UnsafeArchiveError, match="cannot read"):
        import_profile(tmp_path / "junk.tar.gz", None, empty_root)
    assert list((empty_root / "profiles").iterdir()) == []


# --------------------------------------------------------------------------- hostile archives

HOSTILE_NAMES = [
    "/etc/passwd", "/p/x", "p/../../escape", "../p/x", "p/a/../../../x", "C:/Windows/x", "C:x",
    "\\\\server\\share\\x", "p\\..\\..\\x", "D:\\p\\x", "p/x:stream",
]


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_member_parts_refuses_escapes(name: str) -> None:
    with pytest.raises(UnsafeArchiveError) as exc:
        member_parts(name)
    assert repr(name) in str(exc.value)


@st.composite
def hostile_archive(draw: st.DrawFn) -> tuple[list[tuple[tarfile.TarInfo, bytes | None]], str]:
    """A plausible profile archive with one hostile member inserted somewhere."""
    benign = [dir_member("p"), file_member("p/config.yaml", b"a: 1\n"), dir_member("p/skills"),
              file_member("p/skills/SKILL.md", b"s")]
    kind = draw(st.sampled_from(["name", "symlink", "hardlink", "chr", "blk", "fifo", "outside", "topfile", "dup"]))
    suffix = draw(st.from_regex(r"[a-z]{1,6}", fullmatch=True))
    if kind == "name":
        bad = file_member(draw(st.sampled_from(HOSTILE_NAMES)) + suffix)
    elif kind == "symlink":
        target = draw(st.sampled_from(["/etc/passwd", "../../x", "config.yaml", "skills"]))
        bad = special_member(f"p/{suffix}", tarfile.SYMTYPE, target)
    elif kind == "hardlink":
        bad = special_member(f"p/{suffix}", tarfile.LNKTYPE, draw(st.sampled_from(["p/config.yaml", "/etc/shadow"])))
    elif kind == "chr":
        bad = special_member(f"p/{suffix}", tarfile.CHRTYPE)
    elif kind == "blk":
        bad = special_member(f"p/{suffix}", tarfile.BLKTYPE)
    elif kind == "fifo":
        bad = special_member(f"p/{suffix}", tarfile.FIFOTYPE)
    elif kind == "outside":
        bad = file_member(f"other{suffix}/x")
    elif kind == "topfile":
        bad = file_member(f"{suffix}.txt")
    else:
        bad = file_member("p/config.yaml", b"again")
    position = draw(st.integers(min_value=1 if kind in ("outside", "dup") else 0, max_value=len(benign)))
    members = [*benign[:position], bad, *benign[position:]]
    return members, bad[0].name


@settings(max_examples=120, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(hostile_archive())
def test_hostile_archives_are_refused_and_leave_nothing(empty_root: Path, tmp_path: Path, case: tuple) -> None:
    members, bad_name = case
    archive = build_tar(tmp_path / "hostile.tar.gz", members)
    before = sorted(os.listdir(empty_root / "profiles"))
    with pytest.raises(UnsafeArchiveError) as exc:
        import_profile(archive, "victim", empty_root)
    assert repr(bad_name) in str(exc.value) or "config.yaml" in str(exc.value)
    assert sorted(os.listdir(empty_root / "profiles")) == before
    assert not (tmp_path / "escape").exists() and not (empty_root / "escape").exists()


@settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(min_value=1, max_value=40), st.integers(min_value=1, max_value=200))
def test_size_and_count_limits(empty_root: Path, tmp_path: Path, files: int, size: int) -> None:
    members = [dir_member("p"), *(file_member(f"p/f{i}", b"x" * size) for i in range(files))]
    archive = build_tar(tmp_path / "big.tar.gz", members)
    total = files * size
    with pytest.raises(UnsafeArchiveError, match="byte limit"):
        import_profile(archive, "big", empty_root, max_bytes=total - 1)
    with pytest.raises(UnsafeArchiveError, match="more than"):
        import_profile(archive, "big", empty_root, max_members=files)
    assert scratch_left(empty_root) == [] and not (empty_root / "profiles" / "big").exists()
    result = import_profile(archive, "big", empty_root, max_bytes=total, max_members=files + 1)
    assert result.members == files + 1
    import shutil

    shutil.rmtree(result.path)


def test_declared_sizes_bound_a_compression_bomb(empty_root: Path, tmp_path: Path) -> None:
    """A tiny .tar.gz declaring gigabytes is refused from its headers, before any byte is written."""
    path = tmp_path / "bomb.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo("p/zeros")
        info.size = 64 * 1024 * 1024
        tar.addfile(info, io.BytesIO(bytes(info.size)))
    assert path.stat().st_size < 1024 * 1024
    with pytest.raises(UnsafeArchiveError, match="'p/zeros'"):
        import_profile(path, "bomb", empty_root, max_bytes=1024 * 1024)
    assert scratch_left(empty_root) == []


def test_failure_during_extraction_leaves_nothing(empty_root: Path, tmp_path: Path) -> None:
    """A member whose data is truncated fails mid-extraction; the scratch folder is removed."""
    good = build_tar(tmp_path / "t.tar", [dir_member("p"), file_member("p/a", b"a" * 10_000)], mode="w")
    data = good.read_bytes()
    truncated = tmp_path / "trunc.tar"
    truncated.write_bytes(data[: 512 + 512 + 2000])
    with pytest.raises(UnsafeArchiveError):
        import_profile(truncated, "t", empty_root)
    assert sorted(os.listdir(empty_root / "profiles")) == []
