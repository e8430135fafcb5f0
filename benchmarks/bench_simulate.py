"""How the engine scales: pods placed per second by `hami simulate`'s pipeline.

Prints, for clusters and workloads of growing size, the wall time per pod and its ratio
to the smallest run measured in the same process (the machines are noisy: compare the
ratios, not the seconds). A linear engine keeps the ratio near the growth of the
cluster, since each filter visits every node.

    .venv/bin/python benchmarks/bench_simulate.py
"""

from __future__ import annotations

import time

from hami_core.cluster import MemoryCluster
from hami_core.model import DeviceInfo
from hami_core.plugin import BackendManager
from hami_core.protocol import encode_inventory
from hami_core.simulate.pipeline import Pipeline


def cluster(nodes: int, gpus: int) -> MemoryCluster:
    c = MemoryCluster()
    for n in range(nodes):
        devices = [
            DeviceInfo(
                uuid=f"GPU-{n}-{g}",
                vendor="NVIDIA",
                model="NVIDIA A100-SXM4-80GB",
                index=g,
                split_count=10,
                memory_mib=81920,
                cores_pct=100,
                numa=g // 4,
            )
            for g in range(gpus)
        ]
        c.add_node(
            {
                "metadata": {
                    "name": f"node-{n:03}",
                    "annotations": {"hami.io/node-nvidia-register": encode_inventory(devices)},
                }
            }
        )
    return c


def pod(i: int) -> dict:
    mem = (2000, 4000, 8000, 16000)[i % 4]
    return {
        "metadata": {"name": f"p{i}", "namespace": "default"},
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "resources": {
                        "limits": {
                            "nvidia.com/gpu": "1",
                            "nvidia.com/gpumem": str(mem),
                            "nvidia.com/gpucores": "10",
                        }
                    },
                }
            ]
        },
    }


def run(nodes: int, pods: int, manager: BackendManager) -> float:
    p = Pipeline(cluster(nodes, 8), manager)
    t0 = time.perf_counter()
    placed = sum(p.submit(pod(i)).scheduled for i in range(pods))
    elapsed = time.perf_counter() - t0
    assert placed == pods, f"only {placed}/{pods} placed"
    return elapsed / pods


def main() -> None:
    manager = BackendManager.from_entry_points()
    sizes = [(10, 100), (30, 300), (100, 1000)]
    base = None
    print(f"{'nodes':>6} {'pods':>6} {'ms/pod':>8} {'ratio':>6}")
    for nodes, pods in sizes:
        per_pod = run(nodes, pods, manager)
        base = base or per_pod
        print(f"{nodes:>6} {pods:>6} {per_pod * 1000:>8.2f} {per_pod / base:>6.2f}")


if __name__ == "__main__":
    main()
