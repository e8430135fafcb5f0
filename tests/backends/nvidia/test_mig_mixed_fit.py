"""Profile-named requests as the NVIDIA device plugin's ``mixed`` strategy means them
(issue #17 item 1): ``nvidia.com/mig-<profile>: N`` is N instances of the profile, not N
GPUs, so several sit on one GPU (static MIG: the existing instances; dynamic MIG: N
placements that never overlap); more than the free instances is refused with the
reason; two pods never share an instance; the simulate line names the profile."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hami_core.cli import cli
from hami_core.model import MigPlacement, MigProfile
from hami_core.protocol import encode_inventory
from hami_core.protocol.migallocations import decode_mig_allocations
from tests.backends.nvidia.test_mig_fit import A100, mig_gpu, mixed, places
from tests.builders import pipeline

#: A static MIG GPU cut into seven 1g.10gb instances: the inventory offers exactly the
#: placements of the existing instances (``migdevices.mig_device``).
STATIC_1G = (
    MigProfile(name="1g.10gb", memory_mib=9856, cores_pct=15, slice_count=1,
               placements=places(*((i, 1) for i in range(7)))),
)  # fmt: skip


def node(gpus: int = 1, profiles: tuple[MigProfile, ...] = STATIC_1G) -> dict[str, Any]:
    devices = [mig_gpu(f"GPU-m{i}", index=i, profiles=profiles) for i in range(gpus)]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "node-m", "annotations": {"hami.io/node-nvidia-register": encode_inventory(devices)}},
        "status": {"allocatable": {"nvidia.com/gpu": str(7 * gpus)}},
    }  # fmt: skip


def held(p) -> list[tuple[str, int, int, str]]:
    out = []
    for q in p.cluster.list_pods():
        ann = q["metadata"].get("annotations") or {}
        for a in decode_mig_allocations(ann.get("hami.io/vgpu-mig-allocations", "")):
            out.append((a.gpu_uuid, a.slot.placement.start, a.slot.placement.size, a.slot.profile))
    return out


@pytest.mark.parametrize("n", [2, 7])
def test_one_gpu_with_seven_free_instances_takes_n_of_them(n):
    p = pipeline(node())
    out = p.submit(mixed("m", ("nvidia.com/mig-1g.10gb", str(n))))
    assert out.node == "node-m", out
    (slices,) = out.allocation.devices["NVIDIA"]
    assert len(slices) == n and {d.uuid for d in slices} == {"GPU-m0"}
    starts = [d.mig.placement.start for d in slices]
    assert len(set(starts)) == n  # n distinct instances, never one twice
    assert {(d.mig.profile, d.memory_mib, d.cores_pct) for d in slices} == {("1g.10gb", 9856, 15)}
    annotated = held(p)
    assert sorted(s for _, s, _, _ in annotated) == sorted(starts)


def test_eight_of_seven_instances_is_refused_with_the_reason():
    p = pipeline(node())
    out = p.submit(mixed("m", ("nvidia.com/mig-1g.10gb", "8")))
    assert out.node is None
    # the eighth instance finds the GPU's seven shares (split count 7) taken
    assert out.filter.failed == {"node-m": "1/1 CardTimeSlicingExhausted"}
    # on a static GPU with only three instances the fourth has no placement left
    p3 = pipeline(node(profiles=(STATIC_1G[0].__class__(
        name="1g.10gb", memory_mib=9856, cores_pct=15, slice_count=1, placements=places((0, 1), (3, 1), (5, 1))),)))  # fmt: skip
    assert p3.submit(mixed("t", ("nvidia.com/mig-1g.10gb", "3"))).node == "node-m"
    four = p3.submit(mixed("f", ("nvidia.com/mig-1g.10gb", "1")))
    assert four.node is None and four.filter.failed == {"node-m": "1/1 CardMigTopologyInfeasible"}


def test_two_gpus_take_three_and_then_the_rest_but_not_one_more():
    p = pipeline(node(gpus=2))
    assert p.submit(mixed("a", ("nvidia.com/mig-1g.10gb", "3"))).node == "node-m"
    assert p.submit(mixed("b", ("nvidia.com/mig-1g.10gb", "11"))).node == "node-m"
    assert p.submit(mixed("c", ("nvidia.com/mig-1g.10gb", "1"))).node is None
    annotated = held(p)
    assert len(annotated) == 14 and len({(g, s) for g, s, _, _ in annotated}) == 14


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.one_of(
            st.tuples(
                st.just("add"),
                st.sampled_from(["1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb"]),
                st.integers(min_value=1, max_value=4),
            ),
            st.tuples(st.just("del"), st.integers(min_value=0, max_value=20), st.just(0)),
        ),
        min_size=1,
        max_size=15,
    )
)
def test_dynamic_mig_placements_of_profile_requests_never_overlap(steps):
    p = pipeline(node(gpus=2, profiles=A100))
    n = 0
    for op, arg, count in steps:
        if op == "add":
            p.submit(mixed(f"p{n}", (f"nvidia.com/mig-{arg}", str(count))))
            n += 1
        else:
            live = sorted(q["metadata"]["name"] for q in p.cluster.list_pods())
            if live:
                p.cluster.delete_pod("default", live[int(arg) % len(live)])
        now = held(p)
        for gpu in {h[0] for h in now}:
            mine = sorted((s, size) for g, s, size, _ in now if g == gpu)
            for (s1, n1), (s2, _n2) in itertools.pairwise(mine):
                assert s1 + n1 <= s2, f"overlap on {gpu}: {mine}"
        for _, start, size, profile in now:
            offered = next(x for x in A100 if x.name == profile)
            assert MigPlacement(start=start, size=size) in offered.placements


def test_the_unschedulable_line_names_the_profile(tmp_path):
    cluster_file = tmp_path / "cluster.yaml"
    cluster_file.write_text(
        "nodes:\n  - name: mig-node\n    gpus:\n      - model: NVIDIA A100-SXM4-80GB\n"
        "        memoryMiB: 81920\n        mode: mig\n        splitCount: 7\n"
        "        migProfiles:\n          - name: 1g.10gb\n            memoryMB: 9856\n"
        "            core: 15\n            sliceCount: 1\n"
        "            placements: ["
        + ", ".join(f"{{start: {i}, size: 1}}" for i in range(7))
        + "]\n"
    )
    pods = tmp_path / "pods"
    pods.mkdir()
    (pods / "pods.yaml").write_text(
        "".join(
            f"---\napiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  containers:\n"
            f"    - name: main\n      image: x\n      resources:\n"
            f"        limits: {{nvidia.com/mig-1g.10gb: {n}}}\n"
            for name, n in (("two", 2), ("eight", 8))
        )
    )
    result = CliRunner().invoke(cli, ["simulate", "--cluster", str(cluster_file), str(pods)])
    assert result.exit_code == 0, result.output
    assert "default/eight: asks 8 MIG instances of 1g.10gb" in result.output, result.output
    data = json.loads(
        CliRunner()
        .invoke(cli, ["simulate", "--cluster", str(cluster_file), str(pods), "-o", "json"])
        .output
    )
    got = {p["name"]: (p["status"], [d["migProfile"] for d in p["devices"]]) for p in data["pods"]}
    assert got == {"two": ("placed", ["1g.10gb", "1g.10gb"]), "eight": ("unschedulable", [])}
    (req,) = next(p for p in data["pods"] if p["name"] == "two")["request"]
    assert (req["count"], req["migProfile"]) == (2, "1g.10gb")
