"""What a Kunlunxin container gets: the xpu-container-toolkit's ``CXPU_VISIBLE_DEVICES`` and
``CXPU_CONTAINER_MEMORY_LIMIT``, or device nodes without the runtime."""

from __future__ import annotations

from hami_kunlun.allocate import allocate

from hami_core.model import ContainerDevice

from .helpers import config

Q = ContainerDevice(uuid="XPU-q", vendor="XPU", memory_mib=24576, cores_pct=25)
Q2 = ContainerDevice(uuid="XPU-q2", vendor="XPU", memory_mib=24576, cores_pct=25)
W = ContainerDevice(uuid="XPU-w", vendor="XPU", memory_mib=98304, cores_pct=100)


def test_a_slice_gets_visibility_and_a_memory_limit_in_bytes():
    res = allocate((Q, Q2), config(), indices={"XPU-q": 5, "XPU-q2": 1})
    assert res.envs == {
        "CXPU_VISIBLE_DEVICES": "5,1",
        "CXPU_CONTAINER_MEMORY_LIMIT": str(24576 * 1024 * 1024),
    }
    assert res.device_nodes == ()


def test_whole_cards_get_no_memory_limit():
    res = allocate((W,), config(), indices={"XPU-w": 0})
    assert res.envs == {"CXPU_VISIBLE_DEVICES": "0"}


def test_a_container_without_xpus_sees_none():
    assert allocate((), config(), indices={}).envs == {"CXPU_VISIBLE_DEVICES": "none"}


def test_unknown_index_falls_back_to_the_id():
    res = allocate((W,), config(), indices={})
    assert res.envs["CXPU_VISIBLE_DEVICES"] == "XPU-w"


def test_without_the_runtime_device_nodes_are_exposed():
    res = allocate((W,), config(useContainerRuntime=False), indices={"XPU-w": 3})
    assert [n.container_path for n in res.device_nodes] == ["/dev/xpu3", "/dev/xpuctrl"]
