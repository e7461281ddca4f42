#!/usr/bin/env python3
"""Regenerate ``docs/settings.md``, every hermesd.yaml key, from its declaration (``supervisor.settings``).

    python scripts/docs_settings.py           # rewrite docs/settings.md
    python scripts/docs_settings.py --check   # exit 1 when it is stale

``tests/test_docs.py`` runs the check, so a setting added or changed without a regenerated page fails
the suite.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SETTINGS_PAGE = REPO / "docs" / "settings.md"
INTRO = """\
# hermesd.yaml settings

Every key `<root>/hermesd.yaml` accepts; the file is optional and each key too. This page is generated
from the keys' one declaration (`supervisor/settings.py`), the same that the config reader, its error
messages and the defaults come from: after changing a setting, run `python scripts/docs_settings.py`
(`tests/test_docs.py` fails while it is stale). The [guide](guide.md#configuration-roothermesdyaml-optional)
explains how they work together, with examples.

*Where*: at the top level, under `profiles.NAME:` too (a profile's value beats the top level's; the
keys of a section such as `limits` merge key by key), and for the limits under `kanban.worker_limits:`
(each kanban worker's own, over its assignee's). *Restarts*: a change restarts the gateways it applies
to (which part of their settings carries it); any other change applies without a restart. A section's
keys are written nested: `restart.factor` is `restart: {factor: 2}`."""
WHERE = {"top": "top level", "top, profiles.NAME": "top level, `profiles.NAME`",
         "top, profiles.NAME, kanban.worker_limits": "top level, `profiles.NAME`, `kanban.worker_limits`",
         "profiles.NAME": "`profiles.NAME` only"}


def _yaml(value: object) -> str:
    if value is None or isinstance(value, bool):
        return "null" if value is None else str(value).lower()
    if isinstance(value, float) and value == int(value):
        return str(int(value))
    return "[]" if value == () else str(value)


def render() -> str:
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from supervisor.settings import SETTINGS, parse_bool, parse_count

    rows = ["| key | where | default | accepted | restarts | what it does |", "|---|---|---|---|---|---|"]
    for s in SETTINGS:
        accepted = s.accepts or ("a whole number" if s.parse is parse_count else "a number")
        if s.bound is not None:
            accepted += f" from {s.bound.span()}"
        elif s.parse is parse_bool:
            accepted = "true or false"
        rows.append(f"| `{s.key}` | {WHERE[s.scope]} | `{_yaml(s.default)}` | {accepted} | "
                    f"{s.restarts or 'no'} | {s.doc} |")
    return INTRO + "\n\n" + "\n".join(rows) + "\n"


if __name__ == "__main__":
    import docs_reference  # this folder: sys.path[0] when run as a script

    sys.exit(docs_reference.main(out=SETTINGS_PAGE, render=render, source="supervisor/settings.py"))
