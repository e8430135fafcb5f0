"""``hami simulate`` must not lie (issue items 12-15): other schedulers, kube-scheduler's
own checks, unmanaged resources, and what the webhook and the device plugin would do."""

import json

import yaml
from click.testing import CliRunner

from hami_core.cli import cli
from hami_core.model import DeviceInfo
from hami_core.protocol import encode_inventory
from hami_core.simulate.report import build_report
from tests.simulate.helpers import gpu_pod, run, write


def _node(name, *, labels=None, taints=None, cpu="8", memory="32Gi", pods="110", gpus=1):
    devs = [
        DeviceInfo(
            uuid=f"GPU-{name}-{i}",
            vendor="NVIDIA",
            model="A100",
            index=i,
            split_count=10,
            memory_mib=40000,
            cores_pct=100,
        )
        for i in range(gpus)
    ]
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": labels or {},
            "annotations": {"hami.io/node-nvidia-register": encode_inventory(devs)},
        },
        "spec": {"taints": taints or []},
        "status": {
            "allocatable": {
                "cpu": cpu,
                "memory": memory,
                "pods": pods,
                "nvidia.com/gpu": str(10 * gpus),
            }
        },
    }
    return node


def _statuses(sim):
    return {p["name"]: (p["status"], p["node"]) for p in build_report(sim)["pods"]}


def _with(pod, **spec):
    pod["spec"].update(spec)
    return pod


def _cpu(pod, cpu, memory=None):
    res = pod["spec"]["containers"][0].setdefault("resources", {})
    res.setdefault("requests", {})["cpu"] = cpu
    if memory:
        res["requests"]["memory"] = memory
    return pod


# -- item 12 -------------------------------------------------------------------------


def test_pods_of_another_scheduler_are_left_to_it_and_use_nothing():
    sim = run(
        [_node("n1")],
        [
            _with(gpu_pod("volcano-job", gpu=1, gpumem=40000), schedulerName="volcano"),
            gpu_pod("ours", gpu=1, gpumem=40000),
        ],
    )
    data = build_report(sim)
    pods = {p["name"]: p for p in data["pods"]}
    assert pods["volcano-job"]["status"] == "other-scheduler"
    assert pods["volcano-job"]["node"] is None and pods["volcano-job"]["devices"] == []
    assert "left to scheduler 'volcano'" in pods["volcano-job"]["message"]
    assert pods["volcano-job"]["admission"] == []  # the webhook leaves it alone
    # the GPU the real cluster would leave free is free for the next pod
    assert pods["ours"]["status"] == "placed"
    assert data["summary"]["otherScheduler"] == 1


# -- item 13 -------------------------------------------------------------------------


def test_pinned_to_a_missing_node_and_500_cpus_is_not_placed():
    sim = run(
        [_node("n1")],
        [
            _with(gpu_pod("ghost"), nodeName="no-such-node"),
            _cpu(gpu_pod("huge", gpu=1, gpumem=100), "500"),
        ],
    )
    data = build_report(sim)
    pods = {p["name"]: p for p in data["pods"]}
    assert pods["ghost"]["status"] == "unschedulable"
    reasons = {e["node"]: e["reason"] for e in pods["ghost"]["explanation"]}
    assert reasons == {
        "n1": "node(s) didn't match the requested hostname",
        "no-such-node": "node no-such-node is not in the cluster",
    }
    assert pods["huge"]["status"] == "unschedulable"
    assert {e["node"]: e["reason"] for e in pods["huge"]["explanation"]} == {
        "n1": "Insufficient cpu"
    }


def test_node_selector_affinity_and_taints():
    nodes = [
        _node("a", labels={"zone": "a", "gpu": "on"}),
        _node(
            "b",
            labels={"zone": "b", "gpu": "on"},
            taints=[{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}],
        ),
        _node("c", labels={"zone": "c"}, taints=[{"key": "x", "effect": "PreferNoSchedule"}]),
    ]
    selector = _with(gpu_pod("sel", gpu=1, gpumem=100), nodeSelector={"zone": "c"})
    affinity = _with(
        gpu_pod("aff", gpu=1, gpumem=100),
        affinity={
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}
                    ]
                }
            }
        },
    )
    tolerating = _with(
        gpu_pod("tol", gpu=1, gpumem=100),
        affinity=affinity["spec"]["affinity"],
        tolerations=[
            {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}
        ],
    )
    not_in = _with(
        gpu_pod("notin", gpu=1, gpumem=100),
        affinity={
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "gpu", "operator": "DoesNotExist"}]}
                    ]
                }
            }
        },
    )
    sim = run(nodes, [selector, affinity, tolerating, not_in])
    got = _statuses(sim)
    assert got["sel"] == ("placed", "c")  # PreferNoSchedule does not filter
    assert got["aff"] == ("unschedulable", None)
    assert got["tol"] == ("placed", "b")
    assert got["notin"] == ("placed", "c")
    aff = next(p for p in build_report(sim)["pods"] if p["name"] == "aff")
    reasons = {e["node"]: e["reason"] for e in aff["explanation"]}
    assert reasons["a"] == "node(s) didn't match Pod's node affinity"
    assert reasons["b"] == "node(s) had taint {dedicated: ml}, that the pod didn't tolerate"


def test_capacity_counts_the_pods_already_on_the_node():
    nodes = [_node("n1", cpu="4", memory="8Gi", pods="2")]
    sim = run(
        nodes,
        [
            _cpu(gpu_pod("p1"), "3", "6Gi"),
            _cpu(gpu_pod("p2"), "2"),  # 3 + 2 > 4
            _cpu(gpu_pod("p3"), "500m", "4Gi"),  # memory 6 + 4 > 8
            _cpu(gpu_pod("p4"), "100m"),  # fits: the second pod of two
            _cpu(gpu_pod("p5"), "100m"),  # a third pod: Too many pods
        ],
    )
    data = build_report(sim)
    reasons = {p["name"]: (p["explanation"] or [{}])[0].get("reason") for p in data["pods"]}
    assert [p["status"] for p in data["pods"]] == [
        "placed",
        "unschedulable",
        "unschedulable",
        "placed",
        "unschedulable",
    ]
    assert reasons["p2"] == "Insufficient cpu"
    assert reasons["p3"] == "Insufficient memory"
    assert reasons["p5"] == "Too many pods"


def test_unschedulable_node_is_skipped():
    n = _node("n1")
    n["spec"]["unschedulable"] = True
    sim = run([n], [gpu_pod("p", gpu=1, gpumem=100)])
    pod = build_report(sim)["pods"][0]
    assert pod["status"] == "unschedulable"
    assert pod["explanation"][0]["reason"] == "node(s) were unschedulable"


# -- item 14 -------------------------------------------------------------------------


def test_resources_no_backend_manages_are_reported_unmanaged_with_a_warning(monkeypatch):
    """``amd.com/gpu`` with hami-amd not installed (disabled here, as a cluster without it)."""
    monkeypatch.setenv("HAMI_DISABLED_BACKENDS", "amd")
    from hami_core.plugin import BackendManager

    mgr = BackendManager.from_entry_points()
    amd = gpu_pod("amd")
    amd["spec"]["containers"][0]["resources"] = {"limits": {"amd.com/gpu": "1"}}
    sim = run([_node("n1")], [amd, gpu_pod("after", gpu=1, gpumem=40000)], mgr=mgr)
    data = build_report(sim)
    pod = data["pods"][0]
    assert pod["status"] == "unmanaged" and pod["node"] is None and pod["devices"] == []
    assert "amd.com/gpu" in pod["message"]
    assert any("amd.com/gpu" in w and "no installed backend" in w for w in data["warnings"])
    assert data["summary"]["unmanaged"] == 1
    assert data["pods"][1]["status"] == "placed"


def test_ascend_pods_with_only_nvidia_installed_are_unmanaged(monkeypatch):
    monkeypatch.setenv("HAMI_DISABLED_BACKENDS", "ascend")
    from hami_core.plugin import BackendManager

    mgr = BackendManager.from_entry_points()
    assert not any(t.vendor.startswith("Ascend") for t in mgr.device_types())
    npu = gpu_pod("npu")
    npu["spec"]["containers"][0]["resources"] = {"limits": {"huawei.com/Ascend910B": "1"}}
    sim = run([_node("n1")], [npu], mgr=mgr)
    assert build_report(sim)["pods"][0]["status"] == "unmanaged"


def test_kubernetes_own_and_managed_domains_are_not_unmanaged():
    p = gpu_pod("p", gpu=1, gpumem=100)
    p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/priority"] = "1"
    sim = run([_node("n1")], [p])
    assert build_report(sim)["pods"][0]["status"] == "placed"


def test_a_typo_in_a_managed_domain_is_admitted_as_hamis_webhook_does():
    """The real webhook with hami-nvidia: a container asking only ``nvidia.com/gpumemory``
    (a typo of ``nvidia.com/gpumem``) asks nothing of any backend, so it is admitted
    unchanged and stays with its own scheduler, as HAMi's ``pkg/scheduler/webhook.go``
    does (each device's ``MutateAdmission`` reads only its own names; none found: the
    pod is allowed untouched). Beside ``nvidia.com/gpu`` the typo is no memory limit:
    the whole card is booked (cores 100, ``defaultExclusiveCoreIfNeeded``)."""
    from tests.unit.test_admission import review

    alone = gpu_pod("typo", gpumemory=4000)
    answer = review(alone)
    assert answer.allowed and not answer.patch
    with_count = gpu_pod("typo", gpu=1, gpumemory=4000)
    answer = review(with_count)
    assert answer.allowed
    limits = {
        op["path"].rsplit("/", 1)[1].replace("~1", "/"): op["value"]
        for op in answer.patch
        if op["path"].startswith("/spec/containers/0/resources/limits/")
    }
    assert limits == {"nvidia.com/gpucores": "100"}


def test_a_typo_in_a_managed_domain_is_reported_unmanaged_not_placed():
    """The same pods through ``hami simulate``: admitted (not denied, as above), then
    kube-scheduler checks ``nvidia.com/gpumemory`` itself (only the backends' names are
    ``ignoredByScheduler``) and finds it on no node, so the real cluster leaves them
    Pending. Reported unmanaged with a warning naming the resource, nothing booked: a
    tenant cannot take a GPU (or hide one) through a misspelt name."""
    pods = [
        gpu_pod("alone", gpumemory=4000),
        gpu_pod("with-count", gpu=1, gpumemory=4000),
        gpu_pod("priority", gpu=1, gpumem=1000, priority=1),
        gpu_pod("after", gpu=1, gpumem=40000),
    ]
    data = build_report(run([_node("n1")], pods))
    by_name = {p["name"]: p for p in data["pods"]}
    for name in ("alone", "with-count"):
        pod = by_name[name]
        assert (pod["status"], pod["node"], pod["devices"]) == ("unmanaged", None, [])
        assert "nvidia.com/gpumemory" in pod["message"]
        assert any(f"default/{name}" in w and "nvidia.com/gpumemory" in w for w in data["warnings"])
    assert data["summary"]["unmanaged"] == 2
    # nvidia.com/priority is read by hami-nvidia: no typo; the whole card is still free
    assert by_name["priority"]["status"] == "placed"
    assert by_name["after"]["status"] == "unschedulable"  # 1000 MiB of 40000 taken: not 40000


def test_a_resource_a_node_advertises_is_kube_schedulers_to_place():
    """A name of the vendor's domain that a node states in its capacity belongs to another
    device plugin (NVIDIA's renamed time-slicing resource ``nvidia.com/gpu.shared``):
    kube-scheduler's ``NodeResourcesFit`` places the pod on a node that has it and
    says ``Insufficient <name>`` for one that does not state it."""
    shared = _node("shared")
    shared["status"]["allocatable"]["nvidia.com/gpu.shared"] = "4"
    pods = [gpu_pod(f"p{i}", gpu_shared=2) for i in range(3)]
    for p in pods:
        p["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu.shared": "2"}}
    sim = run([_node("plain"), shared], pods)
    data = build_report(sim)
    assert [(p["status"], p["node"]) for p in data["pods"]] == [
        ("placed", "shared"),
        ("placed", "shared"),
        ("unschedulable", None),
    ]
    assert not data["warnings"]
    third = sim.runs[2].outcome
    assert third.filter.failed == {
        "plain": "Insufficient nvidia.com/gpu.shared",
        "shared": "Insufficient nvidia.com/gpu.shared",
    }


# -- item 15 -------------------------------------------------------------------------


def test_json_and_yaml_show_the_webhook_changes_and_the_device_plugin_answer(tmp_path):
    cluster = write(
        tmp_path / "cluster.yaml", {"apiVersion": "v1", "kind": "List", "items": [_node("n1")]}
    )
    workload = write(tmp_path / "pod.yaml", gpu_pod("p", gpu=1, gpumem=3000))
    out = CliRunner().invoke(
        cli, ["simulate", "--cluster", str(cluster), str(workload), "-o", "json"]
    )
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    pod = data["pods"][0]
    assert pod["schedulerName"] == "hami-scheduler"
    ops = {op["path"]: op for op in pod["admission"]}
    assert ops["/spec/schedulerName"]["value"] == "hami-scheduler"
    assert any(op["path"].startswith("/spec/containers/0/resources") for op in pod["admission"])
    (c,) = pod["containers"]
    assert c["name"] == "main"
    assert c["env"]["CUDA_DEVICE_MEMORY_LIMIT_0"] == "3000m"
    assert c["env"]["NVIDIA_VISIBLE_DEVICES"] == "GPU-n1-0"
    assert any(m["containerPath"].endswith("libvgpu.so") for m in c["mounts"])
    y = CliRunner().invoke(
        cli, ["simulate", "--cluster", str(cluster), str(workload), "-o", "yaml"]
    )
    assert y.exit_code == 0 and yaml.safe_load(y.stdout) == data


def test_text_mode_prints_warnings_on_stderr(tmp_path):
    cluster = write(
        tmp_path / "cluster.yaml", {"apiVersion": "v1", "kind": "List", "items": [_node("n1")]}
    )
    amd = gpu_pod("amd")
    amd["spec"]["containers"][0]["resources"] = {"limits": {"example.com/fpga": "1"}}
    workload = write(tmp_path / "pod.yaml", amd)
    out = CliRunner().invoke(cli, ["simulate", "--cluster", str(cluster), str(workload)])
    assert out.exit_code == 0, out.output
    assert "warning: pod default/amd asks example.com/fpga" in out.stderr
    assert "warning:" not in out.stdout
    assert "Unmanaged resources (1)" in out.stdout


def test_text_mode_warns_of_a_misspelt_vendor_resource(tmp_path):
    """``hami simulate`` in text mode: the ``nvidia.com/gpumemory`` pod is listed as
    unmanaged and the warning (on stderr) says why it stays Pending."""
    cluster = write(
        tmp_path / "cluster.yaml", {"apiVersion": "v1", "kind": "List", "items": [_node("n1")]}
    )
    workload = write(tmp_path / "pod.yaml", gpu_pod("typo", gpu=1, gpumemory=4000))
    out = CliRunner().invoke(cli, ["simulate", "--cluster", str(cluster), str(workload)])
    assert out.exit_code == 0, out.output
    assert "warning: pod default/typo asks nvidia.com/gpumemory" in out.stderr
    assert "misspelt" in out.stderr and "Pending" in out.stderr
    assert "Unmanaged resources (1)" in out.stdout and "Placed (0)" in out.stdout


def test_a_resource_renamed_in_the_config_is_not_unmanaged():
    """HAMi's ``resourceCountName`` (e.g. ``nvidia.com/vgpu`` beside NVIDIA's own plugin):
    a pod asking the configured name is the backend's, placed, not reported unmanaged;
    the default name is still known (the other names of the section keep theirs)."""
    from tests.simulate.helpers import manager

    mgr = manager({"nvidia": {"resourceCountName": "nvidia.com/vgpu"}})
    renamed = gpu_pod("renamed")
    renamed["spec"]["containers"][0]["resources"] = {
        "limits": {"nvidia.com/vgpu": "1", "nvidia.com/gpumem": "1000"}
    }
    data = build_report(run([_node("n1")], [renamed], mgr=mgr))
    assert data["pods"][0]["status"] == "placed", data["pods"][0]
    assert [d["uuid"] for d in data["pods"][0]["devices"]] == ["GPU-n1-0"]
    assert not data["warnings"]


def test_a_misspelt_mig_profile_resource_is_unmanaged_not_placed():
    """``nvidia.com/mig-1g.10g`` (``gb`` missing) is no resource of ours nor of any node:
    kube-scheduler leaves the pod Pending, so the what-if must not place it; the real
    profile name is still ours (item 14 of issue #15)."""
    typo = gpu_pod("typo")
    typo["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/mig-1g.10g": "1"}}
    real = gpu_pod("real")
    real["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/mig-1g.10gb": "1"}}
    media = gpu_pod("media")
    media["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/mig-1g.10gb+me": "1"}}
    reports = {p["name"]: p for p in build_report(run([_node("n1")], [typo, real, media]))["pods"]}
    assert reports["typo"]["status"] == "unmanaged"
    assert reports["real"]["status"] == "unschedulable"  # ours: no MIG GPU offers it
    assert reports["media"]["status"] == "unschedulable"
