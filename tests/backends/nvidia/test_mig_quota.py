"""Quota of MIG requests (issue #17 item 2): a request that names a profile
(``nvidia.com/mig-2g.20gb: N``) is charged the profile's memory and cores, N times, in
the namespace's quota at admission (the webhook reads the profile from the cluster's
inventories), at fit and in the usage after placement, so a quota the pod fits admits and
places it and one it does not fit denies it at admission naming the amounts. A count-only
pod on a ``single``-strategy node is charged its instances the same way once placed."""

from __future__ import annotations

from typing import Any

from hami_core.facts.quota import CORES, MEMORY, namespace_usage
from tests.backends.nvidia.test_mig_fit import mig_node
from tests.backends.nvidia.test_mig_single_fit import single_node
from tests.builders import container, pipeline, pod

NS = "team"


def mig(name: str, profile: str, n: int = 1) -> dict[str, Any]:
    c = {
        "name": "main",
        "image": "x",
        "resources": {"limits": {f"nvidia.com/mig-{profile}": str(n)}},
    }
    return pod(name, c, namespace=NS)


def quota(p, **hard: str) -> None:
    p.cluster.add_quota(
        {
            "metadata": {"name": "q", "namespace": NS},
            "spec": {"hard": {f"limits.nvidia.com/{k}": v for k, v in hard.items()}},
        }
    )


def used(p) -> dict[tuple[str, str], int]:
    return namespace_usage(
        p.cluster.list_pods(namespace=NS),
        p.manager.device_types(),
        scheduler_name="hami-scheduler",
    )


def test_a_profile_request_is_charged_the_profiles_memory_at_admission_and_after_placement():
    p = pipeline(mig_node(gpus=2))
    quota(p, gpumem="50000")
    first = p.submit(mig("a", "2g.20gb"))  # 19968 of 50000
    assert first.node == "node-m", first
    assert used(p).of("NVIDIA", MEMORY) == 19968  # what the instance really takes
    two = p.submit(mig("b", "2g.20gb", 2))  # 19968 + 2 x 19968 > 50000
    assert two.denied == (
        f"pod {NS}/b: exceeds quota q: limits.nvidia.com/gpumem 50000, used 19968, this pod 39936"
    )
    fits = p.submit(mig("c", "1g.10gb"))
    assert fits.node == "node-m" and used(p).of("NVIDIA", MEMORY) == 19968 + 9856
    exact = p.submit(mig("d", "1g.10gb"))  # 29824 + 9856 = 39680 <= 50000
    assert exact.node == "node-m"
    over = p.submit(mig("e", "1g.10gb", 2))  # 39680 + 19712 > 50000
    assert over.denied.endswith("used 39680, this pod 19712")


def test_the_cores_quota_charges_the_profiles_cores_too():
    p = pipeline(mig_node())
    quota(p, gpucores="40")
    assert p.submit(mig("a", "2g.20gb")).node == "node-m"  # 29 % of the GPU's SMs
    assert used(p).of("NVIDIA", CORES) == 29
    out = p.submit(mig("b", "1g.10gb"))  # 29 + 15 > 40
    assert out.denied.endswith("limits.nvidia.com/gpucores 40, used 29, this pod 15")


def test_a_profile_no_gpu_offers_is_left_to_fit_and_fits_nowhere():
    p = pipeline(mig_node())
    quota(p, gpumem="1")
    out = p.submit(mig("a", "2g.10gb"))
    assert not out.denied  # its memory is unknown until a GPU offers it
    assert out.node is None and out.filter.failed == {"node-m": "1/1 CardMigTopologyInfeasible"}


def test_a_count_only_pod_on_a_single_strategy_node_is_charged_its_instances():
    p = pipeline(single_node())
    quota(p, gpumem="20000")
    two = p.submit(pod("a", container(gpu=2), namespace=NS))
    assert two.node == "node-s" and used(p).of("NVIDIA", MEMORY) == 2 * 9856
    # admission cannot size a count-only request (the whole of each device): fit does
    one = p.submit(pod("b", container(gpu=1), namespace=NS))
    assert one.node is None
    assert one.filter.failed["node-s"] == (
        "ResourceQuotaNotFit (quota q: limits.nvidia.com/gpumem 20000, used 19712, this pod 9856)"
    )


def test_the_inventories_are_read_only_when_the_namespace_limits_memory_or_cores():
    p = pipeline(mig_node())
    quota(p, gpu="4")  # a count quota: the profile's size matters to no limit
    reads = []
    list_nodes = p.cluster.list_nodes
    p.cluster.list_nodes = lambda: reads.append(1) or list_nodes()  # type: ignore[method-assign]
    before = len(reads)
    p.admission.review(mig("a", "2g.20gb", 2))
    assert len(reads) == before
    quota(p, gpumem="10")  # now memory is limited: read once, and denied by it
    out = p.admission.review(mig("b", "2g.20gb"))
    assert len(reads) == before + 1 and not out.allowed and "this pod 19968" in out.message


def test_n_instances_on_one_gpu_are_charged_n_times_the_profile():
    # nvidia.com/mig-1g.10gb: 3 on one GPU: three instances of it, 3 x 9856 MiB, 3 x 15 %
    p = pipeline(mig_node())
    quota(p, gpumem="40000", gpucores="50")
    out = p.submit(mig("a", "1g.10gb", 3))
    assert out.node == "node-m", out
    (slices,) = out.allocation.devices["NVIDIA"]
    assert {d.uuid for d in slices} == {"GPU-m0"} and len(slices) == 3
    assert used(p).of("NVIDIA", MEMORY) == 3 * 9856
    assert used(p).of("NVIDIA", CORES) == 3 * 15
    more = p.submit(mig("b", "1g.10gb", 1))  # 45 + 15 > 50 cores
    assert more.denied.endswith("limits.nvidia.com/gpucores 50, used 45, this pod 15")
