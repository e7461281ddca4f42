"""Upstream's API-server platform as a health check sees it: its name and its health route.

``GET /v1/health`` needs no key; its aiohttp handler runs on the gateway's event loop and answers
``{"status": "ok", "platform": "hermes-agent", "version": …}`` (the same on 0.19.0, 0.20.1 and main after
0.21.3; ``/health`` and ``/p/<profile>/v1/health`` are aliases). When the profile's files enable the
platform, which port it listens on is the ``api_server`` rule of :mod:`profiles.upstream.platforms`.
"""

from __future__ import annotations

API_SERVER = "api_server"  # the platform's name in the registry and in gateway_state.json
API_HEALTH_PATH = "/v1/health"
API_HEALTH_STATUS = "ok"  # the answer's "status"
