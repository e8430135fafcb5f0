"""Link scores for every vendor that declares a key, not only NVIDIA (issue #14 item 5).

Before, the writer published ``hami.io/node-<backend>-score`` while the reader decoded
only ``hami.io/node-nvidia-score``: a test backend's published scores arrived as ``{}``.
"""

from __future__ import annotations

import datetime as dt

import attrs
import pytest

from hami_core.cluster import MemoryCluster
from hami_core.deviceplugin import NodeAgent
from hami_core.errors import BackendError
from hami_core.facts.nodes import read_node
from hami_core.model import BackendInfo, DeviceInfo
from hami_core.plugin import BackendManager, hookimpl
from tests.toy_backend import ToyBackend

KEY = "hami.io/node-toy-score"
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
DEVICES = [
    DeviceInfo(uuid=f"TOY-{i}", vendor="TOY", index=i, split_count=4, memory_mib=1000)
    for i in range(3)
]


class LinkedToy(ToyBackend):
    """The toy backend with discovery and links, published under its own key."""

    @hookimpl
    def hami_backend_info(self) -> BackendInfo:
        info = self.info()
        dtype = attrs.evolve(info.device_types[0], link_score_annotation=KEY)
        return attrs.evolve(info, device_types=(dtype,))

    @hookimpl
    def hami_discover(self) -> list[DeviceInfo]:
        return list(DEVICES)

    @hookimpl
    def hami_link_scores(self, devices):
        return {
            a.uuid: {b.uuid: 100 if abs(a.index - b.index) == 1 else 10 for b in devices if b != a}
            for a in devices
        }


def test_a_third_vendors_published_scores_reach_the_scheduler():
    cluster = MemoryCluster()
    cluster.add_node({"metadata": {"name": "n1"}})
    manager = BackendManager.from_plugins({"toy": LinkedToy()})
    agent = NodeAgent(
        cluster, manager, backend="toy", vendor="TOY", node="n1", link_scores=True, clock=lambda: T0
    )
    devices = agent.discover()
    agent.publish(devices, scores=agent.scores(devices))
    node = cluster.get_node("n1")
    assert KEY in node["metadata"]["annotations"]
    info = read_node(node, manager.device_types(), now=T0)
    assert info.link_scores["TOY-0"] == {"TOY-1": 100, "TOY-2": 10}
    assert info.link_scores["TOY-1"] == {"TOY-0": 100, "TOY-2": 100}


def test_an_unreadable_score_is_ignored_never_the_vendor():
    """Issue 24 item 2: link scores are optional; unreadable, they are left out."""
    manager = BackendManager.from_plugins({"toy": LinkedToy()})
    node = {"metadata": {"name": "n1", "annotations": {KEY: "{not json"}}}
    info = read_node(node, manager.device_types(), now=T0)
    assert info.unregistered == {} and info.link_scores == {}
    assert "not valid JSON" in info.ignored[KEY]


def test_link_scores_without_a_declared_key_fail_at_load():
    class Undeclared(ToyBackend):
        @hookimpl
        def hami_link_scores(self, devices):
            return {}

    with pytest.raises(BackendError, match="link_score_annotation"):
        BackendManager.from_plugins({"toy": Undeclared()})
