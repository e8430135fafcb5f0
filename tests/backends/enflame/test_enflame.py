"""Enflame: whole GCUs from capacity, DRS profiles from enflame.com/gcu-drs-capacity,
profile choice, bind annotations and the pipeline. Expected values from HAMi 2.10
``pkg/device/enflame`` (``device_test.go``: ``TestGetNodeDevices_DRSAnnotation``,
``TestFit_SelectProfileByRequest``, ``TestFit_SelectProfileByMemoryCoreRequest``,
``TestMutateAdmission_ByMemoryCoreAPI``, ``TestFit_ProfileNotFound``,
``TestPatchAnnotations_DRSFields``; ``gcu_test.go``)."""

import json

import pytest
from hami_enflame import fit, inventory, profiles, requests

from hami_core.errors import AnnotationError, InvalidInputError
from hami_core.model import (
    ContainerDevice,
    DevicePolicy,
    DeviceUsage,
    NodeInfo,
    ReasonCode,
)
from hami_core.protocol.devicelist import decode_pod_devices

from ..support import node, pipeline, pod, quota

#: HAMi's TestGetNodeDevices_DRSAnnotation value.
HAMI_DRS = '{"devices":[{"index":"0","minor":"0","capacity":6}],"profiles":{"1g.6gb":"0","3g.20gb":"1","6g.40gb":"2"}}'


def drs_node(name="node-a", value=HAMI_DRS):
    return node(name, annotations={"enflame.com/gcu-drs-capacity": value})


def test_drs_inventory_as_hami():
    (d,) = inventory.drs_gcus(drs_node())
    assert (d.uuid, d.vendor, d.memory_mib, d.split_count, d.info("minor")) == (
        "node-a-enflame-drs-0",
        "Enflame",
        40960,
        6,
        "0",
    )
    assert inventory.drs_gcus(node("none")) is None
    for bad in (
        "",
        '{"devices":[{"index":"0","capacity":6}],"profiles":{}}',
        '{"devices":[{"index":"0","capacity":0}],"profiles":{"1g.6gb":"0"}}',
    ):
        with pytest.raises(AnnotationError):
            inventory.drs_gcus(drs_node(value=bad))


def test_whole_gcus_from_capacity():
    devs = inventory.whole_gcus(node("g", capacity={"enflame.com/gcu": "2"}))
    assert [(d.uuid, d.split_count) for d in devs] == [("g-GCU-0", 1), ("g-GCU-1", 1)]


def ctr(**limits):
    keys = {
        "gcu": "enflame.com/gcu",
        "drs": "enflame.com/drs-gcu",
        "mem": "enflame.com/gcu-memory",
        "cores": "enflame.com/gcu-core",
    }
    return {
        "name": "pod-gcu-example1",
        "resources": {"limits": {keys[k]: v for k, v in limits.items()}},
    }


def run(limits, ann=None):
    devs = inventory.drs_gcus(drs_node())
    req = requests.parse_request(ctr(**limits))
    usage = [DeviceUsage(device=d) for d in devs]
    return fit.fit(
        req,
        NodeInfo(name="node-a", devices=tuple(devs)),
        usage,
        {"metadata": {"annotations": ann or {}}},
        DevicePolicy.SPREAD,
    )


def test_profile_by_slice_count_and_by_memory_core():
    by_size = run({"drs": "3"})
    assert (by_size.devices[0].memory_mib, by_size.devices[0].cores_pct) == (20480, 50)
    by_spec = run({"mem": "20480", "cores": "40"})  # MiB -> 20 GiB
    assert (by_spec.devices[0].memory_mib, by_spec.devices[0].cores_pct) == (20480, 50)
    gib = run({"mem": "7"})
    assert gib.devices[0].memory_mib == 20480  # the smallest profile with >= 7 GiB
    missing = run({"drs": "5"})
    assert not missing.fits and missing.device_reasons == {
        "node-a-enflame-drs-0": ReasonCode.MODE_NOT_FIT
    }
    excluded = run({"drs": "1"}, {"enflame.com/nouse-gpuuuid": "node-a-enflame-drs-0"})
    assert excluded.device_reasons == {"node-a-enflame-drs-0": ReasonCode.CARD_UUID_MISMATCH}


def test_profile_names():
    assert profiles.parse_name("3g.20gb") == (3, 20)
    assert profiles.parse_name("bad") == (0, 0)


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        ({"drs": "0"}, "enflame.com/drs-gcu must be greater than 0"),
        ({"mem": "0"}, "enflame.com/gcu-memory must be greater than 0"),
        ({"cores": "0"}, "must be in range (0,100]"),
        ({"cores": "101"}, "must be in range (0,100]"),
        ({"gcu": "0"}, "enflame.com/gcu must be greater than 0"),
        ({"drs": "1.5"}, "enflame.com/drs-gcu"),
    ],
)
def test_illegal_values_are_denied(limits, message):
    with pytest.raises(InvalidInputError, match=message.replace("(", r"\(").replace("]", r"\]")):
        requests.parse_request(ctr(**limits))
    assert message in requests.mutate(ctr(**limits), "/spec/containers/0").denial


def test_bind_annotations_as_hami_patch_annotations():
    devs = inventory.drs_gcus(drs_node())
    n = NodeInfo(name="node-a", devices=tuple(devs))
    slice_ = (
        (
            ContainerDevice(
                uuid="node-a-enflame-drs-0", vendor="Enflame", memory_mib=20480, cores_pct=50
            ),
        ),
    )
    out = fit.bind_annotations(
        {"spec": {"containers": [{"name": "pod-gcu-example1"}]}}, n, slice_, clock_ns=lambda: 9
    )
    assert out["enflame.com/gcu-assigned"] == "false"
    assert (
        out["enflame.com/gcu-assigned-index"] == "0"
        and out["enflame.com/gcu-assigned-minor"] == "0"
    )
    assert (
        out["enflame.com/gcu-request-size"] == "3" and out["enflame.com/gcu-assigned-time"] == "9"
    )
    assert json.loads(out["assigned-containers"]) == {
        "pod-gcu-example1": {
            "allocated": False,
            "request": 3,
            "profileID": "1",
            "profileName": "3g.20gb",
        }
    }


def test_pipeline_drs_and_whole_gcus():
    p = pipeline(
        drs_node(), node("gcu-1", capacity={"enflame.com/gcu": "1"}), backends=("enflame", "nvidia")
    )
    out = p.submit(pod("d", {"enflame.com/drs-gcu": "3"}))
    assert out.denied == "" and out.error == "" and out.node == "node-a"
    ann = p.cluster.get_pod("default", "d")["metadata"]["annotations"]
    (entry,) = decode_pod_devices(ann["hami.io/enflame-vgpu-devices-allocated"])
    assert (entry[0].memory_mib, entry[0].cores_pct) == (20480, 50)
    assert ann["enflame.com/gcu-request-size"] == "3"
    second = p.submit(pod("e", {"enflame.com/drs-gcu": "3"}))
    assert second.node == "node-a"
    third = p.submit(pod("f", {"enflame.com/drs-gcu": "1"}))
    assert third.node is None and "CardInsufficientMemory" in third.filter.failed["node-a"]
    g = p.submit(pod("g", {"enflame.com/gcu": "1"}))
    assert g.node == "gcu-1"
    assert p.submit(pod("h", {"enflame.com/gcu": "1"})).node is None


def test_quota_in_gib():
    p = pipeline(drs_node(), backends=("enflame",))
    p.cluster.add_quota(quota("q", {"limits.enflame.com/gcu-memory": "20"}))
    assert p.submit(pod("a", {"enflame.com/drs-gcu": "3"})).node == "node-a"
    # the profile (and so the charge) is known at fit: the quota stops it there
    over = p.submit(pod("b", {"enflame.com/drs-gcu": "1"}))
    assert over.node is None and "ResourceQuotaNotFit" in over.filter.failed["node-a"]
