"""Attack run (docs/threat-model.md): every annotation key any installed backend names,
filled with garbage of each shape below, on one node beside a good one. /filter and
/prioritize (the cache path and the Nodes-object path of nodeCacheCapable: false) must
answer 200 with the good node, and the scheduler's /metrics scrape must not fail.

    .venv/bin/python scripts/attack/garbage_nodes.py     # prints the failures; exit 1 if any
"""

import json
import pathlib
import re
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
from prometheus_client import generate_latest

from hami_core.scheduling.scheduler import Scheduler
from hami_core.servers.extender import create_extender_app
from hami_core.servers.metrics import SchedulerMetrics
from tests.builders import cluster, container, gpu, manager, node, pod
from tests.servers.test_extender import admitted, real_filter_args

keys = set()
ROOT = pathlib.Path(__file__).resolve().parents[2]
for f in (ROOT / "backends").glob("hami-*/hami_*/**/*.py"):
    if "/build/" in str(f):
        continue
    for m in re.finditer(r'"([a-z0-9.-]+\.(?:io|com|ai|cn)/[A-Za-z0-9._{}-]+)"', f.read_text()):
        k = m.group(1)
        if "{" not in k:
            keys.add(k)
m = manager()
for t in m.device_types():
    for k in (t.register_annotation, t.link_score_annotation, t.handshake_annotation):
        if k:
            keys.add(k)
SHAPES = {
    "obj": '{"a": 1}',
    "list-int": "[1]",
    "list-str": '["x"]',
    "list-null": "[null]",
    "nested": "[[[]]]",
    "dict-null": '[{"id": null, "uuid": null, "count": null}]',
    "neg": '[{"id":"X","count":-1,"devmem":-5,"devcore":-1}]',
    "huge": '[{"id":"X","count":' + "9" * 5000 + "}]",
    "deep": "[" * 5000 + "]" * 5000,
    "colon": "a,b,c:" * 10,
    "float": '[{"id":"X","count":1e400}]',
    "nul": "\x00" * 10,
    "bool": "true",
    "big-num": "9" * 20,
}
print(len(keys), "keys", len(SHAPES), "shapes", file=sys.stderr)
fails = []
for key in sorted(keys):
    for sname, value in SHAPES.items():
        bad = node("bad", [gpu("GPU-X")])
        bad["metadata"]["annotations"][key] = value
        c = cluster(node("good", [gpu("GPU-G")]), bad)
        try:
            sched = Scheduler(c, m)
            metrics = SchedulerMetrics(sched)
            app = create_extender_app(sched, is_leader=lambda: True).test_client()
            p = admitted(c, pod("p", container(gpu=1, gpumem=1000)))
            for path in ("/filter", "/prioritize"):
                args = real_filter_args(p, ["good", "bad"])
                r = app.post(path, json=args)
                if r.status_code != 200 or (
                    path == "/filter"
                    and (r.get_json()["Error"] or "good" not in r.get_json()["NodeNames"])
                ):
                    fails.append((key, sname, path, r.status_code, r.get_data()[:200]))
                # the Nodes-object path: a template node unknown to the cache
                args2 = dict(args)
                t = json.loads(json.dumps(bad))
                t["metadata"]["name"] = "template"
                g = json.loads(json.dumps(c.get_node("good")))
                args2["Nodes"] = {"items": [g, t]}
                args2["NodeNames"] = None
                r = app.post(path, json=args2)
                if r.status_code != 200 or (
                    path == "/filter"
                    and (r.get_json()["Error"] or "good" not in r.get_json()["NodeNames"])
                ):
                    fails.append((key, sname, path + "(Nodes)", r.status_code, r.get_data()[:200]))
            generate_latest(metrics.registry)
        except Exception as exc:
            fails.append((key, sname, "exception", type(exc).__name__, str(exc)[:200]))
for f in fails:
    print(f)
print("FAILS", len(fails))
sys.exit(1 if fails else 0)
