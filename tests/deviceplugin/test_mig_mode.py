"""MIG on the node (issue #17 items 1-2): the device plugin against the real pynvml and
the stand-in libnvidia-ml.so.1 with its MIG calls (fakenvml/fake_nvml.c), in child
processes (the loader reads LD_LIBRARY_PATH only when a process starts). GPU and compute
instances live in the stand-in's state file, so they outlive a device plugin that
crashes, as on a real GPU.

Dynamic MIG (``operatingmode: mig``): the inventory offers the GPU's profiles and
placements, bind reserves one, Allocate creates it and gives the container its MIG UUID
and nothing of the shim, the pod annotation gets the runtime triple, and an instance no
live pod holds is destroyed (after the pod ends, and at the start of a restarted
plugin). Static MIG: existing instances are offered and handed out, never created or
destroyed."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from .conftest import FakeGpus

REPO = Path(__file__).resolve().parents[2]
GPU = "GPU-00000000-1111-2222-3333-444455556666"
MIG_KEY = "hami.io/vgpu-mig-allocations"

PRELUDE = """
import json, os, time
from pathlib import Path
from hami_core.cluster import MemoryCluster
from hami_core.deviceplugin import Allocator, NodeAgent
from hami_core.deviceplugin.loop import HealthLoop
from hami_core.deviceplugin.state import DeviceState
from hami_core.errors import HamiError
from hami_core.protocol.inventory import decode_inventory
from hami_core.protocol.nodeconfig import parse_node_overrides
from hami_core.scheduling.scheduler import Scheduler
from hami_nvidia import node as nvnode
from tests.deviceplugin.conftest import ctr, gpu_pod, nvidia_manager

NODE = "node-a"
PODS = Path(os.environ["PODS_FILE"])
out = {}

def start(mode=None, strategy=None, **entry_keys):
    cluster = MemoryCluster()
    cluster.add_node({"metadata": {"name": NODE}})
    if PODS.exists():
        for p in json.loads(PODS.read_text()):
            cluster.add_pod(p)
    entry = {"name": NODE}
    if mode:
        entry["operatingmode"] = mode
    if strategy:
        entry["migstrategy"] = strategy
    entry.update(entry_keys)
    agent = NodeAgent(cluster, nvidia_manager(Path(os.environ["HOOK_DIR"])), backend="nvidia",
                      vendor="NVIDIA", node=NODE,
                      overrides=parse_node_overrides({"nodeconfig": [entry]}, node=NODE))
    state = DeviceState()
    loop = HealthLoop(agent, state, cluster, health_interval_s=1, register_interval_s=30)
    loop.first_round()
    allocator = Allocator(cluster, agent.manager, vendor="NVIDIA", node=NODE,
                          known_ids=state.known_ids, node_devices=lambda: state.devices)
    return cluster, agent, loop, allocator, state

def inventory(cluster):
    ann = cluster.get_node(NODE)["metadata"]["annotations"]["hami.io/node-nvidia-register"]
    return json.loads(ann)

def place(cluster, agent, allocator, state, name, annotations=None, **limits):
    p = gpu_pod(name, ctr("main", **limits))
    if annotations:
        p["metadata"]["annotations"] = annotations
    created = cluster.add_pod(p)
    meta = created["metadata"]
    try:
        Scheduler(cluster, agent.manager).bind("default", name, uid=meta["uid"], node=NODE)
    except HamiError as exc:
        cluster.delete_pod("default", name)
        return {"refused": str(exc)}
    pod = cluster.get_pod("default", name)
    uuid = pod["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"].split(",")[0]
    ids = sorted(i for i in state.known_ids() if i.startswith(uuid))
    try:
        (answer,) = allocator.allocate([[ids[0]]])
    except HamiError as exc:
        return {"failed": str(exc), "pod": cluster.get_pod("default", name)}
    cluster.set_pod_phase("default", name, "Running")
    return {"envs": dict(answer.envs), "mounts": [m.container_path for m in answer.mounts],
            "files": sorted(answer.files), "pod": cluster.get_pod("default", name)}

def instances():
    return [[m.gpu_instance_id, m.profile_id, m.start, m.size, m.mig_uuid]
            for m in nvnode.current().nvml.mig_instances(0)]

def save(cluster):
    PODS.write_text(json.dumps(cluster.list_pods()))
"""


@pytest.fixture
def mig_gpus(tmp_path: Path) -> FakeGpus:
    """One A100-SXM4-80GB in MIG mode (the stand-in's default MIG profiles), no instance."""
    return FakeGpus(
        tmp_path / "fake-nvml.json",
        tmp_path / "sys",
        [{"uuid": GPU, "name": "NVIDIA A100-SXM4-80GB", "memory_mib": 81920, "mig": True}],
    )


def run(gpus: FakeGpus, lib: Path, tmp_path: Path, body: str) -> dict[str, Any]:
    script = PRELUDE + textwrap.dedent(body) + "\nprint(json.dumps(out))\n"
    env = {
        **os.environ,
        **gpus.env(lib),
        "HOOK_DIR": str(tmp_path / "vgpu"),
        "PODS_FILE": str(tmp_path / "pods.json"),
    }
    proc = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def mig_ann(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return json.loads(pod["metadata"]["annotations"]["hami.io/vgpu-mig-allocations"])


def test_dynamic_mig_creates_the_reserved_instance_at_allocate_and_frees_it_after_the_pod(
    mig_gpus, fake_nvml_dir, tmp_path
):
    out = run(
        mig_gpus,
        fake_nvml_dir,
        tmp_path,
        """
        cluster, agent, loop, allocator, state = start("mig")
        out["inventory"] = inventory(cluster)
        out["a"] = place(cluster, agent, allocator, state, "a", gpu=1, gpumem=30000)
        out["b"] = place(cluster, agent, allocator, state, "b", gpu=1, gpumem=5000)
        out["after_create"] = instances()
        loop.release(state.devices)           # both pods live: nothing goes
        out["kept"] = instances()
        cluster.set_pod_phase("default", "a", "Succeeded")
        loop.release(state.devices)           # just made: kept for the grace period
        out["grace"] = instances()
        nvnode.current().mig.clock = lambda: time.monotonic() + 3600
        loop.release(state.devices)
        out["after_release"] = instances()
        """,
    )
    inv = out["inventory"][0]
    assert inv["mode"] == "mig" and inv["devmem"] == 81920 and inv["count"] == 7
    assert [p["name"] for p in inv["migProfiles"]] == [
        "1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb", "1g.20gb",
    ]  # fmt: skip
    a, b = out["a"], out["b"]
    # The container sees its instance only: its MIG UUID, and nothing of the shim.
    (ia,) = mig_ann(a["pod"])
    (ib,) = mig_ann(b["pod"])
    assert (ia["profile"], ia["placement"]) == ("3g.40gb", {"start": 4, "size": 4})
    assert (ib["profile"], ib["placement"]) == ("1g.10gb", {"start": 3, "size": 1})
    assert a["envs"] == {"NVIDIA_VISIBLE_DEVICES": ia["migUUID"]}
    assert ia["migUUID"].startswith("MIG-") and ia["migUUID"] != ib["migUUID"]
    assert a["mounts"] == [] and a["files"] == []
    assert {k for k in ia} >= {"migUUID", "gpuInstanceID", "computeInstanceID"}
    assert a["pod"]["metadata"]["annotations"]["hami.io/bind-phase"] == "success"
    # NVML holds exactly the two instances, where the annotations say.
    assert sorted((s, n, u) for _, _, s, n, u in out["after_create"]) == [
        (3, 1, ib["migUUID"]),
        (4, 4, ia["migUUID"]),
    ]
    assert out["kept"] == out["after_create"] and out["grace"] == out["after_create"]
    assert [u for *_, u in out["after_release"]] == [ib["migUUID"]]


def test_a_restarted_device_plugin_frees_what_a_crashed_one_left_and_keeps_what_pods_hold(
    mig_gpus, fake_nvml_dir, tmp_path
):
    first = run(
        mig_gpus,
        fake_nvml_dir,
        tmp_path,
        """
        cluster, agent, loop, allocator, state = start("mig")
        out["a"] = place(cluster, agent, allocator, state, "a", gpu=1, gpumem=5000)
        out["b"] = place(cluster, agent, allocator, state, "b", gpu=1, gpumem=15000)
        save(cluster)
        out["instances"] = instances()
        os._exit(0)  # a crash: no cleanup of any kind
        """.replace("os._exit(0)", "print(json.dumps(out)); os._exit(0)"),
    )
    assert len(first["instances"]) == 2
    pods = json.loads((tmp_path / "pods.json").read_text())
    pods = [p for p in pods if p["metadata"]["name"] != "a"]  # pod a was deleted meanwhile
    (tmp_path / "pods.json").write_text(json.dumps(pods))

    second = run(
        mig_gpus,
        fake_nvml_dir,
        tmp_path,
        """
        out["before"] = instances()
        cluster, agent, loop, allocator, state = start("mig")   # first round releases
        out["after"] = instances()
        """,
    )
    (kept,) = mig_ann(first["b"]["pod"])
    assert len(second["before"]) == 2
    assert [u for *_, u in second["after"]] == [kept["migUUID"]]


def test_static_mig_hands_out_the_existing_instances_and_creates_nothing(
    mig_gpus, fake_nvml_dir, tmp_path
):
    out = run(
        mig_gpus,
        fake_nvml_dir,
        tmp_path,
        """
        nvml = nvnode.current().nvml
        nvml.create_mig_instance(0, 0, 0, 1)   # what an admin made: 1g.10gb at 0, 3g.40gb at 4
        nvml.create_mig_instance(0, 2, 4, 4)
        made = instances()
        cluster, agent, loop, allocator, state = start()   # a hami-core node
        out["inventory"] = inventory(cluster)
        out["big"] = place(cluster, agent, allocator, state, "big", gpu=1, gpumem=30000)
        out["small"] = place(cluster, agent, allocator, state, "small", gpu=1, gpumem=2000)
        out["third"] = place(cluster, agent, allocator, state, "third", gpu=1, gpumem=2000)
        cluster.delete_pod("default", "big")
        nvnode.current().mig.clock = lambda: time.monotonic() + 3600
        loop.release(state.devices)
        out["made"], out["after"] = made, instances()
        """,
    )
    inv = out["inventory"][0]
    assert inv["mode"] == "mig" and inv["count"] == 2
    assert [(p["name"], p["placements"]) for p in inv["migProfiles"]] == [
        ("1g.10gb", [{"start": 0, "size": 1}]),
        ("3g.40gb", [{"start": 4, "size": 4}]),
    ]
    uuid_of = {(s, n): u for _, _, s, n, u in out["made"]}
    assert out["big"]["envs"] == {"NVIDIA_VISIBLE_DEVICES": uuid_of[(4, 4)]}
    assert out["small"]["envs"] == {"NVIDIA_VISIBLE_DEVICES": uuid_of[(0, 1)]}
    assert "CardMigTopologyInfeasible" in out["third"]["refused"] or (
        "CardTimeSlicingExhausted" in out["third"]["refused"]
    )
    assert out["after"] == out["made"]  # static instances are the administrator's


def test_a_tampered_reservation_is_refused_at_allocate_and_nothing_is_created(
    mig_gpus, fake_nvml_dir, tmp_path
):
    out = run(
        mig_gpus,
        fake_nvml_dir,
        tmp_path,
        """
        cluster, agent, loop, allocator, state = start("mig")
        p = gpu_pod("evil", ctr("main", gpu=1, gpumem=5000))
        created = cluster.add_pod(p)
        Scheduler(cluster, agent.manager).bind("default", "evil", uid=created["metadata"]["uid"], node=NODE)
        ann = cluster.get_pod("default", "evil")["metadata"]["annotations"]
        # Past the webhook somehow: the reservation asks for the whole GPU instead.
        forged = json.loads(ann["hami.io/vgpu-mig-allocations"])
        forged[0]["profile"], forged[0]["placement"] = "7g.80gb", {"start": 0, "size": 3}
        cluster.patch_pod_metadata("default", "evil",
                                   annotations={"hami.io/vgpu-mig-allocations": json.dumps(forged)})
        ids = sorted(state.known_ids())
        try:
            allocator.allocate([[ids[0]]])
        except HamiError as exc:
            out["error"] = str(exc)
        out["phase"] = cluster.get_pod("default", "evil")["metadata"]["annotations"]["hami.io/bind-phase"]
        out["instances"] = instances()
        """,
    )
    assert "offers no MIG instance 7g.80gb at slices 0+3" in out["error"]
    assert out["phase"] == "failed"
    assert out["instances"] == []


def test_a_gpu_with_mig_off_on_a_mig_node_is_not_advertised(fake_gpus, fake_nvml_dir, tmp_path):
    out = run(
        fake_gpus,
        fake_nvml_dir,
        tmp_path,
        """
        cluster, agent, loop, allocator, state = start("mig")
        out["inventory"] = inventory(cluster)
        """,
    )
    assert out["inventory"] == []


def test_a_profile_request_of_two_gets_two_instances_of_one_gpu_static_and_dynamic(
    mig_gpus, fake_nvml_dir, tmp_path
):
    # nvidia.com/mig-1g.10gb: 2 as the webhook leaves it (nvidia.com/gpu: 2 + the profile
    # in HAMI_MIG_PROFILE): two instances, several per GPU, each named by its MIG UUID
    out = run(
        mig_gpus,
        fake_nvml_dir,
        tmp_path,
        """
        def two(cluster, allocator, state, name):
            c = ctr("main", gpu=2, gpucores=0)
            c["env"] = [{"name": "HAMI_MIG_PROFILE", "value": "1g.10gb"}]
            created = cluster.add_pod(gpu_pod(name, c))
            Scheduler(cluster, agent.manager).bind(
                "default", name, uid=created["metadata"]["uid"], node=NODE)
            ids = sorted(i for i in state.known_ids() if i.startswith("GPU-"))
            (answer,) = allocator.allocate([ids[:2]])
            cluster.set_pod_phase("default", name, "Running")
            return dict(answer.envs), cluster.get_pod("default", name)

        nvml = nvnode.current().nvml
        for s in (0, 1, 2):   # what an admin made: three 1g.10gb
            nvml.create_mig_instance(0, 0, s, 1)
        made = instances()
        cluster, agent, loop, allocator, state = start()
        out["static"], _ = two(cluster, allocator, state, "s1")
        out["static_made"], out["static_after"] = made, instances()
        for m in nvml.mig_instances(0):
            nvml.destroy_mig_instance(0, m.gpu_instance_id)
        PODS.unlink(missing_ok=True)
        cluster, agent, loop, allocator, state = start(mode="mig")
        out["dyn1"], p1 = two(cluster, allocator, state, "d1")
        out["dyn2"], p2 = two(cluster, allocator, state, "d2")
        out["dyn_ann"] = [p1["metadata"]["annotations"]["hami.io/vgpu-mig-allocations"],
                          p2["metadata"]["annotations"]["hami.io/vgpu-mig-allocations"]]
        out["dyn_after"] = instances()
        """,
    )
    static_uuids = out["static"]["NVIDIA_VISIBLE_DEVICES"].split(",")
    made = {u for *_, u in out["static_made"]}
    assert len(static_uuids) == 2 and len(set(static_uuids)) == 2 and set(static_uuids) <= made
    assert out["static_after"] == out["static_made"]  # static: nothing created
    d1 = out["dyn1"]["NVIDIA_VISIBLE_DEVICES"].split(",")
    d2 = out["dyn2"]["NVIDIA_VISIBLE_DEVICES"].split(",")
    assert len(set(d1 + d2)) == 4  # four instances, never one twice
    assert {u for *_, u in out["dyn_after"]} == set(d1 + d2)
    placements = sorted(
        (a["placement"]["start"], a["placement"]["size"])
        for ann in out["dyn_ann"]
        for a in json.loads(ann)
    )
    assert len(placements) == 4
    for (s1, n1), (s2, _) in itertools.pairwise(placements):
        assert s1 + n1 <= s2  # never overlapping


def test_hamis_device_list_of_three_instances_of_one_gpu_gets_those_three_in_order(
    mig_gpus, fake_nvml_dir, tmp_path
):
    # The list HAMi writes for three 1g.10gb of one GPU names the GPU three times
    # (tests/backends/nvidia/test_mig_device_list.py); kubelet asks three IDs and the
    # container gets the instance of each reservation, in deviceIndex order.
    out = run(
        mig_gpus,
        fake_nvml_dir,
        tmp_path,
        """
        nvml = nvnode.current().nvml
        for s in (4, 5, 6):   # what an admin made: three 1g.10gb
            nvml.create_mig_instance(0, 0, s, 1)
        cluster, agent, loop, allocator, state = start()
        c = ctr("main", gpu=3, gpucores=0)
        c["env"] = [{"name": "HAMI_MIG_PROFILE", "value": "1g.10gb"}]
        created = cluster.add_pod(gpu_pod("p", c))
        Scheduler(cluster, agent.manager).bind("default", "p", uid=created["metadata"]["uid"],
                                               node=NODE)
        out["bound"] = dict(cluster.get_pod("default", "p")["metadata"]["annotations"])
        ids = sorted(i for i in state.known_ids() if i.startswith("GPU-"))
        (answer,) = allocator.allocate([ids[:3]])
        out["envs"] = dict(answer.envs)
        out["after"] = cluster.get_pod("default", "p")["metadata"]["annotations"]
        out["instances"] = instances()
        """,
    )
    entry = f"{GPU},NVIDIA,9856,15:"
    assert out["bound"]["hami.io/vgpu-devices-allocated"] == entry * 3 + ";"
    by_start = {start: uuid for _, _, start, _, uuid in out["instances"]}
    assert [a["placement"]["start"] for a in json.loads(out["bound"][MIG_KEY])] == [6, 5, 4]
    assert out["envs"]["NVIDIA_VISIBLE_DEVICES"] == ",".join(by_start[s] for s in (6, 5, 4))
    realised = json.loads(out["after"][MIG_KEY])
    assert [(a["deviceIndex"], a["migUUID"]) for a in realised] == [
        (i, by_start[s]) for i, s in enumerate((6, 5, 4))
    ]
    assert "CUDA_DEVICE_MEMORY_LIMIT_0" not in out["envs"]  # MIG: no shim


# -- issue 24 item 14: an instance another live pod holds; one unreadable reservation ----

FORGE = """
def bind_only(cluster, agent, name, **limits):
    created = cluster.add_pod(gpu_pod(name, ctr("main", **limits)))
    Scheduler(cluster, agent.manager).bind("default", name, uid=created["metadata"]["uid"],
                                           node=NODE)
    return json.loads(cluster.get_pod("default", name)["metadata"]["annotations"][
        "hami.io/vgpu-mig-allocations"])

def forge_onto(cluster, name, victim):
    # The tenant patches its own pod after bind: its reservation now names the victim's
    # instance (same GPU, profile and placement), realised triple copied too.
    mine = json.loads(cluster.get_pod("default", name)["metadata"]["annotations"][
        "hami.io/vgpu-mig-allocations"])
    theirs = json.loads(victim["metadata"]["annotations"]["hami.io/vgpu-mig-allocations"])[0]
    for k in ("profile", "placement", "migUUID", "gpuInstanceID", "computeInstanceID"):
        if k in theirs:
            mine[0][k] = theirs[k]
    cluster.patch_pod_metadata("default", name,
                               annotations={"hami.io/vgpu-mig-allocations": json.dumps(mine)})

def allocate_one(cluster, allocator, state, name):
    uuid = cluster.get_pod("default", name)["metadata"]["annotations"][
        "hami.io/vgpu-devices-allocated"].split(",")[0]
    ids = sorted(i for i in state.known_ids() if i.startswith(uuid))
    try:
        (answer,) = allocator.allocate([[ids[0]]])
    except HamiError as exc:
        return {"error": str(exc)}
    return {"envs": dict(answer.envs)}
"""


@pytest.mark.parametrize("mode", ["mig", None], ids=["dynamic", "static"])
def test_a_tenant_forging_its_reservation_onto_a_live_pods_instance_is_refused(
    mig_gpus, fake_nvml_dir, tmp_path, mode
):
    out = run(
        mig_gpus,
        fake_nvml_dir,
        tmp_path,
        FORGE
        + textwrap.dedent(f"""
        MODE = {mode!r}
        if MODE is None:   # static: what an admin made, two 1g.10gb
            nvml = nvnode.current().nvml
            nvml.create_mig_instance(0, 0, 0, 1)
            nvml.create_mig_instance(0, 0, 1, 1)
        cluster, agent, loop, allocator, state = start(MODE)
        out["victim"] = place(cluster, agent, allocator, state, "victim", gpu=1, gpumem=5000)
        out["before"] = instances()
        bind_only(cluster, agent, "evil", gpu=1, gpumem=5000)
        forge_onto(cluster, "evil", out["victim"]["pod"])
        out["evil"] = allocate_one(cluster, allocator, state, "evil")
        out["phase"] = cluster.get_pod("default", "evil")["metadata"]["annotations"][
            "hami.io/bind-phase"]
        out["after"] = instances()
        """),
    )
    (held,) = mig_ann(out["victim"]["pod"])
    assert "envs" not in out["evil"], out["evil"]  # never the victim's MIG UUID
    assert "default/victim" in out["evil"]["error"] and "holds" in out["evil"]["error"]
    assert out["phase"] == "failed"
    assert out["after"] == out["before"]  # the victim's instance untouched, nothing made
    assert held["migUUID"] in [u for *_, u in out["after"]]


def test_a_slot_freed_by_a_gone_pod_is_handed_to_the_next_pod_without_waiting_for_a_round(
    mig_gpus, fake_nvml_dir, tmp_path
):
    # The scheduler frees a slot once its pod is gone; the next pod placed there must get
    # it at Allocate although no release round ran in between (no false "held").
    out = run(
        mig_gpus,
        fake_nvml_dir,
        tmp_path,
        FORGE
        + textwrap.dedent("""
        cluster, agent, loop, allocator, state = start("mig")
        out["a"] = place(cluster, agent, allocator, state, "a", gpu=1, gpumem=5000)
        cluster.delete_pod("default", "a")
        out["b"] = place(cluster, agent, allocator, state, "b", gpu=1, gpumem=5000)
        out["after"] = instances()
        """),
    )
    assert "failed" not in out["b"], out["b"]
    (ia,) = mig_ann(out["a"]["pod"])
    (ib,) = mig_ann(out["b"]["pod"])
    assert ib["placement"] == ia["placement"]
    assert out["b"]["envs"] == {"NVIDIA_VISIBLE_DEVICES": ib["migUUID"]}
    assert [u for *_, u in out["after"]] == [ib["migUUID"]]


@pytest.mark.parametrize("bad", ['"{not json"', '"[" * 100000'], ids=["not-json", "deep"])
def test_one_unreadable_reservation_skips_only_that_pod_and_is_reported(
    mig_gpus, fake_nvml_dir, tmp_path, bad
):
    out = run(
        mig_gpus,
        fake_nvml_dir,
        tmp_path,
        FORGE
        + f"BAD = {bad}\n"
        + textwrap.dedent("""
        cluster, agent, loop, allocator, state = start("mig")
        out["gone"] = place(cluster, agent, allocator, state, "gone", gpu=1, gpumem=5000)
        out["bad"] = place(cluster, agent, allocator, state, "bad", gpu=1, gpumem=15000)
        out["ok"] = place(cluster, agent, allocator, state, "ok", gpu=1, gpumem=30000)
        cluster.delete_pod("default", "gone")
        cluster.patch_pod_metadata("default", "bad",
                                   annotations={"hami.io/vgpu-mig-allocations": BAD})
        nvnode.current().mig.clock = lambda: time.monotonic() + 3600
        loop.release(state.devices)
        loop.release(state.devices)   # a second round: still one event, not one per round
        out["after"] = instances()
        out["events"] = [[e.name, e.type, e.reason, e.message] for e in cluster.events]
        """),
    )
    (gone,) = mig_ann(out["gone"]["pod"])
    (bad,) = mig_ann(out["bad"]["pod"])
    (ok,) = mig_ann(out["ok"]["pod"])
    left = {u for *_, u in out["after"]}
    # the gone pod's instance is freed although another pod's reservation is unreadable;
    # the pod with the unreadable reservation keeps the instance it was given
    assert left == {bad["migUUID"], ok["migUUID"]}, (gone, left)
    warned = [e for e in out["events"] if e[0] == "bad" and e[1] == "Warning"]
    assert len(warned) == 1, out["events"]
    assert "hami.io/vgpu-mig-allocations" in warned[0][3]
