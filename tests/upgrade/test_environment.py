"""The byte copy of the distributions pip replaces: what is saved, how it is checked, how it comes back."""

from __future__ import annotations

import base64
import hashlib
import os
import sys
from pathlib import Path

import pytest

from profiles import safeio
from supervisor.upgrade import environment
from supervisor.upgrade.environment import Dist, Interpreter


def _h(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def fake_prefix(tmp_path: Path) -> tuple[Path, Dist]:
    prefix = tmp_path / "venv"
    site = prefix / "lib" / "python3.11" / "site-packages"
    info = site / "hermes_agent-0.18.2.dist-info"
    info.mkdir(parents=True)
    (site / "hermes_cli").mkdir()
    (prefix / "bin").mkdir()
    files = {site / "hermes_cli" / "__init__.py": b"__version__ = '0.18.2'\n",
             prefix / "bin" / "hermes": b"#!/venv/bin/python\nmain()\n",
             info / "METADATA": b"Name: hermes-agent\nVersion: 0.18.2\n"}
    for p, data in files.items():
        p.write_bytes(data)
    os.chmod(prefix / "bin" / "hermes", 0o755)
    (site / "hermes_cli" / "__pycache__").mkdir()
    (site / "hermes_cli" / "__pycache__" / "__init__.cpython-311.pyc").write_bytes(b"\x00pyc")
    record = [f"{os.path.relpath(p, site)},{_h(d)},{len(d)}" for p, d in files.items()]
    record += ["hermes_cli/__pycache__/__init__.cpython-311.pyc,,", "hermes_agent-0.18.2.dist-info/RECORD,,",
               "../../../../outside.txt,sha256=x,1"]
    (info / "RECORD").write_text("\n".join(record) + "\n")
    (tmp_path / "outside.txt").write_text("not ours")
    return prefix, Dist("hermes-agent", "0.18.2", str(info))


def test_save_copies_every_recorded_file_inside_the_prefix_and_restore_brings_them_back(tmp_path):
    prefix, dist = fake_prefix(tmp_path)
    store = tmp_path / "store"
    saved = environment.save(str(prefix), [dist], store)
    assert saved[0].dist_info == "lib/python3.11/site-packages/hermes_agent-0.18.2.dist-info"
    assert sorted(saved[0].files) == sorted([
        "lib/python3.11/site-packages/hermes_cli/__init__.py", "bin/hermes",
        "lib/python3.11/site-packages/hermes_agent-0.18.2.dist-info/METADATA",
        "lib/python3.11/site-packages/hermes_cli/__pycache__/__init__.cpython-311.pyc",
        "lib/python3.11/site-packages/hermes_agent-0.18.2.dist-info/RECORD"])  # never ../outside.txt
    assert environment.SavedDist.from_json(saved[0].to_json()).files == saved[0].files
    assert environment.verify(str(prefix), saved) == []
    # what an upgrade does to them: gone, or replaced
    (prefix / "bin" / "hermes").write_text("#!/venv/bin/python\nnew()\n")
    for rel in saved[0].files:
        if "site-packages" in rel:
            (prefix / rel).unlink()
    assert "bin/hermes" in environment.verify(str(prefix), saved) or environment.verify(str(prefix), saved)
    interp = Interpreter("/nonexistent/python", str(prefix), "hermes-agent")
    assert environment.restore(interp, saved, store, remove=[]) == []
    assert (prefix / "bin" / "hermes").read_bytes() == b"#!/venv/bin/python\nmain()\n"
    assert os.stat(prefix / "bin" / "hermes").st_mode & 0o777 == 0o755
    assert (tmp_path / "outside.txt").read_text() == "not ours"


def test_verify_names_a_changed_or_missing_file(tmp_path):
    prefix, dist = fake_prefix(tmp_path)
    saved = environment.save(str(prefix), [dist], tmp_path / "store")
    init = prefix / "lib/python3.11/site-packages/hermes_cli/__init__.py"
    init.write_text("__version__ = 'tampered'\n")
    (prefix / "bin" / "hermes").unlink()
    assert sorted(environment.verify(str(prefix), saved)) == ["bin/hermes (missing)",
                                                             "lib/python3.11/site-packages/hermes_cli/__init__.py"]


def test_names_are_compared_as_pip_does():
    assert environment.canonical("Hermes_Agent") == environment.canonical("hermes.agent") == "hermes-agent"


def test_the_record_side_follows_no_link(tmp_path):
    """The store and pip's log live in hermesd's folder, which the default profile can write under
    Landlock alone: a link planted there is refused, and nothing is written through it."""
    prefix, dist = fake_prefix(tmp_path)
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    record = tmp_path / "record"
    record.mkdir()
    (record / "pip.log").symlink_to(victim)
    interp = Interpreter(sys.executable, str(prefix), "hermes-agent")
    with pytest.raises(safeio.LinkRefusedError):
        interp.run(["-c", "print('x')"], log=safeio.at(record, "pip.log"))
    (record / "python").symlink_to(tmp_path / "elsewhere")
    (tmp_path / "elsewhere").mkdir()
    with pytest.raises(safeio.LinkRefusedError):
        environment.save(str(prefix), [dist], safeio.at(record, "python"))
    assert victim.read_text() == "keep\n" and list((tmp_path / "elsewhere").iterdir()) == []
    code, out = interp.run(["-c", "print('x')"], log=safeio.at(record, "ok.log"))
    assert out == "x\n"
    assert code == 0 and (record / "ok.log").read_text().endswith("x\n")
