"""A restartable init container (a sidecar) is charged beside the app containers.

Kubernetes (KEP-753 "Sidecar containers", on by default from 1.29) runs an init container
with ``restartPolicy: Always`` for the pod's whole life, beside the app containers and
beside every init container started after it; kube-scheduler adds its requests to the
app containers' (``resourcehelper.PodRequests``). HAMi 2.10 still charges it as a
sequential init container, at the peak (``pkg/device/initContainer.go``, the TODO naming
PR #2584), so a pod whose sidecar and app container each ask most of a GPU would get
twice the GPU's memory while being charged once. Here the tenant who writes such a pod
is charged for both: in the device usage, at fit, in the namespace quota and in
``hami simulate``'s CPU model.
"""

from hami_core.model import Charge, ContainerDevice, device_charges, init_flags
from hami_core.protocol.pods import containers
from hami_core.simulate.kubechecks import pod_requests
from hami_core.simulate.report import build_report
from tests.builders import container, gpu, node, pipeline, pod
from tests.simulate.helpers import gpu_pod, run
from tests.unit.test_admission import review

ONE_GPU = node("node-1", [gpu("GPU-A", memory_mib=16384)])


def _sidecar(name="side", **res):
    c = container(name, **res)
    c["restartPolicy"] = "Always"
    return c


def _terminated(name):
    return {"name": name, "state": {"terminated": {"exitCode": 0}}}


def test_a_sidecar_is_the_only_init_container_charged_as_an_app_container():
    p = pod("p", container("app"), init=[container("i1"), _sidecar("s"), container("i2")])
    assert init_flags(p) == (True, False, True)
    assert [(c["name"], init) for c, init, _ in containers(p)] == [
        ("i1", True),
        ("s", False),
        ("i2", True),
        ("app", False),
    ]
    assert init_flags(pod("q", container("app"), init=[container("i")])) == (True,)


def test_a_sidecar_and_the_app_on_one_gpu_are_summed():
    p = pod("p", container("app"), init=[_sidecar()])
    devs = (
        (ContainerDevice(uuid="GPU-A", vendor="NVIDIA", memory_mib=14000, cores_pct=10),),
        (ContainerDevice(uuid="GPU-A", vendor="NVIDIA", memory_mib=14000, cores_pct=10),),
    )
    assert device_charges(p, devs) == {"GPU-A": Charge(28000, 20, 2)}
    # a sidecar's status never frees it: it is an app container for the charge
    p["status"] = {"phase": "Running", "initContainerStatuses": [_terminated("side")]}
    assert device_charges(p, devs) == {"GPU-A": Charge(28000, 20, 2)}


def test_a_sidecar_and_an_app_asking_most_of_one_gpu_do_not_fit_it():
    """14000 MiB + 14000 MiB on a 16384 MiB GPU: both would run at once."""
    p = pipeline(ONE_GPU)
    abuser = pod(
        "abuser",
        container("app", gpu=1, gpumem=14000),
        init=[_sidecar(gpu=1, gpumem=14000)],
    )
    assert not p.submit(abuser).scheduled
    fits = pod("fits", container("app", gpu=1, gpumem=8000), init=[_sidecar(gpu=1, gpumem=8000)])
    assert p.submit(fits).scheduled
    sched = p.scheduler
    usage = sched.node_usage(sched.node_info(p.cluster.get_node("node-1")))["GPU-A"]
    assert (usage.used_memory_mib, usage.used_count) == (16000, 2)


def test_a_sidecar_counts_in_full_against_the_namespace_quota():
    p = pipeline(ONE_GPU)
    p.cluster.add_quota(
        {
            "metadata": {"name": "q", "namespace": "team"},
            "spec": {"hard": {"limits.nvidia.com/gpumem": "10000"}},
        }
    )
    abuser = pod(
        "abuser",
        container("app", gpu=1, gpumem=6000),
        init=[_sidecar(gpu=1, gpumem=6000)],
        namespace="team",
    )
    denied = review(abuser, store=p.cluster)
    assert not denied.allowed and "this pod 12000" in denied.message


def test_kube_scheduler_cpu_sum_with_sidecars():
    """KEP-753's formula: max(apps + sidecars, max over init i of init_i + the sidecars
    started before it)."""

    def cpu(name, value, sidecar=False):
        c = {"name": name, "resources": {"requests": {"cpu": value}}}
        if sidecar:
            c["restartPolicy"] = "Always"
        return c

    p = {
        "spec": {
            "initContainers": [cpu("i1", "3"), cpu("s", "2", sidecar=True), cpu("i2", "3")],
            "containers": [cpu("app", "1")],
        }
    }
    assert pod_requests(p)["cpu"] == 5  # i2 (3) beside s (2); apps 1 + s 2 = 3
    p["spec"]["containers"] = [cpu("app", "4")]
    assert pod_requests(p)["cpu"] == 6  # app 4 + s 2


def test_simulate_does_not_place_a_sidecar_pod_twice_the_gpu():
    from tests.compat.test_whatif import _node

    abuser = gpu_pod("abuser", gpu=1, gpumem=30000)
    abuser["spec"]["initContainers"] = [_sidecar(gpu=1, gpumem=30000)]
    sim = run([_node("n1")], [abuser])  # one 40000 MiB GPU
    report = build_report(sim)["pods"][0]
    assert report["status"] == "unschedulable"


def test_simple_cluster_nodes_carry_kubelets_hostname_label():
    """kubelet labels its Node ``kubernetes.io/hostname``; a what-if pod pinned with it
    lands as it would on the cluster."""
    cluster = {"nodes": [{"name": n, "gpus": [{"model": "T4", "memoryMiB": 15360}]} for n in "ab"]}
    p = gpu_pod("pinned", gpu=1, gpumem=100)
    p["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "b"}
    sim = run(cluster, [p])
    got = build_report(sim)["pods"][0]
    assert (got["status"], got["node"]) == ("placed", "b")
