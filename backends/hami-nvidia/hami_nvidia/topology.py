"""Link scores between a node's GPUs (PROTOCOL.md §2, ``hami.io/node-nvidia-score``).

Score of a pair: NVLink with k active links 100*k; otherwise by the closest common PCIe
ancestor (``nvmlDeviceGetTopologyCommonAncestor``): same board 60, one PCIe switch 50,
several switches 40, same host bridge 30, same CPU / NUMA node 20, across CPUs 10.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from .nvml import (
    TOPOLOGY_HOSTBRIDGE,
    TOPOLOGY_INTERNAL,
    TOPOLOGY_MULTIPLE,
    TOPOLOGY_NODE,
    TOPOLOGY_SINGLE,
    NvmlGpu,
    normalise_bus_id,
)

NVLINK_SCORE_PER_LINK = 100
PCIE_SCORES: Mapping[int, int] = {
    TOPOLOGY_INTERNAL: 60,
    TOPOLOGY_SINGLE: 50,
    TOPOLOGY_MULTIPLE: 40,
    TOPOLOGY_HOSTBRIDGE: 30,
    TOPOLOGY_NODE: 20,
}
ACROSS_CPUS_SCORE = 10


def pcie_score(level: int) -> int:
    """Score of a ``nvmlGpuTopologyLevel_t``; anything farther than a NUMA node: 10."""
    return PCIE_SCORES.get(level, ACROSS_CPUS_SCORE)


def link_scores(
    gpus: Sequence[NvmlGpu],
    *,
    common_ancestor: Callable[[int, int], int],
    nvlink_peers: Callable[[int], Mapping[str, int]],
) -> dict[str, dict[str, int]]:
    """``{uuid: {other_uuid: score}}`` for every ordered pair of distinct GPUs.

    Args:
        gpus: the GPUs to score.
        common_ancestor: NVML topology level of two GPU indexes.
        nvlink_peers: per GPU index, normalised peer bus id -> active link count.
    """
    by_bus = {normalise_bus_id(g.bus_id): g for g in gpus}
    links: dict[tuple[str, str], int] = {}
    for g in gpus:
        for bus, count in nvlink_peers(g.index).items():
            peer = by_bus.get(bus)
            if peer is not None and peer.uuid != g.uuid:
                links[(g.uuid, peer.uuid)] = count
    out: dict[str, dict[str, int]] = {g.uuid: {} for g in gpus}
    for a in gpus:
        for b in gpus:
            if a.uuid == b.uuid:
                continue
            count = max(links.get((a.uuid, b.uuid), 0), links.get((b.uuid, a.uuid), 0))
            if count:
                out[a.uuid][b.uuid] = NVLINK_SCORE_PER_LINK * count
            else:
                out[a.uuid][b.uuid] = pcie_score(common_ancestor(a.index, b.index))
    return out
