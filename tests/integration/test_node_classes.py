"""Fitting once per class of identical nodes (``scheduling/nodeclass.py``, issue #13):
the shared filter answers exactly what fitting every node on its own answers.

A hypothesis property runs the same pod stream through two schedulers over two copies
of one random cluster, one sharing fits between identical nodes and one fitting each
node alone, and compares every filter answer in full (feasible nodes, reasons, each
node's ``NodeFit`` with its devices, scores). The clusters mix nodes identical but for
their names and UUIDs (so classes form) with nodes that differ (memory, split, NUMA, a
cordoned or unhealthy GPU, UUIDs sorted in another order, link scores); the pods carry
the per-pod filters that must not be shared wrongly: a UUID filter naming one node's
GPU, type filters, NUMA binding, device and node policies, several containers. Pods are
bound as they go, so usage diverges and classes split.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hami_core.model import DeviceInfo, DeviceUsage, NodeInfo
from hami_core.scheduling import nodeclass
from hami_core.scheduling.bind import allocation_annotations
from hami_core.scheduling.scheduler import Scheduler
from tests.builders import cluster, container, gpu, manager, node, pod

SCHEDULER = "hami-scheduler"
NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)

# One GPU of a template: (memory MiB, split, numa, model)
gpus = st.tuples(
    st.sampled_from([16384, 40960]),
    st.sampled_from([2, 10]),
    st.integers(0, 1),
    st.sampled_from(["NVIDIA A100-PCIE-40GB", "NVIDIA T4"]),
)
templates = st.lists(st.lists(gpus, min_size=1, max_size=3), min_size=1, max_size=3)
# A node: (template, uuid style, quirk)
nodes = st.tuples(
    st.integers(0, 2),
    st.sampled_from(["ordered", "ordered", "reversed"]),
    st.sampled_from([None, None, None, None, None, "cordon", "unhealthy", "links"]),
)
requests = st.fixed_dictionaries(
    {"gpu": st.integers(1, 2)},
    optional={"gpumem": st.integers(1000, 30000), "gpucores": st.sampled_from([0, 30, 100])},
)
annotations = st.fixed_dictionaries(
    {},
    optional={
        "nvidia.com/use-gpuuuid": st.tuples(st.integers(0, 7), st.integers(0, 2)),
        "nvidia.com/nouse-gpuuuid": st.tuples(st.integers(0, 7), st.integers(0, 2)),
        "nvidia.com/use-gputype": st.sampled_from(["A100", "T4"]),
        "nvidia.com/nouse-gputype": st.sampled_from(["T4"]),
        "nvidia.com/numa-bind": st.sampled_from(["true", "false"]),
        "hami.io/gpu-scheduler-policy": st.sampled_from(["binpack", "spread", "topology-aware"]),
        "hami.io/node-scheduler-policy": st.sampled_from(["binpack", "spread"]),
    },
)
pods = st.lists(
    st.tuples(
        st.lists(requests, min_size=1, max_size=2), annotations, st.booleans(), st.integers(0, 9)
    ),
    min_size=1,
    max_size=10,
)


def uuids(name: str, count: int, style: str) -> list[str]:
    """The node's GPU UUIDs; ``reversed`` sorts them against index order."""
    return [f"GPU-{name}-{count - j if style == 'reversed' else j}" for j in range(count)]


def build(tpls: list[Any], specs: list[Any]) -> list[dict[str, Any]]:
    out = []
    for i, (t, style, quirk) in enumerate(specs):
        name = f"node-{i}"
        tpl = tpls[t % len(tpls)]
        ids = uuids(name, len(tpl), style)
        devices = [
            gpu(
                ids[j],
                index=j,
                memory_mib=m,
                split=s,
                numa=numa,
                model=model,
                healthy=not (quirk == "unhealthy" and j == 0),
            )
            for j, (m, s, numa, model) in enumerate(tpl)
        ]
        ann: dict[str, str] = {}
        if quirk == "cordon":
            ann["hami.io/device-cordon"] = ids[0]
        if quirk == "links" and len(ids) > 1:
            ann["hami.io/node-nvidia-score"] = json.dumps(
                [
                    {"uuid": a, "score": {b: 100 if k == 1 else 10 for k, b in enumerate(ids)}}
                    for a in ids
                ]
            )
        out.append(node(name, devices, annotations=ann))
    return out


def same(a: Any, b: Any) -> None:
    assert a.feasible == b.feasible
    assert dict(a.failed) == dict(b.failed)
    assert dict(a.fits) == dict(b.fits)
    assert dict(a.scores) == dict(b.scores)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(templates, st.lists(nodes, min_size=3, max_size=8), pods)
def test_the_class_shared_filter_answers_what_fitting_each_node_answers(tpls, specs, stream):
    objs = build(tpls, specs)
    m = manager()
    clusters = [cluster(*objs), cluster(*objs)]
    shared = Scheduler(clusters[0], m, clock=lambda: NOW)
    alone = Scheduler(clusters[1], m, clock=lambda: NOW, share_fits=False)
    for k, (reqs, ann, bind, delete) in enumerate(stream):
        wire = {}
        for key, value in ann.items():
            if isinstance(value, tuple):  # a UUID of one node of the cluster
                n, j = value
                _, style, _ = specs[n % len(specs)]
                tpl = tpls[specs[n % len(specs)][0] % len(tpls)]
                value = uuids(f"node-{n % len(specs)}", len(tpl), style)[j % len(tpl)]
            wire[key] = value
        body = pod(
            f"p{k}",
            *[container(f"c{i}", **r) for i, r in enumerate(reqs)],
            annotations=wire,
            scheduler_name=SCHEDULER,
        )
        body["metadata"]["uid"] = f"uid-{k}"  # the same uid in both copies
        added = [c.add_pod(json.loads(json.dumps(body))) for c in clusters]
        a, b = shared.filter(added[0]), alone.filter(added[1])
        same(a, b)
        best = b.best()
        if bind and best is not None:
            fit = b.fits[best]
            assert fit.allocation is not None
            wire = {
                key: v
                for key, v in allocation_annotations(fit.allocation, alone.manager, NOW).items()
                if v is not None
            }
            for c, p in zip(clusters, added, strict=True):
                c.bind_pod(
                    "default",
                    p["metadata"]["name"],
                    uid=p["metadata"]["uid"],
                    node=best,
                    annotations=wire,
                )
        if delete == 0 and k:
            for c in clusters:
                c.delete_pod("default", f"p{k - 1}")
        # the same pod again (its fit now memoised, shared ones relabelled when read)
        same(shared.filter(added[0]), alone.filter(added[1]))


def counting(monkeypatch: pytest.MonkeyPatch, m: Any) -> list[list[str]]:
    fitted: list[list[str]] = []
    real = m.fit_nodes

    def counted(request: Any, items: Any, **kw: Any) -> Any:
        fitted.append([n.name for n, _, _ in items])
        return real(request, items, **kw)

    monkeypatch.setattr(m, "fit_nodes", counted)
    return fitted


def fresh(n: int) -> list[dict[str, Any]]:
    return [node(f"node-{i}", [gpu(f"GPU-{i}-{j}", index=j) for j in range(4)]) for i in range(n)]


def test_identical_nodes_are_fitted_once_and_answered_each_in_its_own_names(monkeypatch):
    c, m = cluster(*fresh(20)), manager()
    fitted = counting(monkeypatch, m)
    sched = Scheduler(c, m)
    p = c.add_pod(pod("a", container(gpu=2, gpumem=1000), scheduler_name=SCHEDULER))
    result = sched.filter(p)
    assert len(result.feasible) == 20
    assert fitted == [["node-0"]]  # one node of the one class
    for i in range(20):
        alloc = result.fits[f"node-{i}"].allocation
        assert alloc is not None and alloc.node == f"node-{i}"
        assert {d.uuid for c_ in alloc.devices["NVIDIA"] for d in c_} <= {
            f"GPU-{i}-{j}" for j in range(4)
        }


def test_a_pod_naming_a_gpu_is_fitted_alone_on_that_node(monkeypatch):
    c, m = cluster(*fresh(6)), manager()
    fitted = counting(monkeypatch, m)
    sched = Scheduler(c, m)
    p = c.add_pod(
        pod(
            "a",
            container(gpu=1, gpumem=1000),
            annotations={"nvidia.com/use-gpuuuid": "GPU-3-2"},
            scheduler_name=SCHEDULER,
        )
    )
    result = sched.filter(p)
    assert result.feasible == ("node-3",)
    assert result.fits["node-3"].allocation.devices["NVIDIA"][0][0].uuid == "GPU-3-2"
    assert sorted(fitted[0]) == ["node-0", "node-3"]  # the class's first node, and node-3


def test_a_backend_without_the_declaration_is_fitted_node_by_node(monkeypatch):
    c, m = cluster(*fresh(5)), manager()
    fitted = counting(monkeypatch, m)
    sched = Scheduler(c, m)
    sched.engine.by_class = set()  # as for a backend that does not declare fit_by_node_class
    p = c.add_pod(pod("a", container(gpu=1, gpumem=1000), scheduler_name=SCHEDULER))
    assert len(sched.filter(p).feasible) == 5
    assert fitted == [[f"node-{i}" for i in range(5)]]


def test_the_signature_reads_every_field_of_the_model_types():
    for cls, names in nodeclass.CANON_FIELDS.items():
        assert tuple(f.name for f in attrs.fields(cls)) == names, cls.__name__


def test_nodes_differing_in_more_than_names_are_in_different_classes():
    def sig(info: NodeInfo, **usage: Any) -> Any:
        return nodeclass.node_signature(
            info, {d.uuid: DeviceUsage(device=d, **usage) for d in info.devices}
        )

    def info(name: str, ids: list[str], **dev: Any) -> NodeInfo:
        devices = tuple(
            DeviceInfo(uuid=u, vendor="NVIDIA", index=j, split_count=10, memory_mib=1000, **dev)
            for j, u in enumerate(ids)
        )
        return NodeInfo(name=name, devices=devices)

    a = info("node-a", ["GPU-a0", "GPU-a1"])
    assert sig(a) == sig(info("node-b", ["GPU-b0", "GPU-b1"]))
    assert sig(a) != sig(info("node-b", ["GPU-b1", "GPU-b0"]))  # another sort order
    assert sig(a) != sig(info("node-b", ["GPU-b0", "GPU-b1"], numa=1))
    assert sig(a) != sig(a, used_count=1)
    assert sig(a) != sig(attrs.evolve(a, cordoned_uuids=frozenset({"GPU-a0"})))
    assert sig(attrs.evolve(a, cordoned_uuids=frozenset({"GPU-a0"}))) != sig(
        attrs.evolve(a, cordoned_uuids=frozenset({"GPU-a1"}))
    )
    assert sig(info("node-a", ["node-a", "GPU-a1"])) is None  # a UUID equal to the name
    # a label inside another string is canonicalised too (here "a" inside "hami-core"):
    # such nodes differ from others, never wrongly equal
    assert sig(info("a", ["GPU-a0", "GPU-a1"])) != sig(info("b", ["GPU-b0", "GPU-b1"]))
    # a node whose devices pods hold part of is in no class (their annotations differ)
    assert sig(a, holders=({"x": "GPU-a0,NVIDIA,1000,0"},)) is None
    # a label inside a longer string is replaced by its position
    canon = nodeclass._Canon(("node-a", "GPU-a0"))
    assert canon("GPU-a0,NVIDIA") == canon_b("GPU-b0,NVIDIA")
    assert canon("GPU-a0,NVIDIA") != canon_b("GPU-b1,NVIDIA")


def canon_b(value: str) -> object:
    return nodeclass._Canon(("node-b", "GPU-b0", "GPU-b1"))(value)


def test_relabel_refuses_a_name_inside_a_longer_string():
    with pytest.raises(nodeclass.Unshareable):
        nodeclass.relabel(("GPU-a0 and more",), {"GPU-a0": "GPU-b0"})
    assert nodeclass.relabel(("GPU-a0", {"GPU-a1": 3}), {"GPU-a0": "x", "GPU-a1": "y"}) == (
        "x",
        {"y": 3},
    )


class _CountedText(str):
    """A pod's annotation text that counts the searches made in it."""

    searches = 0

    def __contains__(self, label: object) -> bool:
        type(self).searches += 1
        return super().__contains__(label)  # type: ignore[operator]


def test_a_large_annotation_is_not_searched_once_per_node_and_device():
    """Whether a pod's annotations mention a node (its name, a GPU's UUID) was a search
    of the whole text per label: a pod carrying 256 KiB of annotations (any key: its
    author's, or kubectl's last-applied-configuration) cost nodes x (GPUs + 1) full
    scans under the state lock, about 2.3 GB read at 1000 nodes of 8 GPUs. The answer
    stays the substring rule; only a label that can be in the text is searched."""
    from hami_core.scheduling.nodeclass import mentions

    uuids = [[f"GPU-{n:04d}{g}-5b1a-8d7e-2c44-0a9b3e6f1d21" for g in range(8)] for n in range(1000)]
    labels = [(f"node-{n}", *uuids[n]) for n in range(1000)]
    filler = ",".join(f"GPU-{i:08x}-0000-0000-0000-000000000000" for i in range(6400))
    text = _CountedText(f"a=x\nnvidia.com/nouse-gpuuuid={filler},{uuids[7][3]}\nb=node-12 ")
    assert len(text) > 256 * 1024
    found = [n for n, ls in enumerate(labels) if mentions(text, ls)]
    assert found == [1, 7, 12]  # "node-1" is in "node-12": a substring, as before
    assert _CountedText.searches < 300  # one per node and GPU: 8980 before
    for ls in labels[:50]:  # the same answers as a search per label
        assert mentions(text, ls) == any(str.__contains__(text, label) for label in ls)
