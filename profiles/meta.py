"""``profile.yaml``: the small metadata file that sits next to a profile's ``config.yaml``.

Upstream keeps *about the profile* (a description, whether an LLM wrote it) apart from the
profile's behaviour (``config.yaml``); we read and write the same file with the same keys.
Unlike upstream, a malformed file is an error naming the file and line rather than being
silently treated as empty: a merge-write over a file we could not parse would destroy
whatever the user had in it. Keys we do not know are preserved on every write.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from profiles.errors import ProfileNotFoundError
from profiles.fileio import atomic_write_text, dump_yaml, load_yaml_mapping

META_FILE = "profile.yaml"


def meta_path(home: Path) -> Path:
    """``<home>/profile.yaml``."""
    return Path(home) / META_FILE


def read_profile_meta(home: Path) -> dict[str, Any]:
    """Every key of ``profile.yaml``, with ``description`` (str) and ``description_auto`` (bool) normalised.

    Missing file -> the two defaults. Malformed YAML -> :class:`ProfileConfigError`.
    """
    data = dict(load_yaml_mapping(meta_path(home)))
    data["description"] = str(data.get("description") or "").strip()
    data["description_auto"] = bool(data.get("description_auto", False))
    return data


def write_profile_meta(
    home: Path,
    *,
    description: str | None = None,
    description_auto: bool | None = None,
) -> dict[str, Any]:
    """Merge the given fields into ``profile.yaml`` atomically and return the new content.

    Only the fields passed are changed; every other key survives. The profile directory
    must already exist (writing would otherwise create a profile by accident).
    """
    home = Path(home)
    if not home.is_dir():
        raise ProfileNotFoundError(f"profile directory does not exist: {home}")
    path = meta_path(home)
    data: dict[str, Any] = dict(load_yaml_mapping(path))
    if description is not None:
        data["description"] = description.strip()
    if description_auto is not None:
        data["description_auto"] = bool(description_auto)
    atomic_write_text(path, dump_yaml(data))
    return data
