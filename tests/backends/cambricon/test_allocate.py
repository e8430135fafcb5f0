"""What a Cambricon container gets from the device plugin (cambricon-k8s-device-plugin's
``PrepareResponse``: ``CAMBRICON_VISIBLE_DEVICES`` with the runtime, device nodes without)."""

from __future__ import annotations

from hami_cambricon.allocate import allocate

from hami_core.model import ContainerDevice, DeviceNode, Mount

from .helpers import config

A = ContainerDevice(uuid="MLU-a", vendor="MLU", memory_mib=5120, cores_pct=30)
B = ContainerDevice(uuid="MLU-b", vendor="MLU", memory_mib=24576, cores_pct=100)


def test_visible_devices_are_card_indices_in_slice_order():
    res = allocate((B, A), config(), indices={"MLU-a": 0, "MLU-b": 3})
    assert res.envs == {"CAMBRICON_VISIBLE_DEVICES": "3,0"}
    assert res.device_nodes == () and res.mounts == ()


def test_unknown_index_falls_back_to_the_uuid():
    res = allocate((A, B), config(), indices={"MLU-b": 1})
    assert res.envs == {"CAMBRICON_VISIBLE_DEVICES": "MLU-a,1"}


def test_without_the_runtime_device_nodes_are_exposed():
    res = allocate((A,), config(useContainerRuntime=False), indices={"MLU-a": 2})
    assert res.envs == {"CAMBRICON_VISIBLE_DEVICES": "2"}
    paths = [n.container_path for n in res.device_nodes]
    assert paths[0] == "/dev/cambricon_dev2" and paths[-1] == "/dev/cambricon_ctl"
    assert all(
        isinstance(n, DeviceNode) and n.host_path == n.container_path for n in res.device_nodes
    )


def test_cnmon_is_mounted_read_only_when_configured():
    res = allocate((A,), config(mountCnmonPath="/usr/bin/cnmon"), indices={"MLU-a": 0})
    assert res.mounts == (Mount(container_path="/usr/bin/cnmon", host_path="/usr/bin/cnmon"),)


def test_a_container_without_mlus_gets_nothing():
    res = allocate((), config(), indices={})
    assert res.envs == {} and res.device_nodes == () and res.mounts == ()
