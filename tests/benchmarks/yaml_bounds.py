"""What the YAML bounds cost: the event walk that refuses deep or exploding documents before libyaml's
composer sees them, beside the composer itself, on upstream's own configuration and on larger files.

Run ``.venv/bin/python tests/benchmarks/yaml_bounds.py [--repeat N]``. CPU time of this process
(``time.process_time``), best of N, so other load on the machine inflates nothing but the wall
clock. Documents:

* upstream's default ``config.yaml`` (``hermes_cli.config.DEFAULT_CONFIG`` of the installed
  hermes-agent, written out by PyYAML, about 25 KB);
* that configuration repeated under new keys to 1, 2 and 5 MiB (no aliases). hermesd reads no
  profile file over 1 MiB (``MAX_PROFILE_FILE``), and stops the walk at 100,000 nodes
  (``MAX_YAML_NODES``), which the 1 MiB one stays under: the larger ones are measured with the
  budget lifted, to show the walk's cost grows with the file and nothing else;
* the nesting bombs of issue 33, 150,000 levels each way: the time to refuse them.
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from collections.abc import Callable
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from profiles import fileio
from profiles.errors import ProfileConfigError

F = Path("/bench/config.yaml")


def best(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.process_time()
        fn()
        times.append(time.process_time() - t)
    return min(times)


def documents() -> dict[str, str]:
    try:
        from hermes_cli.config import DEFAULT_CONFIG
    except ImportError:
        sys.exit("needs hermes-agent installed (the test extra has it)")
    one = yaml.safe_dump({"p0": DEFAULT_CONFIG}, sort_keys=False)
    docs = {"upstream default": yaml.safe_dump(DEFAULT_CONFIG, sort_keys=False)}
    for mib in (1, 2, 5):
        copies = (mib << 20) // len(one) + 1
        docs[f"{mib} MiB"] = yaml.safe_dump({f"p{i}": copy.deepcopy(DEFAULT_CONFIG) for i in range(copies)},
                                            sort_keys=False)
    return docs


def refuse(text: str) -> None:
    try:
        fileio.compose_yaml(text, F)[0].dispose()
    except ProfileConfigError:
        return
    raise AssertionError("not refused")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    loader = fileio._Loader
    print(f"loader {loader.__name__}, PyYAML {yaml.__version__}, Python {sys.version.split()[0]}; "
          f"CPU ms, best of {args.repeat}")
    print(f"{'document':<18} {'bytes':>9} {'events':>8} {'walk':>9} {'compose':>9} {'walk share':>10}")
    budget = fileio.MAX_YAML_NODES
    for name, text in documents().items():
        fileio.MAX_YAML_NODES = 10**9  # the whole file, whatever its size
        events = sum(1 for _ in yaml.parse(text, Loader=loader))
        walk = best(lambda t=text: fileio._check_events(t, F, loader), args.repeat)

        def compose(t: str = text) -> None:
            ldr = loader(t)
            try:
                ldr.get_single_node()
            finally:
                ldr.dispose()

        comp = best(compose, args.repeat)
        fileio.MAX_YAML_NODES = budget
        print(f"{name:<18} {len(text):>9,} {events:>8,} {walk * 1e3:>9.2f} {comp * 1e3:>9.2f} "
              f"{walk / (walk + comp):>10.0%}")
    deep = 150_000
    bombs = {"[[[ 150,000": "a: " + "[" * deep + "]" * deep, "{a: 150,000": "a: " + "{a: " * deep + "1" + "}" * deep,
             "- - 150,000": "a:\n" + "- " * deep + "x", "? ? 150,000": "? " * deep + "x"}
    for name, text in bombs.items():
        print(f"refuse {name:<11} {len(text):>9,} {'':>8} {best(lambda t=text: refuse(t), args.repeat) * 1e3:>9.3f}")


if __name__ == "__main__":
    main()
