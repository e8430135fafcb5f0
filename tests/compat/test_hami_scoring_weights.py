"""HAMi 2.10's ``hami.io/device-scoring-weights`` pod annotation, with HAMi's expected
values (Project-HAMi/HAMi at 4707fb02, ``pkg/util/device_scoring_weights_test.go``,
``pkg/scheduler/policy/gpu_policy_test.go``, ``pkg/scheduler/score_test.go``).

HAMi's test devices: GPU "a" holds 1 sharer, 90 % compute and 10 of 100 MiB; GPU "b"
7 sharers, 10 % and 20 MiB; 10 sharers each; the pod asks one GPU with 40 % of its
memory and no compute. Equal weights score a 16, b 15; ``memory=3`` a 26, b 27.
"""

from __future__ import annotations

import pytest

from hami_core.backend.fit import DeviceFilters, fit_devices, rank, weighted_score
from hami_core.errors import InvalidInputError, NotFoundError
from hami_core.model import (
    DevicePolicy,
    DeviceRequest,
    DeviceScoringWeights,
    DeviceUsage,
    NodeInfo,
)
from hami_core.protocol.topology import encode_link_scores
from hami_core.servers.extender import create_extender_app
from tests.builders import container, gpu, node, pipeline, pod

WEIGHTS = "hami.io/device-scoring-weights"
POLICY = "hami.io/gpu-scheduler-policy"
REQUEST = DeviceRequest(vendor="NVIDIA", count=1, memory_pct=40)


def _usage() -> list[DeviceUsage]:
    a = gpu("gpu-a", index=0, memory_mib=100, numa=0)
    b = gpu("gpu-b", index=1, memory_mib=100, numa=1)
    return [
        DeviceUsage(device=a, used_count=1, used_cores_pct=90, used_memory_mib=10),
        DeviceUsage(device=b, used_count=7, used_cores_pct=10, used_memory_mib=20),
    ]


# -- pkg/util/device_scoring_weights_test.go ------------------------------------------


@pytest.mark.parametrize(
    ("value", "want"),
    [
        ("slot=1,core=2,memory=3", DeviceScoringWeights(slot=1, core=2, memory=3)),
        (" memory = 3, slot = 1, core = 0 ", DeviceScoringWeights(slot=1, core=0, memory=3)),
    ],
)
def test_parse_device_scoring_weights(value, want):
    """``TestParseDeviceScoringWeights`` "valid ordered weights", "valid reordered weights
    and whitespace"."""
    assert DeviceScoringWeights.parse(value) == want


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("", "expected slot, core, and memory weights"),
        ("slot=1,memory=3", "expected slot, core, and memory weights"),
        ("slot=1,core,memory=3", "expected key=value entries"),
        ("slot=1,core=high,memory=3", '"core" weight must be an integer'),
        ("slot=1,core=-1,memory=3", '"core" weight must not be negative'),
        ("slot=1,bandwidth=2,memory=3", 'unknown weight "bandwidth"'),
        ("slot=1,slot=2,memory=3", 'duplicate "slot" weight'),
        ("slot=0,core=0,memory=0", "at least one weight must be positive"),
        # Go's ParseInt(s, 10, 64): no digit separators, no other digits, int64 only
        ("slot=1_0,core=1,memory=1", '"slot" weight must be an integer'),
        ("slot=\u0661,core=1,memory=1", '"slot" weight must be an integer'),
        ("slot=9223372036854775808,core=1,memory=1", '"slot" weight must be an integer'),
        ("slot=" + "9" * 5000 + ",core=1,memory=1", '"slot" weight must be an integer'),
    ],
)
def test_parse_device_scoring_weights_rejects(value, reason):
    """``TestParseDeviceScoringWeights``: every malformed case and HAMi's reason."""
    with pytest.raises(ValueError, match=reason):
        DeviceScoringWeights.parse(value)


def test_the_default_weights_are_equal():
    """``TestGetDeviceScoringWeightsByPod`` "missing annotation uses defaults"."""
    assert DeviceScoringWeights() == DeviceScoringWeights(slot=1, core=1, memory=1)
    assert DeviceFilters.from_annotations({}).weights is None  # our own order then
    read = DeviceFilters.from_annotations({WEIGHTS: "slot=1,core=2,memory=3"}).weights
    assert read == DeviceScoringWeights(slot=1, core=2, memory=3)


# -- pkg/scheduler/policy/gpu_policy_test.go::TestComputeScoreWithResourceWeights ------


@pytest.mark.parametrize(
    ("weights", "score_a", "score_b"),
    [
        (DeviceScoringWeights(), 16.0, 15.0),
        (DeviceScoringWeights(slot=1, core=1, memory=3), 26.0, 27.0),
        (DeviceScoringWeights(slot=1, core=3, memory=1), 34.0, 17.0),
    ],
)
def test_compute_score_with_resource_weights(weights, score_a, score_b):
    """``TestComputeScoreWithResourceWeights``: "default weights preserve current score"
    (16, 15), "memory weight changes the device preference" (26, 27), "core weight can
    independently change the device preference" (34, 17)."""
    a, b = _usage()
    assert weighted_score(a, REQUEST, weights) == score_a
    assert weighted_score(b, REQUEST, weights) == score_b


def test_weights_change_the_binpack_and_spread_order():
    """``TestComputeScoreWithResourceWeights``: with ``memory=3`` binpack takes gpu-b,
    spread gpu-a; with ``core=3`` binpack takes gpu-a."""
    mem3 = DeviceScoringWeights(slot=1, core=1, memory=3)
    core3 = DeviceScoringWeights(slot=1, core=3, memory=1)

    def first(policy, weights):
        return rank(_usage(), policy, request=REQUEST, weights=weights)[0].device.uuid

    assert first(DevicePolicy.BINPACK, mem3) == "gpu-b"
    assert first(DevicePolicy.SPREAD, mem3) == "gpu-a"
    assert first(DevicePolicy.BINPACK, core3) == "gpu-a"


def test_numa_binding_stays_ahead_of_the_weighted_score():
    """``TestComputeScoreWithResourceWeights`` "NUMA ordering remains independent from
    weighted score": with NUMA binding, gpu-a (NUMA 0) although gpu-b scores higher."""
    filters = DeviceFilters.from_annotations(
        {WEIGHTS: "slot=1,core=1,memory=3", "nvidia.com/numa-bind": "true"},
        numa_bind=("nvidia.com/numa-bind",),
    )
    assert filters.numa_bind and filters.weights is not None
    out = fit_devices(REQUEST, NodeInfo(name="n"), _usage(), filters, DevicePolicy.BINPACK)
    assert [d.uuid for d in out.devices] == ["gpu-a"]


# -- pkg/scheduler/score_test.go: through admission, filter and bind ------------------


def _weighted_node(link_scores=None):
    cards = [gpu("gpu-a", index=0, memory_mib=100), gpu("gpu-b", index=1, memory_mib=100)]
    ann = {"hami.io/node-nvidia-score": encode_link_scores(link_scores)} if link_scores else None
    return node("node1", cards, annotations=ann)


def _load(p):
    """HAMi's usage on the two GPUs, by pods our scheduler placed."""
    held = [("gpu-a", 10, 90)] + [("gpu-b", 2, 1)] * 6 + [("gpu-b", 8, 4)]
    for i, (uuid, mem, cores) in enumerate(held):
        filler = pod(
            f"held-{i}",
            container(gpu=1, gpumem=mem, gpucores=cores),
            annotations={"nvidia.com/use-gpuuuid": uuid},
        )
        assert p.submit(filler).scheduled, uuid


def _chosen(p, name, annotations, init=None):
    out = p.submit(
        pod(
            name,
            container("app", gpu=1, gpumem_percentage=40) if init is None else container("app"),
            annotations=annotations,
            init=init,
        )
    )
    assert out.scheduled, out
    lists = out.allocation.devices["NVIDIA"]
    return [[d.uuid for d in c] for c in lists]


@pytest.mark.parametrize(
    ("weights", "want"), [(None, "gpu-a"), ("slot=1,core=1,memory=3", "gpu-b")]
)
def test_calc_score_uses_pod_device_scoring_weights(weights, want):
    """``TestCalcScoreUsesPodDeviceScoringWeights``: binpack takes gpu-a under equal
    weights, gpu-b with ``slot=1,core=1,memory=3``. (Without the annotation HAMi's equal
    weights and our binpack rule agree here: gpu-a is the tighter fit.)"""
    p = pipeline(_weighted_node())
    _load(p)
    ann = {POLICY: "binpack", **({WEIGHTS: weights} if weights else {})}
    assert _chosen(p, "weighted-score", ann) == [[want]]


@pytest.mark.parametrize(
    ("weights", "want"), [(None, "gpu-a"), ("slot=1,core=1,memory=3", "gpu-b")]
)
def test_calc_score_uses_pod_device_scoring_weights_for_init_containers(weights, want):
    """``TestCalcScoreUsesPodDeviceScoringWeightsForInitContainers``: the init container's
    GPU follows the weights the same way; the app container asks none (empty entry)."""
    p = pipeline(_weighted_node())
    _load(p)
    ann = {POLICY: "binpack", **({WEIGHTS: weights} if weights else {})}
    init = [container("init", gpu=1, gpumem_percentage=40)]
    assert _chosen(p, "weighted-init-score", ann, init=init) == [[want], []]


@pytest.mark.parametrize(
    ("weights", "want"), [(None, "gpu-b"), ("slot=1,core=1,memory=3", "gpu-a")]
)
def test_calc_score_uses_device_scoring_weights_as_topology_tie_breaker(weights, want):
    """``TestCalcScoreUsesDeviceScoringWeightsAsTopologyTieBreaker``: equal link scores,
    so topology-aware keeps its precedence and the spread order breaks the tie: gpu-b
    under equal weights, gpu-a with ``memory=3``."""
    p = pipeline(_weighted_node({"gpu-a": {"gpu-b": 1}, "gpu-b": {"gpu-a": 1}}))
    _load(p)
    ann = {POLICY: "topology-aware", **({WEIGHTS: weights} if weights else {})}
    assert _chosen(p, "topology-score-tie", ann) == [[want]]


@pytest.mark.parametrize(
    "value",
    ["slot=1,core=-1,memory=3", "slot=1,memory=3", "slot=0,core=0,memory=0", "slot=x"],
)
def test_a_malformed_weights_annotation_is_denied_at_admission(value):
    """``TestCalcScoreRejectsInvalidDeviceScoringWeights``: HAMi refuses to schedule the
    pod (``"core" weight must not be negative``); here the tenant learns it at admission,
    the message naming the annotation and the value, and nothing is placed."""
    p = pipeline(_weighted_node())
    out = p.submit(pod("bad", container(gpu=1, gpumem=10), annotations={WEIGHTS: value}))
    assert out.denied and WEIGHTS in out.denied and repr(value) in out.denied
    assert not out.scheduled
    with pytest.raises(NotFoundError):  # denied: never stored
        p.cluster.get_pod("default", "bad")


def test_a_malformed_weights_annotation_fails_the_filter_too():
    """A pod that reaches the scheduler without the webhook (a webhook outage, the
    annotation written later) is refused at ``/filter`` as HAMi refuses it: the error
    names the annotation and HAMi's reason, no node is feasible, and nothing is written."""
    p = pipeline(_weighted_node())
    bad = pod("bad", container(gpu=1, gpumem=10), annotations={WEIGHTS: "slot=1,core=-1,memory=3"})
    bad["metadata"]["uid"] = "uid-bad"
    bad["spec"]["schedulerName"] = "hami-scheduler"
    with pytest.raises(InvalidInputError, match='"core" weight must not be negative'):
        p.scheduler.filter(bad)
    client = create_extender_app(p.scheduler, is_leader=lambda: True).test_client()
    body = client.post("/filter", json={"Pod": bad, "NodeNames": ["node1"]}).get_json()
    assert WEIGHTS in body["Error"] and '"core" weight must not be negative' in body["Error"]
    assert not body.get("NodeNames")
