"""Fixtures for the engine tests: a running dockerd, the hermes + hermesd image built by
``contrib/docker/build-image.sh``, and one exported root shared by the Compose and Swarm modules.

They skip, with the reason, where the engine cannot run (no docker CLI, no dockerd answering, the
image recipe lacking root or debootstrap: the script exits 3); anything else that fails is a
failure. ``scripts/test.sh`` installs docker.io, debootstrap and docker-compose and starts
dockerd when it runs as root.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from supervisor.ops import export
from tests.engine.engine import HUNG_AFTER, PROFILES, Deployment

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "contrib" / "docker" / "build-image.sh"
BUILD_TIMEOUT = 1800.0  # a cold build runs debootstrap and downloads every wheel
# Folder owners when the tests run as root: a named profile's gateway then runs as an id the image
# does not know (no /etc/passwd entry, no home), as a user's own uid would.
OWNERS = {"coder": (10001, 10001), "writer": (10002, 10003)}


@pytest.fixture(scope="session")
def engine() -> None:
    if shutil.which("docker") is None:
        pytest.skip("no docker CLI (Debian: apt-get install docker.io; scripts/test.sh does so as root)")
    done = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True,
                          timeout=60)
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or ["no answer"])[-1]
        pytest.skip(f"dockerd is not answering ({why}); scripts/test.sh starts it when run as root")


@pytest.fixture(scope="session")
def image(engine: None) -> str:
    """The image's tag; built once (minutes), then found by its key (under a second)."""
    started = time.monotonic()
    done = subprocess.run(["bash", str(BUILD)], capture_output=True, text=True, timeout=BUILD_TIMEOUT)
    if done.returncode == 3:
        pytest.skip(f"cannot build the image here: {done.stderr.strip().splitlines()[-1]}")
    assert done.returncode == 0, f"{BUILD} exited {done.returncode}:\n{done.stderr[-6000:]}"
    tag = done.stdout.strip().splitlines()[-1]
    print(f"\nengine image {tag} ready in {time.monotonic() - started:.1f}s")
    return tag


@pytest.fixture(scope="session")
def deployment(image: str, tmp_path_factory: pytest.TempPathFactory) -> Deployment:
    root = tmp_path_factory.mktemp("engine") / "root"
    marks = {p: f"mark-{p}-{secrets.token_hex(8)}" for p in PROFILES}
    for profile in PROFILES:
        home = root if profile == "default" else root / "profiles" / profile
        home.mkdir(parents=True)
        # no credential: each gateway comes up with no platform and stays up for cron
        (home / ".env").write_text(f"HERMESD_ENGINE_MARK={marks[profile]}\n")
    if os.geteuid() == 0:
        for profile, (uid, gid) in OWNERS.items():
            for path in [root / "profiles" / profile, *(root / "profiles" / profile).rglob("*")]:
                os.chown(path, uid, gid)
    # Hung detection at 45 s (one and a half heartbeat periods): the exported liveness probe follows
    # it, so a stopped gateway turns unhealthy within about a minute instead of two.
    (root / "hermesd.yaml").write_text(f"hung_after: {HUNG_AFTER:g}\n")
    out = root.parent / "deploy"
    export.write_files(out, export.export_files("compose", root, image=image))
    return Deployment(root, out / "compose.yaml", image, marks)
