"""Taking over a node that HAMi runs (docs/migrating-from-hami.md), on a real control
plane and a real kubelet node, with hami's chart installed by real Helm.

The node starts in HAMi 2.10's state: HAMi's device plugin (a wire stand-in,
``hami_standin``) registered ``nvidia.com/gpu`` and wrote the node's inventory and
handshake; a pod HAMi's scheduler bound and its device plugin allocated runs with
HAMi's annotations and environment; HAMi's ``hami-scheduler-device`` and
``hami-device-plugin`` ConfigMaps are in ``kube-system``. Then, as the migration guide
says: HAMi's scheduler, webhook and device plugin go (here: the stand-in stops; HAMi's
control-plane parts are not running), hami's chart is installed with HAMi's node
configuration, and:

- the running HAMi pod is neither restarted nor re-allocated (same container, same
  annotations);
- a new pod is placed around HAMi's slice (the other GPU) and served by hami's device
  plugin;
- ``helm uninstall`` leaves HAMi's state as it was (the pod, its annotations, HAMi's
  ConfigMaps, the node's inventory in HAMi's format), so HAMi can be put back.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from hami_core.protocol.inventory import decode_inventory
from tests.chart.helm import CHART
from tests.e2e.hami_standin import Answer, Gpu, HamiStandIn
from tests.e2e.kubenode import (
    DEVICE_PLUGIN_DIR,
    gpu_pod_body,
)
from tests.e2e.test_helm_install import (
    GPUS,
    NAMESPACE,
    NODE,
    RELEASE,
    Release,
    cluster_for_the_chart,
)

pytestmark = pytest.mark.timeout(1200)

helm_python = pytest.importorskip("helm_python", reason="pip install -e '.[dev]' (helm-python-sdk)")

REPO = Path(__file__).resolve().parents[2]
HAMI_NAMESPACE = "kube-system"
HAMI_DEVICE_CONFIG = (REPO / "tests" / "fixtures" / "hami" / "device-config.yaml").read_text()
#: HAMi's node configuration (its chart's ``hami-device-plugin`` ConfigMap, config.json).
HAMI_NODE_CONFIG = json.dumps(
    {"nodeconfig": [{"name": NODE, "devicesplitcount": 10, "devicememoryscaling": 1}]}
)
OLD = "hami-old"
OLD_MIB, OLD_CORES = 12000, 50


def _hami_pod(namespace: str) -> dict[str, Any]:
    """A pod as HAMi leaves it once scheduled, bound and allocated (HAMi 2.10:
    ``pkg/scheduler`` Bind, ``pkg/util`` PodAllocationSuccess)."""
    body = gpu_pod_body(OLD, gpumem=OLD_MIB, gpucores=OLD_CORES, namespace=namespace)
    entry = f"{GPUS[0]},NVIDIA,{OLD_MIB},{OLD_CORES}:;"
    body["metadata"]["labels"] = {"hami.io/vgpu-node": NODE}
    body["metadata"]["annotations"] = {
        "hami.io/vgpu-node": NODE,
        "hami.io/vgpu-time": "1764547200",
        "hami.io/bind-time": "1764547200",
        "hami.io/vgpu-devices-to-allocate": ";",
        "hami.io/vgpu-devices-allocated": entry,
        "hami.io/bind-phase": "success",
    }
    body["spec"]["schedulerName"] = "hami-scheduler"
    body["spec"]["nodeName"] = NODE  # HAMi's scheduler bound it
    return body


def _identity(pod: dict[str, Any]) -> dict[str, Any]:
    """What a restart or a re-allocation would change."""
    meta = pod["metadata"]
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return {
        "uid": meta["uid"],
        "annotations": meta.get("annotations"),
        "labels": meta.get("labels"),
        "containers": [(s["containerID"], s["restartCount"]) for s in statuses],
        "phase": pod["status"]["phase"],
    }


class Takeover:
    def __init__(self, rel: Release, hami: HamiStandIn) -> None:
        self.rel = rel
        self.hami = hami
        self.before: dict[str, Any] = {}
        self.hami_configmaps: dict[str, dict[str, str]] = {}

    def configmaps(self) -> dict[str, dict[str, str]]:
        return {
            name: self.rel.core.read_namespaced_config_map(name, HAMI_NAMESPACE).data
            for name in ("hami-scheduler-device", "hami-device-plugin")
        }

    def node_annotations(self) -> dict[str, str]:
        return self.rel.core.read_node(NODE).metadata.annotations or {}


@pytest.fixture(scope="module")
def takeover(kube_bin_dir: Path, hami_image: Path) -> Iterator[Takeover]:
    hami: HamiStandIn | None = None
    with cluster_for_the_chart(kube_bin_dir, hami_image, "migrate-e2e") as rel:
        node = rel.node
        try:
            # -- HAMi's state --------------------------------------------------------------
            for name, data in (
                ("hami-scheduler-device", {"device-config.yaml": HAMI_DEVICE_CONFIG}),
                ("hami-device-plugin", {"config.json": HAMI_NODE_CONFIG}),
            ):
                rel.core.create_namespaced_config_map(
                    HAMI_NAMESPACE, {"metadata": {"name": name}, "data": data}
                )
            hami = HamiStandIn(
                DEVICE_PLUGIN_DIR,
                [Gpu(uuid=u, index=i, memory_mib=16384) for i, u in enumerate(GPUS)],
            ).start()
            rel.core.patch_node(
                NODE,
                {
                    "metadata": {
                        "labels": {"gpu": "on"},
                        "annotations": dict(hami.node_annotations()),
                    }
                },
            )
            rel.wait(lambda: node.allocatable("nvidia.com/gpu") == "20", "HAMi's 20 nvidia.com/gpu")
            hami.answers.put(Answer(uuid=GPUS[0], memory_mib=OLD_MIB, cores=OLD_CORES))
            rel.core.create_namespaced_pod(rel.namespace, _hami_pod(rel.namespace))
            old = rel.wait_running(OLD)
            assert rel.env_of(old)["CUDA_DEVICE_MEMORY_LIMIT_0"] == f"{OLD_MIB}m"
            t = Takeover(rel, hami)
            t.hami_configmaps = t.configmaps()

            # -- the takeover: HAMi's node side goes, hami's chart comes -------------------
            hami.stop()
            values = rel.make_values()
            # HAMi's node configuration, carried over as the guide says (same shape).
            rel.core.create_namespaced_config_map(
                NAMESPACE,
                {
                    "metadata": {"name": "hami-node-config"},
                    "data": {"config.json": HAMI_NODE_CONFIG},
                },
            )
            values["devicePlugin"]["nodeConfiguration"] = {"externalConfigName": "hami-node-config"}
            rel.values = values
            t.before = _identity(rel.pod(OLD))
            t0 = time.monotonic()
            installed = rel.helm.install(CHART, RELEASE, values, namespace=NAMESPACE, timeout=300)
            assert installed["status"] == "deployed", installed
            rel.wait(lambda: rel.ready_pods("scheduler"), "the scheduler pod ready")
            rel.wait(lambda: rel.ready_pods("webhook"), "the webhook pod ready")
            rel.wait(lambda: rel.ready_pods("device-plugin"), "hami's device plugin ready")
            rel.wait(
                lambda: node.allocatable("nvidia.com/gpu") == "20",
                "nvidia.com/gpu 20 from hami's device plugin",
            )
            sys.stderr.write(f"[migrate-e2e] hami took over in {time.monotonic() - t0:.0f} s\n")
            yield t
        finally:
            if hami is not None:
                hami.stop()


def test_the_running_hami_pod_is_neither_restarted_nor_reallocated(takeover: Takeover):
    after = _identity(takeover.rel.pod(OLD))
    assert after == takeover.before
    assert after["phase"] == "Running"
    # hami's device plugin re-published the inventory in the same wire format HAMi reads.
    inv = decode_inventory(
        takeover.node_annotations()["hami.io/node-nvidia-register"], node=NODE, vendor="nvidia"
    )
    assert sorted(d.uuid for d in inv) == sorted(GPUS)


def test_a_new_pod_is_placed_around_hamis_slice_and_served_by_hamis_successor(
    takeover: Takeover,
):
    rel = takeover.rel
    # 8000 MiB fits only beside HAMi's 12000 MiB on the other GPU (16384 MiB each).
    rel.kubectl("apply", "-f", "-", input=rel.gpu_pod("new-a", gpumem=8000, gpucores=20))
    pod = rel.wait_running("new-a")
    ann = pod["metadata"]["annotations"]
    assert ann["hami.io/vgpu-devices-allocated"] == f"{GPUS[1]},NVIDIA,8000,20:;"
    assert ann["hami.io/bind-phase"] == "success"
    env = rel.env_of(pod)
    assert env["NVIDIA_VISIBLE_DEVICES"] == GPUS[1]
    assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "8000m"
    # A pod that would fit only on HAMi's GPU if HAMi's slice were not counted waits.
    rel.kubectl("apply", "-f", "-", input=rel.gpu_pod("new-big", gpumem=9000, gpucores=10))

    def unschedulable() -> bool:
        conds = (rel.pod("new-big").get("status") or {}).get("conditions") or []
        return any(c.get("reason") == "Unschedulable" for c in conds)

    rel.wait(unschedulable, "new-big Unschedulable", timeout=120)
    assert not rel.pod("new-big")["spec"].get("nodeName")
    assert takeover.hami.served and len(takeover.hami.served) == 1  # HAMi's pod only


def test_uninstalling_hami_leaves_hamis_state_as_it_was(takeover: Takeover):
    rel = takeover.rel
    for name in ("new-a", "new-big"):
        with contextlib.suppress(Exception):
            rel.core.delete_namespaced_pod(name, rel.namespace, grace_period_seconds=0)
    rel.helm.uninstall(RELEASE, wait="watcher", timeout=180)
    rel.wait(lambda: not rel.pods(), "the chart's pods gone", timeout=180)
    assert _identity(rel.pod(OLD)) == takeover.before
    assert takeover.configmaps() == takeover.hami_configmaps
    ann = takeover.node_annotations()
    # HAMi's scheduler reads the inventory as it is; the handshake is HAMi's to refresh.
    raw = json.loads(ann["hami.io/node-nvidia-register"])
    assert {d["id"] for d in raw} == set(GPUS)
    assert all(d["count"] == 10 and d["devmem"] == 16384 for d in raw)
    assert "hami.io/node-handshake" in ann
    assert yaml.safe_load(takeover.hami_configmaps["hami-scheduler-device"]["device-config.yaml"])
