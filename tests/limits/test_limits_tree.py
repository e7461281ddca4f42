"""The watch mechanism's pure decisions: tree membership, memory arithmetic, breaches, pace, nice."""

import math
from dataclasses import dataclass

import pytest

from supervisor.limits.tree import (
    Pace,
    TreeSample,
    build_trees,
    check_tree,
    is_hot,
    needs_exact,
    next_scan,
    nice_for_weight,
    summarize,
)
from supervisor.settings import Limits

M = 1 << 20


@dataclass(frozen=True)
class P:
    pid: int
    ppid: int
    start: int = 100
    threads: int = 1
    rss: int = 10 * M


def procs(*ps):
    return {p.pid: p for p in ps}


HERMESD = 50


def host():
    return procs(
        P(1, 0), P(2, 0), P(3, 2),  # init, kthreadd, a kernel thread
        P(HERMESD, 1),
        P(100, HERMESD), P(101, 100), P(102, 101),  # gateway a and two generations
        P(200, HERMESD), P(201, 200),  # gateway b
        P(300, HERMESD, start=150),  # a's escaped setsid helper, its parent died: now hermesd's
        P(301, 300, start=151),  # ... and its child
        P(400, 1, start=160),  # a tagged orphan adopted by init (adopted gateway case)
        P(500, 1),  # an unrelated process
    )


def test_parent_closure_and_tags():
    t = build_trees(host(), {"a": (100, 100), "b": (200, 100)}, {300: "a", 301: "a", 400: "b"}, exclude={HERMESD})
    assert t["a"][0] == 100 and sorted(t["a"]) == [100, 101, 102, 300, 301]
    assert t["b"][0] == 200 and sorted(t["b"]) == [200, 201, 400]


def test_parent_closure_wins_over_tags():
    """A kanban worker for profile b started by profile a's gateway carries a's tag by inheritance;
    even a wrong tag does not move a descendant to another tree."""
    t = build_trees(host(), {"a": (100, 100), "b": (200, 100)}, {102: "b"}, exclude={HERMESD})
    assert 102 in t["a"] and 102 not in t["b"]


def test_recycled_root_pid_yields_an_empty_tree():
    t = build_trees(host(), {"a": (100, 99)}, {}, exclude={HERMESD})
    assert t == {"a": []}


def test_tags_for_profiles_not_asked_for_are_ignored_and_hermesd_is_never_a_member():
    t = build_trees(host(), {"a": (100, 100)}, {400: "b", HERMESD: "a"}, exclude={HERMESD})
    assert HERMESD not in t["a"] and 400 not in t["a"] and set(t) == {"a"}


def test_dead_tagged_pid_is_skipped():
    assert build_trees(host(), {"a": (100, 100)}, {999: "a"}) == build_trees(host(), {"a": (100, 100)}, {})


def test_summarize_counts_threads_and_bounds_memory():
    members = [P(1, 0, threads=30, rss=80 * M), P(2, 1, threads=1, rss=80 * M), P(3, 1, threads=2, rss=5 * M)]
    s = summarize("a", members, [1, 2, 3], swap=3 * M)
    assert s.tasks == 33 and s.rss_sum == 168 * M and s.rss_max == 80 * M and not s.exact
    assert s.memory_bytes == 168 * M  # the upper bound while not measured
    e = summarize("a", members, [1, 2, 3], pss=90 * M)
    assert e.exact and e.memory_bytes == 90 * M
    # PSS below the largest RSS (pages shared with processes outside the tree): the floor wins
    assert summarize("a", members, [1, 2, 3], pss=60 * M).memory_bytes == 80 * M


def sample(tasks=10, rss_sum=100 * M, rss_max=80 * M, pss=None):
    return TreeSample("a", (1,), tasks, rss_sum, rss_max, pss)


def test_needs_exact_only_near_the_limit():
    lim = Limits(memory_max=200 * M)
    assert not needs_exact(sample(rss_sum=179 * M), lim)
    assert needs_exact(sample(rss_sum=180 * M), lim)
    assert not needs_exact(sample(rss_sum=500 * M, pss=100 * M), lim)
    assert not needs_exact(sample(rss_sum=10**12), Limits())


def test_memory_breach_only_on_exact_figures():
    lim = Limits(memory_max=200 * M)
    assert check_tree(sample(rss_sum=400 * M), lim) is None  # forked workers sharing pages: not judged
    assert check_tree(sample(rss_sum=400 * M, pss=150 * M), lim) is None
    b = check_tree(sample(rss_sum=400 * M, pss=201 * M), lim)
    assert b is not None and b.reason == "memory_limit" and b.value == 201 * M and b.limit == 200 * M
    assert "memory_max 200M" in b.describe()
    assert check_tree(sample(pss=200 * M), lim) is None  # at the limit is allowed, over is not


def test_tasks_breach_first():
    lim = Limits(memory_max=100 * M, tasks_max=50)
    assert check_tree(sample(tasks=50), lim) is None
    b = check_tree(sample(tasks=51, pss=500 * M), lim)
    assert b.reason == "tasks_limit" and b.value == 51 and "tasks_max 50" in b.describe()


def delay(cur, prev, lim, now=100.0, hot_until=-1.0):
    return next_scan(cur, prev, lim, now=now, hot_until=hot_until)[0]


def test_pace():
    lim = {"a": Limits(tasks_max=100, memory_max=1000 * M)}
    calm = {"a": sample(tasks=10, rss_sum=100 * M)}
    assert delay(calm, calm, lim) == Pace().base
    assert delay({"a": sample(tasks=50)}, calm, lim) == Pace().fast  # half the limit
    assert delay({"a": sample(tasks=20)}, calm, lim) == Pace().fast  # grew by 10
    assert delay({"a": sample(tasks=17)}, calm, lim) == Pace().base  # grew by 7 < 8
    assert delay({"a": sample(tasks=8)}, {"a": sample(tasks=1)}, lim) == Pace().fast  # doubled
    assert delay({"a": sample(tasks=3)}, {"a": sample(tasks=1)}, lim) == Pace().base  # by 2 only
    assert delay({"a": sample(rss_sum=800 * M)}, calm, lim) == Pace().fast  # 80 % of memory
    # exact and low: calm again even though RSS double counts
    assert not is_hot(sample(rss_sum=900 * M, pss=100 * M), None, lim["a"])
    assert next_scan(calm, {}, {"a": Limits(cpu_weight=50)}, now=0.0) == (None, -math.inf)  # nothing to watch
    assert delay({}, {}, lim) is None


def test_pace_hysteresis_holds_the_fast_pace_between_bursts():
    lim = {"a": Limits(tasks_max=100)}
    d, hot_until = next_scan({"a": sample(tasks=16)}, {"a": sample(tasks=8)}, lim, now=10.0)
    assert d == Pace().fast and hot_until == 10.0 + Pace().hold
    # a quiet scan between two bursts: still fast
    d, hot_until2 = next_scan({"a": sample(tasks=16)}, {"a": sample(tasks=16)}, lim, now=10.1, hot_until=hot_until)
    assert d == Pace().fast and hot_until2 == hot_until
    # quiet for longer than the hold: back to the base pace
    d, _ = next_scan({"a": sample(tasks=16)}, {"a": sample(tasks=16)}, lim, now=13.1, hot_until=hot_until)
    assert d == Pace().base


@pytest.mark.parametrize(("weight", "nice"), [(None, 0), (100, 0), (80, 1), (125, -1), (50, 3), (1, 19), (10000, -20)])
def test_nice_for_weight(weight, nice):
    assert nice_for_weight(weight) == nice
