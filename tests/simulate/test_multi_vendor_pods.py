"""``hami simulate`` allocates a pod that asks two vendors on one node (issue 24 item 1):
containers asking NVIDIA and Kunlunxin devices (HAMi#2335), and one container asking
both (HAMi#2105). Every vendor's Allocate is answered; the pod ends ``bind-phase:
success`` and the node unlocked only then."""

from __future__ import annotations

import pytest

from hami_core.protocol import annotations as keys
from hami_core.protocol.devicelist import decode_pod_devices
from hami_core.simulate.loader import parse_cluster
from hami_core.simulate.pipeline import Pipeline

from .helpers import manager, simple_cluster

A100 = {"model": "NVIDIA A100-SXM4-80GB", "memoryMiB": 81920, "count": 2}
P800 = {"vendor": "XPU", "model": "P800", "memoryMiB": 98304, "count": 2, "splitCount": 4}
GPU = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "2000"}
XPU = {"kunlunxin.com/vxpu": "1", "kunlunxin.com/vxpu-memory": "24576"}


def pod(name: str, *limits: dict[str, str]) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "containers": [
                {"name": f"c{i}", "image": "busybox", "resources": {"limits": lim}}
                for i, lim in enumerate(limits)
            ]
        },
    }


@pytest.mark.parametrize(
    "shape",
    [
        pytest.param((GPU, XPU), id="two containers"),
        pytest.param(({**GPU, **XPU},), id="one container"),
    ],
)
def test_a_pod_asking_two_vendors_is_allocated(shape):
    mgr = manager()
    memory = parse_cluster(
        [simple_cluster(("n1", [A100, P800]))], source="t", manager=mgr
    ).to_memory()
    pipeline = Pipeline(memory, mgr)

    out = pipeline.submit(pod("p", *shape))

    assert out.node == "n1" and not out.error, out
    ann = memory.get_pod("default", "p")["metadata"]["annotations"]
    for key in ("hami.io/vgpu-devices-to-allocate", "hami.io/xpu-devices-to-allocate"):
        assert not any(decode_pod_devices(ann[key])), key
    assert ann[keys.BIND_PHASE] == keys.BIND_PHASE_SUCCESS
    assert keys.NODE_LOCK not in (memory.get_node("n1")["metadata"].get("annotations") or {})
    # The next pod binds on the same node: nothing was left locked.
    again = pipeline.submit(pod("q", *shape))
    assert again.node == "n1" and not again.error, again
