"""Traffic through real gateways, for tests and the serving benchmark (issue 34).

- :mod:`~tests.traffic.llm`: the model provider stand-in every profile's agent calls;
- :mod:`~tests.traffic.served`: profiles that serve upstream's API-server platform, one gateway each
  or all through one multiplexed gateway;
- :mod:`~tests.traffic.load`: steady requests to every profile, each recorded;
- :mod:`~tests.traffic.stats`: the figures those records give (pure);
- :mod:`~tests.traffic.sides`: hermesd, or upstream's multiplexed gateway, started on a fresh root;
- :mod:`~tests.traffic.faults`: what one profile suffers;
- :mod:`~tests.traffic.phases`: where "time to serve again" goes;
- :mod:`~tests.traffic.scenario`: one run of all that.

``test_serving.py`` is the full tier's short run; ``tests/benchmarks/serving.py`` runs the whole matrix.
"""
