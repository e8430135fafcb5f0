"""What kubelet adds to DCU containers: device nodes, hyhal/DTK mounts, vDCU files."""

import pytest
from hami_hygon import discover, plugin
from hami_hygon.allocate import allocate
from hami_hygon.vdev import VdevAllocator, VdevConfig, cu_count_of, parse, render

from hami_core.errors import InvalidInputError
from hami_core.model import (
    ContainerDevice,
    DeviceInfo,
    DeviceNode,
    MemoryNodeState,
    ScopedNodeState,
)
from hami_core.plugin import BackendManager
from hami_core.protocol.config import parse_config
from hami_core.testing import section

from .support import make_sysfs

POD = {"metadata": {"name": "p", "namespace": "default", "uid": "uid-1"}}
MAIN = {"name": "main"}
SN0, SN1 = "DCU-3E3D2A0D0A1B", "DCU-3E3D2A0D0A1C"


@pytest.fixture
def node(tmp_path, hy_smi):
    """(section, the node's DCUs as hami_discover finds them, the node's records) for
    ``allocate(..., *node)``."""
    sysfs = make_sysfs(tmp_path / "sys", {"0000:9f:00.0": (1, 0), "0000:56:00.0": (2, 0)})
    config = section(plugin, options={"sysfsPath": str(sysfs), "vdevPath": str(tmp_path / "vdev")})
    devices = discover.discover(config, hy_smi, sysfs=sysfs)
    assert devices
    return config, devices, MemoryNodeState()


def dev(uuid, mib, cores):
    return ContainerDevice(uuid=uuid, vendor="DCU", memory_mib=mib, cores_pct=cores)


def test_whole_dcus_get_their_nodes_and_the_runtime_mounts(node):
    res = allocate(POD, MAIN, (dev(SN0, 65520, 100), dev(SN1, 65520, 100)), *node)
    assert res.device_nodes == (
        DeviceNode(container_path="/dev/kfd", host_path="/dev/kfd", permissions="rwm"),
        DeviceNode(container_path="/dev/mkfd", host_path="/dev/mkfd", permissions="rwm"),
        DeviceNode(container_path="/dev/dri/card1", host_path="/dev/dri/card1"),
        DeviceNode(container_path="/dev/dri/renderD129", host_path="/dev/dri/renderD129"),
        DeviceNode(container_path="/dev/dri/card2", host_path="/dev/dri/card2"),
        DeviceNode(container_path="/dev/dri/renderD130", host_path="/dev/dri/renderD130"),
    )
    assert {(m.container_path, m.host_path) for m in res.mounts} == {
        ("/opt/hyhal", "/opt/hyhal"),
        ("/opt/hygondriver", "/opt/dtk"),
    }
    assert res.envs == {"HIP_VISIBLE_DEVICES": "0,1"}


def test_a_virtual_dcu_gets_its_configuration_file(node, tmp_path):
    res = allocate(POD, MAIN, (dev(SN1, 2000, 60),), *node)
    vdev = next(m for m in res.mounts if m.container_path == "/etc/vdev/docker")
    assert vdev.read_only and vdev.host_path == str(tmp_path / "vdev" / "uid-1_main_1")
    # the device plugin writes the file from the answer; Allocate itself writes nothing
    assert list(res.files) == [f"{vdev.host_path}/vdev0.conf"]
    assert not (tmp_path / "vdev").exists()
    text = res.files[f"{vdev.host_path}/vdev0.conf"]
    conf = parse(text)
    # 60 % of the K100_AI's 120 compute units
    assert (conf.cu_count, conf.memory_mib, conf.device_id, conf.pci_bus_id) == (
        72,
        2000,
        1,
        "0000:56:00.0",
    )
    assert text.splitlines()[1:4] == [
        "cu_mask: 0xffffffffffffffff",
        "cu_mask: 0x00000000000000ff",
        "cu_count: 72",
    ]
    # Allocate again for the same container: the same file (kubelet may retry).
    again = allocate(POD, MAIN, (dev(SN1, 2000, 60),), *node)
    assert again.mounts == res.mounts and again.files == res.files
    # A second container on the DCU gets disjoint compute units, its own vdev and pipe.
    other = {"metadata": {"uid": "uid-2"}}
    [text2] = allocate(other, MAIN, (dev(SN1, 2000, 40),), *node).files.values()
    conf2 = parse(text2)
    assert conf2.cu_count == 48 and conf2.cu_bits & conf.cu_bits == 0
    assert (conf2.vdev_id, conf2.pipe_id) == (1, 1)
    # The DCU has no compute units left for a third slice.
    with pytest.raises(InvalidInputError, match="compute units wanted"):
        allocate({"metadata": {"uid": "uid-3"}}, MAIN, (dev(SN1, 1000, 10),), *node)


def test_pruning_frees_the_slices_of_gone_pods(node, tmp_path):
    allocate(POD, MAIN, (dev(SN0, 2000, 50),), *node)
    allocate({"metadata": {"uid": "uid-2"}}, MAIN, (dev(SN0, 2000, 50),), *node)
    with pytest.raises(InvalidInputError, match="compute units wanted"):
        allocate({"metadata": {"uid": "uid-3"}}, MAIN, (dev(SN0, 2000, 50),), *node)
    assert VdevAllocator(tmp_path / "vdev", node[2]).prune(["uid-2"]) == ["uid-1_main_0"]
    allocate({"metadata": {"uid": "uid-3"}}, MAIN, (dev(SN0, 2000, 50),), *node)


def test_the_device_plugins_release_round_frees_the_vdevs_of_finished_pods(node):
    config, devices, state = node
    manager = BackendManager.from_entry_points(disabled=[])
    manager = manager.with_config(
        parse_config({"version": "v1", "hygon": dict(config.options)}, backends=manager.infos)
    )
    scoped = ScopedNodeState(state, "hygon")
    allocate(POD, MAIN, (dev(SN0, 2000, 50),), config, devices, scoped)
    done = {"metadata": {"uid": "uid-1"}, "status": {"phase": "Failed"}}
    running = {"metadata": {"uid": "uid-1"}, "status": {"phase": "Running"}}
    assert manager.release("hygon", [running], devices, state=state) == ()
    assert manager.release("hygon", [done], devices, state=state) == ("the vDCU of uid-1_main_0",)
    assert scoped.read("vdevs") == {}


def test_a_dcu_not_on_the_node_is_refused(node):
    with pytest.raises(InvalidInputError, match="not on this node"):
        allocate(POD, MAIN, (dev("DCU-ELSEWHERE", 2000, 50),), *node)


def test_without_discovery_facts_no_device_is_invented():
    # hami simulate hands no devices, or the inventory's (without node-local facts).
    inventory = (DeviceInfo(uuid="DCU-x", vendor="DCU", memory_mib=65520, cores_pct=100),)
    for node_devices in ((), inventory):
        res = allocate(
            POD, MAIN, (dev("DCU-x", 2000, 50),), section(plugin), node_devices, MemoryNodeState()
        )
        assert [n.container_path for n in res.device_nodes] == ["/dev/kfd", "/dev/mkfd"]
        assert all(m.container_path != "/etc/vdev/docker" for m in res.mounts)


def test_a_container_without_dcus_gets_nothing():
    res = allocate(POD, MAIN, (), section(plugin), (), MemoryNodeState())
    assert res.envs == {} and res.device_nodes == () and res.mounts == ()


def test_vdev_file_round_trip_and_cu_rounding():
    conf = VdevConfig(
        pci_bus_id="0000:9f:00.0",
        cu_masks=(0xF, 0),
        memory_mib=2000,
        device_id=0,
        vdev_id=3,
        pipe_id=0,
    )
    text = render(conf)
    assert text == (
        "PciBusId: 0000:9f:00.0\n"
        "cu_mask: 0x000000000000000f\n"
        "cu_mask: 0x0000000000000000\n"
        "cu_count: 4\n"
        "mem: 2000 MiB\n"
        "device_id: 0\n"
        "vdev_id: 3\n"
        "pipe_id: 0\n"
        "enable: 1\n"
    )
    assert parse(text) == conf
    assert cu_count_of(60, 60) == 36 and cu_count_of(1, 60) == 1 and cu_count_of(100, 120) == 120
    with pytest.raises(ValueError, match="missing"):
        parse("PciBusId: x\n")
