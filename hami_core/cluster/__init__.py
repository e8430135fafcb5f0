"""Cluster state behind one interface (``ClusterStore``): embedded or real."""

from .base import ClusterStore, KubeObject
from .memory import Event, MemoryCluster

__all__ = ["ClusterStore", "Event", "KubeObject", "MemoryCluster"]
