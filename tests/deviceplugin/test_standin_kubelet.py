"""The bench's stand-in kubelet (``tests/standin_kubelet.py``) plays kubelet honestly: it
admits a bound pod only after its admission delay, one pod at a time per node, calls the
real ``Allocator`` (preferred allocation, then Allocate per container with IDs it picks
from its free ones), and a pod the device plugin refuses gets nothing (no shortcut that
marks every bound pod allocated)."""

from __future__ import annotations

import itertools
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from hami_core.cluster import MemoryCluster
from hami_core.deviceplugin import Allocator
from hami_core.deviceplugin.devices import physical_uuid
from hami_core.plugin import BackendManager
from hami_core.protocol import annotations as keys
from hami_core.protocol.devicelist import decode_pod_devices
from hami_core.protocol.handshake import podresources_key
from hami_core.protocol.signature import (
    AllocationSigner,
    AllocationVerifier,
    generate_private_key_pem,
)
from hami_core.servers.signingkeys import PublicKeyFiles
from tests.standin_kubelet import StandInKubelet

from .conftest import BindPod, ctr, gpu_node, gpu_pod, gpu_uuid

DELAY_S = 0.15


def uuids(node: str) -> list[str]:
    return [gpu_uuid(0) + f"-{node}", gpu_uuid(1) + f"-{node}"]


@pytest.fixture
def cluster() -> MemoryCluster:
    c = MemoryCluster()
    for name in ("node-a", "node-b"):
        c.add_node(gpu_node(name, uuids(name)))
    return c


def kubelet(cluster: MemoryCluster, manager: BackendManager, tmp_path: Path) -> StandInKubelet:
    return StandInKubelet(
        cluster,
        manager,
        admission_delay_s=DELAY_S,
        allocator_options={"make_dir": lambda path: None, "make_file": lambda p, s: None},
    ).start()


def pod_annotations(cluster: MemoryCluster, name: str) -> dict[str, str]:
    return cluster.get_pod("default", name)["metadata"].get("annotations") or {}


def test_bound_pods_get_the_slices_they_were_charged_after_the_delay(
    cluster: MemoryCluster, nvidia: BackendManager, bound_pod: BindPod, tmp_path: Path
) -> None:
    k = kubelet(cluster, nvidia, tmp_path)
    try:
        first = bound_pod(
            cluster,
            nvidia,
            gpu_pod(
                "two",
                ctr("main", gpu=1, gpumem=3000, gpucores=30),
                init=[ctr("setup", gpu=1, gpumem=1000, gpucores=10)],
            ),
            "node-a",
        )
        # The second bind waits for the node lock, held until the first pod's Allocate.
        second: dict[str, Any] = {}
        t = threading.Thread(
            target=lambda: second.update(
                bound_pod(
                    cluster,
                    nvidia,
                    gpu_pod("one", ctr("main", gpu=1, gpumem=2000, gpucores=20)),
                    "node-a",
                    lock_wait_s=10.0,
                )
            )
        )
        t.start()
        t.join(15)
        uids = [first["metadata"]["uid"], second["metadata"]["uid"]]
        assert k.wait_admitted(uids, timeout_s=10)
    finally:
        k.stop()
    for name, uid in (("two", uids[0]), ("one", uids[1])):
        adm = k.admissions[uid]
        assert adm.error is None, adm.error
        assert adm.admitted - adm.seen_bound >= DELAY_S
        assert pod_annotations(cluster, name)[keys.BIND_PHASE] == keys.BIND_PHASE_SUCCESS
        charged = decode_pod_devices(
            pod_annotations(cluster, name)["hami.io/vgpu-devices-allocated"]
        )
        spec = cluster.get_pod("default", name)["spec"]
        order = [c["name"] for c in [*(spec.get("initContainers") or []), *spec["containers"]]]
        for container, devices in zip(order, charged, strict=True):
            given = adm.devices[container]
            assert {physical_uuid(i) for i in given} == {d.uuid for d in devices}
    node = cluster.get_node("node-a")["metadata"].get("annotations") or {}
    assert keys.NODE_LOCK not in node
    held = [i for ids in k.held_ids("node-a").values() for i in ids]
    assert len(held) == len(set(held)) == 3
    cluster.delete_pod("default", "two")
    assert [key.split("/")[1] for key in k.held_ids("node-a")] == ["main"]


def test_a_forged_allocation_is_refused_and_admission_is_serial_per_node(
    cluster: MemoryCluster,
    nvidia: BackendManager,
    bound_pod: BindPod,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A tenant replays a real pod's allocation annotations on pods it binds itself
    # (webhook down): only the pod a node lock names is served, so kubelet admits none.
    real = bound_pod(
        cluster, nvidia, gpu_pod("real", ctr("main", gpu=1, gpumem=2000, gpucores=20)), "node-b"
    )
    stolen = {
        k: v
        for k, v in (real["metadata"].get("annotations") or {}).items()
        if k.startswith("hami.io/")
    }
    calls: list[tuple[str, float, float]] = []
    original = Allocator.allocate

    def timed(self: Allocator, requests: Any) -> Any:
        start = time.monotonic()
        try:
            time.sleep(0.05)
            return original(self, requests)
        finally:
            calls.append((self.node, start, time.monotonic()))

    monkeypatch.setattr(Allocator, "allocate", timed)
    k = kubelet(cluster, nvidia, tmp_path)
    uids = [real["metadata"]["uid"]]
    try:
        for i in range(3):
            pod = gpu_pod(f"forged-{i}", ctr("main", gpu=1, gpumem=2000, gpucores=20))
            pod["metadata"]["annotations"] = dict(stolen, **{keys.VGPU_NODE: "node-a"})
            created = cluster.add_pod(pod)
            uid = created["metadata"]["uid"]
            cluster.bind_pod("default", f"forged-{i}", uid=uid, node="node-a")
            uids.append(uid)
        assert k.wait_admitted(uids, timeout_s=10)
    finally:
        k.stop()
    assert k.admissions[uids[0]].error is None
    for uid in uids[1:]:
        adm = k.admissions[uid]
        assert adm.error is not None and "node lock" in adm.error, adm.error
        name = adm.ref.split("/")[1]
        assert pod_annotations(cluster, name)[keys.BIND_PHASE] != keys.BIND_PHASE_SUCCESS
    assert k.held_ids("node-a") == {}  # a refused admission keeps no device
    on_a = sorted((s, e) for node, s, e in calls if node == "node-a")
    assert len(on_a) == 3
    assert all(prev[1] <= nxt[0] for prev, nxt in itertools.pairwise(on_a))
    on_b = [(s, e) for node, s, e in calls if node == "node-b"]
    # the other node's kubelet admits at the same time (here the real pod, bound first)
    assert on_b and on_b[0][0] < on_a[0][1]


def test_with_podresources_and_trust_pods_bind_and_are_admitted_without_the_lock(
    nvidia: BackendManager, bound_pod: BindPod, tmp_path: Path
) -> None:
    # The node's device plugin claims it tells pods apart (PROTOCOL.md §4): binds take
    # no lock, and kubelet's PodResources (served by the stand-in) names the pod being
    # admitted; an allocation the trust check refuses (a forged one) gets nothing.
    answer = "Reported_2026-12-02 02:00:00"
    cluster = MemoryCluster()
    node = gpu_node("node-a", uuids("node-a"))
    node["metadata"]["annotations"].update(
        {"hami.io/node-handshake": answer, podresources_key("hami.io/node-handshake"): answer}
    )
    cluster.add_node(node)
    k = StandInKubelet(
        cluster,
        nvidia,
        admission_delay_s=DELAY_S,
        allocator_options={
            "make_dir": lambda path: None,
            "make_file": lambda p, s: None,
            "trusted": lambda pod: not pod["metadata"]["name"].startswith("forged"),
        },
    ).start()
    try:
        pods = [
            bound_pod(
                cluster,
                nvidia,
                gpu_pod(f"p{i}", ctr("main", gpu=1, gpumem=1000 * (i + 1), gpucores=10)),
                "node-a",
            )
            for i in range(3)
        ]
        stolen = dict(pods[0]["metadata"]["annotations"])
        forged = gpu_pod("forged", ctr("main", gpu=1, gpumem=1000, gpucores=10))
        forged["metadata"]["annotations"] = stolen
        created = cluster.add_pod(forged)
        cluster.bind_pod("default", "forged", uid=created["metadata"]["uid"], node="node-a")
        uids = [p["metadata"]["uid"] for p in pods] + [created["metadata"]["uid"]]
        assert k.wait_admitted(uids, timeout_s=10)
    finally:
        k.stop()
    assert keys.NODE_LOCK not in (cluster.get_node("node-a")["metadata"].get("annotations") or {})
    for i, pod in enumerate(pods):
        adm = k.admissions[pod["metadata"]["uid"]]
        assert adm.error is None, adm.error
        ann = pod_annotations(cluster, f"p{i}")
        assert ann[keys.BIND_PHASE] == keys.BIND_PHASE_SUCCESS
        (charged,) = decode_pod_devices(ann["hami.io/vgpu-devices-allocated"])
        assert charged[0].memory_mib == 1000 * (i + 1)
        assert {physical_uuid(i) for i in adm.devices["main"]} == {d.uuid for d in charged}
    assert k.admissions[uids[-1]].error is not None
    listed = {p.name: p for p in k.listed("node-a")}
    assert set(listed) == {"p0", "p1", "p2", "forged"}  # a refused pod stays listed
    assert listed["forged"].devices_of("main", "nvidia.com/gpu") == ()


def test_with_the_real_verifier_only_the_signed_pod_is_served(
    nvidia: BackendManager, bound_pod: BindPod, tmp_path: Path
) -> None:
    # The bench's default (--trust signed): the scheduler signs, the stand-in's
    # allocator verifies with the public key as `hami device-plugin
    # --allocation-public-keys FILE` does. On a node that claims PodResources a signed
    # pod is served without the lock; a pod bound unsigned (no lock names it) and one
    # carrying a signed pod's annotations (a forged allocation) get nothing.
    signer = AllocationSigner(generate_private_key_pem())
    public = tmp_path / "scheduler.pem"
    public.write_bytes(signer.public_pem())
    verifier = AllocationVerifier(PublicKeyFiles(str(public), flag="--allocation-public-keys"))
    answer = "Reported_2026-12-02 02:00:00"
    cluster = MemoryCluster()
    node = gpu_node("node-a", uuids("node-a"))
    node["metadata"]["annotations"].update(
        {"hami.io/node-handshake": answer, podresources_key("hami.io/node-handshake"): answer}
    )
    cluster.add_node(node)
    k = StandInKubelet(
        cluster,
        nvidia,
        admission_delay_s=DELAY_S,
        allocator_options={
            "make_dir": lambda path: None,
            "make_file": lambda p, s: None,
            "verifier": verifier,
        },
    ).start()
    try:
        signed = bound_pod(
            cluster,
            nvidia,
            gpu_pod("signed", ctr("main", gpu=1, gpumem=1000, gpucores=10)),
            "node-a",
            signer=signer,
        )
        unsigned = bound_pod(
            cluster, nvidia, gpu_pod("unsigned", ctr("main", gpu=1, gpumem=1000)), "node-a"
        )
        forged = gpu_pod("forged", ctr("main", gpu=1, gpumem=1000, gpucores=10))
        forged["metadata"]["annotations"] = dict(signed["metadata"]["annotations"])
        created = cluster.add_pod(forged)
        cluster.bind_pod("default", "forged", uid=created["metadata"]["uid"], node="node-a")
        uids = [p["metadata"]["uid"] for p in (signed, unsigned, created)]
        assert k.wait_admitted(uids, timeout_s=10)
    finally:
        k.stop()
    assert keys.NODE_LOCK not in (cluster.get_node("node-a")["metadata"].get("annotations") or {})
    ok = k.admissions[uids[0]]
    assert ok.error is None, ok.error
    assert pod_annotations(cluster, "signed")[keys.BIND_PHASE] == keys.BIND_PHASE_SUCCESS
    assert k.admissions[uids[1]].error is not None  # unsigned, and no lock names it
    assert k.admissions[uids[2]].error is not None  # the signature is another pod's
    for name in ("unsigned", "forged"):
        assert pod_annotations(cluster, name)[keys.BIND_PHASE] != keys.BIND_PHASE_SUCCESS
