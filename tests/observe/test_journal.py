"""The journal writer: one write per line, bounded rotation, crash-safe lines, private files, no symlinks."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time

import pytest

from supervisor.observe.events import Stamper, validate
from supervisor.observe.journal import Journal, JournalSettings, encode, segment_name
from supervisor.observe.reader import ReadStats, iter_events
from tests.observe.conftest import REPO


def ev(seq: int, profile: str | None = "coder", type_: str = "started", **fields):
    base = {"ts": 1_700_000_000.0 + seq, "seq": seq, "daemon": 42, "type": type_, "profile": profile}
    return {**base, **({"pid": seq, "argv0": "hermes"} if type_ == "started" and not fields else fields)}


def test_append_is_one_compact_line_in_private_files(events_dir):
    j = Journal(events_dir)
    j.open()
    assert j.append(ev(1)) and j.append(ev(2, None, "daemon_started"))
    j.close()
    assert stat.S_IMODE(events_dir.stat().st_mode) == 0o700
    seg = events_dir / segment_name(1)
    assert stat.S_IMODE(seg.stat().st_mode) == 0o600
    lines = seg.read_bytes().split(b"\n")
    assert lines[0].startswith(b'{"ts":1700000001.0,"seq":1,"daemon":42,"type":"started","profile":"coder"')
    assert lines[-1] == b"" and len(lines) == 3
    assert [e["seq"] for e in iter_events(events_dir)] == [1, 2]


def test_a_loose_events_folder_of_ours_is_tightened(events_dir):
    events_dir.mkdir(mode=0o755)
    os.chmod(events_dir, 0o755)
    Journal(events_dir).open()
    assert stat.S_IMODE(events_dir.stat().st_mode) == 0o700


def test_rotation_is_bounded_and_readers_see_the_kept_events_in_order(events_dir):
    j = Journal(events_dir, JournalSettings(max_bytes=4096, backups=2))
    j.open()
    for i in range(1, 401):
        assert j.append(ev(i, reason="x" * 50))
    j.close()
    names = sorted(p.name for p in events_dir.iterdir())
    assert len(names) == 3  # the current file and two backups
    assert all(p.stat().st_size <= 4096 for p in events_dir.iterdir())
    seqs = [e["seq"] for e in iter_events(events_dir)]
    assert seqs == list(range(seqs[0], 401)) and seqs[0] > 1
    assert j.stats.rotations >= 10


def test_reopening_continues_the_newest_file(events_dir):
    for n in range(3):
        j = Journal(events_dir)
        j.open()
        j.append(ev(n + 1))
        j.close()
    assert [p.name for p in events_dir.iterdir()] == [segment_name(1)]
    assert [e["seq"] for e in iter_events(events_dir)] == [1, 2, 3]


def test_a_torn_last_line_is_skipped_and_counted_and_the_next_writer_starts_fresh(events_dir):
    j = Journal(events_dir)
    j.open()
    j.append(ev(1))
    j.append(ev(2))
    j.close()
    seg = events_dir / segment_name(1)
    whole = encode(ev(3))
    with open(seg, "ab") as fh:
        fh.write(whole[: len(whole) // 2])  # what a write cut short by a crash leaves
    stats = ReadStats()
    assert [e["seq"] for e in iter_events(events_dir, stats=stats)] == [1, 2]
    assert (stats.torn, stats.malformed) == (1, 0)
    j = Journal(events_dir)
    j.open()  # a new daemon after the crash
    j.append(ev(4))
    j.close()
    stats = ReadStats()
    assert [e["seq"] for e in iter_events(events_dir, stats=stats)] == [1, 2, 4]
    assert (stats.torn, stats.malformed) == (0, 1)  # the fragment is now one complete, bad line


def test_junk_lines_nul_padding_and_blank_lines_are_skipped(events_dir):
    events_dir.mkdir(mode=0o700)
    seg = events_dir / segment_name(1)
    good = encode(ev(1)) + encode(ev(2))
    seg.write_bytes(good + b"\0" * 300 + b"\n\n" + b"not json\n" + b'{"type": 3}\n' + b"[1,2]\n" + encode(ev(3)))
    stats = ReadStats()
    assert [e["seq"] for e in iter_events(events_dir, stats=stats)] == [1, 2, 3]
    assert stats.malformed == 4 and stats.torn == 0


def test_symlinks_are_never_followed(tmp_path, events_dir):
    target = tmp_path / "elsewhere"
    target.mkdir()
    events_dir.symlink_to(target)
    with pytest.raises(OSError):
        Journal(events_dir).open()
    assert list(target.iterdir()) == []
    with pytest.raises(OSError, match="symlink"):
        list(iter_events(events_dir))


def test_a_planted_segment_symlink_or_fifo_is_refused_without_blocking(tmp_path, events_dir):
    events_dir.mkdir(mode=0o700)
    secret = tmp_path / "secret"
    secret.write_text("token\n")
    (events_dir / segment_name(1)).symlink_to(secret)
    os.mkfifo(events_dir / segment_name(2))
    with pytest.raises(OSError):
        Journal(events_dir).open()  # the newest is a FIFO: refused at open (O_NONBLOCK), not hung
    stats = ReadStats()
    started = time.monotonic()
    assert list(iter_events(events_dir, stats=stats)) == []
    assert time.monotonic() - started < 2
    assert len(stats.refused) == 2
    assert secret.read_text() == "token\n"


def test_write_errors_are_counted_not_raised_and_a_short_write_leaves_one_bad_line(events_dir):
    """A real short write: the file-size limit (RLIMIT_FSIZE) cuts a line the way a full disk does."""
    script = f"""
import resource, sys
sys.path.insert(0, {str(REPO)!r})
from supervisor.observe.journal import Journal
from tests.observe.test_journal import ev
from pathlib import Path
j = Journal(Path({str(events_dir)!r}))
j.open()
j.append(ev(1))
size = j._size
resource.setrlimit(resource.RLIMIT_FSIZE, (size + 40, resource.RLIM_INFINITY))
ok = [j.append(ev(i)) for i in (2, 3, 4)]
resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
ok.append(j.append(ev(5)))
print(ok, j.stats.failed)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[False, False, False, True] 3"
    stats = ReadStats()
    assert [e["seq"] for e in iter_events(events_dir, stats=stats)] == [1, 5]
    assert stats.malformed == 1


def test_a_journal_that_cannot_be_opened_counts_instead_of_raising(events_dir):
    j = Journal(events_dir)
    assert j.append(ev(1)) is False and j.stats.failed == 1


def test_reopen_after_the_folder_was_deleted(events_dir):
    import shutil

    j = Journal(events_dir)
    j.open()
    j.append(ev(1))
    shutil.rmtree(events_dir)
    assert j.reopen_if_moved()
    j.append(ev(2))
    assert [e["seq"] for e in iter_events(events_dir)] == [2]
    assert not j.reopen_if_moved()


WRITER = """
import os, sys
sys.path.insert(0, {repo!r})
from pathlib import Path
from supervisor.observe.journal import Journal, JournalSettings
from supervisor.observe.events import Stamper
j = Journal(Path({folder!r}), JournalSettings(max_bytes=65536, backups=1000))
j.open()
st = Stamper(os.getpid())
i = 0
while True:
    i += 1
    if i == 2:
        os.write(1, b"go\\n")  # one event is in: every run leaves at least one
    j.append(st.stamp("exited", "coder", 1.0 * i, dict(pid=i, code=1, signal=None, kind="crash",
                                                      reason="r" * (i % 3000), uptime_s=0.1)))
"""


def test_sigkill_of_the_writer_mid_stream_never_breaks_readers(events_dir):
    """SIGKILL a writer appending as fast as it can, 15 times; every run's events stay readable."""
    events_dir.parent.mkdir(exist_ok=True)
    rounds = 15
    for r in range(rounds):
        proc = subprocess.Popen([sys.executable, "-c", WRITER.format(repo=str(REPO), folder=str(events_dir))],
                                stdout=subprocess.PIPE)
        try:
            assert proc.stdout is not None and proc.stdout.readline() == b"go\n"
            time.sleep(0.01 + 0.007 * r)  # different moments of the write loop
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    stats = ReadStats()
    events = list(iter_events(events_dir, stats=stats))
    assert len(events) > rounds
    by_run: dict[int, list[int]] = {}
    for e in events:
        assert not validate(e), e
        by_run.setdefault(e["daemon"], []).append(e["seq"])
    assert len(by_run) == rounds
    for seqs in by_run.values():
        assert seqs == list(range(1, len(seqs) + 1))  # nothing lost or reordered before the kill point
    assert stats.skipped <= rounds  # at most the one line each kill was writing


def test_append_cost_is_microseconds(events_dir):
    j = Journal(events_dir)
    j.open()
    st = Stamper(1)
    samples = []
    for i in range(5000):
        e = st.stamp("exited", "coder", 1.0 * i, {"pid": i, "code": 1, "signal": None, "kind": "crash",
                                                   "reason": "exit 1 after 0.4s; retry in 2s", "uptime_s": 0.4})
        t0 = time.perf_counter_ns()
        j.append(e)
        samples.append(time.perf_counter_ns() - t0)
    samples.sort()
    median, p99 = samples[len(samples) // 2] / 1000, samples[int(len(samples) * 0.99)] / 1000
    print(f"\njournal append: median {median:.1f} µs, p99 {p99:.1f} µs per event")
    assert median < 100 and p99 < 2000
