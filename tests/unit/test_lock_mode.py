"""When a bind takes the node lock (PROTOCOL.md §4): only where the node's device plugin
of a vendor the pod asks for cannot tell in-flight pods apart. Ours says it can, beside
its handshake answer; HAMi's never does, and a claim another device plugin's answer
follows, or that a tenant-free but stale value carries, is no claim."""

from __future__ import annotations

from typing import Any

import pytest

from hami_core.facts.lockmode import needs_node_lock
from hami_core.protocol.handshake import identifies_pods, podresources_key
from tests.builders import manager

ANSWER = "Reported_2026-12-02 02:00:00"


def test_the_capability_key_sits_beside_the_handshake_key():
    assert podresources_key("hami.io/node-handshake") == "hami.io/node-podresources"
    assert podresources_key("hami.io/node-handshake-dcu") == "hami.io/node-podresources-dcu"
    assert podresources_key("vendor.example/hs") == "vendor.example/hs-podresources"


@pytest.mark.parametrize(
    ("capability", "handshake", "holds"),
    [
        (ANSWER, ANSWER, True),  # our answer, still the node's
        (ANSWER, "Requesting_2026-12-02 02:00:30", True),  # the next round, unanswered
        (ANSWER, "Requesting_2026-12-02 02:01:01", False),  # unanswered too long
        (ANSWER, "Requesting_2026-12-02 01:59:50", False),  # asked before our answer
        (ANSWER, "Reported_2026-12-02 02:00:31", False),  # another device plugin answered
        (ANSWER, "Deleted_2026-12-02 02:00:31", False),
        (None, ANSWER, False),  # HAMi's device plugin: no claim
        ("", ANSWER, False),
        (ANSWER, None, False),
        ("garbage", "garbage", False),  # unreadable is no claim, never an error
        ("Requesting_2026-12-02 02:00:00", "Requesting_2026-12-02 02:00:00", False),
    ],
)
def test_the_capability_holds_only_with_our_own_handshake_answer(capability, handshake, holds):
    assert identifies_pods(capability, handshake) is holds


def node(**ann: str) -> dict[str, Any]:
    return {"metadata": {"name": "n1", "annotations": ann}}


def test_a_bind_locks_unless_every_vendor_of_the_pod_identifies_pods():
    m = manager()
    nvidia = m.device_type("NVIDIA")
    claimed = node(
        **{
            nvidia.handshake_annotation: ANSWER,
            podresources_key(nvidia.handshake_annotation): ANSWER,
        }
    )
    assert needs_node_lock(claimed, [nvidia]) is False
    assert needs_node_lock(node(**{nvidia.handshake_annotation: ANSWER}), [nvidia]) is True
    assert needs_node_lock(node(), [nvidia]) is True
    other = next(t for t in m.device_types() if t.vendor != "NVIDIA")
    # a pod also asking a vendor whose device plugin is HAMi's: the lock, for both
    assert needs_node_lock(claimed, [nvidia, other]) is True
    assert needs_node_lock(claimed, []) is False
