"""Changing a node's ``migstrategy`` (or to dynamic MIG) while pods hold its GPUs (MIG
leftovers item 3): the restarted device plugin would publish the same instances under
other UUIDs, the scheduler would no longer count the pods' instances as held, and hand
them out again (on a dynamic MIG node it would even destroy them). So it refuses to
start, naming the pods and devices, publishes and destroys nothing, and starts once the
pods are gone. A pod our scheduler did not place cannot block it with a forged list.
Against the real pynvml and the stand-in NVML, in child processes (``test_mig_mode.run``),
the pods kept across restarts (``save``)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from .conftest import FakeGpus
from .test_mig_mode import run
from .test_mig_single import GPUS, PLACE_N


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


#: one 1g.10gb pod placed under the node's strategy at the time, kept for the restart
HOLD = (
    PLACE_N
    + """
def hold(strategy, mode=None):
    nvml = nvnode.current().nvml
    for at in (0, 1, 2):
        nvml.create_mig_instance(0, 0, at, 1)
    nvml.create_mig_instance(1, 0, 6, 1)
    cluster, agent, loop, allocator, state = start(mode=mode, strategy=strategy)
    if strategy == "single":
        placed = place_n(cluster, agent, allocator, state, "a", 1)
    else:
        c = ctr("main", gpu=1, gpucores=0)
        c["env"] = [{"name": "HAMI_MIG_PROFILE", "value": "1g.10gb"}]
        created = cluster.add_pod(gpu_pod("a", c))
        Scheduler(cluster, agent.manager).bind("default", "a", uid=created["metadata"]["uid"],
                                               node=NODE)
        uuid = cluster.get_pod("default", "a")["metadata"]["annotations"][
            "hami.io/vgpu-devices-allocated"].split(",")[0]
        ids = sorted(i for i in state.known_ids() if i.startswith(uuid))
        (answer,) = allocator.allocate([ids[:1]])
        cluster.set_pod_phase("default", "a", "Running")
        placed = {"envs": dict(answer.envs), "uuids": [uuid]}
    save(cluster)
    return placed

def restart(**kw):
    try:
        cluster, *_ = start(**kw)
    except HamiError as exc:
        return {"error": str(exc)}
    return {"inventory": sorted(d["id"] for d in inventory(cluster))}

def end_pod():
    pods = json.loads(PODS.read_text())
    for p in pods:
        p.setdefault("status", {})["phase"] = "Succeeded"
    PODS.write_text(json.dumps(pods))
"""
)


@pytest.mark.parametrize(
    "before, after, held",
    [
        # none -> single: the pod names GPU 0, the node now publishes its instances
        ({"strategy": "none"}, {"strategy": "single"}, "now published as its MIG instances"),
        # single -> none: the pod names an instance, the node now publishes GPU 0 whole
        ({"strategy": "single"}, {"strategy": "none"}, "a MIG instance, now published inside"),
        # single -> dynamic MIG: same, and dynamic MIG would destroy the instance
        ({"strategy": "single"}, {"mode": "mig"}, "a MIG instance, now published inside"),
    ],
)
def test_a_strategy_change_under_a_pod_stops_the_start_until_the_pod_is_gone(
    two_mig_gpus, fake_nvml_dir, tmp_path, before, after, held
):
    out = run(
        two_mig_gpus,
        fake_nvml_dir,
        tmp_path,
        HOLD
        + textwrap.dedent(
            f"""
        out["placed"] = hold(**{before!r})
        out["made"] = sorted([*instances_of(0).values(), *instances_of(1).values()])
        out["refused"] = restart(**{after!r})
        out["kept"] = sorted([*instances_of(0).values(), *instances_of(1).values()])
        end_pod()
        out["after_pod"] = restart(**{after!r})
        """
        ),
    )
    (held_uuid,) = out["placed"]["uuids"]
    error = out["refused"]["error"]
    assert f"pod default/a holds {held_uuid} ({held}" in error, error
    assert "migstrategy" in error and "node node-a" in error
    assert "delete or drain those pods, or restore the previous migstrategy" in error
    # nothing destroyed (dynamic MIG releases what no pod names by its GPU)
    assert out["kept"] == out["made"]
    # the pod gone, the same configuration starts and publishes
    assert "inventory" in out["after_pod"], out["after_pod"]
    if after.get("strategy") == "single":
        assert held_uuid not in out["after_pod"]["inventory"]
        assert all(u.startswith("MIG-") for u in out["after_pod"]["inventory"])
    else:
        assert sorted(out["after_pod"]["inventory"]) == sorted(GPUS)


def test_the_same_strategy_restarts_with_the_pod_and_keeps_counting_it(
    two_mig_gpus, fake_nvml_dir, tmp_path
):
    out = run(
        two_mig_gpus,
        fake_nvml_dir,
        tmp_path,
        HOLD
        + textwrap.dedent(
            """
        out["placed"] = hold("single")
        cluster, agent, loop, allocator, state = start(strategy="single")
        out["inventory"] = sorted(d["id"] for d in inventory(cluster))
        out["next"] = place_n(cluster, agent, allocator, state, "b", 3)
        """
        ),
    )
    (held_uuid,) = out["placed"]["uuids"]
    assert held_uuid in out["inventory"] and len(out["inventory"]) == 4
    assert held_uuid not in out["next"]["uuids"]  # the held instance is not handed out


def test_a_pod_another_scheduler_placed_cannot_block_the_start_with_a_forged_list(
    two_mig_gpus, fake_nvml_dir, tmp_path
):
    out = run(
        two_mig_gpus,
        fake_nvml_dir,
        tmp_path,
        HOLD
        + textwrap.dedent(
            f"""
        nvml = nvnode.current().nvml
        nvml.create_mig_instance(0, 0, 0, 1)
        nvml.create_mig_instance(1, 0, 6, 1)
        forged = gpu_pod("forged", ctr("main", gpu=1))
        forged["spec"]["schedulerName"] = "default-scheduler"
        forged["spec"]["nodeName"] = NODE
        forged["metadata"]["annotations"] = {{
            "hami.io/vgpu-devices-allocated": "{GPUS[0]},NVIDIA,9856,15:;"}}
        forged["status"] = {{"phase": "Running"}}
        PODS.write_text(json.dumps([forged]))
        out["started"] = restart(strategy="single")
        """
        ),
    )
    assert "inventory" in out["started"], out["started"]
