"""Which file events matter: pure classification of changed paths."""

from pathlib import Path

from supervisor.watch.classify import classify, watched_dirs

ROOT = Path("/r")


def test_profile_files_and_folders():
    ev = classify(ROOT, ["/r/profiles/coder/.env", "/r/config.yaml", "/r/profiles/x/profile.yaml"])
    assert ev.profiles == {"coder", "default", "x"} and not ev.config
    assert ev.rescan  # an identity file under profiles/: the folder may have just become a profile
    assert not classify(ROOT, ["/r/config.yaml"]).rescan
    assert classify(ROOT, ["/r/profiles/new"]).rescan
    assert classify(ROOT, ["/r/profiles"]).rescan
    assert classify(ROOT, ["/r/hermesd.yaml"]).config


def test_noise_is_ignored():
    noise = [
        "/r/gateway.lock", "/r/state.db-wal", "/r/logs/gateway.log",
        "/r/.hermesd/state.json", "/r/.hermesd/logs/coder.log",
        "/r/profiles/coder/state/gateway.heartbeat", "/r/profiles/coder/sessions/x.json",
        "/r/profiles/coder/logs/config.yaml",  # a file named like a config, but not at a profile's top
        "/r/profiles/coder/logs/gateway_state.json",  # nor a gateway's state file
    ]
    assert not classify(ROOT, noise)


def test_gateway_state_files_are_reported_per_profile():
    ev = classify(ROOT, ["/r/gateway_state.json", "/r/profiles/coder/gateway.pid", "/r/profiles/coder/gateway.lock"])
    assert ev.states == {"default", "coder"} and not ev.profiles and not ev.rescan and not ev.config


def test_watched_dirs(tmp_path):
    (tmp_path / "profiles" / "a").mkdir(parents=True)
    dirs = watched_dirs(tmp_path, [tmp_path, tmp_path / "profiles" / "a", tmp_path / "profiles" / "gone"])
    assert dirs == sorted([tmp_path, tmp_path / "profiles", tmp_path / "profiles" / "a"])


def test_the_multiplex_default_lines_files():
    """Upstream's parking marker re-reads the profile; an identity file appearing in a folder under
    profiles/ may turn it into a profile (rescan); upstream's config-rewrite marker is its own event."""
    ev = classify(ROOT, ["/r/profiles/coder/gateway.parked"])
    assert ev.profiles == {"coder"} and not ev.rescan
    for name in ("SOUL.md", "auth.json", "config.yaml", ".env", "profile.yaml"):
        assert classify(ROOT, [f"/r/profiles/new/{name}"]).rescan, name
    assert not classify(ROOT, ["/r/profiles/coder/state.db"])  # SQLite rewrites it all the time
    assert not classify(ROOT, ["/r/SOUL.md", "/r/profiles/coder/logs/SOUL.md"])
    ev = classify(ROOT, ["/r/.multiplex_opt_out_rewritten"])
    assert ev.rewritten and bool(ev) and not ev.profiles


def test_upstreams_tombstones_are_watched(tmp_path):
    """``profiles/.deleted/NAME`` (upstream's delete) decides what is served: a change there is a rescan,
    and the folder is watched when it is a real folder, never through a link."""
    assert classify(ROOT, ["/r/profiles/.deleted/coder"]).rescan
    assert classify(ROOT, ["/r/profiles/.deleted"]).rescan
    assert not classify(ROOT, ["/r/profiles/coder/.deleted/x"]).rescan
    (tmp_path / "profiles" / ".deleted").mkdir(parents=True)
    assert tmp_path / "profiles" / ".deleted" in watched_dirs(tmp_path, [])
    (tmp_path / "profiles" / ".deleted").rmdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "profiles" / ".deleted").symlink_to(tmp_path / "elsewhere")
    assert watched_dirs(tmp_path, []) == [tmp_path, tmp_path / "profiles"]
