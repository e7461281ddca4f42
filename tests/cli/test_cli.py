"""The command line as a user drives it: background start, logs, watch, keep-children upgrades."""

from __future__ import annotations

import io
import os
import pty
import select
import signal
import subprocess
import sys

import pytest

from supervisor.processes import logs
from tests.harness import REPO, Hermesd, kill_tagged, pid_alive, tagged_pids, wait_for


@pytest.mark.live
def test_background_start_status_logs_stop(fake_root):
    d = Hermesd(fake_root)
    try:
        out = d.cli("start")
        assert out.returncode == 0, out.stderr
        assert "started" in out.stdout
        up = d.ping()
        assert up["ready"]
        d.wait_running("default", "coder", "writer")
        again = d.cli("start")
        assert again.returncode == 0 and "already running" in again.stdout
        log = d.cli("logs", "coder", "-n", "5")
        assert log.returncode == 0 and "hermesd: started" in log.stdout
        assert d.cli("logs").returncode == 0  # the daemon's own log
        assert d.cli("stop").returncode == 0
        wait_for(lambda: not pid_alive(up["pid"]), 10)
        assert tagged_pids(fake_root) == []
    finally:
        d.cli("stop")
        kill_tagged(fake_root)


@pytest.mark.live
def test_start_on_a_broken_hermesd_yaml_says_every_profile_is_held(fake_root):
    """The daemon starts (it waits for a fixed file), and ``start`` says what ``status`` would."""
    config = fake_root / "hermesd.yaml"
    good = config.read_text()
    config.write_text(good + "max_starting: [\n")  # an unclosed list: reported at the line it opens
    d = Hermesd(fake_root)
    try:
        out = d.cli("start")
        assert out.returncode == 0, out.stderr
        assert "started" in out.stdout
        assert "every profile is held until hermesd.yaml is fixed" in out.stderr
        assert f"{config}:{len(good.splitlines()) + 1}: invalid YAML" in out.stderr
        config.write_text(good)  # fixed: the profiles start, the daemon is not restarted
        d.wait_running("default", "coder", "writer")
        assert d.cli("stop").returncode == 0
    finally:
        d.cli("stop")
        kill_tagged(fake_root)


def test_keep_children_then_adopt(fake_root, hermesd_factory):
    d = hermesd_factory(fake_root)
    before = d.wait_running("default", "coder", "writer")
    out = d.cli("stop", "--keep-children")
    assert out.returncode == 0 and "left running" in out.stdout
    assert d.proc.wait(10) == 0
    assert all(pid_alive(p) for p in before.values())
    d2 = hermesd_factory(fake_root)
    assert d2.wait_running("default", "coder", "writer") == before


def test_status_watch_plain_when_piped(fake_root, hermesd_factory):
    d = hermesd_factory(fake_root)
    d.wait_running("coder")
    proc = subprocess.Popen(
        [sys.executable, "-m", "supervisor", "status", "--watch", "--interval", "0.1", "--root", str(fake_root)],
        stdout=subprocess.PIPE, env=d.env, cwd=str(REPO),
    )
    chunks: list[bytes] = []

    def two_snapshots() -> bool:
        if select.select([proc.stdout], [], [], 0.1)[0]:
            chunks.append(os.read(proc.stdout.fileno(), 65536))
        return b"".join(chunks).count(b"PROFILE") >= 2

    try:
        wait_for(two_snapshots, 10)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            rest, _ = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:  # never leave it behind
            proc.kill()
            proc.communicate()
            raise
    assert proc.returncode == 0
    assert b"\x1b[" not in b"".join(chunks) + rest


def _pty_output(args: list[str], env: dict[str, str], until: bytes, times: int = 2) -> bytes:
    pid, fd = pty.fork()
    if pid == 0:  # child: exec the CLI on the pty
        os.chdir(REPO)
        os.execve(sys.executable, [sys.executable, "-m", "supervisor", *args], env)
    out = b""
    try:
        def more() -> bool:
            nonlocal out
            if select.select([fd], [], [], 0.1)[0]:
                try:
                    out += os.read(fd, 65536)
                except OSError:
                    return True
            return out.count(until) >= times
        wait_for(more, 10)
    finally:
        os.kill(pid, signal.SIGINT)
        try:
            wait_for(lambda: os.waitpid(pid, os.WNOHANG)[0] == pid, 10, what="status --watch to end on SIGINT")
        except AssertionError:  # never leave it behind, nor wait on it forever
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise
        finally:
            os.close(fd)
    return out


def test_status_watch_redraws_on_a_terminal_and_honours_no_color(fake_root, hermesd_factory):
    d = hermesd_factory(fake_root)
    d.wait_running("default", "coder", "writer")
    args = ["status", "--watch", "--interval", "0.1", "--root", str(fake_root)]
    colored = _pty_output(args, {**d.env, "TERM": "xterm"}, b"PROFILE")
    assert b"\x1b[H\x1b[2J" in colored and b"\x1b[32m" in colored
    plain = _pty_output(args, {**d.env, "TERM": "xterm", "NO_COLOR": "1"}, b"PROFILE")
    assert b"\x1b[H\x1b[2J" in plain and b"\x1b[32m" not in plain


def test_logs_follow_across_rotation(tmp_path):
    path = tmp_path / "p.log"
    path.write_text("old-1\n")
    out_file = tmp_path / "out.txt"
    code = (
        "import sys, pathlib; from supervisor.processes import logs\n"
        f"logs.follow(pathlib.Path({str(path)!r}), open({str(out_file)!r}, 'w'), interval=0.02)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=str(REPO))
    try:
        # follow() starts at the end of the file, at a moment this process cannot see: a line
        # appended before that is (rightly) never shown, so append one until one is.
        def appended_and_shown() -> bool:
            with path.open("a") as fh:
                fh.write("before-rotation\n")
            return out_file.exists() and "before-rotation" in out_file.read_text()

        wait_for(appended_and_shown, 30, interval=0.2, what="follow() to show an appended line")
        with path.open("a") as fh:
            fh.write("x" * 5000 + "\nlast-before\n")
        assert logs.rotate_if_needed(path, 4096, 2)
        with path.open("a") as fh:
            fh.write("after-rotation\n")
        wait_for(lambda: "after-rotation" in out_file.read_text(), 20)
        text = out_file.read_text()
        assert "last-before" in text and "old-1" not in text
        assert text.index("last-before") < text.index("after-rotation")
    finally:
        proc.kill()
        proc.wait()


def test_rotation_keeps_n_backups(tmp_path):
    path = tmp_path / "c.log"
    for i in range(5):
        path.write_text(f"gen{i}\n" + "y" * 5000)
        assert logs.rotate_if_needed(path, 4096, 3)
        assert path.stat().st_size == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.log", "c.log.1", "c.log.2", "c.log.3"]
    assert (tmp_path / "c.log.1").read_text().startswith("gen4")
    assert (tmp_path / "c.log.3").read_text().startswith("gen2")
    assert oct((tmp_path / "c.log.1").stat().st_mode & 0o777) == "0o600"
    assert logs.tail_lines(tmp_path / "c.log.1", 1) == [b"y" * 5000]


def test_housekeeping_rotates_only_the_oversized_logs(tmp_path):
    """One read of the logs folder decides which logs are due; a link named like a log is never
    followed (the rotation refuses it)."""
    from supervisor.layout import Layout

    layout = Layout(tmp_path)
    layout.logs.mkdir(parents=True)
    (layout.logs / "big.log").write_text("x" * 5000)
    (layout.logs / "small.log").write_text("y" * 10)
    (tmp_path / "elsewhere").write_text("z" * 5000)
    (layout.logs / "linked.log").symlink_to(tmp_path / "elsewhere")
    problems = logs.housekeep(layout, ["big", "small", "linked", "absent"], 4096, 2, 0)
    assert problems == {"big": None, "small": None, "linked": None, "absent": None}
    assert (layout.logs / "big.log").stat().st_size == 0 and (layout.logs / "big.log.1").stat().st_size == 5000
    assert (layout.logs / "small.log").read_text() == "y" * 10 and not (layout.logs / "small.log.1").exists()
    assert (tmp_path / "elsewhere").stat().st_size == 5000 and not (layout.logs / "linked.log.1").exists()


def test_errors_are_one_line(tmp_path):
    d = Hermesd(tmp_path)
    for args, code in ((["restart", "coder"], 3), (["logs", "nope"], 2)):
        out = d.cli(*args)
        assert out.returncode == code
        assert out.stderr.startswith("hermesd: error: ") and out.stderr.count("\n") == 1, out.stderr
        assert "Traceback" not in out.stderr
    out = d.cli("status")
    assert out.returncode == 3 and "NOT RUNNING" in out.stdout


def test_socket_folder_owned_by_someone_else_is_refused(tmp_path):
    """A long root moves the socket to /tmp/hermesd-<uid>/; a folder there we do not control is refused."""
    from supervisor.layout import Layout, UnsafeFolderError, check_private

    deep = tmp_path / ("x" * 60) / ("y" * 60)
    deep.mkdir(parents=True)
    layout = Layout(deep)
    assert layout.socket.parent != layout.dir  # the fallback path
    folder = tmp_path / "shared"
    folder.mkdir(mode=0o777)
    folder.chmod(0o777)
    try:
        check_private(folder)
        raise AssertionError("a world-writable folder was accepted")
    except UnsafeFolderError as exc:
        assert "0777" in str(exc)
    folder.chmod(0o700)
    check_private(folder)


def test_stop_shows_progress_on_a_terminal_only(fake_root, hermesd_factory):
    from tests.fakegw import write_behaviour

    for home in (fake_root, fake_root / "profiles" / "coder", fake_root / "profiles" / "writer"):
        write_behaviour(home, hang_on_exit=0.6)  # a drain that takes a moment
    d = hermesd_factory(fake_root)
    d.wait_running("default", "coder", "writer")
    out = _pty_output(["stop", "--root", str(fake_root)], {**d.env, "TERM": "xterm"}, b"hermesd stopped", times=1)
    assert b"stopping gateways: " in out and b"/3 stopped" in out and b"hermesd stopped" in out
    assert d.proc.wait(10) == 0


def test_profile_export_progress_only_on_a_terminal(fake_root, tmp_path):
    from profiles.progress import Progress

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    tty, pipe = Tty(), io.StringIO()
    for stream in (tty, pipe):
        shown = Progress("exporting entries", stream, every=0)
        for n in range(1, 4):
            shown.update(n, 3)
        shown.done()
    assert "exporting entries: 3/3" in tty.getvalue() and pipe.getvalue() == ""


def test_root_before_the_command_typos_and_a_missing_root(tmp_path):
    """``hermesd --root R status`` is ``hermesd status --root R``; a typo gets a suggestion and never
    a hidden helper's name; a root that does not exist says how to make one."""
    root = tmp_path / "root"
    (root / "profiles").mkdir(parents=True)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path), "PYTHONPATH": str(REPO)}

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "supervisor", *args], capture_output=True, text=True,
                              env=env, cwd=str(REPO), timeout=60)

    out = cli("--root", str(root), "status")
    assert out.returncode == 3 and f"hermesd for {root}: NOT RUNNING" in out.stdout, out.stderr
    assert cli(f"--root={root}", "status", "--json").returncode == 3
    clash = cli("--root", str(root), "status", "--root", str(tmp_path))
    assert clash.returncode == 2 and "two roots given" in clash.stderr
    typo = cli("stauts")
    assert typo.returncode == 2 and "did you mean 'status'?" in typo.stderr, typo.stderr
    assert "_planned-stop" not in typo.stderr and typo.stderr.count("\n") == 1
    missing = cli("status")  # HOME has no .hermes: a new account
    assert missing.returncode == 2 and f"root {tmp_path / '.hermes'} does not exist" in missing.stderr
    assert "'hermes setup'" in missing.stderr and "mkdir -p" in missing.stderr and "hermesd start" in missing.stderr
    other = cli("status", "--root", str(tmp_path / "nowhere"))
    assert f"'HERMES_HOME={tmp_path / 'nowhere'} hermes setup'" in other.stderr


def test_exec_takes_its_options_before_the_command_with_or_without_dashes(tmp_path):
    """``hermesd exec P --root R cmd`` runs in R (never silently in ~/.hermes); an unknown option
    there is an error, not a command."""
    root = tmp_path / "root"
    (root / "profiles" / "coder").mkdir(parents=True)
    (root / "hermesd.yaml").write_text("isolation: off\n")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path), "PYTHONPATH": str(REPO)}

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "supervisor", "exec", *args], capture_output=True, text=True,
                              env=env, cwd=str(REPO), timeout=60)

    show = ["/bin/sh", "-c", 'echo "home=$HERMES_HOME"']
    for args in (["coder", "--root", str(root), *show], ["coder", "--root", str(root), "--", *show],
                 ["coder", f"--root={root}", *show], ["--root", str(root), "coder", "--", *show]):
        out = cli(*args)
        assert out.returncode == 0 and out.stdout.strip() == f"home={root / 'profiles' / 'coder'}", (args, out)
    bad = cli("coder", "--rot", str(root), *show)
    assert bad.returncode == 2 and "unknown option '--rot'" in bad.stderr and "home=" not in bad.stdout
    assert cli("coder", "--root").returncode == 2


def test_exec_after_dashes_is_the_command_even_when_it_looks_like_an_option(tmp_path):
    root = tmp_path / "root"
    (root / "profiles" / "coder").mkdir(parents=True)
    (root / "hermesd.yaml").write_text("isolation: off\n")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path), "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-m", "supervisor", "exec", "coder", "--root", str(root), "--",
                          "--no-such-program"], capture_output=True, text=True, env=env, cwd=str(REPO), timeout=60)
    assert out.returncode == 127 and "unknown option" not in out.stderr, out  # run, and not found
    out = subprocess.run([sys.executable, "-m", "supervisor", "exec", "--root", str(root), "coder", "--",
                          "--no-such-program"], capture_output=True, text=True, env=env, cwd=str(REPO), timeout=60)
    assert out.returncode == 127 and "unknown option" not in out.stderr, out


def test_doctor_reads_tree_memory_from_the_running_daemon(fake_root, hermesd_factory):
    """doctor's memory-pressure check takes each running profile's tree memory from the daemon's
    status reply; a reply it cannot read would silently turn the check off."""
    from supervisor.doctor.domain_checks import _tree_memory
    from supervisor.doctor.scan import Scan

    d = hermesd_factory(fake_root)
    d.wait_running("default", "coder", "writer")
    usage = _tree_memory(Scan(root=fake_root, env=d.env, service_dirs=[]))
    assert set(usage) == {"default", "coder", "writer"}
    assert all(v > 0 for v in usage.values())


def test_a_permission_error_names_its_file_on_one_escaped_line(capsys):
    """A file name from a profile may hold a line break: the error stays one line, the name escaped."""
    import argparse

    from supervisor.cli.common import guarded

    def handler(_args: argparse.Namespace) -> int:
        raise PermissionError(13, "Permission denied", "/r/profiles/p/evil\nhermesd: ok")

    assert guarded(handler, argparse.Namespace()) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "evil\\nhermesd: ok" in err and err.startswith("hermesd: error: permission denied:")
