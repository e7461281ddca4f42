"""Upstream's own route functions, called on the same input as hermesd's, for differential tests.

In-process (hermes-agent 0.19.0 is installed in the test environment): ``parse`` and ``match``
are ``gateway.profile_routing``'s functions; ``load`` is ``gateway.config.load_gateway_config``
run against a real folder (``HERMES_HOME`` set for the call), so the choice between
config.yaml's two forms and the legacy ``gateway.json`` is upstream's too. Values are compared
with their types (``1``, ``True`` and ``1.0`` are different inputs and must stay different).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

routing = pytest.importorskip("gateway.profile_routing")


def typed(value: Any) -> Any:
    """A comparison key that keeps types apart (``True != 1 != 1.0``) and works for lists and dicts."""
    if isinstance(value, dict):
        return ("dict", tuple((typed(k), typed(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return (type(value).__name__, tuple(typed(v) for v in value))
    return (type(value).__name__, repr(value))


def route_key(route: Any) -> tuple[Any, ...] | None:
    """The fields both implementations keep, typed."""
    if route is None:
        return None
    return tuple(typed(getattr(route, f)) for f in ("name", "platform", "profile", "guild_id", "chat_id",
                                                     "thread_id", "enabled"))


def parse(raw: Any) -> list[Any]:
    """Upstream's ``parse_profile_routes`` (logging silenced)."""
    logging.disable(logging.CRITICAL)
    try:
        return routing.parse_profile_routes(raw)
    finally:
        logging.disable(logging.NOTSET)


def match(routes: list[Any], **source: Any) -> Any:
    return routing.match_profile_route(routes, **source)


@contextmanager
def _home(home: Path) -> Iterator[None]:
    old = os.environ.get("HERMES_HOME")
    os.environ["HERMES_HOME"] = str(home)
    logging.disable(logging.CRITICAL)
    try:
        yield
    finally:
        logging.disable(logging.NOTSET)
        if old is None:
            os.environ.pop("HERMES_HOME", None)
        else:
            os.environ["HERMES_HOME"] = old


def load(home: Path) -> list[Any] | BaseException:
    """``load_gateway_config().profile_routes`` for ``home``, or the exception upstream's loader raises."""
    from gateway.config import load_gateway_config

    with _home(home):
        try:
            return list(load_gateway_config().profile_routes)
        except Exception as exc:  # upstream raising is an outcome to compare, not a test error
            return exc
