"""The upgrade tests' fleet: four profiles whose gateways run the ``hermes`` of a real virtual environment
holding a small "hermes-agent" release (``tests/upgrade/support.py``), under a real daemon."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.harness import write_config
from tests.upgrade import support
from tests.upgrade.support import NAMES


@pytest.fixture
def fleet(tmp_path: Path, hermesd_factory: Any) -> dict[str, Any]:
    wheels = tmp_path / "wheels"
    support.build_release(wheels, "0.18.2", helper=1)
    support.build_release(wheels, "0.19.0", helper=2, sync_skills=True)
    support.build_helper(wheels, 1)
    support.build_helper(wheels, 2)
    broken = support.build_release(tmp_path / "broken", "0.19.1", helper=2, broken=True)
    python = support.make_venv(tmp_path / "venv")
    support.pip_install(python, wheels, "hermes-agent==0.18.2")
    root = tmp_path / "root"
    for name in NAMES[1:]:
        (root / "profiles" / name).mkdir(parents=True)
    (root / "profiles" / "alpha" / "config.yaml").write_bytes(b"# alpha's own\nmodel: {default: x}\n")
    write_config(root, command=[str(tmp_path / "venv" / "bin" / "hermes")])
    d = hermesd_factory(root, env=support.pip_env(wheels))
    d.wait_running(*NAMES, timeout=30)
    site = next((tmp_path / "venv" / "lib").glob("python3*/site-packages"))
    return {"d": d, "root": root, "python": python, "wheels": wheels, "broken": broken, "site": site}
