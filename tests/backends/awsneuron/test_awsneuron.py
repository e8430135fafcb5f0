"""AWS Neuron: requests, capacity inventory, core masks, contiguous ranges, bind
annotations, discovery and the pipeline. Expected values from HAMi 2.10
``pkg/device/awsneuron/device_test.go`` (``Test_MutateAdmission``, ``Test_GetNodeDevices``,
``Test_splitCoreRequest``, ``Test_graphSelect``, ``Test_PatchAnnotations``,
``TestDevices_Fit``)."""

from pathlib import Path

import pytest
from hami_awsneuron import bind, discover, fit, inventory, requests

from hami_core.errors import InvalidInputError
from hami_core.model import (
    ContainerDevice,
    DeviceRequest,
    DeviceUsage,
    NodeInfo,
    ReasonCode,
)
from hami_core.protocol.config import VendorConfig
from hami_core.protocol.devicelist import decode_pod_devices

from ..support import node, pipeline, pod

SAMPLES = Path(__file__).parent / "samples"


def ctr(**limits):
    keys = {"n": "aws.amazon.com/neuron", "cores": "aws.amazon.com/neuroncore"}
    return {"name": "main", "resources": {"limits": {keys[k]: v for k, v in limits.items()}}}


@pytest.mark.parametrize(
    ("limits", "count", "cores"),
    [
        ({"n": "1"}, 1, 100),
        ({"n": "3"}, 3, 100),
        ({"cores": "1"}, 1, 1),
        ({"cores": "2"}, 1, 2),
        ({"cores": "6"}, 3, 100),
    ],
)
def test_requests_split_cores_as_hami(limits, count, cores):
    req = requests.parse_request(ctr(**limits))
    assert (req.count, req.cores_pct) == (count, cores)


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        ({"cores": "3"}, "must be 1 or a multiple of 2, got 3"),
        ({"cores": "0"}, "aws.amazon.com/neuroncore must be greater than 0"),
        ({"cores": "-1"}, "aws.amazon.com/neuroncore"),
        ({"n": "0"}, "aws.amazon.com/neuron must be greater than 0"),
        ({"n": "2147483648"}, "aws.amazon.com/neuron"),
        ({"cores": "4294967296"}, "aws.amazon.com/neuroncore"),
    ],
)
def test_illegal_values_are_denied(limits, message):
    with pytest.raises(InvalidInputError, match=message):
        requests.parse_request(ctr(**limits))
    assert message in requests.mutate(ctr(**limits), "/spec/containers/0").denial


def test_inventory_from_capacity_as_hami_test():
    (d,) = inventory.node_devices(
        node(
            "test",
            capacity={"aws.amazon.com/neuron": "1", "aws.amazon.com/neuroncore": "2"},
            labels={"node.kubernetes.io/instance-type": "inf2"},
        )
    )
    assert (d.uuid, d.index, d.split_count, d.memory_mib, d.cores_pct, d.model) == (
        "test-AWSNeuron-0",
        0,
        2,
        0,
        3,
        "AWSNeuron",
    )
    assert d.info("AWSNodeType") == "inf2"
    assert inventory.node_devices(node("none")) is None


def usage_of(instance, used=(), n=16):
    devs = inventory.node_devices(
        node(
            "n",
            capacity={"aws.amazon.com/neuron": str(n), "aws.amazon.com/neuroncore": str(2 * n)},
            labels={"node.kubernetes.io/instance-type": instance},
        )
    )
    return [
        DeviceUsage(
            device=d,
            used_count=1 if d.index in used else 0,
            used_cores_pct=3 if d.index in used else 0,
        )
        for d in devs
    ]


@pytest.mark.parametrize(
    ("instance", "used", "count", "want"),
    [
        ("inf2", (), 16, list(range(16))),
        ("trn1", (7, 13), 8, None),
        ("trn1", (7,), 8, list(range(8, 16))),
        ("inf1", (5, 14), 8, list(range(6, 14))),
    ],
)
def test_contiguous_ranges_as_hami_graph_select(instance, used, count, want):
    usage = usage_of(instance, used)
    out = fit.fit(
        DeviceRequest(vendor="AWSNeuron", count=count, memory_pct=100, cores_pct=100),
        NodeInfo(name="n", devices=tuple(u.device for u in usage)),
        usage,
        {},
    )
    if want is None:
        assert not out.fits and out.node_reason is ReasonCode.NUMA_NOT_FIT
    else:
        assert [int(d.uuid.rsplit("-", 1)[1]) for d in out.devices] == want
        assert {d.cores_pct for d in out.devices} == {3}


def test_single_cores_pack_and_reasons():
    usage = usage_of("trn1", n=2)
    one = DeviceRequest(vendor="AWSNeuron", count=1, memory_pct=100, cores_pct=1)
    n = NodeInfo(name="n", devices=tuple(u.device for u in usage))
    first = fit.fit(one, n, usage, {})
    assert first.devices == (
        ContainerDevice(uuid="n-AWSNeuron-0", vendor="AWSNeuron", memory_mib=0, cores_pct=1),
    )
    usage[0] = DeviceUsage(device=usage[0].device, used_count=1, used_cores_pct=1)
    second = fit.fit(one, n, usage, {})
    assert second.devices[0].uuid == "n-AWSNeuron-0" and second.devices[0].cores_pct == 2
    both = DeviceRequest(vendor="AWSNeuron", count=1, memory_pct=100, cores_pct=2)
    whole = fit.fit(both, NodeInfo(name="n", devices=(usage[0].device,)), usage[:1], {})
    assert whole.summary(1) == "1/1 CardInsufficientCore"
    excluded = fit.fit(
        one,
        n,
        usage,
        {
            "metadata": {
                "annotations": {"aws.amazon.com/nouse-neuron-uuid": "n-AWSNeuron-0,n-AWSNeuron-1"}
            }
        },
    )
    assert excluded.summary(2) == "2/2 CardUuidMismatch"
    full = [DeviceUsage(device=u.device, used_count=2, used_cores_pct=3) for u in usage]
    assert fit.fit(one, n, full, {}).summary(2) == "2/2 CardTimeSlicingExhausted"


def test_bind_annotations_as_hami_patch_annotations():
    usage = usage_of("trn1", n=2)
    n = NodeInfo(name="trn-1", devices=tuple(u.device for u in usage))
    two = (
        tuple(
            ContainerDevice(uuid=f"n-AWSNeuron-{i}", vendor="AWSNeuron", memory_mib=0, cores_pct=3)
            for i in range(2)
        ),
    )
    out = bind.pod_annotations({"spec": {"containers": [ctr(n="2")]}}, n, two, clock_ns=lambda: 5)
    assert out == {
        "AWS_NEURON_IDS": "0,1",
        "NEURON_ALLOC_TIME": "5",
        "NEURON_ALLOCATED": "false",
        "aws.amazon.com/predicate-node": "trn-1",
    }
    cores = (
        (ContainerDevice(uuid="n-AWSNeuron-1", vendor="AWSNeuron", memory_mib=0, cores_pct=2),),
    )
    out2 = bind.pod_annotations({"spec": {"containers": [ctr(cores="1")]}}, n, cores)
    assert (
        out2["AWS_NEURON_IDS"] == "3"
        and out2["NEURON_RESOURCE_TYPE"] == "aws.amazon.com/neuroncore"
    )


def test_discovery_from_neuron_ls(monkeypatch):
    monkeypatch.setenv("NODE_NAME", "inf-7")
    devices = discover.discover(
        VendorConfig(), lambda argv: (SAMPLES / "neuron-ls.json").read_text()
    )
    assert [(d.uuid, d.split_count, d.cores_pct) for d in devices] == [
        (f"inf-7-AWSNeuron-{i}", 2, 3) for i in range(4)
    ]
    assert discover.discover(VendorConfig(), lambda argv: None) is None
    assert discover.discover(VendorConfig(), lambda argv: "{}") is None


def test_pipeline_devices_and_cores():
    n = node(
        "inf-1",
        capacity={"aws.amazon.com/neuron": "4", "aws.amazon.com/neuroncore": "8"},
        labels={"node.kubernetes.io/instance-type": "inf2.24xlarge"},
    )
    p = pipeline(n, backends=("awsneuron", "nvidia"))
    out = p.submit(pod("c", {"aws.amazon.com/neuroncore": "1"}))
    assert out.denied == "" and out.error == "" and out.node == "inf-1"
    ann = p.cluster.get_pod("default", "c")["metadata"]["annotations"]
    assert ann["AWS_NEURON_IDS"] == "0" and ann["aws.amazon.com/predicate-node"] == "inf-1"
    assert decode_pod_devices(ann["hami.io/aws-neuron-devices-allocated"])[0][0].cores_pct == 1
    assert out.envs["main"]["NEURON_RT_VISIBLE_CORES"] == "0"
    three = p.submit(pod("d", {"aws.amazon.com/neuron": "3"}))
    assert three.node == "inf-1"
    assert p.cluster.get_pod("default", "d")["metadata"]["annotations"]["AWS_NEURON_IDS"] == "1,2,3"
    odd = p.submit(pod("e", {"aws.amazon.com/neuroncore": "3"}))
    assert "multiple of 2" in odd.denied
    none_left = p.submit(pod("f", {"aws.amazon.com/neuron": "1"}))
    assert none_left.node is None


def test_quota_counts_devices():
    from ..support import quota

    n = node(
        "inf-1",
        capacity={"aws.amazon.com/neuron": "4", "aws.amazon.com/neuroncore": "8"},
        labels={"node.kubernetes.io/instance-type": "inf2.24xlarge"},
    )
    p = pipeline(n, backends=("awsneuron",))
    p.cluster.add_quota(quota("q", {"limits.aws.amazon.com/neuron": "2"}))
    assert p.submit(pod("a", {"aws.amazon.com/neuron": "2"})).node == "inf-1"
    assert (
        "limits.aws.amazon.com/neuron" in p.submit(pod("b", {"aws.amazon.com/neuron": "1"})).denied
    )


def inf_node(name="inf-1"):
    return node(
        name,
        capacity={"aws.amazon.com/neuron": "4", "aws.amazon.com/neuroncore": "8"},
        labels={"node.kubernetes.io/instance-type": "inf2.24xlarge"},
    )


def test_neuroncore_quota_counts_cores_not_masks():
    """A slice of core 1 carries mask 2 and a whole device mask 3: the quota charges 1
    and 2 cores (PROTOCOL.md §8: the resource's own unit), at fit and in usage."""
    from ..support import quota

    p = pipeline(inf_node(), backends=("awsneuron",))
    p.cluster.add_quota(quota("q", {"limits.aws.amazon.com/neuroncore": "4"}))
    one = {"aws.amazon.com/neuroncore": "1"}
    assert p.submit(pod("a", one)).node == "inf-1"
    # the second core of the same device: mask 2; as a mask sum this would charge 1 + 2
    assert p.submit(pod("b", one)).node == "inf-1"
    ann = p.cluster.get_pod("default", "b")["metadata"]["annotations"]
    (slice_b,) = decode_pod_devices(ann["hami.io/aws-neuron-devices-allocated"])[0]
    assert slice_b.cores_pct == 2
    # 2 cores used of 4: a whole device (2 cores, mask 3) still fits
    assert p.submit(pod("c", {"aws.amazon.com/neuron": "1"})).node == "inf-1"
    # 4 of 4: one more core is over the quota, at admission already
    over = p.submit(pod("d", one))
    assert "limits.aws.amazon.com/neuroncore" in over.denied


def test_neuroncore_quota_at_fit_time_counts_cores():
    """Admission lets a request through that fits the quota; fit charges the core count
    of each candidate slice (two whole devices are 4 cores, not masks 3 + 3 = 6)."""
    from ..support import quota

    p = pipeline(inf_node(), backends=("awsneuron",))
    p.cluster.add_quota(quota("q", {"limits.aws.amazon.com/neuroncore": "4"}))
    assert p.submit(pod("pair", {"aws.amazon.com/neuroncore": "4"})).node == "inf-1"
    assert (
        "limits.aws.amazon.com/neuroncore"
        in p.submit(pod("more", {"aws.amazon.com/neuroncore": "1"})).denied
    )


@pytest.mark.parametrize(
    ("case", "cores", "count", "per_device"),
    [
        ("single core takes one device", "1", 1, 1),
        ("a full device is one device", "2", 1, 2),
        ("whole devices divide evenly", "6", 3, 100),
        ("per-device cores above the addressable limit are bounded", "4", 2, 100),
        ("unknown per-device cores falls back to the addressable limit", "4", 2, 100),
    ],
)
def test_split_core_request(case, cores, count, per_device):
    """``device_test.go::Test_splitCoreRequest``, the case named: HAMi's
    ``(nums, coresreq)``; ``coresreq`` 2 of a request spanning devices is each device
    whole here (100), as HAMi's ``graphSelect`` path books every such device's whole core
    mask. Two addressable cores per device is fixed (HAMi's cap); HAMi's "device count
    stays within int32" case needs one core per device, which cannot arise here: the
    bound is 2^31 - 1 devices of 2 cores (``test_illegal_values_are_denied``)."""
    req = requests.parse_request(ctr(cores=cores))
    assert (req.count, req.cores_pct) == (count, per_device), case


@pytest.mark.parametrize(
    ("used_mask", "free_cores"),
    [(3, 0), (2, 1), (1, 1), (0, 2)],
)
def test_count_mask_available(used_mask, free_cores):
    """``device_test.go::Test_countMaskAvailable``: masks 3, 2, 1, 0 hold 2, 1, 1, 0
    cores, so a 2-core device with that mask held has 0, 1, 1, 2 cores free: a request of
    one more core than that is refused, one of that many takes the free cores."""
    device = usage_of("trn1", n=1)[0].device
    usage = DeviceUsage(device=device, used_count=1 if used_mask else 0, used_cores_pct=used_mask)
    for cores in (1, 2):
        taken = fit.take(
            usage, DeviceRequest(vendor="AWSNeuron", count=1, memory_pct=100, cores_pct=cores)
        )
        if cores > free_cores:
            assert taken is None
        else:
            assert taken is not None and taken & used_mask == 0 and bin(taken).count("1") == cores


def test_a_whole_device_books_both_cores():
    """Gap decided (docs/hami-go-tests.md "Decisions taken"): ``aws.amazon.com/neuron: 1``
    is HAMi's ``Coresreq`` 2 (``coresPerAWSNeuron``), i.e. both NeuronCores; the request
    here says "whole" (100) instead, and the device list carries the same booking HAMi's
    ``Fit`` writes: the whole core mask, 3 (``addCoreUsage``), so a later single core is
    refused on that device (``CardInsufficientCore``)."""
    usage = usage_of("trn1", n=1)
    n = NodeInfo(name="n", devices=(usage[0].device,))
    whole = fit.fit(requests.parse_request(ctr(n="1")), n, usage, {})
    assert [d.cores_pct for d in whole.devices] == [3]
    held = [DeviceUsage(device=usage[0].device, used_count=1, used_cores_pct=3)]
    core = fit.fit(requests.parse_request(ctr(cores="1")), n, held, {})
    assert core.summary(1) == "1/1 CardInsufficientCore"


@pytest.mark.parametrize(
    ("case", "pod_spec", "devices", "ids", "resource_type"),
    [
        (
            "neuron device",
            {"containers": [ctr(n="2")]},
            (("n-AWSNeuron-0", 3), ("n-AWSNeuron-1", 3)),
            "0,1",
            None,
        ),
        (
            "neuroncore device",
            {"containers": [ctr(cores="2")]},
            (("n-AWSNeuron-0", 3),),
            "0,1",
            "aws.amazon.com/neuroncore",
        ),
    ],
)
def test_patch_annotations(case, pod_spec, devices, ids, resource_type):
    """``device_test.go::Test_PatchAnnotations``, the case named: device indices for
    ``aws.amazon.com/neuron``; core indices (2 per device) and ``NEURON_RESOURCE_TYPE``
    for ``aws.amazon.com/neuroncore``. HAMi's ``aws.amazon.com/predicate-node`` copies
    ``hami.io/vgpu-node`` (empty in its test); here it names the node bound to."""
    usage = usage_of("trn1", n=2)
    n = NodeInfo(name="trn-1", devices=tuple(u.device for u in usage))
    entry = tuple(
        ContainerDevice(uuid=u, vendor="AWSNeuron", memory_mib=0, cores_pct=m) for u, m in devices
    )
    out = bind.pod_annotations({"spec": pod_spec}, n, (entry,))
    assert out["AWS_NEURON_IDS"] == ids, case
    assert out.get("NEURON_RESOURCE_TYPE") == resource_type
    assert out["aws.amazon.com/predicate-node"] == "trn-1"


def test_patch_annotations_init_container():
    """``Test_PatchAnnotations`` "init container neuron device": the init container's
    device comes first in the device list; the app container has none: ``AWS_NEURON_IDS``
    is ``0``."""
    usage = usage_of("trn1", n=2)
    n = NodeInfo(name="trn-1", devices=tuple(u.device for u in usage))
    devices = (
        (ContainerDevice(uuid="n-AWSNeuron-0", vendor="AWSNeuron", memory_mib=0, cores_pct=3),),
        (),
    )
    spec = {"initContainers": [ctr(n="1")], "containers": [{"name": "app"}]}
    assert bind.pod_annotations({"spec": spec}, n, devices)["AWS_NEURON_IDS"] == "0"
