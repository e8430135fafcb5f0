"""HAMi 2.10 scheduling semantics a pod written for HAMi relies on (issue items 2-7)."""

import copy

import jsonpatch
import pytest

from hami_core.errors import ConfigError
from hami_core.model import DevicePolicy, DevicePolicyChain
from hami_core.scheduling.scheduler import Scheduler
from hami_core.servers.extender import create_extender_app
from tests.builders import cluster, container, gpu, manager, node, pipeline, pod
from tests.unit.test_admission import limits_of, patched, review

POLICY = "hami.io/gpu-scheduler-policy"


def _two_gpus(numa=(0, 0)):
    return node(
        "node-1",
        [gpu("GPU-0", index=0, numa=numa[0]), gpu("GPU-1", index=1, numa=numa[1])],
    )


def _gpus_of(out):
    return [d.uuid for c in out.allocation.devices["NVIDIA"] for d in c]


# -- item 2: mutex and ordered lists --------------------------------------------------


def test_mutex_takes_only_idle_devices():
    """HAMi ``pkg/device/nvidia/device_test.go::TestFit_MutexPolicy``: with one used and
    one idle GPU, mutex allocates the idle one; two cards cannot be had."""
    p = pipeline(_two_gpus())
    assert _gpus_of(p.submit(pod("busy", container(gpu=1, gpumem=100)))) == ["GPU-0"]
    one = p.submit(pod("m1", container(gpu=1, gpumem=100), annotations={POLICY: "mutex"}))
    assert _gpus_of(one) == ["GPU-1"]
    two = p.submit(pod("m2", container(gpu=1, gpumem=100), annotations={POLICY: "mutex"}))
    assert not two.scheduled
    assert two.filter.failed == {"node-1": "2/2 ExclusiveDeviceAllocateConflict"}


def test_mutex_with_binpack_still_avoids_used_devices():
    """Binpack alone would stack on the used GPU; ``mutex,binpack`` may not."""
    p = pipeline(_two_gpus())
    assert p.submit(pod("busy", container(gpu=1, gpumem=100))).scheduled
    plain = p.submit(pod("b", container(gpu=1, gpumem=100), annotations={POLICY: "binpack"}))
    assert _gpus_of(plain) == ["GPU-0"]
    m = p.submit(pod("mb", container(gpu=1, gpumem=100), annotations={POLICY: "mutex,binpack"}))
    assert _gpus_of(m) == ["GPU-1"]


def test_chain_spread_numa_breaks_ties_by_numa():
    """HAMi ``pkg/scheduler/policy/gpu_policy_test.go::TestDeviceUsageList_Less``, case
    "Chain spread,numa: score primary, numa tiebreak when scores equal": two empty GPUs,
    the one on the lower NUMA node comes first (here GPU-1 on NUMA 0)."""
    p = pipeline(_two_gpus(numa=(1, 0)))
    plain = p.submit(pod("s", container(gpu=1, gpumem=100), annotations={POLICY: "spread"}))
    assert _gpus_of(plain) == ["GPU-0"]
    p2 = pipeline(_two_gpus(numa=(1, 0)))
    chained = p2.submit(
        pod("sn", container(gpu=1, gpumem=100), annotations={POLICY: "spread,numa"})
    )
    assert _gpus_of(chained) == ["GPU-1"]


@pytest.mark.parametrize(
    ("value", "primary", "ties", "mutex"),
    [
        ("spread", DevicePolicy.SPREAD, (), False),
        ("mutex", DevicePolicy.SPREAD, (), True),
        # gpu_policy_test.go: "Chain mutex,spread: ... spread decides order"
        ("mutex,spread", DevicePolicy.SPREAD, (), True),
        (" binpack , numa ", DevicePolicy.BINPACK, (DevicePolicy.NUMA,), False),
        ("numa,spread,numa", DevicePolicy.NUMA, (DevicePolicy.SPREAD,), False),
    ],
)
def test_policy_lists_parse(value, primary, ties, mutex):
    chain = DevicePolicyChain.parse(value)
    assert (chain.primary, chain.tie_breaks, chain.mutex) == (primary, ties, mutex)


@pytest.mark.parametrize("value", ["fastest", "spread,fastest", ",", "spread;numa"])
def test_unknown_policy_tokens_are_denied_with_the_token(value):
    out = review(pod("p", container(gpu=1), annotations={POLICY: value}))
    assert not out.allowed and out.reason == "InvalidRequest"
    assert POLICY in out.message and ("mutex" in out.message or "names no policy" in out.message)


def test_lists_and_mutex_are_admitted():
    for value in ("mutex", "spread,numa", "mutex,spread", "binpack,topology-aware"):
        assert review(pod("p", container(gpu=1), annotations={POLICY: value})).allowed


def test_config_default_mutex_reaches_the_fit():
    """A cluster default of ``mutex`` (HAMi's ``defaultSchedulerPolicy``) applies to pods
    that name no policy."""
    p = pipeline(
        _two_gpus(), config={"defaultSchedulerPolicy": {"gpuSchedulerPolicy": "mutex,binpack"}}
    )
    assert _gpus_of(p.submit(pod("a", container(gpu=1, gpumem=100)))) == ["GPU-0"]
    assert _gpus_of(p.submit(pod("b", container(gpu=1, gpumem=100)))) == ["GPU-1"]
    assert not p.submit(pod("c", container(gpu=1, gpumem=100))).scheduled


def test_config_rejects_unknown_policy_tokens():
    with pytest.raises(ConfigError, match="gpuSchedulerPolicy: 'fast'"):
        manager({"defaultSchedulerPolicy": {"gpuSchedulerPolicy": "spread,fast"}})


# -- item 3: nvidia.com/vgpu-mode ------------------------------------------------------


def _mixed_modes():
    from hami_core.model import DeviceInfo, MigPlacement, MigProfile
    from hami_core.protocol import encode_inventory

    devs = [
        DeviceInfo(
            uuid="GPU-H",
            vendor="NVIDIA",
            model="A100",
            index=0,
            split_count=10,
            memory_mib=40000,
            cores_pct=100,
            mode="hami-core",
        ),
        DeviceInfo(
            uuid="GPU-M",
            vendor="NVIDIA",
            model="A100",
            index=1,
            split_count=10,
            memory_mib=40000,
            cores_pct=100,
            mode="mig",
            # a MIG GPU offers instances (HAMi 2.10 migProfiles); 10 x 1g.4gb here
            mig_profiles=(
                MigProfile(
                    name="1g.4gb",
                    memory_mib=4000,
                    cores_pct=10,
                    slice_count=1,
                    placements=tuple(MigPlacement(start=i, size=1) for i in range(10)),
                ),
            ),
        ),
    ]
    n = node("node-1", [])
    n["metadata"]["annotations"]["hami.io/node-nvidia-register"] = encode_inventory(devs)
    return n


def test_vgpu_mode_selects_devices_by_inventory_mode():
    """HAMi ``pkg/device/nvidia/device.go`` ``checkType``: a device whose mode the pod's
    ``nvidia.com/vgpu-mode`` does not list is a ``CardTypeMismatch``."""
    p = pipeline(_mixed_modes())
    mig = p.submit(
        pod("m", container(gpu=1, gpumem=100), annotations={"nvidia.com/vgpu-mode": "mig"})
    )
    assert _gpus_of(mig) == ["GPU-M"]
    p2 = pipeline(_mixed_modes())
    none = p2.submit(
        pod("x", container(gpu=2, gpumem=100), annotations={"nvidia.com/vgpu-mode": "mps"})
    )
    assert not none.scheduled
    assert none.filter.failed == {"node-1": "2/2 CardTypeMismatch"}
    either = p2.submit(
        pod(
            "y", container(gpu=1, gpumem=100), annotations={"nvidia.com/vgpu-mode": "hami-core,mig"}
        )
    )
    assert either.scheduled
    # ... but one container's GPUs are all in one mode (the device plugin serves a
    # container in one mode: docs/sharing-modes.md), so two GPUs are never one of each:
    # the two are two instances of the MIG GPU (a count on MIG GPUs is of instances, as
    # HAMi's isMIGRequest / Fit mean it) ...
    both = p2.submit(
        pod(
            "z", container(gpu=2, gpumem=100), annotations={"nvidia.com/vgpu-mode": "hami-core,mig"}
        )
    )
    assert _gpus_of(both) == ["GPU-M", "GPU-M"]
    # ... and a pod that does not accept mig gets no instance for its count
    shared_only = p2.submit(
        pod("s", container(gpu=2, gpumem=100), annotations={"nvidia.com/vgpu-mode": "hami-core"})
    )
    assert not shared_only.scheduled
    assert shared_only.filter.failed == {
        "node-1": "AllocatedCardsInsufficientRequest, 1/2 CardTypeMismatch"
    }


def test_vgpu_mode_unknown_token_is_denied():
    out = review(pod("p", container(gpu=1), annotations={"nvidia.com/vgpu-mode": "vgpu"}))
    assert not out.allowed and "nvidia.com/vgpu-mode" in out.message and "mig" in out.message


# -- item 4: gpumem-percentage 100 -----------------------------------------------------


@pytest.mark.parametrize("section", ["limits", "requests"])
def test_gpumem_percentage_100_without_cores_is_exclusive(section):
    c = {
        "name": "c",
        "resources": {section: {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "100"}},
    }
    p = pod("p", c)
    res = limits_of(patched(p, review(p)))
    assert res["limits"]["nvidia.com/gpucores"] == "100"
    sim = pipeline(node("node-1", [gpu("GPU-A")]))
    out = sim.submit(pod("p", copy.deepcopy(c)))
    assert out.allocation.devices["NVIDIA"][0][0].cores_pct == 100
    # exclusive like a count-only request: nobody may share it now
    assert not sim.submit(pod("q", container(gpu=1, gpumem=100))).scheduled


def test_gpumem_percentage_below_100_keeps_default_cores():
    p = pod("p", container(gpu=1, gpumem_percentage=50))
    assert limits_of(patched(p, review(p)))["limits"]["nvidia.com/gpucores"] == "0"


# -- item 5: limits written as annotations ---------------------------------------------


@pytest.mark.parametrize("key", ["nvidia.com/gpumem", "nvidia.com/gpucores", "nvidia.com/gpu"])
def test_limits_in_annotations_are_denied_naming_the_place(key):
    out = review(pod("p", container(gpu=1), annotations={key: "4000"}))
    assert not out.allowed and out.reason == "MisplacedLimits"
    assert key in out.message and "resources.limits" in out.message
    # also when the pod asks for nothing in its limits (nothing would be granted)
    bare = review(pod("q", container("c"), annotations={key: "1"}))
    assert not bare.allowed and key in bare.message


def test_other_annotations_pass():
    assert review(
        pod("p", container(gpu=1), annotations={"nvidia.com/use-gputype": "A100"})
    ).allowed


# -- item 6: nodeCacheCapable false ----------------------------------------------------


def _admitted(c, p):
    result = review(p, store=c)
    obj = jsonpatch.apply_patch(copy.deepcopy(p), list(result.patch)) if result.patch else p
    return c.add_pod(obj)


def test_full_nodes_of_cached_nodes_use_live_usage_and_quota():
    """kube-scheduler's default ``nodeCacheCapable: false`` sends full Node objects: a
    node the cache knows is answered with its live usage (a full GPU fails), an unknown
    template with zero usage."""
    c = cluster(node("n1", [gpu("GPU-1")]))
    sched = Scheduler(c, manager())
    client = create_extender_app(sched, is_leader=lambda: True).test_client()
    full = _admitted(c, pod("full", container(gpu=1, gpumem=16000)))
    assert sched.bind("default", "full", uid=full["metadata"]["uid"], node="n1") is not None
    p = _admitted(c, pod("p", container(gpu=1, gpumem=4000)))
    nodes = {"items": [c.get_node("n1"), node("template", [gpu("GPU-T")])]}
    body = client.post("/filter", json={"Pod": p, "Nodes": nodes}).get_json()
    assert body["NodeNames"] == ["template"]
    assert body["FailedNodes"] == {"n1": "1/1 CardInsufficientMemory"}
    c.add_quota(
        {
            "metadata": {"name": "q", "namespace": "default"},
            "spec": {"hard": {"limits.nvidia.com/gpumem": "17000"}},
        }
    )
    c2 = node("n1", [gpu("GPU-1", memory_mib=65536)])
    c.add_node(c2)
    body = client.post(
        "/filter", json={"Pod": p, "Nodes": {"items": [c.get_node("n1")]}}
    ).get_json()
    assert body["NodeNames"] == [] and "ResourceQuotaNotFit" in body["FailedNodes"]["n1"]


# -- item 7: node label selector and runtimeClassName ---------------------------------


def test_node_label_selector_keeps_other_nodes_out():
    """HAMi's ``--node-label-selector`` (``cmd/scheduler/main.go``): only labelled nodes
    are registered; the chart labels GPU nodes ``gpu=on``."""
    on = node("on", [gpu("GPU-1")])
    on["metadata"]["labels"] = {"gpu": "on"}
    off = node("off", [gpu("GPU-2")])
    c = cluster(on, off)
    sched = Scheduler(c, manager(), node_selector={"gpu": "on"})
    result = sched.filter(_admitted(c, pod("p", container(gpu=1, gpumem=100))))
    assert result.feasible == ("on",)
    assert result.failed == {"off": "NodeUnregistered (node labels do not match gpu=on)"}
    # a pod asking no devices is not ours to judge
    assert set(sched.filter(pod("cpu", container("c"))).feasible) == {"on", "off"}


def test_node_label_selector_flag_is_validated():
    from click.testing import CliRunner

    from hami_core.cli import cli

    out = CliRunner().invoke(cli, ["scheduler", "--node-label-selector", "gpu"])
    assert out.exit_code != 0 and "'gpu' is not key=value" in out.output


def test_runtime_class_name_set_for_nvidia_pods_when_configured():
    """HAMi ``pkg/device/nvidia/device.go`` ``MutateAdmission``: ``runtimeClassName`` is
    set on a pod that asks NVIDIA resources and names none itself."""
    cfg = {"nvidia": {"runtimeClassName": "nvidia"}}
    p = pod("p", container("a", gpu=1), container("b", gpu=1))
    out = patched(p, review(p, config=cfg))
    assert out["spec"]["runtimeClassName"] == "nvidia"
    own = pod("q", container(gpu=1))
    own["spec"]["runtimeClassName"] = "kata"
    assert patched(own, review(own, config=cfg))["spec"]["runtimeClassName"] == "kata"
    cpu = pod("r", container("c"))
    assert "runtimeClassName" not in patched(cpu, review(cpu, config=cfg))["spec"]
    assert "runtimeClassName" not in patched(p, review(p))["spec"]
