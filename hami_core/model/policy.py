"""Scheduling policies (PROTOCOL.md §5, HAMi's ``*-scheduler-policy`` annotations)."""

from __future__ import annotations

import enum


class NodePolicy(enum.StrEnum):
    """How to rank feasible nodes: fill the busiest first, or the emptiest."""

    BINPACK = "binpack"
    SPREAD = "spread"


class DevicePolicy(enum.StrEnum):
    """How to choose devices inside a node."""

    BINPACK = "binpack"
    SPREAD = "spread"
    TOPOLOGY_AWARE = "topology-aware"
    NUMA = "numa"
