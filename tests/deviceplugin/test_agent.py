"""The node agent: inventory and handshake written only when they change, per-node
overrides, link scores (PROTOCOL.md §2), over hami-nvidia with a Python fake NVML."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from hami_nvidia.node import NvidiaNode
from hami_nvidia.nvml import NvmlGpu

from hami_core.cluster import MemoryCluster
from hami_core.deviceplugin import NodeAgent, NodeOverrides, load_node_overrides
from hami_core.deviceplugin.agent import DiscoveryUnavailableError
from hami_core.errors import ConfigError
from hami_core.protocol.inventory import decode_inventory
from hami_core.protocol.nodeconfig import parse_node_overrides

from .conftest import gpu_uuid, nvidia_manager
from .pyfake import PyFakeNvml, installed

NODE = "node-a"
T0 = dt.datetime(2026, 11, 29, 9, 0, 0, tzinfo=dt.UTC)


class CountingCluster(MemoryCluster):
    def __init__(self) -> None:
        super().__init__()
        self.node_patches: list[dict[str, str | None]] = []

    def patch_node_annotations(self, name, annotations, *, resource_version=None):  # type: ignore[no-untyped-def]
        self.node_patches.append(dict(annotations))
        return super().patch_node_annotations(name, annotations, resource_version=resource_version)


@pytest.fixture
def fake() -> Iterator[PyFakeNvml]:
    nvml = PyFakeNvml(
        [
            NvmlGpu(index=i, uuid=gpu_uuid(i), name="Tesla T4", memory_mib=15360, bus_id="")
            for i in range(3)
        ]
    )
    with installed(NvidiaNode(nvml, sysfs_root="/nonexistent", clock=lambda: 0.0)):
        yield nvml


@pytest.fixture
def cluster() -> CountingCluster:
    c = CountingCluster()
    c.add_node({"metadata": {"name": NODE}})
    return c


def agent(cluster: MemoryCluster, tmp_path: Path, **kw) -> NodeAgent:  # type: ignore[no-untyped-def]
    return NodeAgent(
        cluster,
        nvidia_manager(tmp_path, **kw.pop("section", {})),
        backend="nvidia",
        vendor="NVIDIA",
        node=NODE,
        clock=lambda: T0,
        **kw,
    )


def annotations(cluster: MemoryCluster) -> Mapping[str, str]:
    return cluster.get_node(NODE)["metadata"].get("annotations") or {}


def test_publishes_the_inventory_and_answers_the_handshake_once(cluster, fake, tmp_path):
    a = agent(cluster, tmp_path, section={"deviceSplitCount": 4, "deviceMemoryScaling": 2.0})
    devices = a.discover()

    first = a.publish(devices)
    second = a.publish(devices)

    assert first.inventory and first.handshake and not second.wrote
    assert len(cluster.node_patches) == 1
    ann = annotations(cluster)
    assert ann["hami.io/node-handshake"] == "Reported_2026-11-29 09:00:00"
    inventory = json.loads(ann["hami.io/node-nvidia-register"])
    assert inventory[0] == {
        "id": gpu_uuid(0),
        "count": 4,
        "devmem": 30720,
        "devcore": 100,
        "type": "NVIDIA-Tesla T4",
        "mode": "hami-core",
        "health": True,
    }
    assert [d["index"] for d in inventory[1:]] == [1, 2]


def test_a_health_change_is_published_with_a_new_handshake(cluster, fake, tmp_path):
    a = agent(cluster, tmp_path)
    a.publish(a.discover())
    fake.events.append(_xid(gpu_uuid(1), 79))

    changed = a.manager.watch_health("nvidia", timeout_s=0.01)
    result = a.publish(a.discover())

    assert changed == (gpu_uuid(1),)
    assert result.inventory and result.handshake
    devices = decode_inventory(
        annotations(cluster)["hami.io/node-nvidia-register"], node=NODE, vendor="NVIDIA"
    )
    assert [d.healthy for d in devices] == [True, False, True]


def test_the_schedulers_requesting_handshake_is_answered(cluster, fake, tmp_path):
    a = agent(cluster, tmp_path)
    devices = a.discover()
    a.publish(devices)
    cluster.patch_node_annotations(
        NODE, {"hami.io/node-handshake": "Requesting_2026-11-29 08:59:30"}
    )

    result = a.publish(devices)

    assert result.handshake and not result.inventory
    assert annotations(cluster)["hami.io/node-handshake"] == "Reported_2026-11-29 09:00:00"


def test_node_overrides_change_split_scaling_and_leave_devices_out(cluster, fake, tmp_path):
    overrides = parse_node_overrides(
        {
            "nodeconfig": [
                {"name": "other", "devicesplitcount": 2},
                {
                    "name": NODE,
                    "devicesplitcount": 3,
                    "devicememoryscaling": 0.5,
                    "devicecorescaling": 2,
                    "filterdevices": {"uuid": [gpu_uuid(0)], "index": [2]},
                },
            ]
        },
        node=NODE,
    )
    a = agent(cluster, tmp_path, overrides=overrides)

    devices = a.discover()

    assert [(d.uuid, d.split_count, d.memory_mib, d.cores_pct) for d in devices] == [
        (gpu_uuid(1), 3, 7680, 200)
    ]
    assert a.config.split_count == 3  # Allocate sees the node's values too


def test_a_node_without_an_entry_keeps_the_cluster_values(tmp_path):
    path = tmp_path / "node-config.yaml"
    path.write_text("nodeconfig:\n- name: other\n  devicesplitcount: 2\n")

    assert load_node_overrides(path, node=NODE) == NodeOverrides()
    assert load_node_overrides(None, node=NODE) == NodeOverrides()


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"nodes": []}, "unknown key 'nodes' (allowed: nodeconfig)"),
        (
            {"nodeconfig": [{"name": NODE, "splitcount": 3}]},
            f"nodeconfig[{NODE}].splitcount: unknown key",
        ),
        (
            {"nodeconfig": [{"name": NODE, "devicesplitcount": 0}]},
            "devicesplitcount: must be between 1 and 1000, got 0",
        ),
        (
            {"nodeconfig": [{"name": NODE, "devicememoryscaling": "2"}]},
            "devicememoryscaling: expected a number, got '2'",
        ),
        (
            {"nodeconfig": [{"name": NODE, "operatingmode": "timeslice"}]},
            "'timeslice' is not supported",
        ),
        (
            {"nodeconfig": [{"name": NODE, "migstrategy": "all"}]},
            "migstrategy: 'all' is not one of",
        ),
        ({"nodeconfig": [{"name": NODE}, {"name": NODE}]}, f"node {NODE!r} is listed twice"),
        (
            {"nodeconfig": [{"name": NODE, "filterdevices": {"index": ["0"]}}]},
            "filterdevices.index: must be a list of indexes >= 0",
        ),
    ],
)
def test_bad_node_config_names_the_key(doc, message):
    with pytest.raises(ConfigError) as err:
        parse_node_overrides(doc, node=NODE)
    assert message in str(err.value)


def test_a_bad_file_names_the_file(tmp_path):
    path = tmp_path / "nc.json"
    path.write_text('{"nodeconfig": [{"name": 3}]}')

    with pytest.raises(ConfigError, match=r"nc\.json: nodeconfig\[0\]\.name: must be a node name"):
        load_node_overrides(path, node=NODE)


def test_link_scores_are_published_when_enabled(cluster, fake, tmp_path):
    fake.links = {0: {"0000:3b:00.0": 2}}
    fake.list = [
        NvmlGpu(
            index=0, uuid="GPU-a", name="NVIDIA H100", memory_mib=80000, bus_id="00000000:3A:00.0"
        ),
        NvmlGpu(
            index=1, uuid="GPU-b", name="NVIDIA H100", memory_mib=80000, bus_id="00000000:3B:00.0"
        ),
        NvmlGpu(
            index=2, uuid="GPU-c", name="NVIDIA H100", memory_mib=80000, bus_id="00000000:3C:00.0"
        ),
    ]
    fake.levels = {(0, 2): 10, (1, 2): 50}
    a = agent(cluster, tmp_path, link_scores=True)
    devices = a.discover()

    a.publish(devices, scores=a.scores(devices))

    scores = json.loads(annotations(cluster)["hami.io/node-nvidia-score"])
    assert scores == [
        {"uuid": "GPU-a", "score": {"GPU-b": 200, "GPU-c": 50}},
        {"uuid": "GPU-b", "score": {"GPU-a": 200, "GPU-c": 10}},
        {"uuid": "GPU-c", "score": {"GPU-a": 50, "GPU-b": 10}},
    ]


def test_link_scores_are_not_computed_when_disabled(cluster, fake, tmp_path):
    a = agent(cluster, tmp_path)
    assert a.scores(a.discover()) is None


def test_stale_link_scores_are_removed_when_scoring_is_turned_off(cluster, fake, tmp_path):
    a = agent(cluster, tmp_path)
    devices = a.discover()
    a.publish(devices, scores={"GPU-x": {"GPU-y": 100}})
    assert "hami.io/node-nvidia-score" in annotations(cluster)
    result = a.publish(devices, scores=None)
    assert "hami.io/node-nvidia-score" not in annotations(cluster) and result.link_scores


def test_no_driver_is_a_clear_error(cluster, tmp_path):
    from hami_nvidia.nvml import NvmlMissingError

    class NoDriver(PyFakeNvml):
        def gpus(self) -> list[NvmlGpu]:
            raise NvmlMissingError("nvmlInit", 12, "NVML Shared Library Not Found")

    with installed(NvidiaNode(NoDriver([]))), pytest.raises(DiscoveryUnavailableError) as err:
        agent(cluster, tmp_path).discover()

    assert str(err.value) == (
        "backend 'nvidia' cannot discover devices on node node-a (is the driver installed "
        "and its library on the library path?)"
    )


def _xid(uuid: str, xid: int):  # type: ignore[no-untyped-def]
    from hami_nvidia.nvml import EVENT_XID_CRITICAL, XidEvent

    return XidEvent(uuid=uuid, event_type=EVENT_XID_CRITICAL, xid=xid)


def test_the_claim_to_tell_pods_apart_rides_on_the_handshake_answer(cluster, fake, tmp_path):
    """PROTOCOL.md §4: written with the answer's exact value while the allocator tells
    pods apart, removed when it stops doing so and when the process stops; a quiet node
    costs no write."""
    from hami_core.facts.lockmode import needs_node_lock

    a = agent(cluster, tmp_path)
    claim = "hami.io/node-podresources"
    a.identifies_pods = lambda: True
    devices = a.discover()
    a.publish(devices)
    ann = annotations(cluster)
    assert ann[claim] == ann["hami.io/node-handshake"] == "Reported_2026-11-29 09:00:00"
    assert not needs_node_lock(cluster.get_node(NODE), [a.dtype])
    writes = len(cluster.node_patches)
    a.publish(devices)
    assert len(cluster.node_patches) == writes  # nothing changed, nothing written
    a.identifies_pods = lambda: False
    a.publish(devices)
    assert claim not in annotations(cluster)
    assert needs_node_lock(cluster.get_node(NODE), [a.dtype])
    a.identifies_pods = lambda: True
    a.publish(devices)
    assert claim in annotations(cluster)
    a.withdraw()
    assert claim not in annotations(cluster)
