"""What hami says about a MIG GPU (issue 24 item 5), seen with ``hami simulate``:

- "largest that fits" names a size a request then gets: the hint runs the same placement
  check as the fit (a hypothesis property over random MIG states and requests);
- a full MIG GPU reads 100 % of its compute held, not the 105 % its seven ``1g``
  instances book (simulate, ``hami top``, the scheduler's metrics);
- ``nvidia.com/gpucores`` on MIG is a floor on the profile's SM share: 50 % asked gets a
  profile with at least 50 %, never a ``1g`` at 15 % silently; none on the GPU:
  ``CardInsufficientCore``; the quota counts the profile's cores (the tenant who asks
  little memory and much compute gets no more than the quota);
- a full MIG GPU shows no free memory: free is what further instances could hold.
"""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner
from hami_nvidia import fit as nvfit
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hami_core.cli import cli
from hami_core.model import DevicePolicy, DeviceRequest, DeviceUsage, NodeInfo, ReasonCode
from hami_core.model.migusage import held_cores_pct, usable_free_memory_mib
from hami_core.scheduling.scheduler import Scheduler
from hami_core.servers.metrics import SchedulerMetrics
from hami_core.top import build_view
from tests.backends.nvidia.test_mig_fit import (
    A100,
    MigProfile,
    held,
    mig_gpu,
    mig_node,
    submit,
)
from tests.builders import cluster, container, manager, pipeline, pod
from tests.servers.test_scheduler_metrics import samples
from tests.simulate.helpers import EXAMPLES

NS = "team"


def request(memory: int, cores: int = 0, count: int = 1) -> DeviceRequest:
    return DeviceRequest(vendor="NVIDIA", count=count, memory_mib=memory, cores_pct=cores)


def fit_on(usages: list[DeviceUsage], req: DeviceRequest):
    node = NodeInfo(name="n", devices=tuple(u.device for u in usages))
    return nvfit.fit(req, node, usages, {}, DevicePolicy.BINPACK)


def book(usages: list[DeviceUsage], result) -> list[DeviceUsage]:
    """``usages`` with the instances of a fitting ``result`` held."""
    out = list(usages)
    for d in result.devices:
        i = next(n for n, u in enumerate(out) if u.device.uuid == d.uuid)
        out[i] = out[i].charged(memory_mib=d.memory_mib, cores_pct=d.cores_pct, mig=d.mig)
    return out


# -- (a) the hint names a size that is accepted -------------------------------------------

sizes = st.tuples(st.integers(1, 82000), st.sampled_from([0, 0, 10, 15, 30, 50, 60, 100]))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    gpus=st.integers(1, 2),
    earlier=st.lists(sizes, max_size=8),
    asked=sizes,
    count=st.integers(1, 3),
)
def test_every_largest_that_fits_answer_is_accepted_when_asked_for(gpus, earlier, asked, count):
    usages = [DeviceUsage(device=mig_gpu(f"GPU-m{i}", index=i)) for i in range(gpus)]
    for memory, cores in earlier:  # a random state reached by real placements
        result = fit_on(usages, request(memory, cores))
        if result.fits:
            usages = book(usages, result)
    memory, cores = asked
    result = fit_on(usages, request(memory, cores, count))
    if result.fits:
        return
    if result.largest_memory_mib is not None:
        again = fit_on(usages, request(result.largest_memory_mib, cores, count))
        assert again.fits, (usages, asked, count, result.largest_memory_mib, again)
    if result.largest_cores_pct is not None:
        again = fit_on(usages, request(memory, result.largest_cores_pct, count))
        # the cores hint keeps the request's memory where it is free (the probe's rule)
        free = max(u.free_memory_mib for u in usages)
        if memory <= free:
            assert again.fits, (usages, asked, count, result.largest_cores_pct, again)


def test_the_hint_is_the_largest_instance_with_a_free_placement():
    # a 3g at slices 4-7: 41728 MiB are unbooked, but the largest instance left is a
    # 3g/4g of 40192 MiB at slice 0
    usage = DeviceUsage(
        device=mig_gpu(), used_count=1, used_memory_mib=40192, mig_in_use=held(("3g.40gb", 4, 4))
    )
    result = fit_on([usage], request(41000))
    assert not result.fits and result.largest_memory_mib == 40192
    assert fit_on([usage], request(40192)).fits


def simulate_modes(tmp_path: Path, *args: str) -> str:
    """``hami simulate`` of the sharing-modes example and one more MIG pod asking 12000 MiB
    (after the example's pods the MIG GPU's 11904 MiB left unbooked sit under no free
    placement)."""
    extra = tmp_path / "extra.yaml"
    limits = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 12000}
    extra.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "mig-12000", "annotations": {"nvidia.com/vgpu-mode": "mig"}},
                "spec": {
                    "containers": [{"name": "main", "image": "x", "resources": {"limits": limits}}]
                },
            }
        )
    )
    out = CliRunner().invoke(
        cli,
        [
            "simulate",
            "--cluster",
            str(EXAMPLES / "cluster-modes.yaml"),
            str(EXAMPLES / "workloads-modes"),
            str(extra),
            *args,
        ],
    )
    assert out.exit_code == 0, out.output
    return out.output


def test_simulate_names_no_size_that_would_be_refused(tmp_path):
    # was: "largest that fits: 11904 MiB per GPU", and 11904 MiB was then refused
    # (CardMigTopologyInfeasible): every placement overlaps a held instance
    data = json.loads(simulate_modes(tmp_path, "-o", "json"))
    pods = {p["name"]: p for p in data["pods"]}
    for name in ("mig-12000", "mig-no-placement"):
        (miss,) = [e for e in pods[name]["explanation"] if e["node"] == "mig-node"]
        assert miss["largestMemoryMiB"] is None, miss
    text = simulate_modes(tmp_path, "--explain", "default/mig-12000")
    mig_node_part = text.split("mig-node:")[1].split("mps-node:")[0]
    assert "largest that fits" not in mig_node_part
    assert "0 MiB usable" in mig_node_part  # and it says why: no instance can be made


# -- (b), (d) a full MIG GPU: 100 % compute, no usable memory -----------------------------


def full_gpu_cluster(tmp_path: Path) -> tuple[Path, Path]:
    cluster_file = tmp_path / "cluster.yaml"
    modes = (EXAMPLES / "cluster-modes.yaml").read_text()
    cluster_file.write_text(modes.split("  - name: mps-node")[0])  # the MIG node only
    pods = tmp_path / "pods.yaml"
    docs = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"p{i}", "annotations": {"nvidia.com/vgpu-mode": "mig"}},
            "spec": {
                "containers": [
                    {
                        "name": "main",
                        "image": "x",
                        "resources": {"limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 5000}},
                    }
                ]
            },
        }
        for i in range(7)
    ]
    pods.write_text("\n---\n".join(json.dumps(d) for d in docs))
    return cluster_file, pods


def test_a_full_mig_gpu_reads_all_its_compute_held_and_no_memory_free_in_simulate(tmp_path):
    cluster_file, pods = full_gpu_cluster(tmp_path)
    args = ["simulate", "--cluster", str(cluster_file), str(pods)]
    out = CliRunner().invoke(cli, [*args, "-o", "json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert all(p["status"] == "placed" for p in data["pods"])
    (g,) = data["gpus"]
    assert g["usedMemoryMiB"] == 7 * 9856  # what the instances book, as HAMi's wire
    assert (g["usedCoresPct"], g["coresPct"]) == (100, 100)  # not 105/100
    assert g["freeMemoryMiB"] == 0  # 12928 MiB unbooked, but no instance can use them
    text = CliRunner().invoke(cli, args).output
    line = next(ln for ln in text.splitlines() if "/81920 MiB" in ln)
    assert "cores 100/100%" in line and "0 MiB usable" in line, line


def seven_small(gpus: int = 1):
    c = cluster(mig_node(gpus=gpus))
    sched = Scheduler(c, manager())
    for i in range(7):
        assert not isinstance(submit(sched, c, f"p{i}", 5000), str)
    return c, sched


def test_a_full_mig_gpu_reads_100_percent_and_no_free_memory_in_top_and_metrics():
    c, sched = seven_small()
    (row,) = build_view(c, manager()).devices
    assert (row.cores_allocated_pct, row.cores_total_pct) == (100, 100)
    assert row.memory_allocated_mib == 7 * 9856 and row.memory_free_mib == 0
    m = samples(SchedulerMetrics(sched))
    assert [v for _, v in m["hami_gpu_core_allocated_ratio"]] == [100.0]
    assert [v for _, v in m["hami_gpu_core_allocated_share"]] == [1.0]
    # per container, each 1g is a seventh of the GPU: the shares add up to 1, not 1.05
    shares = [v for _, v in m["hami_vgpu_core_allocated_share"]]
    assert len(shares) == 7 and abs(sum(shares) - 1.0) < 1e-9, shares


def test_held_compute_and_usable_memory_of_partly_used_mig_gpus():
    empty = DeviceUsage(device=mig_gpu())
    assert held_cores_pct(empty) == 0
    assert usable_free_memory_mib(empty) == 81152  # one 7g.80gb: 768 MiB no instance has
    half = DeviceUsage(
        device=mig_gpu(), used_count=1, used_memory_mib=40192, mig_in_use=held(("3g.40gb", 4, 4))
    )
    assert held_cores_pct(half) == 43  # 3 of 7 compute slices
    assert usable_free_memory_mib(half) == 40192  # of 41728 unbooked: one 3g/4g at 0
    split = DeviceUsage(
        device=mig_gpu(),
        used_count=2,
        used_memory_mib=2 * 9856,
        mig_in_use=held(("1g.10gb", 0, 1), ("1g.10gb", 4, 1)),
    )
    # 1-3 and 5-7 are free: 2g at 2 + 1g at 1 + 2g at ... the best set of free placements
    assert usable_free_memory_mib(split) == 9856 + 19968 + 9856 + 19968
    assert held_cores_pct(split) == 29  # 2 of 7 slices
    # a shared (non-MIG) GPU reads as booked
    shim = DeviceUsage(device=mig_gpu(profiles=()), used_memory_mib=1000, used_cores_pct=105)
    assert usable_free_memory_mib(shim) == 80920 and held_cores_pct(shim) == 105


# -- (c) gpucores on MIG -------------------------------------------------------------------


def test_gpucores_on_mig_gets_a_profile_with_at_least_that_compute():
    (d,) = fit_on([DeviceUsage(device=mig_gpu())], request(5000, 50)).devices
    assert d.mig.profile == "4g.40gb" and d.cores_pct == 58  # never a 1g at 15 %
    (d,) = fit_on([DeviceUsage(device=mig_gpu())], request(5000, 15)).devices
    assert d.mig.profile == "1g.10gb"  # 15 % is what a 1g has


def test_gpucores_no_profile_meets_is_insufficient_core_and_a_blocked_one_infeasible():
    small_only = tuple(p for p in A100 if p.cores_pct < 50)
    result = fit_on([DeviceUsage(device=mig_gpu(profiles=small_only))], request(5000, 50))
    assert result.device_reasons == {"GPU-m": ReasonCode.CARD_INSUFFICIENT_CORE}
    # the hint names the most compute an instance there has, and that is accepted
    assert result.largest_cores_pct == 43
    assert fit_on([DeviceUsage(device=mig_gpu(profiles=small_only))], request(5000, 43)).fits
    # a 1g at slice 0 blocks every profile of 50 % or more (4g and 7g start at 0)
    blocked = DeviceUsage(
        device=mig_gpu(), used_count=1, used_memory_mib=9856, mig_in_use=held(("1g.10gb", 0, 1))
    )
    result = fit_on([blocked], request(5000, 50))
    assert result.device_reasons == {"GPU-m": ReasonCode.CARD_MIG_TOPOLOGY_INFEASIBLE}


def test_simulate_says_which_profile_a_gpucores_request_got(tmp_path):
    cluster_file, _ = full_gpu_cluster(tmp_path)
    pods = tmp_path / "one.yaml"
    limits = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 5000, "nvidia.com/gpucores": 50}
    pods.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "half", "annotations": {"nvidia.com/vgpu-mode": "mig"}},
                "spec": {
                    "containers": [{"name": "main", "image": "x", "resources": {"limits": limits}}]
                },
            }
        )
    )
    out = CliRunner().invoke(cli, ["simulate", "--cluster", str(cluster_file), str(pods)])
    assert out.exit_code == 0, out.output
    line = next(ln for ln in out.output.splitlines() if "default/half" in ln)
    # the profile is named with what the instance is: the example's GPU offers 1g, 2g,
    # 3g (43 %) and 7g: the 7g.80gb, 100 % of the SMs (>= 50), not a 1g at 15 %
    assert "(mig 7g.80gb)" in line and "100%" in line, line


def test_a_tenant_asking_little_memory_and_much_compute_is_held_to_the_cores_quota():
    p = pipeline(mig_node())
    p.cluster.add_quota(
        {
            "metadata": {"name": "q", "namespace": NS},
            "spec": {"hard": {"limits.nvidia.com/gpucores": "50"}},
        }
    )
    ask = container(gpu=1, gpumem=1000, gpucores=50)
    out = p.submit(pod("grab", ask, namespace=NS))
    # the only profiles with >= 50 % are 58 % and 100 %: both exceed the quota of 50
    assert out.node is None and "ResourceQuotaNotFit" in str(out.filter.failed), out


def test_the_profile_list_of_a_gpu_without_slice_counts_reads_booked_cores_capped():
    bare = tuple(
        MigProfile(
            name=p.name, memory_mib=p.memory_mib, cores_pct=p.cores_pct, placements=p.placements
        )
        for p in A100
    )
    usage = DeviceUsage(
        device=mig_gpu(profiles=bare),
        used_count=7,
        used_cores_pct=105,
        mig_in_use=held(*(("1g.10gb", s, 1) for s in range(7))),
    )
    assert held_cores_pct(usage) == 100
    assert usable_free_memory_mib(usage) == 0


def test_a_count_only_pod_with_default_memory_is_exclusive_on_mig_too():
    # gpucores 100 by HAMi's default (no memory resource stated): a whole-GPU instance,
    # as it would hold a shared GPU alone; a second such pod finds none
    p = pipeline(mig_node(), config={"nvidia": {"defaultMemory": 5000}})
    first = p.submit(pod("a", container(gpu=1)))
    assert first.node == "node-m", first
    (d,) = first.allocation.all_devices()
    assert (d.mig.profile, d.cores_pct) == ("7g.80gb", 100)
    second = p.submit(pod("b", container(gpu=1)))
    assert second.node is None
