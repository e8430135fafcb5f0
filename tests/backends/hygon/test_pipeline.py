"""Webhook -> filter -> bind -> allocate for DCU pods on an embedded cluster, with nodes
carrying the inventory HAMi's dcu-vgpu-device-plugin writes (``hami.io/node-dcu-register``,
legacy ``id,count,devmem,devcore,type,numa,health:`` form)."""

from pathlib import Path

import pytest
from hami_hygon import discover, plugin

from hami_core.cluster import MemoryCluster
from hami_core.protocol import encode_inventory
from hami_core.protocol.devicelist import decode_pod_devices
from hami_core.simulate.pipeline import Pipeline
from hami_core.testing import section
from tests import builders
from tests.backends.support import only

from .support import FakeHySmi, make_sysfs

#: What HAMi's dcu-vgpu-device-plugin registers (register.go: Count 4, Devcore 100,
#: Type "DCU-<DevTypeName>", EncodeNodeDevices' 7-field form).
HAMI_LEGACY = "DCU-SN0,4,65520,100,DCU-K100_AI,0,true:DCU-SN1,4,65520,100,DCU-K100_AI,0,true:"


def dcu_node(name, register):
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "annotations": {"hami.io/node-dcu-register": register}},
        "status": {"allocatable": {"hygon.com/dcunum": "8"}},
    }


def dcu_pod(name, count=None, mem=None, cores=None, annotations=None):
    limits = {}
    for key, value in (("dcunum", count), ("dcumem", mem), ("dcucores", cores)):
        if value is not None:
            limits[f"hygon.com/{key}"] = str(value)
    main = {"name": "main", "image": "busybox", "resources": {"limits": limits}}
    return builders.pod(name, main, annotations=annotations)


def pipeline(*nodes, config=None, backends=("hygon",)):
    cluster = MemoryCluster()
    for n in nodes:
        cluster.add_node(n)
    return Pipeline(cluster, only(*backends, config=config))


@pytest.fixture
def real_node(tmp_path, hy_smi):
    """A node registered from our own discovery of the recorded hy-smi samples, with the
    hooks' sysfs and vDCU directory under ``tmp_path``."""
    sysfs = make_sysfs(
        tmp_path / "sys",
        {
            "0000:9f:00.0": (1, 0),
            "0000:56:00.0": (2, 0),
            "0000:5d:00.0": (3, 1),
            "0000:05:00.0": (4, 1),
        },
    )
    options = {"sysfsPath": str(sysfs), "vdevPath": str(tmp_path / "vdev")}
    found = discover.discover(section(plugin, options=options), FakeHySmi("k100"), sysfs=sysfs)
    assert found is not None
    return dcu_node("dcu-1", encode_inventory(found)), {"hygon": options}


def test_the_handbook_pod_is_admitted_placed_annotated_and_allocated(real_node, tmp_path):
    node, config = real_node
    p = pipeline(node, config=config)
    out = p.submit(dcu_pod("dcu-inference", count=1, mem=2000, cores=60))
    assert out.denied == "" and out.error == "" and out.node == "dcu-1"
    stored = p.cluster.get_pod("default", "dcu-inference")
    ann = stored["metadata"]["annotations"]
    [[chosen]] = decode_pod_devices(ann["hami.io/dcu-devices-allocated"])
    assert decode_pod_devices(ann["hami.io/dcu-devices-to-allocate"]) == ((),)  # answered
    assert (chosen.vendor, chosen.memory_mib, chosen.cores_pct) == ("DCU", 2000, 60)
    assert out.envs["main"] == {"HIP_VISIBLE_DEVICES": "0"}
    # On the node, Allocate gets the discovered DCUs and names the vDCU file for the one
    # the scheduler chose, which the device plugin writes (simulate knows only the
    # inventory, so it names none).
    assert not (tmp_path / "vdev").exists()
    discovered = discover.discover(
        p.manager.vendor_config("hygon"),
        FakeHySmi("k100"),
        sysfs=Path(config["hygon"]["sysfsPath"]),
    )
    spec = stored["spec"]["containers"][0]
    res = p.manager.allocate("DCU", stored, spec, (chosen,), node_devices=discovered)
    index = next(d.index for d in discovered if d.uuid == chosen.uuid)
    [(path, conf)] = res.files.items()
    assert Path(path).parent.name.endswith(f"_main_{index}") and path.startswith(str(tmp_path))
    assert "mem: 2000 MiB" in conf and "cu_count: 72" in conf


def test_default_cores_make_a_dcu_exclusive(real_node):
    node, config = real_node
    p = pipeline(node, config=config)
    outs = [p.submit(dcu_pod(f"p{i}", count=1, mem=1000)) for i in range(5)]
    assert [o.scheduled for o in outs] == [True] * 4 + [False]
    # each DCU has all its compute taken (HAMi checks cores before exclusivity)
    assert outs[4].filter.failed == {"dcu-1": "4/4 CardInsufficientCore"}


def test_hami_registered_nodes_share_dcus_up_to_their_split_count(no_hy_smi):
    p = pipeline(dcu_node("hami-dcu", HAMI_LEGACY))
    outs = [p.submit(dcu_pod(f"s{i}", count=1, mem=4000, cores=10)) for i in range(9)]
    assert [o.scheduled for o in outs] == [True] * 8 + [False]
    assert outs[8].filter.failed == {"hami-dcu": "2/2 CardTimeSlicingExhausted"}
    whole = p.submit(dcu_pod("whole", count=1))
    assert not whole.scheduled


def test_a_memory_only_pod_gets_a_count_and_an_invalid_one_is_denied(no_hy_smi):
    p = pipeline(dcu_node("hami-dcu", HAMI_LEGACY))
    out = p.submit(dcu_pod("memonly", mem=1024, cores=20))
    assert out.scheduled
    limits = p.cluster.get_pod("default", "memonly")["spec"]["containers"][0]["resources"]["limits"]
    assert limits["hygon.com/dcunum"] == "1"
    bad = p.submit(dcu_pod("bad", count=2, mem=1024))
    assert "a virtual DCU" in bad.denied


def test_type_filter_annotation(no_hy_smi):
    z = "DCU-Z0,4,32752,100,DCU-Z100L,0,true:"
    p = pipeline(dcu_node("k100-node", HAMI_LEGACY), dcu_node("z100l-node", z))
    out = p.submit(
        dcu_pod("z", count=1, mem=1000, cores=10, annotations={"hygon.com/use-dcutype": "Z100L"})
    )
    assert out.node == "z100l-node"
    assert out.filter.failed["k100-node"] == "2/2 CardTypeMismatch"


def test_dcu_pods_never_land_on_ascend_nodes(no_hy_smi):
    ascend = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": "npu-node",
            "annotations": {
                "hami.io/node-register-Ascend910B3": '[{"id":"N0","count":4,"devmem":65536,'
                '"devcore":20,"type":"Ascend910B3","health":true}]'
            },
        },
        "status": {"allocatable": {"huawei.com/Ascend910B3": "4"}},
    }
    p = pipeline(ascend, dcu_node("hami-dcu", HAMI_LEGACY), backends=("hygon", "ascend"))
    out = p.submit(dcu_pod("d", count=1, mem=1000, cores=10))
    assert out.node == "hami-dcu"
    assert out.filter.failed["npu-node"].startswith("NodeInsufficientDevice")


def test_quota_on_dcu_memory_is_enforced(no_hy_smi):
    p = pipeline(dcu_node("hami-dcu", HAMI_LEGACY))
    p.cluster.add_quota(
        {
            "metadata": {"name": "dcu", "namespace": "default"},
            "spec": {"hard": {"limits.hygon.com/dcumem": "6000"}},
        }
    )
    assert p.submit(dcu_pod("a", count=1, mem=4000, cores=10)).scheduled
    denied = p.submit(dcu_pod("b", count=1, mem=4000, cores=10))
    assert "limits.hygon.com/dcumem" in denied.denied
