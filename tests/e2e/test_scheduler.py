"""The scheduler extender against a real kube-apiserver and kube-scheduler (issue cases)."""

from __future__ import annotations

import datetime as dt
import json
import time
import urllib.request
import uuid

import pytest
from kubernetes import client

from hami_core.facts.nodes import read_node as decode_node
from hami_core.facts.usage import node_usage
from hami_core.model import DeviceInfo
from hami_core.protocol import decode_pod_devices, encode_inventory
from tests.builders import container, gpu, manager, pipeline, pod
from tests.builders import node as node_obj
from tests.e2e.hami_stack import HamiStack


def read_node(obj):
    return decode_node(obj, manager().device_types(), now=dt.datetime.now(dt.UTC))


@pytest.fixture(scope="module")
def stack(control_plane, tmp_path_factory):
    s = HamiStack(control_plane, tmp_path_factory.mktemp("hami"))
    # HAMi's success events too (off by default): their write through the API is tested here
    s.extra_args = {name: ("--success-events",) for name in ("hami-a", "hami-b")}
    s.start()
    yield s
    s.stop()


@pytest.fixture
def core(control_plane, stack):
    control_plane.reset()
    yield client.CoreV1Api(control_plane.api_client())
    control_plane.reset()  # the nodes and pods of the last test too: the next file's cluster


def add_gpu_node(cp, name: str, gpus: list[DeviceInfo], *, raw: str | None = None) -> None:
    value = raw if raw is not None else encode_inventory(gpus)
    cp.add_fake_node(
        name,
        annotations={"hami.io/node-nvidia-register": value},
        capacity={"nvidia.com/gpu": str(10 * max(1, len(gpus)))},
    )


def create(core, p: dict) -> dict:
    p = json.loads(json.dumps(p))
    p["spec"]["schedulerName"] = "hami-scheduler"
    for c in p["spec"].get("containers", []) + p["spec"].get("initContainers", []):
        c.setdefault("command", ["sleep", "3600"])
    return core.create_namespaced_pod(p["metadata"].get("namespace", "default"), p).to_dict()


def raw_pod(core, name: str, namespace: str = "default") -> dict:
    resp = core.read_namespaced_pod(name, namespace, _preload_content=False)
    return json.loads(resp.data)


def wait_bound(cp, core, names, timeout=60):
    def done():
        pods = [raw_pod(core, n) for n in names]
        return pods if all(p["spec"].get("nodeName") for p in pods) else None

    return cp.wait_for(done, timeout=timeout, message=f"pods {names} bound")


def events(core, name: str) -> list[tuple[str, str]]:
    return [
        (e.reason, e.message)
        for e in core.list_namespaced_event(
            "default", field_selector=f"involvedObject.name={name}"
        ).items
    ]


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def test_pod_is_bound_with_the_exact_allocation_annotations(control_plane, core):
    n = unique("gpu")
    add_gpu_node(control_plane, n, [gpu(f"GPU-{n}")])
    create(core, pod("one", container(gpu=1, gpumem=3000, gpucores=30)))
    (bound,) = wait_bound(control_plane, core, ["one"])
    ann = bound["metadata"]["annotations"]
    assert bound["spec"]["nodeName"] == n
    assert ann["hami.io/vgpu-devices-allocated"] == f"GPU-{n},NVIDIA,3000,30:;"
    assert ann["hami.io/vgpu-devices-to-allocate"] == ann["hami.io/vgpu-devices-allocated"]
    assert ann["hami.io/vgpu-node"] == n and bound["metadata"]["labels"]["hami.io/vgpu-node"] == n
    assert int(ann["hami.io/vgpu-time"]) > 0 and ann["hami.io/bind-phase"] in (
        "allocating",
        "success",
    )
    control_plane.wait_for(
        lambda: {"FilteringSucceed", "BindingSucceed"} <= {r for r, _ in events(core, "one")},
        message="FilteringSucceed and BindingSucceed events (--success-events)",
    )


def test_thirty_pods_on_room_for_sixteen(control_plane, core):
    nodes = [unique("n") for _ in range(2)]
    for n in nodes:
        add_gpu_node(control_plane, n, [gpu(f"GPU-{n}-0", index=0), gpu(f"GPU-{n}-1", index=1)])
    names = [f"burst-{i}" for i in range(30)]
    for name in names:
        create(core, pod(name, container(gpu=1, gpumem=4000)))

    def settled():
        pods = [raw_pod(core, n) for n in names]
        bound = [p for p in pods if p["spec"].get("nodeName")]
        return pods if len(bound) >= 16 else None

    pods = control_plane.wait_for(settled, timeout=120, message="16 pods bound")
    time.sleep(3)  # would anything over-commit given more time?
    pods = [raw_pod(core, n) for n in names]
    bound = [p for p in pods if p["spec"].get("nodeName")]
    assert len(bound) == 16
    infos = {
        n: read_node(json.loads(core.read_node(n, _preload_content=False).data)) for n in nodes
    }
    for n, info in infos.items():
        usage = node_usage(
            info,
            [p for p in pods if p["spec"].get("nodeName") == n],
            manager().device_types(),
            scheduler_name="hami-scheduler",
        )
        for u in usage.values():
            assert u.used_memory_mib <= u.device.memory_mib and u.used_count <= u.device.split_count
            assert u.used_memory_mib == 16000
    pending = [p["metadata"]["name"] for p in pods if not p["spec"].get("nodeName")]

    def explained():
        return all(
            any(
                r == "FilteringFailed" and "CardInsufficientMemory" in m
                for r, m in events(core, name)
            )
            for name in pending
        )

    deadline = (
        time.monotonic() + 100
    )  # unschedulable pods are retried on cluster events or after 60 s
    while not explained() and time.monotonic() < deadline:
        time.sleep(1)
    assert explained(), "\n".join(
        f"{name}: {r}: {m}" for name in pending[:3] for r, m in events(core, name)
    )


def test_garbage_inventory_node_is_skipped_and_named(control_plane, core, stack):
    good, bad = unique("good"), unique("bad")
    add_gpu_node(control_plane, good, [gpu(f"GPU-{good}")])
    add_gpu_node(control_plane, bad, [], raw="this is not an inventory")
    create(core, pod("victim", container(gpu=1, gpumem=1000)))
    (bound,) = wait_bound(control_plane, core, ["victim"])
    assert bound["spec"]["nodeName"] == good
    create(core, pod("too-big", container(gpu=1, gpumem=100000)))
    control_plane.wait_for(
        lambda: any(
            r == "FilteringFailed"
            and f"{bad}: NodeUnregistered" in m
            and "hami.io/node-nvidia-register" in m
            for r, m in events(core, "too-big")
        ),
        message="FilteringFailed naming the bad node",
    )
    for _, url in stack.replicas.values():
        with urllib.request.urlopen(f"{url}/healthz", timeout=2) as r:
            assert r.status == 200


REPLAY = [
    (
        "three-on-one",
        [
            ("a", {"gpu": 1, "gpumem": 4000}),
            ("b", {"gpu": 1, "gpumem": 4000}),
            ("c", {"gpu": 1, "gpumem": 4000}),
        ],
    ),
    (
        "exclusive-first",
        [("a", {"gpu": 1, "gpumem": 1000, "gpucores": 100}), ("b", {"gpu": 1, "gpumem": 1000})],
    ),
    (
        "cores",
        [
            ("a", {"gpu": 1, "gpumem": 1000, "gpucores": 50}),
            ("b", {"gpu": 1, "gpumem": 1000, "gpucores": 50}),
            ("c", {"gpu": 1, "gpumem": 1000, "gpucores": 50}),
        ],
    ),
    # HAMi 2.10's mutex policy: only a GPU nobody uses (pkg/device/nvidia TestFit_MutexPolicy)
    (
        "mutex",
        [
            ("a", {"gpu": 1, "gpumem": 1000}),
            ("b", {"gpu": 1, "gpumem": 1000}, {"hami.io/gpu-scheduler-policy": "mutex"}),
            ("c", {"gpu": 1, "gpumem": 1000}, {"hami.io/gpu-scheduler-policy": "spread,numa"}),
        ],
    ),
    # gpumem-percentage 100 without cores is exclusive (TestMutateAdmissionDefaultsExclusiveCore)
    (
        "percentage-100",
        [("a", {"gpu": 1, "gpumem_percentage": 100}), ("b", {"gpu": 1, "gpumem": 1000})],
    ),
    # nvidia.com/vgpu-mode (HAMi's device_test.go TestCheckType_AllocateMode): a mode the
    # GPU (hami-core) is not in is CardTypeMismatch; a list naming its mode fits
    (
        "vgpu-mode",
        [
            ("a", {"gpu": 1, "gpumem": 1000}, {"nvidia.com/vgpu-mode": "mps"}),
            ("b", {"gpu": 1, "gpumem": 1000}, {"nvidia.com/vgpu-mode": "mig,hami-core"}),
        ],
    ),
    # HAMi 2.10's ordered lists (gpu_policy_test.go "Chain mutex,spread"): the mutex of a
    # list still refuses the used GPU; a list without mutex shares it
    (
        "policy-lists",
        [
            ("a", {"gpu": 1, "gpumem": 1000}),
            ("b", {"gpu": 1, "gpumem": 1000}, {"hami.io/gpu-scheduler-policy": "mutex,binpack"}),
            ("c", {"gpu": 1, "gpumem": 1000}, {"hami.io/gpu-scheduler-policy": "binpack,numa"}),
        ],
    ),
]


@pytest.mark.parametrize(("case", "pods"), REPLAY, ids=[c for c, _ in REPLAY])
def test_engine_cases_match_simulate(control_plane, core, case, pods):
    n = unique("replay")
    gpus = [gpu("GPU-A")]
    add_gpu_node(control_plane, n, gpus)
    sim = pipeline(node_obj(n, gpus))
    expected = {}
    for name, res, *rest in pods:
        ann = rest[0] if rest else None
        out = sim.submit(pod(name, container(**res), annotations=ann))
        expected[name] = out.node
        create(core, pod(name, container(**res), annotations=ann))
        if out.node is not None:
            wait_bound(control_plane, core, [name])
        else:
            control_plane.wait_for(
                lambda name=name: any(r == "FilteringFailed" for r, _ in events(core, name)),
                message=f"{name} unschedulable",
            )
    got = {name: raw_pod(core, name)["spec"].get("nodeName") for name, *_ in pods}
    assert got == expected
    for name, *_ in pods:
        if expected[name]:
            sim_ann = sim.cluster.get_pod("default", name)["metadata"]["annotations"][
                "hami.io/vgpu-devices-allocated"
            ]
            real_ann = raw_pod(core, name)["metadata"]["annotations"][
                "hami.io/vgpu-devices-allocated"
            ]
            assert decode_pod_devices(real_ann) == decode_pod_devices(sim_ann)


@pytest.mark.parametrize(
    ("resource", "limits"),
    [
        ("nvidia.com/gpumemory", {"gpu": 1, "gpumemory": 4000}),
        # a MIG profile name missing its "b": no profile resource of ours (trust review)
        ("nvidia.com/mig-1g.10g", {"gpu": 1, "mig-1g.10g": 1}),
    ],
    ids=["gpumemory", "mig-profile"],
)
def test_a_misspelt_vendor_resource_stays_pending_as_simulate_says(
    control_plane, core, resource, limits
):
    """Issue #15 item 14: ``nvidia.com/gpumemory`` (a typo of ``nvidia.com/gpumem``) next
    to ``nvidia.com/gpu``, or ``nvidia.com/mig-1g.10g`` (of ``nvidia.com/mig-1g.10gb``).
    The real webhook admits the pod (as HAMi's does), kube-scheduler checks the name
    itself (only the backends' names are ``ignoredByScheduler``) and no node has it: the
    pod stays Pending, no GPU booked. ``hami simulate`` reports the same pod unmanaged
    with a warning, placing nothing."""
    from hami_core.simulate.report import build_report
    from tests.simulate.helpers import run as simulate_run

    n = unique("typo")
    gpus = [gpu(f"GPU-{n}")]
    add_gpu_node(control_plane, n, gpus)
    name = unique("typo")
    typo = pod(name, container(**limits))
    data = build_report(simulate_run([node_obj(n, gpus)], [typo]))
    assert [(p["status"], p["node"]) for p in data["pods"]] == [("unmanaged", None)]
    assert any(resource in w for w in data["warnings"])
    create(core, typo)
    control_plane.wait_for(
        lambda: any(
            r == "FailedScheduling" and f"Insufficient {resource}" in m
            for r, m in events(core, name)
        ),
        message=f"{name} unschedulable for kube-scheduler",
    )
    stored = raw_pod(core, name)
    assert not stored["spec"].get("nodeName")
    assert "hami.io/vgpu-devices-allocated" not in (stored["metadata"].get("annotations") or {})


def test_killing_the_leader_hands_binding_to_the_other_replica(control_plane, core, stack):
    assert stack.leader("hami-a") and not stack.leader("hami-b")
    n = unique("ha")
    add_gpu_node(control_plane, n, [gpu(f"GPU-{n}")])
    create(core, pod("before", container(gpu=1, gpumem=1000)))
    wait_bound(control_plane, core, ["before"])
    stack.kill("hami-a")
    t0 = time.monotonic()
    stack.wait_leader("hami-b", timeout=15)
    takeover = time.monotonic() - t0
    assert takeover < 4 + 2  # within one lease duration (+ a retry period of slack)
    create(core, pod("after", container(gpu=1, gpumem=1000)))
    (bound,) = wait_bound(control_plane, core, ["after"], timeout=90)
    assert bound["metadata"]["annotations"]["hami.io/vgpu-node"] == n


def test_metrics_endpoint_reports_binds_and_allocations(control_plane, core, stack):
    n = unique("metrics")
    add_gpu_node(control_plane, n, [gpu(f"GPU-{n}")])
    create(core, pod("measured", container(gpu=1, gpumem=2000, gpucores=20)))
    wait_bound(control_plane, core, ["measured"])
    leader = next(name for name in stack.replicas if stack.leader(name))
    port = stack.metrics_ports[leader]

    def scrape():
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            text = r.read().decode()
        return text if f'node="{n}"' in text else None  # the cache has seen the bound pod

    text = control_plane.wait_for(scrape, timeout=20, message="metrics of the new node")
    assert "hami_scheduler_filter_duration_seconds_count" in text
    success = [
        line for line in text.splitlines() if line.startswith("hami_scheduler_bind_success_total")
    ]
    assert success and float(success[0].split()[-1]) >= 1
    lines = [
        line
        for line in text.splitlines()
        if line.startswith("hami_gpu_memory_allocated_bytes{") and n in line
    ]
    assert lines and float(lines[0].split()[-1]) == 2000 * 2**20, lines
    assert f'hami_vgpu_memory_allocated_bytes{{container_index="0",device_uuid="GPU-{n}"' in text


def test_cambricon_cases_match_simulate(control_plane, core):
    """The Cambricon decisions of this session through the real kube-scheduler and
    extender, against ``hami simulate``: an sMLU with memory but no vcore books the card's
    compute (cores 100, as HAMi's ``pkg/device/cambricon`` does), so it does not join a
    shared card; a slice stating its vcore still does; the bound pods carry
    ``CAMBRICON_DSMLU_PROFILE`` / ``CAMBRICON_DSMLU_ASSIGNED`` as in simulate."""
    from tests.backends.cambricon.helpers import container as mlu_container
    from tests.backends.cambricon.helpers import mlu
    from tests.backends.cambricon.helpers import node as mlu_node

    n = unique("mlu")
    card = mlu("MLU-e2e-0", index=2)
    obj = mlu_node(n, [card])
    control_plane.add_fake_node(
        n,
        annotations=obj["metadata"]["annotations"],
        capacity={"cambricon.com/vmlu": "10"},
    )
    sim = pipeline(obj)
    cases = [
        ("a", mlu_container(vmlu=1, vmemory=20, vcore=30)),
        ("b", mlu_container(vmlu=1, vmemory=20)),
        ("c", mlu_container(vmlu=1, vmemory=20, vcore=30)),
    ]
    expected = {}
    for name, c in cases:
        expected[name] = sim.submit(pod(name, c)).node
        create(core, pod(name, c))
        if expected[name] is not None:
            wait_bound(control_plane, core, [name])
        else:
            control_plane.wait_for(
                lambda name=name: any(r == "FilteringFailed" for r, _ in events(core, name)),
                message=f"{name} unschedulable",
            )
    assert expected == {"a": n, "b": None, "c": n}
    got = {name: raw_pod(core, name)["spec"].get("nodeName") for name, _ in cases}
    assert got == expected
    for name in ("a", "c"):
        real = raw_pod(core, name)["metadata"]["annotations"]
        simulated = sim.cluster.get_pod("default", name)["metadata"]["annotations"]
        for key in (
            "hami.io/cambricon-mlu-devices-allocated",
            "CAMBRICON_DSMLU_PROFILE",
            "CAMBRICON_DSMLU_ASSIGNED",
        ):
            assert real[key] == simulated[key], (name, key)
        assert real["CAMBRICON_DSMLU_PROFILE"] == "2_30_20"


def test_ascend_mode_not_fit_matches_simulate(control_plane, core):
    """HAMi's Ascend mode check (``pkg/device/ascend/device_test.go::TestDevices_Fit``
    "fit fail: hami-core pod on legacy node (ModeNotFit)") through the real kube-scheduler
    and extender, against ``hami simulate``: a ``huawei.com/vnpu-mode: hami-core`` pod
    goes only to the node whose ``hami-vnpu-core`` is "true"; with that node full it is
    unschedulable although the template node has free chips; both answers and the
    ``huawei.com/Ascend910B3`` bind annotation equal simulate's."""
    from tests.backends.ascend.test_pipeline import HAMI_910B3, ascend_node, ascend_pod

    legacy, soft = unique("npu-legacy"), unique("npu-core")
    objs = [
        ascend_node(legacy, "Ascend910B3", HAMI_910B3.replace("HAMI-B3", f"{legacy}-B3")),
        ascend_node(soft, "Ascend910B3", HAMI_910B3.replace("HAMI-B3", f"{soft}-B3")),
    ]
    objs[1]["metadata"]["annotations"]["hami-vnpu-core"] = "true"
    for obj in objs:
        control_plane.add_fake_node(
            obj["metadata"]["name"],
            annotations=obj["metadata"]["annotations"],
            capacity={"huawei.com/Ascend910B3": "8"},
        )
    sim = pipeline(*objs)
    mode = {"huawei.com/vnpu-mode": "hami-core"}
    cases = [
        (f"soft-{i}", ascend_pod(f"soft-{i}", count=2, memory=65536, annotations=mode))
        for i in range(2)
    ]
    expected = {}
    for name, p in cases:
        expected[name] = sim.submit(p).node
        create(core, p)
        if expected[name] is not None:
            wait_bound(control_plane, core, [name])
        else:
            control_plane.wait_for(
                lambda name=name: any(r == "FilteringFailed" for r, _ in events(core, name)),
                message=f"{name} unschedulable",
            )
    assert expected == {"soft-0": soft, "soft-1": None}
    got = {name: raw_pod(core, name)["spec"].get("nodeName") for name, _ in cases}
    assert got == expected
    real = raw_pod(core, "soft-0")["metadata"]["annotations"]
    simulated = sim.cluster.get_pod("default", "soft-0")["metadata"]["annotations"]
    for key in ("hami.io/Ascend910B3-devices-allocated", "huawei.com/Ascend910B3"):
        assert real[key] == simulated[key], key
    failed = [m for r, m in events(core, "soft-1") if r == "FilteringFailed"]
    assert any("ModeNotFit" in m for m in failed), failed


def test_finished_init_containers_free_their_share_as_simulate_says(control_plane, core):
    """Issue #15 item 1 through the real servers: an init container of 12000 MiB and an
    app container of 4000 MiB on one 16384 MiB GPU. While the init container may run the
    pod holds 12000 and an 8000 MiB pod does not fit; once its status says it terminated
    with exit code 0 (written through the API's ``pods/status``, as kubelet does) the
    scheduler's watch shrinks the pod to its app container and the 8000 MiB pod binds.
    The in-process pipeline (what ``hami simulate`` runs) gives the same answers."""
    n = unique("init")
    gpus = [gpu(f"GPU-{n}")]
    add_gpu_node(control_plane, n, gpus)
    big = pod("big-init", container("app", gpu=1, gpumem=4000))
    big["spec"]["initContainers"] = [container("init", gpu=1, gpumem=12000)]
    sim = pipeline(node_obj(n, gpus))
    assert sim.submit(big).node == n
    assert sim.submit(pod("early", container(gpu=1, gpumem=8000))).node is None
    create(core, big)
    wait_bound(control_plane, core, ["big-init"])
    create(core, pod("early", container(gpu=1, gpumem=8000)))
    control_plane.wait_for(
        lambda: any(r == "FilteringFailed" for r, _ in events(core, "early")),
        message="early unschedulable while the init container may run",
    )
    # the early pod would be retried once the share shrinks: remove it first
    core.delete_namespaced_pod("early", "default", grace_period_seconds=0)
    control_plane.wait_for(
        lambda: (
            not any(p.metadata.name == "early" for p in core.list_namespaced_pod("default").items)
        ),
        message="early deleted",
    )
    done = {"name": "init", "ready": False, "restartCount": 0, "image": "busybox"}
    done |= {"imageID": "", "state": {"terminated": {"exitCode": 0}}}
    status = {"phase": "Running", "initContainerStatuses": [done]}
    core.patch_namespaced_pod_status("big-init", "default", {"status": status})
    sim.cluster.set_pod_status("default", "big-init", status)
    assert sim.submit(pod("late", container(gpu=1, gpumem=8000))).node == n
    create(core, pod("late", container(gpu=1, gpumem=8000)))
    (bound,) = wait_bound(control_plane, core, ["late"])
    assert bound["metadata"]["annotations"]["hami.io/vgpu-node"] == n


def test_hami_explain_on_real_pending_and_bound_pods(control_plane, core):
    """``hami explain`` against the real API server: the bound pod's node and slice as
    the extender wrote them (exit 0), the Pending one's reason code per GPU, the largest
    request that fits and no victim (exit 3), another scheduler's pod (exit 4), a
    missing one (exit 1)."""
    from click.testing import CliRunner

    from hami_core.cli import cli

    n = unique("explain")
    add_gpu_node(control_plane, n, [gpu(f"GPU-{n}", memory_mib=8000)])
    create(core, pod("held", container(gpu=1, gpumem=6000, gpucores=30)))
    wait_bound(control_plane, core, ["held"])
    create(core, pod("waiting", container(gpu=1, gpumem=4000)))
    control_plane.wait_for(
        lambda: any(r == "FilteringFailed" for r, _ in events(core, "waiting")),
        message="waiting refused by the filter",
    )
    theirs = pod("theirs", container())
    theirs["spec"]["containers"][0].setdefault("command", ["sleep", "3600"])
    core.create_namespaced_pod("default", theirs)

    def explain(ref: str) -> tuple[int, dict]:
        args = ["explain", ref, "--kubeconfig", str(control_plane.kubeconfig_path), "-o", "json"]
        result = CliRunner().invoke(cli, args)
        return result.exit_code, json.loads(result.output) if result.output.startswith("{") else {}

    code, held = explain("default/held")
    assert code == 0 and held["node"] == n
    assert [(d["uuid"], d["memoryMiB"], d["coresPct"]) for d in held["devices"]] == [
        (f"GPU-{n}", 6000, 30)
    ]
    code, waiting = explain("default/waiting")
    assert code == 3 and waiting["status"] == "pending"
    (node,) = [e for e in waiting["nodes"] if e["node"] == n]
    assert [d["reason"] for d in node["devices"]] == ["CardInsufficientMemory"]
    assert waiting["largest"]["memoryMiB"] == 2000
    assert waiting["preemption"]["victims"] == []
    assert explain("default/theirs")[0] == 4
    assert explain("default/nobody")[0] == 1
