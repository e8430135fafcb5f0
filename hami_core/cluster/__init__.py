"""Cluster state behind one interface (``ClusterStore``, ``base``): embedded or real.

- ``memory``: ``MemoryCluster``, the embedded cluster of ``hami simulate`` and the tests.
- ``kube``: the API server through the ``kubernetes`` client, with list+watch caches
  (the scheduler, the webhook, the monitor); ``direct``: one node's agent, uncached;
  ``quotapods``: the webhook's, whose pods are watched only once a quota exists.
- ``events``: events written off the request thread and aggregated; ``lease``: leader
  election on a Lease; ``backoff``: retrying an unreachable API server.

Nothing above this package talks to the API server but through a ``ClusterStore``.
"""

from .base import ClusterStore, KubeObject
from .memory import Event, MemoryCluster

__all__ = ["ClusterStore", "Event", "KubeObject", "MemoryCluster"]
