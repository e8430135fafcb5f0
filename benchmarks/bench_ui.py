"""The web view at 1000 nodes x 8 GPUs: page weight, and the time to first render in
headless Chromium (Debian's package) against an empty cluster's page in the same run.

The page is built once from a synthetic cluster (``workload.preload``: about half of
every GPU's memory and compute held by 1-GPU pods, plus pending pods that fit nowhere)
and served by the web view's own app and server; Chromium (DevTools protocol,
``tests/browser.py``) opens it and reads the ``hami-painted`` mark the page's script
sets two animation frames after it drew the data: milliseconds from navigation start
to the first frame with every node, GPU and bar. Median of 3 loads each.

    .venv/bin/python benchmarks/bench_ui.py [--quick] [--nodes N]

The last line is the headline: render time at N nodes and the empty page's.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import statistics
import sys
import threading
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from workload import node_object, pod_object, preload  # noqa: E402

from hami_core.cluster.memory import MemoryCluster  # noqa: E402
from hami_core.defrag.sources import DefragInput  # noqa: E402
from hami_core.plugin import BackendManager  # noqa: E402
from hami_core.servers.keepalive import KeepAliveServer  # noqa: E402
from hami_core.ui.access import Gate  # noqa: E402
from hami_core.ui.app import ASSETS, make_app, read_asset  # noqa: E402
from hami_core.ui.page import build_page  # noqa: E402
from tests.browser import Browser  # noqa: E402

PENDING = 20


def cluster(nodes: int) -> DefragInput:
    """``nodes`` nodes of 8 GPUs about half allocated, and ``PENDING`` pods too large."""
    store = MemoryCluster()
    names = [f"node-{i:05}" for i in range(nodes)]
    for n in names:
        store.add_node(node_object(n))
    for p in preload(names, fill=0.5, seed=1):
        store.add_pod(p)
    rng = random.Random(3)
    pending = [
        pod_object(
            f"waiting-{i}",
            {"nvidia.com/gpu": "1", "nvidia.com/gpumem": str(90000 + rng.randrange(1000))},
            namespace=f"team-{i % 5}",
        )
        for i in range(PENDING if nodes else 0)
    ]
    return DefragInput(cluster=store, pending=tuple(pending))


def serve(page: dict) -> tuple[KeepAliveServer, str]:
    server = KeepAliveServer(
        make_app(lambda: page, Gate(require_token=False, reviews=None)),
        host="127.0.0.1",
        port=0,
    )
    threading.Thread(target=server.run, daemon=True).start()
    return server, f"http://127.0.0.1:{server.port}/"


def marks_ms(browser: Browser, url: str) -> tuple[float, float, float]:
    """Milliseconds from navigation start to the first frame with data (the first
    screenful of nodes), to the frame with every node drawn, and to the data fetched and
    parsed (before any of it is drawn)."""
    browser.open(url)
    browser.wait("document.body.dataset.complete", timeout_s=300)
    return tuple(  # type: ignore[return-value]
        float(browser.eval(f"performance.getEntriesByName('hami-{m}')[0].startTime"))
        for m in ("painted", "complete", "data")
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="100 nodes")
    parser.add_argument("--nodes", type=int, default=None)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    nodes = args.nodes or (100 if args.quick else 1000)
    manager = BackendManager.from_entry_points()
    read = cluster(nodes)
    t0, c0 = time.perf_counter(), time.process_time()
    full = build_page(read, manager, refresh_s=3600)
    build_s, build_cpu_s = time.perf_counter() - t0, time.process_time() - c0
    empty = build_page(cluster(0), manager, refresh_s=3600)
    t0 = time.perf_counter()
    data = json.dumps(full, separators=(",", ":")).encode()
    zipped = gzip.compress(data, 5)
    encode_s = time.perf_counter() - t0
    assets = sum(len(read_asset(name)) for name, _ in ASSETS.values())
    gpus = sum(len(n["gpus"]) for n in full["nodes"])
    servers = [serve(full), serve(empty)]
    try:
        with Browser(width=1280, height=900, timeout_s=300) as b:
            marks_ms(b, servers[1][1])  # warm the browser's caches once
            # a viewer's first poll after a reading encodes its answer (``encode_s``,
            # once per reading and viewer); the loads timed here find it encoded
            with urllib.request.urlopen(servers[0][1] + "api/view", timeout=300) as r:
                r.read()
            times: dict[str, list[tuple[float, float, float]]] = {"full": [], "empty": []}
            for _ in range(args.runs):
                times["empty"].append(marks_ms(b, servers[1][1]))
                times["full"].append(marks_ms(b, servers[0][1]))
            shown = b.eval("document.querySelectorAll('.gpu').length")
    finally:
        for server, _ in servers:
            server.close()
    assert shown == gpus, f"the page drew {shown} GPUs of {gpus}"
    first = {k: statistics.median(t[0] for t in v) for k, v in times.items()}
    whole = {k: statistics.median(t[1] for t in v) for k, v in times.items()}
    fetched = {k: statistics.median(t[2] for t in v) for k, v in times.items()}
    slices = sum(len(g["slices"]) for n in full["nodes"] for g in n["gpus"])
    print(
        f"cluster: {nodes} nodes, {gpus} GPUs, {slices} slices, {len(full['pending'])} "
        f"pending; load {os.getloadavg()[0]:.2f} ({os.cpu_count()} CPUs)"
    )
    print(
        f"page built on the server in {build_s:.1f} s, {build_cpu_s:.1f} s CPU (one scheduler "
        f"state and one top view per reading, each pending pod filtered against it; in the "
        f"background, once per refresh)"
    )
    print(
        f"page weight: assets {assets / 1024:.1f} KiB; data {len(data) / 1024:.0f} KiB, "
        f"gzip {len(zipped) / 1024:.0f} KiB; encoded in {encode_s:.2f} s (once per reading)"
    )
    for k in ("empty", "full"):
        runs = ", ".join(f"{a:.0f}/{b:.0f}" for a, b, _ in times[k])
        print(
            f"{k:5} page: data fetched and parsed {fetched[k]:.0f} ms, first render "
            f"{first[k]:.0f} ms, all nodes drawn {whole[k]:.0f} ms (median of {args.runs}; "
            f"runs first/all {runs})"
        )
    print(
        f"headline: first render at {nodes} nodes x 8 GPUs {first['full']:.0f} ms "
        f"(empty page {first['empty']:.0f} ms, +{first['full'] - first['empty']:.0f} ms; "
        f"target <= 1000 ms); every node drawn at {whole['full']:.0f} ms"
    )


if __name__ == "__main__":
    main()
