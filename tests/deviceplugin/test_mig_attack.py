"""The issue-24 attack run on MIG reservations (after item 14): a tenant whose pod was
already handed its instance rewrites its reservation (past the webhook, as item 14's
test does) onto the slot the scheduler gives the *next* pod. The device plugin counted
every live reservation as a holder, so the next pod's Allocate was refused ("one live
pod default/evil holds") and its instance stayed blocked for as long as the tenant's pod
lived. What this device plugin handed a pod's container position is its own record: a
reservation that names another slot for a position already realised is a rewrite and
holds nothing.

Real pynvml against the stand-in libnvidia-ml (``test_mig_mode``'s harness)."""

from __future__ import annotations

import textwrap

import pytest

from .test_mig_mode import FORGE, mig_gpus, run  # noqa: F401 (mig_gpus: a fixture)


@pytest.mark.parametrize("mode", [None, "mig"], ids=["static", "dynamic"])
def test_a_realised_tenant_rewriting_its_reservation_onto_the_next_pods_slot_blocks_nothing(
    mig_gpus,  # noqa: F811
    fake_nvml_dir,
    tmp_path,
    mode,
):
    out = run(
        mig_gpus,
        fake_nvml_dir,
        tmp_path,
        FORGE
        + textwrap.dedent(f"""
        MODE = {mode!r}
        nvml = nvnode.current().nvml
        if MODE is None:   # static: what an admin made, two 1g.10gb
            nvml.create_mig_instance(0, 0, 0, 1)
            nvml.create_mig_instance(0, 0, 1, 1)
        cluster, agent, loop, allocator, state = start(MODE)
        out["evil"] = place(cluster, agent, allocator, state, "evil", gpu=1, gpumem=5000)
        bind_only(cluster, agent, "victim", gpu=1, gpumem=5000)
        if MODE == "mig":  # the victim's instance exists already (a retried Allocate)
            mine = json.loads(cluster.get_pod("default", "victim")["metadata"]["annotations"][
                "hami.io/vgpu-mig-allocations"])[0]
            p = mine["placement"]
            nvml.create_mig_instance(0, 0, p["start"], p["size"])
        forge_onto(cluster, "evil", cluster.get_pod("default", "victim"))
        out["victim"] = allocate_one(cluster, allocator, state, "victim")
        out["phase"] = cluster.get_pod("default", "victim")["metadata"]["annotations"][
            "hami.io/bind-phase"]
        """),
    )
    assert "envs" in out["victim"], out["victim"]
    assert out["phase"] == "success"
    evil_uuid = out["evil"]["envs"]["NVIDIA_VISIBLE_DEVICES"]
    assert out["victim"]["envs"]["NVIDIA_VISIBLE_DEVICES"] != evil_uuid
