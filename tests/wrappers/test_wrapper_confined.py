"""An alias runs its profile's commands confined as the profile's gateway is (issue #13): the real
wrapper script, the real ``hermesd exec``, and a stand-in for ``hermes`` that tries to read another
profile's secrets."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from wrappers.scripts import create_wrapper

REPO = Path(__file__).resolve().parents[2]
HERMESD = Path(sys.executable).parent / "hermesd"

SNOOP = """#!/bin/sh
# stands in for hermes: what could an agent started through the alias read?
cat "$SNOOP_TARGET" >/dev/null 2>&1 && echo other:readable || echo other:denied
echo "$HERMES_HOME" > "$HERMES_HOME/own-write" && echo own:writable
"""


def _setup(tmp_path: Path, isolation: str) -> tuple[Path, Path, dict[str, str]]:
    root = tmp_path / "root"
    for name in ("coder", "writer"):
        (root / "profiles" / name).mkdir(parents=True)
    secret = root / "profiles" / "writer" / ".env"
    secret.write_text("TELEGRAM_BOT_TOKEN=123:not-for-coder\n")
    secret.chmod(0o600)
    (root / "hermesd.yaml").write_text(f"isolation: {isolation}\n")
    snoop = tmp_path / "bin" / "hermes"
    snoop.parent.mkdir()
    snoop.write_text(SNOOP)
    snoop.chmod(0o755)
    alias = create_wrapper("coder", "coder", root, tmp_path / "aliases", hermes=str(snoop), hermesd=str(HERMESD),
                           windows=False, env={"PATH": os.defpath})
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "SNOOP_TARGET": str(secret), "PYTHONPATH": str(REPO)}
    return root, alias, env


def test_alias_command_is_confined_like_the_gateway(tmp_path):
    root, alias, env = _setup(tmp_path, "auto")
    done = subprocess.run([str(alias), "chat"], env=env, capture_output=True, text=True, timeout=60)
    assert "own:writable" in done.stdout, done.stderr
    assert "other:denied" in done.stdout, (done.stdout, done.stderr)
    assert (root / "profiles" / "coder" / "own-write").read_text().strip() == str(root / "profiles" / "coder")


def test_alias_with_isolation_off_is_not_confined(tmp_path):
    """The control: the same script reads the other profile's file when isolation is off, so the
    test above fails for the right reason."""
    _root, alias, env = _setup(tmp_path, "off")
    done = subprocess.run([str(alias), "chat"], env=env, capture_output=True, text=True, timeout=60)
    assert "other:readable" in done.stdout, (done.stdout, done.stderr)
