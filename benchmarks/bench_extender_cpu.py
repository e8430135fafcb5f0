"""CPU time of ``hami scheduler``'s extender per pod, in-process, as kube-scheduler
drives it at 1000 nodes: ``/filter`` with the candidate names kube-scheduler sends, then
``/bind`` of the one node answered, then the bound pod as the watch delivers it.

kube-scheduler 1.20 with ``nodeCacheCapable: true`` sends the pod and a window of node
names (``percentageOfNodesToScore``'s adaptive share: ``50 - nodes/125`` % of the nodes,
at least 100 names; ~420 at 1000 nodes), starting where the previous pod's window ended
(``nextStartNodeIndex``). Each request goes through the Flask app (``create_extender_app``
with ``filter_answer="best"``, as ``hami scheduler`` serves it), its body encoded as
kube-scheduler's JSON; the bind signs the allocation as ``--allocation-signing-key``
does. The cluster is a ``MemoryCluster`` of fresh nodes (as ``bench_pipeline`` makes
them), so the work measured is ours alone: no API server, no sockets.

A thread's own CPU time (``time.thread_time``) barely moves with load on other cores, so
two checkouts measured alternately in one sitting compare within a few percent.

    .venv/bin/python benchmarks/bench_extender_cpu.py [--nodes N] [--pods N]
        [--workload mixed|burst] [--profile FILE]
"""

from __future__ import annotations

import argparse
import cProfile
import datetime as dt
import json
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from workload import node_object, pod_object, pod_shape

from hami_core.cluster.memory import MemoryCluster
from hami_core.plugin import BackendManager
from hami_core.protocol.handshake import HandshakeState, encode_handshake, podresources_key
from hami_core.protocol.signature import AllocationSigner, generate_private_key_pem
from hami_core.scheduling.scheduler import Scheduler
from hami_core.servers.extender import create_extender_app
from hami_core.servers.scheduler_main import settle_gc

HANDSHAKE = "hami.io/node-handshake"


def names_sent(nodes: int) -> int:
    """How many names kube-scheduler 1.20 sends per pod (``numFeasibleNodesToFind``
    with ``percentageOfNodesToScore`` 0: adaptive ``50 - nodes/125`` %, at least 5 %,
    at least 100 nodes)."""
    if nodes < 100:
        return nodes
    pct = max(5, 50 - nodes // 125)
    return max(100, nodes * pct // 100)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--pods", type=int, default=300)
    ap.add_argument("--workload", choices=("mixed", "burst"), default="mixed")
    ap.add_argument("--profile", default="", help="write a cProfile of the stream here")
    args = ap.parse_args()

    store = MemoryCluster()
    answer = encode_handshake(HandshakeState.REPORTED, dt.datetime.now(dt.UTC))
    names = [f"bench-node-{i:04}" for i in range(args.nodes)]
    for name in names:
        node = node_object(name)
        node["metadata"]["annotations"][HANDSHAKE] = answer
        node["metadata"]["annotations"][podresources_key(HANDSHAKE)] = answer
        store.add_node(node)
    scheduler = Scheduler(store, BackendManager.from_entry_points())
    scheduler.binder.signer = AllocationSigner(generate_private_key_pem())
    app = create_extender_app(scheduler, filter_answer="best")
    client = app.test_client()
    settle_gc()

    rng = random.Random(1)
    window = names_sent(args.nodes)
    start = 0
    filter_cpu: list[float] = []
    bind_cpu: list[float] = []
    bound = 0
    profile = cProfile.Profile() if args.profile else None
    for i in range(args.pods):
        limits = (
            pod_shape(rng)
            if args.workload == "mixed"
            else {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8000"}
        )
        pod = store.add_pod(pod_object(f"bench-{i}", limits))
        sent = [names[(start + k) % len(names)] for k in range(window)]
        start = (start + window) % len(names)
        body = json.dumps({"Pod": pod, "Nodes": None, "NodeNames": sent}).encode()
        if profile:
            profile.enable()
        t0 = time.thread_time()
        reply = client.post("/filter", data=body, content_type="application/json")
        t1 = time.thread_time()
        if profile:
            profile.disable()
        filter_cpu.append(t1 - t0)
        answered = reply.get_json()["NodeNames"]
        if not answered:
            continue
        meta = pod["metadata"]
        bind = {
            "PodName": meta["name"],
            "PodNamespace": meta["namespace"],
            "PodUID": meta["uid"],
            "Node": answered[0],
        }
        if profile:
            profile.enable()
        t0 = time.thread_time()
        reply = client.post("/bind", data=json.dumps(bind), content_type="application/json")
        t1 = time.thread_time()
        if profile:
            profile.disable()
        bind_cpu.append(t1 - t0)
        if reply.get_json()["Error"] == "":
            bound += 1
    if profile:
        profile.dump_stats(args.profile)

    def line(what: str, values: list[float]) -> str:
        ordered = sorted(values)
        return (
            f"{what} CPU ms: p50 {statistics.median(ordered) * 1e3:.2f}, "
            f"p90 {ordered[int(0.9 * len(ordered))] * 1e3:.2f}, "
            f"mean {statistics.mean(ordered) * 1e3:.2f}"
        )

    print(
        f"nodes={args.nodes} names={window} pods={args.pods} workload={args.workload} bound={bound}"
    )
    print(line("  /filter", filter_cpu))
    print(line("  /bind", bind_cpu))


if __name__ == "__main__":
    main()
