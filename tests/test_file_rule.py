"""The class-level check of the file rule: no product code opens, writes, renames, removes, chmods,
copies or creates a file by path except through :mod:`profiles.safeio` (and :mod:`profiles.safetree`
for whole trees).

Every path under a profile's home, the root's shared channels, ``.hermesd`` and the alias folder can
be a link the profile's agent planted; hermesd runs as root, so a raw ``open``, ``os.replace`` or
``shutil.copy`` there lets the agent choose what root overwrites. ``safeio`` resolves beneath the
folder without following links. This test reads the source with ``ast`` (nothing is imported) and
fails on any file call outside the rule's modules (``profiles/safeio.py``, ``profiles/safetree.py``
for whole trees, ``profiles/beneath.py``) that is not in :data:`ALLOWED`: a function whose paths are
not profile-controlled (the operator's files, the install, kernel file systems), each with its
reason. Calls on kernel interfaces named by a literal (``/proc``, ``/sys``, ``/dev``) are not file
rule matters.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("supervisor", "profiles", "wrappers")
RULE_MODULES = {"profiles/safeio.py", "profiles/safetree.py", "profiles/beneath.py"}

OS_CALLS = {"open", "replace", "rename", "renames", "unlink", "remove", "rmdir", "removedirs", "mkdir", "makedirs",
            "chmod", "chown", "lchown", "link", "symlink", "truncate", "mkfifo", "mknod", "utime"}
PATH_CALLS = {"open", "read_text", "read_bytes", "write_text", "write_bytes", "unlink", "rename", "replace", "mkdir",
              "rmdir", "chmod", "lchmod", "touch", "symlink_to", "hardlink_to"}
SHUTIL_OK = {"which", "disk_usage", "get_terminal_size", "copyfileobj"}  # copyfileobj: file objects, no path
RULE_NAMES = {"safeio", "safetree", "beneath", "beneath_mod"}
KERNEL = ("/proc", "/sys", "/dev")

_OPERATOR = "the operator's own file or folder (chosen on the command line or in hermesd.yaml, or the install): " \
            "no profile can write it"
_SHIM = "the confinement shim, inside the child's new mount namespace: a tmpfs hermesd mounted a moment ago " \
        "(nothing a profile planted), /proc/self or /dev"
_OWN = "hermesd's own folder, created here and refused unless it is a private 0700 directory of hermesd's uid " \
       "that is not a link (Layout.ensure/check_private); hidden from every profile by the namespace"

_KERNEL = "a kernel file system: no profile can plant a link, FIFO or file there (cgroupfs refuses symlink, " \
          "mknod and creat even to root; /proc is the kernel's), and the path is /proc or the cgroup2 mount " \
          "found in /proc/self/mountinfo"

# (file, function) -> why its raw file calls are not profile-controlled.
ALLOWED: dict[tuple[str, str], str] = {
    ("supervisor/processes/child.py", "spawn"): "os.devnull, for a child whose log file system is full",
    ("supervisor/doctor/runtime.py", "_service_target"): _OPERATOR + " (systemd/launchd unit files)",
    ("supervisor/ops/export.py", "write_files"): _OPERATOR + " (export --out DIR)",
    ("supervisor/processes/childspec.py", "_head"): _OPERATOR + " (a hermes script on hermesd's own PATH)",
    ("supervisor/hermes/release.py", "_head"): _OPERATOR + " (the hermes executable's first bytes)",
    ("supervisor/isolation/install.py", "_shebang"): _OPERATOR + " (the hermes script's shebang)",
    ("supervisor/isolation/install.py", "_prefixes"): _OPERATOR + " (the interpreter's pyvenv.cfg)",
    ("supervisor/isolation/install.py", "_checkouts"): _OPERATOR + " (the install's .pth files)",
    ("supervisor/isolation/confine.py", "_write"): _SHIM,
    ("supervisor/isolation/confine.py", "_mkdir_like"): _SHIM,
    ("supervisor/isolation/confine.py", "_cover"): _SHIM,
    ("supervisor/isolation/confine.py", "_put_back"): _SHIM,
    ("supervisor/isolation/confine.py", "_private_dev"): _SHIM,
    ("supervisor/isolation/confine.py", "_ensure"): "paths outside the root (the operator's), a link created "
        "(never followed) in the root, and hermesd.yaml created O_EXCL|O_NOFOLLOW; folders below the root go "
        "through profiles.beneath",
    ("supervisor/isolation/confine.py", "_open_source"): "outside the root only (install paths, the operator's "
        "read_only list); below it profiles.beneath opens the source",
    ("supervisor/isolation/confine.py", "_landlock"): "outside the root only (the carved free paths, install and "
        "read_only paths, the operator's writable paths, device nodes, the private /tmp hermesd mounted); below it "
        "profiles.beneath opens the path",
    ("supervisor/layout.py", "Layout.ensure"): _OWN,
    ("supervisor/observe/journal.py", "open_folder"): _OWN + "; opened O_DIRECTORY|O_NOFOLLOW",
    ("supervisor/observe/journal.py", "open_segment"): _OWN + "; relative to the folder's descriptor, O_NOFOLLOW",
    ("supervisor/observe/journal.py", "Journal._prune"): _OWN + "; unlink relative to the folder's descriptor",
    ("supervisor/observe/reader.py", "_open_dir"): _OWN + "; opened O_DIRECTORY|O_NOFOLLOW",
    ("supervisor/observe/metrics.py", "_clear_stale_socket"): _OPERATOR + " (metrics.listen unix socket; "
        "removed only when lstat says it is a socket of this uid)",
    ("supervisor/control/server.py", "ControlServer.start"): _OWN + " (the control socket; the mode is set by the "
        "umask at bind, never by a chmod through the path)",
    ("supervisor/control/server.py", "ControlServer.close"): _OWN + " (unlink never follows a link)",
    ("supervisor/ops/service.py", "write_contrib"): _OPERATOR + " (contrib/ unit templates)",
    ("supervisor/ops/service.py", "install_service"): _OPERATOR + " (the unit folder)",
    ("supervisor/ops/service.py", "_written_by_us"): _OPERATOR + " (an installed unit file)",
    ("wrappers/scripts.py", "_write_script"): "the operator's alias folder itself (~/.local/bin or the folder "
        "given); the script is written into it through safeio",
    ("profiles/archive.py", "_write_archive"): _OPERATOR + " (export -o FILE; the profile is read through "
        "profiles.safetree)",
    ("profiles/archive.py", "_open_archive"): _OPERATOR + " (the archive import reads; it is extracted through "
        "profiles.safeio)",
    ("supervisor/hermes/codeid.py", "read_installed"): _OPERATOR + " (the installed distribution's RECORD, found by "
        "probing the configured interpreter; O_NOFOLLOW, regular and bounded)",
    ("supervisor/hermes/codeid.py", "_read_small"): _OPERATOR + " (direct_url.json and the RECORD of a hermes* "
        "distribution beside the installed one; O_NOFOLLOW, regular and bounded)",
    ("supervisor/upgrade/environment.py", "_hash"): _OPERATOR + " (an installed file, hashed against RECORD)",
    ("supervisor/upgrade/environment.py", "_install_folder"): _OPERATOR + " (a folder of the install that pip's "
        "uninstall removed; the files go back through safeio)",
    ("supervisor/kanban/running.py", "scan_workers"): _KERNEL + " (/proc/PID/cmdline)",
    ("supervisor/limits/cgroup_io.py", "_read_text"): _KERNEL,
    ("supervisor/limits/cgroup_io.py", "_write"): _KERNEL,
    ("supervisor/limits/cgroup_io.py", "apply"): _KERNEL + " (mkdir of a cgroup)",
    ("supervisor/limits/cgroup_io.py", "remove"): _KERNEL + " (rmdir of a cgroup)",
    ("supervisor/limits/procfs.py", "_read"): _KERNEL + " (/proc/PID/*)",
}

def _kernel_path(node: ast.AST) -> bool:
    for n in ast.walk(node):
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.startswith(KERNEL):
            return True
        if (isinstance(n, ast.JoinedStr) and n.values and isinstance(n.values[0], ast.Constant)
                and str(n.values[0].value).startswith(KERNEL)):
            return True
    return False


def _what(call: ast.Call) -> str | None:
    """The file operation ``call`` performs by path, or ``None``."""
    f = call.func
    if isinstance(f, ast.Name):
        return "open" if f.id == "open" else None
    if not isinstance(f, ast.Attribute):
        return None
    owner = f.value.id if isinstance(f.value, ast.Name) else None
    if owner in RULE_NAMES:
        return None
    if owner == "os":
        return f"os.{f.attr}" if f.attr in OS_CALLS else None
    if owner == "shutil":
        return f"shutil.{f.attr}" if f.attr not in SHUTIL_OK else None
    if owner == "io":
        return "io.open" if f.attr == "open" else None
    if f.attr not in PATH_CALLS:
        return None
    if f.attr == "replace" and (len(call.args) != 1 or call.keywords):
        return None  # str.replace(a, b), datetime.replace(tzinfo=...): not Path.replace(target)
    if f.attr == "open" and not call.args and not call.keywords and (
            (isinstance(f.value, ast.Name) and f.value.id == "self")
            or (isinstance(f.value, ast.Attribute) and isinstance(f.value.value, ast.Name)
                and f.value.value.id == "self")):
        return None  # self.open(), self.journal.open(), self.observer.open(): hermesd's objects, not paths
    return f".{f.attr}"


def raw_file_calls(path: Path, rel: str) -> list[tuple[str, int, str]]:
    """``(function, line, operation)`` for every file call by path in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    parents: dict[ast.AST, ast.AST] = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[child] = node

    def scope(node: ast.AST) -> str:
        names = []
        while node in parents:
            node = parents[node]
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.append(node.name)
        return ".".join(reversed(names)) or "<module>"

    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and (what := _what(node)) is not None and not _kernel_path(node):
            out.append((scope(node), node.lineno, what))
    return out


def _all_calls() -> dict[tuple[str, str], list[str]]:
    found: dict[tuple[str, str], list[str]] = {}
    for pkg in PACKAGES:
        for path in sorted((REPO / pkg).rglob("*.py")):
            rel = str(path.relative_to(REPO))
            if rel in RULE_MODULES:
                continue
            for func, line, what in raw_file_calls(path, rel):
                found.setdefault((rel, func), []).append(f"{rel}:{line} {what}")
    return found


def test_no_file_call_by_path_outside_the_rule():
    found = _all_calls()
    bad = [loc for key, locs in sorted(found.items()) if key not in ALLOWED for loc in locs]
    assert not bad, ("file calls by path outside the rule's modules (use safeio, or safetree for a whole tree: "
                     "they resolve beneath the folder without following a link; or add the function to ALLOWED "
                     "with why no profile can write the path):\n  " + "\n  ".join(bad))


def test_every_exception_is_still_needed():
    found = _all_calls()
    stale = sorted(k for k in ALLOWED if k not in found)
    assert not stale, f"listed but without a raw file call any more (remove them): {stale}"


def test_the_check_can_fail(tmp_path):
    """The scanner sees each kind of raw call, and lets the rule's own calls and kernel paths through."""
    src = tmp_path / "m.py"
    src.write_text(
        "import os, shutil\nfrom pathlib import Path\nfrom profiles import safeio\n"
        "def planted(home):\n"
        "    fd = os.open(home / '..gateway-planned-stop.json.1.tmp', os.O_WRONLY | os.O_CREAT | os.O_TRUNC)\n"
        "    (home / 'x').write_text('y')\n    shutil.copy2(home / 'a', home / 'b')\n    open(home / 'c')\n"
        "    (home / 'd').replace(home / 'e')\n"
        "def fine(home):\n"
        "    safeio.replace_bytes(safeio.home_file(home, 'x'), b'y')\n"
        "    Path(f'/proc/{1}/stat').read_bytes()\n    'a'.replace('b', 'c')\n    shutil.which('hermes')\n"
    )
    calls = raw_file_calls(src, "m.py")
    assert [(f, w) for f, _, w in calls] == [
        ("planted", "os.open"), ("planted", ".write_text"), ("planted", "shutil.copy2"), ("planted", "open"),
        ("planted", ".replace")]


def test_cgroup_prefix_is_the_limits_one():
    from supervisor.limits.cgroup import PROFILE_PREFIX
    from supervisor.processes.identity import CGROUP_PROFILE_PREFIX

    assert CGROUP_PROFILE_PREFIX == PROFILE_PREFIX
