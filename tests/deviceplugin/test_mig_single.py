"""The NVIDIA device plugin's ``single`` MIG strategy on the node (issue #17 item 1):
``migstrategy: single`` on an administrator-partitioned node publishes every MIG instance
as a device of its own, so a pod written for NVIDIA's device plugin (``nvidia.com/gpu:
N``, nothing else) gets N instances, from one GPU or several; ``Allocate`` hands out
their MIG UUIDs and nothing of the shim. A node NVIDIA's single strategy refuses (a GPU
with MIG off or without instances, instances of several profiles) stops the device
plugin at start naming the GPUs. Against the real pynvml and the stand-in NVML, in child
processes (``test_mig_mode.run``)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from .conftest import FakeGpus
from .test_mig_mode import mig_ann, run

GPUS = ("GPU-00000000-1111-2222-3333-444455556666", "GPU-00000000-1111-2222-3333-444455557777")

#: place N count-only instances; kubelet hands the device plugin one ID per instance.
PLACE_N = """
def place_n(cluster, agent, allocator, state, name, n):
    created = cluster.add_pod(gpu_pod(name, ctr("main", gpu=n)))
    try:
        Scheduler(cluster, agent.manager).bind("default", name, uid=created["metadata"]["uid"],
                                               node=NODE)
    except HamiError as exc:
        cluster.delete_pod("default", name)
        return {"refused": str(exc)}
    pod = cluster.get_pod("default", name)
    listed = pod["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"]
    uuids = [d.split(",")[0] for d in listed.rstrip(";").split(":") if d]
    (answer,) = allocator.allocate([[f"{u}-0" for u in uuids]])
    cluster.set_pod_phase("default", name, "Running")
    return {"envs": dict(answer.envs), "mounts": [m.container_path for m in answer.mounts],
            "uuids": uuids, "pod": cluster.get_pod("default", name)}

def instances_of(i):
    return {(m.start, m.size): m.mig_uuid for m in nvnode.current().nvml.mig_instances(i)}
"""


@pytest.fixture
def two_mig_gpus(tmp_path: Path) -> FakeGpus:
    """Two A100-SXM4-80GB in MIG mode, no instance yet."""
    return FakeGpus(
        tmp_path / "fake-nvml.json",
        tmp_path / "sys",
        [
            {"uuid": u, "name": "NVIDIA A100-SXM4-80GB", "memory_mib": 81920, "mig": True}
            for u in GPUS
        ],
    )


def test_single_strategy_publishes_each_instance_and_a_count_only_pod_gets_n_of_them(
    two_mig_gpus, fake_nvml_dir, tmp_path
):
    out = run(
        two_mig_gpus,
        fake_nvml_dir,
        tmp_path,
        PLACE_N
        + textwrap.dedent(
            """
        nvml = nvnode.current().nvml
        for at in (0, 1, 2):                    # the admin's 1g.10gb instances: 3 + 1
            nvml.create_mig_instance(0, 0, at, 1)
        nvml.create_mig_instance(1, 0, 6, 1)
        made = {**instances_of(0), **{("gpu1",) + k: v for k, v in instances_of(1).items()}}
        cluster, agent, loop, allocator, state = start(strategy="single")
        out["inventory"] = inventory(cluster)
        out["ids"] = sorted(state.known_ids())
        out["a"] = place_n(cluster, agent, allocator, state, "a", 3)
        out["b"] = place_n(cluster, agent, allocator, state, "b", 2)   # one instance left
        out["c"] = place_n(cluster, agent, allocator, state, "c", 1)
        out["d"] = place_n(cluster, agent, allocator, state, "d", 1)   # none left
        out["made"] = sorted(made.values())
        out["after"] = sorted([*instances_of(0).values(), *instances_of(1).values()])
        """
        ),
    )
    inv = out["inventory"]
    # every instance is a device: its MIG UUID, one sharer, its own memory, all its cores
    assert sorted(d["id"] for d in inv) == out["made"] and len(inv) == 4
    for d in inv:
        assert d["id"].startswith("MIG-") and d["mode"] == "mig"
        assert (d["count"], d["devmem"], d["devcore"]) == (1, 9856, 100)
        assert d["type"] == "NVIDIA A100-SXM4-80GB"
        (p,) = d["migProfiles"]
        assert p["name"] == "1g.10gb" and len(p["placements"]) == 1
    assert sorted(d.get("index", 0) for d in inv) == [0, 0, 0, 1]
    # kubelet sees one nvidia.com/gpu per instance
    assert out["ids"] == sorted(f"{u}-0" for u in out["made"])
    a, c = out["a"], out["c"]
    assert len(set(a["uuids"])) == 3 and not set(a["uuids"]) & set(c["uuids"])
    # the container sees its instances only: their MIG UUIDs, no shim
    assert a["envs"] == {"NVIDIA_VISIBLE_DEVICES": ",".join(a["uuids"])}
    assert a["mounts"] == []
    assert [m["gpuUUID"] for m in mig_ann(a["pod"])] == a["uuids"]
    assert all(m["migUUID"] == m["gpuUUID"] for m in mig_ann(a["pod"]))
    assert a["pod"]["metadata"]["annotations"]["hami.io/bind-phase"] == "success"
    # 2 asked, 1 free: the count reason; none free: every instance is held
    assert "AllocatedCardsInsufficientRequest" in out["b"]["refused"]
    assert "CardTimeSlicingExhausted" in out["d"]["refused"]
    assert out["after"] == out["made"]  # static: nothing created or destroyed


@pytest.mark.parametrize(
    "setup, message",
    [
        (
            "nvml.create_mig_instance(0, 0, 0, 1); nvml.create_mig_instance(1, 2, 4, 4)",
            "the node's MIG instances are of several profiles (GPU 0: 1g.10gb, GPU 1: 3g.40gb)",
        ),
        ("nvml.create_mig_instance(0, 0, 0, 1)", "GPU 1 " + GPUS[1] + " has no MIG instance"),
    ],
)
def test_a_node_the_single_strategy_cannot_serve_stops_the_start_naming_the_gpus(
    two_mig_gpus, fake_nvml_dir, tmp_path, setup, message
):
    out = run(
        two_mig_gpus,
        fake_nvml_dir,
        tmp_path,
        f"""
        nvml = nvnode.current().nvml
        {setup}
        try:
            start(strategy="single")
        except HamiError as exc:
            out["error"] = str(exc)
        """,
    )
    assert message in out["error"] and "migstrategy: single" in out["error"]


def test_a_gpu_with_mig_off_on_a_single_strategy_node_stops_the_start(
    fake_gpus, fake_nvml_dir, tmp_path
):
    out = run(
        fake_gpus,
        fake_nvml_dir,
        tmp_path,
        """
        try:
            start(strategy="single")
        except HamiError as exc:
            out["error"] = str(exc)
        """,
    )
    assert "has MIG mode off" in out["error"] and "migstrategy: single" in out["error"]


def test_a_fault_on_a_gpu_makes_each_of_its_instances_unhealthy(
    two_mig_gpus, fake_nvml_dir, tmp_path
):
    out = run(
        two_mig_gpus,
        fake_nvml_dir,
        tmp_path,
        """
        nvml = nvnode.current().nvml
        for i, at in ((0, 0), (0, 1), (1, 0)):
            nvml.create_mig_instance(i, 0, at, 1)
        cluster, agent, loop, allocator, state = start(strategy="single")
        path = Path(os.environ["FAKE_NVML_CONFIG"])
        doc = json.loads(path.read_text())
        doc["events"].append({"device": 0, "xid": 79, "type": "xid"})   # GPU 0 off the bus
        path.write_text(json.dumps(doc))
        for _ in range(3):
            loop._round(0.0)
        out["inventory"] = inventory(cluster)
        """,
    )
    health = {d["id"]: (d.get("index", 0), bool(d.get("health"))) for d in out["inventory"]}
    assert sorted(health.values()) == [(0, False), (0, False), (1, True)]


def test_the_real_gpu_scripts_single_strategy_check_passes_on_the_stand_in(
    two_mig_gpus, fake_nvml_dir, tmp_path
):
    # shim/tests/gpu/modes_check.py's single-strategy view, run here over the stand-in
    # NVML (on a real GPU it runs over the driver), so the script cannot rot unseen
    out = run(
        two_mig_gpus,
        fake_nvml_dir,
        tmp_path,
        """
        import importlib.util
        spec = importlib.util.spec_from_file_location("modes_check", "shim/tests/gpu/modes_check.py")
        mc = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mc)
        mc.gpu_uuid = lambda gpu: "GPU-00000000-1111-2222-3333-444455556666"  # no nvidia-smi
        lib = nvnode.current().nvml
        small = min(lib.mig_profiles(0), key=lambda p: (p.memory_mib, p.slice_count))
        made = lib.create_mig_instance(0, small.profile_id, *small.placements[0])
        out["view"] = mc.single_strategy_view(lib, 0, made, small)
        out["mig_uuid"] = made.mig_uuid
        """,
    )
    assert out["view"]["ok"] is True
    assert out["view"]["devices"] == [
        {"id": out["mig_uuid"], "devmem": 9856, "count": 1, "profile": "1g.10gb"}
    ]


def test_an_instance_recreated_since_publication_fails_the_pod_instead_of_another_one(
    two_mig_gpus, fake_nvml_dir, tmp_path
):
    out = run(
        two_mig_gpus,
        fake_nvml_dir,
        tmp_path,
        PLACE_N
        + textwrap.dedent(
            """
            nvml = nvnode.current().nvml
            nvml.create_mig_instance(0, 0, 0, 1)
            nvml.create_mig_instance(1, 0, 0, 1)
            cluster, agent, loop, allocator, state = start(strategy="single")
            published = sorted(d.uuid for d in state.devices)
            # the administrator recreates GPU 0's instance after the publication
            (old,) = nvml.mig_instances(0)
            nvml.destroy_mig_instance(0, old.gpu_instance_id)
            nvml.create_mig_instance(0, 0, 0, 1)       # same place, a new MIG UUID
            out["old"], out["new"] = old.mig_uuid, nvml.mig_instances(0)[0].mig_uuid
            created = cluster.add_pod(gpu_pod("a", ctr("main", gpu=2)))
            Scheduler(cluster, agent.manager).bind("default", "a", uid=created["metadata"]["uid"], node=NODE)
            try:
                allocator.allocate([[f"{u}-0" for u in published]])
            except HamiError as exc:
                out["failed"] = str(exc)
            out["phase"] = cluster.get_pod("default", "a")["metadata"]["annotations"]["hami.io/bind-phase"]
            """
        ),
    )
    assert out["old"] != out["new"]
    assert out["phase"] == "failed"
    assert f"MIG instance {out['old']}" in out["failed"] and out["new"] in out["failed"]


def test_filterdevices_index_names_a_mig_instance_as_nvidias_device_plugin_does(
    two_mig_gpus, fake_nvml_dir, tmp_path
):
    # Under single each instance is a device; NVIDIA's device plugin numbers it
    # "<GPU index>:<MIG device index>" (nvidia-smi -L's "MIG ... Device <n>"), and so does
    # filterdevices.index: "0:1" leaves out GPU 0's second MIG device only.
    out = run(
        two_mig_gpus,
        fake_nvml_dir,
        tmp_path,
        PLACE_N
        + textwrap.dedent(
            """
        nvml = nvnode.current().nvml
        for at in (2, 0, 1):   # MIG device order (by GPU instance) is not placement order
            nvml.create_mig_instance(0, 0, at, 1)
        nvml.create_mig_instance(1, 0, 6, 1)
        by_gi = sorted(nvml.mig_instances(0), key=lambda m: m.gpu_instance_id)
        out["second"] = by_gi[1].mig_uuid
        out["second_start"] = by_gi[1].start
        out["all"] = sorted([*instances_of(0).values(), *instances_of(1).values()])
        cluster, agent, loop, allocator, state = start(
            strategy="single", filterdevices={"index": ["0:1"]})
        out["inventory"] = sorted(d["id"] for d in inventory(cluster))
        out["ids"] = sorted(state.known_ids())
        out["a"] = place_n(cluster, agent, allocator, state, "a", 3)
        out["b"] = place_n(cluster, agent, allocator, state, "b", 1)
        """
        ),
    )
    assert out["second_start"] == 0  # the second MIG device sits at slice 0
    kept = sorted(set(out["all"]) - {out["second"]})
    assert out["inventory"] == kept and len(kept) == 3
    assert out["ids"] == sorted(f"{u}-0" for u in kept)  # kubelet never sees it either
    assert sorted(out["a"]["uuids"]) == kept  # the three others serve a pod of three
    assert "refused" in out["b"]  # and the filtered one never serves anyone


@pytest.mark.parametrize(
    "strategy, filters, message",
    [
        (
            "single",
            {"index": [0]},
            "filterdevices.index: 0 is a whole GPU, but this node publishes its MIG "
            "instances as devices (migstrategy: single): name an instance by its index "
            "('0:0', '0:1')",
        ),
        (
            "single",
            {"uuid": [GPUS[1]]},
            f"filterdevices.uuid: {GPUS[1]} is a whole GPU, but this node publishes its MIG "
            "instances as devices",
        ),
        (
            "none",
            {"index": ["0:1"]},
            "filterdevices.index: '0:1' names a MIG instance, but this node publishes whole GPUs",
        ),
        ("single", {"index": ["0:x"]}, 'MIG instance indexes "<gpu>:<n>"'),
    ],
)
def test_a_filter_entry_that_addresses_no_published_device_stops_the_start(
    two_mig_gpus, fake_nvml_dir, tmp_path, strategy, filters, message
):
    out = run(
        two_mig_gpus,
        fake_nvml_dir,
        tmp_path,
        f"""
        nvml = nvnode.current().nvml
        for at in (0, 1):
            nvml.create_mig_instance(0, 0, at, 1)
        nvml.create_mig_instance(1, 0, 6, 1)
        try:
            start(strategy={strategy!r}, filterdevices={filters!r})
            out["error"] = None
        except HamiError as exc:
            out["error"] = str(exc)
        """,
    )
    assert out["error"] and message in out["error"], out["error"]
    assert "nodeconfig[node-a].filterdevices" in out["error"]


def test_an_instance_index_that_matches_nothing_is_logged_once_not_every_round(
    two_mig_gpus, fake_nvml_dir, tmp_path
):
    out = run(
        two_mig_gpus,
        fake_nvml_dir,
        tmp_path,
        """
        import logging
        seen = []
        class Keep(logging.Handler):
            def emit(self, record):
                seen.append(record.getMessage())
        logging.getLogger("hami_core.deviceplugin.agent").addHandler(Keep())
        logging.getLogger("hami_core.deviceplugin.agent").setLevel(logging.INFO)
        nvml = nvnode.current().nvml
        nvml.create_mig_instance(0, 0, 0, 1)
        nvml.create_mig_instance(1, 0, 6, 1)
        cluster, agent, loop, allocator, state = start(
            strategy="single", filterdevices={"index": ["0:5"]})
        for _ in range(3):
            agent.discover()
        out["warnings"] = [m for m in seen if "filterdevices.index" in m]
        out["inventory"] = len(inventory(cluster))
        """,
    )
    assert out["warnings"] == [
        "nodeconfig[node-a].filterdevices.index: no MIG instance 0:5 on this node"
    ]
    assert out["inventory"] == 2  # nothing left out
