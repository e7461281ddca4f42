"""One verdict (issue #11): over generated profile trees on disk, the profiles ``doctor`` reports as
held, the ones ``export`` refuses, and the ones the daemon's planner holds are the same set, with
the same kind.

The trees are real folders with real ``.env`` and ``config.yaml`` files; each of the three reads
them its own way (doctor's scan, export's collect, the daemon's reader feeding the planner), so a
rule added to one path and forgotten in another makes this fail. The planner runs in the fake
world of :mod:`tests.plan.world` (no processes: nothing here is about timing).
"""

from __future__ import annotations

import random
import re
import shutil
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from profiles.discovery import profiles_to_serve
from profiles.snapshot import read_profile
from supervisor.plan.planner import Planner, Settings
from supervisor.plan.policy import RestartPolicy
from supervisor.plan.verdict import HoldKind
from tests.harness import write_config
from tests.plan.world import World

NAMES = ("default", "a", "b", "c")
ENVS = {
    "none": None,
    "token1": "TELEGRAM_BOT_TOKEN=111111:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\n",
    "token2": "TELEGRAM_BOT_TOKEN=222222:BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB\n",
    "broken": "TELEGRAM_BOT_TOKEN=123:AAH secret (from BotFather)\n",
    "max_starts": "HERMES_GATEWAY_MAX_STARTS=5\n",
    "s6": "HERMES_S6_SUPERVISED_CHILD=true\n",
    "api_env": "API_SERVER_ENABLED=true\nAPI_SERVER_PORT=8650\nAPI_SERVER_KEY=k-0123456789abcdef\n",
}
CONFIGS = {
    "none": None,
    "empty": "{}\n",
    "api": "platforms:\n  api_server:\n    enabled: true\n    extra: {port: 8650, key: k-0123456789abcdef}\n",
    "api_other": "platforms:\n  api_server:\n    enabled: true\n    extra: {port: 8651, key: k-0123456789abcdef}\n",
    "broken": "platforms: [unclosed\n",
    "alias_bomb": "a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
                  "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
                  "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\n",
}
FILE_KINDS = {HoldKind.CONFIG_ERROR, HoldKind.ENV_OVERRIDE, HoldKind.CREDENTIAL_CONFLICT, HoldKind.PORT_CONFLICT}
BY_CODE = {k.doctor_code: k.value for k in HoldKind}

trees = st.dictionaries(
    st.sampled_from(NAMES[1:]), st.tuples(st.sampled_from(sorted(ENVS)), st.sampled_from(sorted(CONFIGS))),
    max_size=3,
).flatmap(lambda named: st.tuples(st.just(named), st.sampled_from(sorted(ENVS)), st.sampled_from(sorted(CONFIGS))))


def build(root: Path, named: dict[str, tuple[str, str]], default_env: str, default_cfg: str) -> None:
    if root.exists():
        shutil.rmtree(root)
    (root / "profiles").mkdir(parents=True)
    write_config(root)
    homes = {"default": root, **{n: root / "profiles" / n for n in named}}
    files = {"default": (default_env, default_cfg), **named}
    for name, (env, cfg) in files.items():
        home = homes[name]
        home.mkdir(exist_ok=True)
        if ENVS[env] is not None:
            (home / ".env").write_text(ENVS[env])
        if CONFIGS[cfg] is not None:
            (home / "config.yaml").write_text(CONFIGS[cfg])


def doctor_holds(root: Path) -> set[tuple[str, str]]:
    from supervisor.doctor import diagnose

    found = diagnose(root, env={"PATH": "/usr/bin:/bin", "HOME": str(root.parent)}, service_dirs=[])
    return {(f.profile, BY_CODE[f.code]) for f in found if f.code in BY_CODE and f.severity == "error"
            and f.profile is not None}


def export_refusals(root: Path) -> set[tuple[str, str]]:
    from supervisor.ops.export import ExportError, collect

    try:
        collect(root)
    except ExportError as exc:
        return set(re.findall(r"profile '([^']+)': (\w+):", str(exc)))
    return set()


def daemon_holds(root: Path) -> set[tuple[str, str]]:
    """The daemon's planner, fed what the daemon's reader reads, with every start answered at once."""
    planner = Planner(clock=lambda: 0.0, wall=lambda: 0.0, rng=random.Random(1))
    world = World(planner)
    world.run(planner.set_settings(Settings(policy=RestartPolicy(jitter=0.0)), None))
    served = [(n, Path(h)) for n, h in profiles_to_serve(True, root=root)]
    world.run(planner.set_served(served))
    salt = b"0123456789abcdef"
    for name, home in served:
        world.run(planner.set_facts(name, read_profile(name, home, salt)))
    world.run(planner.start())
    assert not world.problems, world.problems
    return {(n, p.hold.kind.value) for n, p in planner.profiles.items() if p.hold is not None}


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(trees)
def test_doctor_export_and_daemon_hold_the_same_profiles(tmp_path_factory, tree):
    named, default_env, default_cfg = tree
    root = tmp_path_factory.mktemp("tree") / "root"
    build(root, named, default_env, default_cfg)
    daemon = daemon_holds(root)
    assert daemon == doctor_holds(root) == export_refusals(root), (named, default_env, default_cfg)
    assert {k for _, k in daemon} <= {k.value for k in FILE_KINDS}


def test_the_comparison_sees_each_kind(tmp_path):
    """Each file-borne hold kind is produced by some tree, so the property above is not vacuous."""
    cases = {
        "config_error": ({"a": ("none", "broken")}, "none", "none"),
        "env_override": ({"a": ("max_starts", "none")}, "none", "none"),
        "credential_conflict": ({"a": ("token1", "none")}, "token1", "none"),
        "port_conflict": ({"a": ("none", "api")}, "none", "api"),
    }
    for kind, tree in cases.items():
        root = tmp_path / kind / "root"
        build(root, *tree)
        held = daemon_holds(root)
        assert any(k == kind for _, k in held), (kind, held)
        assert held == doctor_holds(root) == export_refusals(root)
