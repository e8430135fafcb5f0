"""Each container's device memory measured from the host (issue 24 item 19): NVML's
per-process accounting attributed to pods by the processes' cgroups, against the
scheduler's allocation, never only the tenant-written region; a container over its
slice is a metric, a Warning Event and, by ``hami.io/overuse-policy``, an eviction."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from hami_core.deviceplugin.allocator import make_shared_file
from hami_core.model import HostDevice, HostProcess
from hami_core.monitor import NodeMonitor
from hami_core.monitor.cgroups import ContainerRef, parse_cgroup
from hami_core.monitor.overuse import OveruseEnforcer
from hami_core.plugin import BackendManager

from .support import NODE

GiB = 1 << 30
MiB = 1 << 20
GPU0 = "GPU-00000000-1111-2222-3333-000000000000"
GPU1 = "GPU-00000000-1111-2222-3333-000000000001"
UID_A = "0a0a0a0a-0000-4000-8000-00000000000a"
UID_B = "0b0b0b0b-0000-4000-8000-00000000000b"
CID_A = "a" * 64
CID_B = "b" * 64
CID_SIDE = "c" * 64


# -- cgroup paths ------------------------------------------------------------------------

SYSTEMD_UID = UID_A.replace("-", "_")


@pytest.mark.parametrize(
    "text",
    [
        # cgroup v2, systemd driver, containerd
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{SYSTEMD_UID}.slice/cri-containerd-{CID_A}.scope\n",
        # cgroup v2, systemd driver, CRI-O; a guaranteed pod sits right under kubepods
        f"0::/kubepods.slice/kubepods-pod{SYSTEMD_UID}.slice/crio-{CID_A}.scope\n",
        # cgroup v2, systemd driver, Docker (dockershim)
        f"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{SYSTEMD_UID}.slice/docker-{CID_A}.scope\n",
        # cgroup v2, cgroupfs driver
        f"0::/kubepods/burstable/pod{UID_A}/{CID_A}\n",
        # cgroup v1, cgroupfs driver (one line per hierarchy)
        f"12:memory:/kubepods/burstable/pod{UID_A}/{CID_A}\n"
        f"11:devices:/kubepods/burstable/pod{UID_A}/{CID_A}\n"
        f"1:name=systemd:/kubepods/burstable/pod{UID_A}/{CID_A}\n",
        # cgroup v1, systemd driver
        f"9:cpu,cpuacct:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{SYSTEMD_UID}.slice/cri-containerd-{CID_A}.scope\n"
        "0::/\n",
        # seen from inside the monitor's own cgroup namespace (a relative path)
        f"0::/../../kubepods-burstable-pod{SYSTEMD_UID}.slice/cri-containerd-{CID_A}.scope\n",
        # a process in a sub-cgroup of its container (systemd inside the container)
        f"0::/kubepods/pod{UID_A}/{CID_A}/init.scope\n",
        # a node in a container (kind): the runtime's prefix before kubepods
        f"0::/docker/{'d' * 64}/kubepods/besteffort/pod{UID_A}/{CID_A}\n",
    ],
    ids=[
        "v2-systemd-containerd",
        "v2-systemd-crio-guaranteed",
        "v2-systemd-docker",
        "v2-cgroupfs",
        "v1-cgroupfs",
        "v1-systemd",
        "v2-cgroupns-relative",
        "v2-nested",
        "kind",
    ],
)
def test_the_pod_and_container_of_a_cgroup_path(text):
    assert parse_cgroup(text) == ContainerRef(UID_A, CID_A)


@pytest.mark.parametrize(
    "text",
    [
        "0::/system.slice/containerd.service\n",  # a host process
        f"0::/kubepods/burstable/pod{UID_A}\n",  # the pod's own cgroup, no container
        f"0::/kubepods/burstable/pod{UID_A}/not-an-id\n",
        "garbage without colons\n",
        "",
    ],
)
def test_a_process_of_no_container_is_not_attributed(text):
    assert parse_cgroup(text) is None


# -- the monitor over a fake host ----------------------------------------------------------


class Host:
    """A fake host: procfs (``/proc/<pid>/cgroup``, ``status``, the monitor's own
    ``self/status``) and what NVML lists per GPU."""

    def __init__(self, tmp: Path, *, host_pid_ns: bool = True) -> None:
        self.proc = tmp / "proc"
        (self.proc / "self").mkdir(parents=True)
        nspid = "1234" if host_pid_ns else "1234\t17"
        (self.proc / "self" / "status").write_text(f"Name:\thami\nNSpid:\t{nspid}\n")
        self.nvml: dict[str, list[HostProcess]] = {GPU0: [], GPU1: []}

    def process(
        self, pid: int, cgroup: str, *, gpu: str, used: int, inner_pid: int | None = None
    ) -> None:
        d = self.proc / str(pid)
        d.mkdir()
        (d / "cgroup").write_text(cgroup)
        ns = f"{pid}\t{inner_pid}" if inner_pid else str(pid)
        (d / "status").write_text(f"Name:\tpython\nNSpid:\t{ns}\n")
        (d / "stat").write_text(f"{pid} (python) S " + " ".join(["0"] * 17 + ["100"] + ["0"] * 10))
        self.nvml[gpu].append(HostProcess(pid=pid, memory_used_bytes=used))


def cgroup_of(uid: str, cid: str) -> str:
    return (
        "0::/kubepods.slice/kubepods-burstable.slice/"
        f"kubepods-burstable-pod{uid.replace('-', '_')}.slice/cri-containerd-{cid}.scope\n"
    )


class HostBackends:
    """The real backends (device types, region parsing), with NVML's answers faked."""

    def __init__(self, host: Host) -> None:
        self.real = BackendManager.from_entry_points()
        self.host = host

    @property
    def backends(self) -> Any:
        return self.real.backends

    def usage_files(self, backend: str) -> dict[str, tuple[int, ...]]:
        return self.real.usage_files(backend)

    def parse_usage(self, backend: str, name: str, data: bytes) -> Any:
        return self.real.parse_usage(backend, name, data)

    def device_types(self) -> Any:
        return self.real.device_types()

    def host_devices(self, backend: str) -> list[HostDevice] | None:
        if backend != "nvidia":
            return None
        return [
            HostDevice(
                index=i,
                uuid=uuid,
                device_type="NVIDIA-A100",
                memory_used_bytes=sum(p.memory_used_bytes for p in procs),
                memory_total_bytes=80 * GiB,
                processes=tuple(procs),
            )
            for i, (uuid, procs) in enumerate(self.host.nvml.items())
        ]


def gpu_pod(
    uid: str,
    name: str,
    containers: dict[str, str],
    *,
    allocated: str | None,
    annotations: dict[str, str] | None = None,
    namespace: str = "team-a",
) -> dict[str, Any]:
    ann = dict(annotations or {})
    if allocated is not None:
        ann["hami.io/vgpu-devices-allocated"] = allocated
    return {
        "metadata": {"name": name, "namespace": namespace, "uid": uid, "annotations": ann},
        "spec": {"nodeName": NODE, "containers": [{"name": c} for c in containers]},
        "status": {
            "phase": "Running",
            "containerStatuses": [
                {"name": c, "containerID": f"containerd://{cid}"} for c, cid in containers.items()
            ],
        },
    }


class Cluster:
    """What the enforcer asks of the API server, recorded."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []
        self.evictions: list[str] = []
        self.namespace_labels: dict[str, str] = {}

    def event(self, pod: Any, reason: str, message: str) -> None:
        self.events.append((pod["metadata"]["name"], reason, message))

    def evict(self, pod: Any, message: str) -> None:
        self.evictions.append(pod["metadata"]["name"])

    def namespace_policy(self, namespace: str) -> str | None:
        return self.namespace_labels.get(namespace)


def monitor_for(tmp_path: Path, host: Host, pods: list, cluster: Cluster, **kw: Any):
    root = tmp_path / "containers"
    root.mkdir(exist_ok=True)
    enforcer = OveruseEnforcer(cluster, namespace_policy=cluster.namespace_policy, **kw)
    return NodeMonitor(
        HostBackends(host),
        root=str(root),
        node_name=NODE,
        pods=lambda: pods,
        proc_root=str(host.proc),
        overuse=enforcer,
    )


def samples(monitor: NodeMonitor, name: str) -> dict[tuple[str, ...], float]:
    fams = {f.name: f for f in monitor.collect()}
    return dict(fams[name].samples)


def test_a_tenant_whose_region_claims_nothing_is_still_caught_from_the_host(tmp_path):
    """Pod A was allocated 1024 MiB of GPU0. Its tenant loads its own library ahead of
    the shim and leaves its region empty (a zero file: "nothing used"); NVML still lists
    its process with 5 GiB. The host metric, the excess and a Warning Event show it; the
    policy (report, the default) evicts nothing."""
    host = Host(tmp_path)
    host.process(4242, cgroup_of(UID_A, CID_A), gpu=GPU0, used=5 * GiB)
    pods = [gpu_pod(UID_A, "trainer", {"main": CID_A}, allocated=f"{GPU0},NVIDIA,1024,30:;")]
    cluster = Cluster()
    monitor = monitor_for(tmp_path, host, pods, cluster)
    region = tmp_path / "containers" / f"{UID_A}_main" / "vgpu.cache"
    from hami_nvidia.shared_region import FILE_SIZE

    make_shared_file(str(region), FILE_SIZE)  # the tenant's region says: nothing

    fams = {f.name: f for f in monitor.collect()}
    labels = ("team-a", "trainer", "main", "0", GPU0)
    assert dict(fams["hami_vgpu_memory_used_bytes"].samples).get(labels, 0) == 0
    assert dict(fams["hami_container_device_memory_host_bytes"].samples) == {labels: 5 * GiB}
    over = dict(fams["hami_container_device_memory_over_allocation_bytes"].samples)
    assert over == {labels: 5 * GiB - 1024 * MiB}
    assert [(n, r) for n, r, _ in cluster.events] == [("trainer", "GPUMemoryOverAllocation")]
    assert "5120 MiB" in cluster.events[0][2] and "1024 MiB" in cluster.events[0][2]
    assert "4242" in cluster.events[0][2]
    for _ in range(3):
        monitor.collect()
    assert cluster.evictions == []
    assert len(cluster.events) == 1, "one Event per container and device per interval"


def test_a_process_in_another_pods_cgroup_is_charged_to_that_pod(tmp_path):
    """Pod A's region names a process (pid 7 in its namespace) that is really pod B's:
    attribution follows the kernel's cgroup of the host PID NVML reports (4343, whose
    innermost pid is 7), never a PID a region claims. B is over, A is not."""
    host = Host(tmp_path)
    host.process(4242, cgroup_of(UID_A, CID_A), gpu=GPU0, used=512 * MiB)
    host.process(4343, cgroup_of(UID_B, CID_B), gpu=GPU0, used=3 * GiB, inner_pid=7)
    host.process(4444, cgroup_of(UID_B, CID_SIDE), gpu=GPU1, used=256 * MiB)
    pods = [
        gpu_pod(UID_A, "a", {"main": CID_A}, allocated=f"{GPU0},NVIDIA,1024,30:;"),
        gpu_pod(
            UID_B,
            "b",
            {"main": CID_B, "side": CID_SIDE},
            allocated=f"{GPU0},NVIDIA,2048,30:;{GPU1},NVIDIA,1024,0:;",
        ),
    ]
    cluster = Cluster()
    monitor = monitor_for(tmp_path, host, pods, cluster)
    fams = {f.name: f for f in monitor.collect()}
    used = dict(fams["hami_container_device_memory_host_bytes"].samples)
    assert used == {
        ("team-a", "a", "main", "0", GPU0): 512 * MiB,
        ("team-a", "b", "main", "0", GPU0): 3 * GiB,
        ("team-a", "b", "side", "0", GPU1): 256 * MiB,
    }
    assert [n for n, _, _ in cluster.events] == ["b"]
    assert dict(fams["hami_host_gpu_unattributed_memory_bytes"].samples) == {
        (NODE, "0", GPU0): 0,
        (NODE, "1", GPU1): 0,
    }


def test_processes_of_no_listed_pod_are_unattributed_not_charged(tmp_path):
    host = Host(tmp_path)
    host.process(100, "0::/system.slice/nvidia-persistenced.service\n", gpu=GPU0, used=GiB)
    host.process(4242, cgroup_of(UID_B, CID_B), gpu=GPU0, used=2 * GiB)  # pod not listed
    cluster = Cluster()
    monitor = monitor_for(tmp_path, host, [], cluster)
    fams = {f.name: f for f in monitor.collect()}
    assert dict(fams["hami_host_gpu_unattributed_memory_bytes"].samples)[(NODE, "0", GPU0)] == (
        3 * GiB
    )
    assert fams["hami_container_device_memory_host_bytes"].samples == []
    assert cluster.events == []


def test_without_the_hosts_pid_namespace_nothing_is_attributed(tmp_path, caplog):
    """NVML's PIDs are the host's. A monitor deployed without ``hostPID`` sees other
    PIDs (its ``NSpid`` has two entries): a pid it finds may be another process, so it
    attributes nothing, says so once, and shows every byte as unattributed."""
    host = Host(tmp_path, host_pid_ns=False)
    host.process(4242, cgroup_of(UID_A, CID_A), gpu=GPU0, used=5 * GiB)
    pods = [gpu_pod(UID_A, "trainer", {"main": CID_A}, allocated=f"{GPU0},NVIDIA,1024,30:;")]
    cluster = Cluster()
    monitor = monitor_for(tmp_path, host, pods, cluster)
    with caplog.at_level(logging.WARNING, logger="hami_core.monitor.node"):
        fams = {f.name: f for f in monitor.collect()}
        monitor.collect()
    assert fams["hami_container_device_memory_host_bytes"].samples == []
    assert dict(fams["hami_host_gpu_unattributed_memory_bytes"].samples)[(NODE, "0", GPU0)] == (
        5 * GiB
    )
    assert cluster.events == []
    assert len([r for r in caplog.records if "hostPID" in r.getMessage()]) == 1


def test_a_pod_hami_did_not_allocate_is_measured_but_not_judged(tmp_path):
    host = Host(tmp_path)
    host.process(4242, cgroup_of(UID_A, CID_A), gpu=GPU0, used=5 * GiB)
    pods = [gpu_pod(UID_A, "mps-daemon", {"main": CID_A}, allocated=None)]
    cluster = Cluster()
    monitor = monitor_for(tmp_path, host, pods, cluster)
    fams = {f.name: f for f in monitor.collect()}
    assert dict(fams["hami_container_device_memory_host_bytes"].samples) == {
        ("team-a", "mps-daemon", "main", "", GPU0): 5 * GiB
    }
    assert fams["hami_container_device_memory_over_allocation_bytes"].samples == []
    assert cluster.events == []


# -- the policy ---------------------------------------------------------------------------


def over_pod(annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return gpu_pod(
        UID_A,
        "trainer",
        {"main": CID_A},
        allocated=f"{GPU0},NVIDIA,1024,30:;",
        annotations=annotations,
    )


@pytest.mark.parametrize(
    ("node", "namespace", "pod", "evicted"),
    [
        ("report", None, None, False),
        ("report", None, "evict", True),  # a tenant may ask for its own eviction
        ("report", "evict", None, True),  # an administrator's namespace label
        ("report", "evict", "report", True),  # ... which a tenant cannot relax
        ("evict", None, "report", True),  # nor the node's default
        ("evict", None, None, True),
        ("report", None, "off", False),  # no such value: ignored, still reported
        ("report", "garbage", None, False),
    ],
)
def test_the_strictest_policy_wins_and_a_tenant_cannot_opt_out(
    tmp_path, node, namespace, pod, evicted
):
    host = Host(tmp_path)
    host.process(4242, cgroup_of(UID_A, CID_A), gpu=GPU0, used=5 * GiB)
    pods = [over_pod({"hami.io/overuse-policy": pod} if pod else None)]
    cluster = Cluster()
    if namespace:
        cluster.namespace_labels["team-a"] = namespace
    monitor = monitor_for(tmp_path, host, pods, cluster, default_policy=node)
    monitor.collect()
    assert cluster.evictions == [], "one reading is not enough to evict"
    monitor.collect()
    assert cluster.evictions == (["trainer"] if evicted else [])
    reasons = [r for _, r, _ in cluster.events]
    assert reasons[0] == "GPUMemoryOverAllocation", "reporting is the floor"
    assert ("GPUMemoryOverAllocationEvicting" in reasons) is evicted


def test_an_eviction_is_not_repeated_every_scan_and_a_recovered_container_starts_again(
    tmp_path,
):
    host = Host(tmp_path)
    host.process(4242, cgroup_of(UID_A, CID_A), gpu=GPU0, used=5 * GiB)
    pods = [over_pod({"hami.io/overuse-policy": "evict"})]
    cluster = Cluster()
    monitor = monitor_for(tmp_path, host, pods, cluster)
    for _ in range(5):
        monitor.collect()
    assert cluster.evictions == ["trainer"]
    fams = {f.name: f for f in monitor.collect()}
    assert fams["hami_monitor_overuse_evictions_total"].samples == [((), 1.0)]
    assert fams["hami_monitor_overuse_total"].samples == [((), 6.0)]


def test_within_the_allocation_and_the_tolerance_nothing_happens(tmp_path):
    host = Host(tmp_path)
    host.process(4242, cgroup_of(UID_A, CID_A), gpu=GPU0, used=1024 * MiB)
    pods = [over_pod({"hami.io/overuse-policy": "evict"})]
    cluster = Cluster()
    monitor = monitor_for(tmp_path, host, pods, cluster)
    for _ in range(3):
        fams = {f.name: f for f in monitor.collect()}
    assert dict(fams["hami_container_device_memory_over_allocation_bytes"].samples) == {
        ("team-a", "trainer", "main", "0", GPU0): 0
    }
    assert cluster.events == [] and cluster.evictions == []


def test_a_bad_node_default_is_refused_at_start():
    with pytest.raises(ValueError, match="'off' is not one of report, evict"):
        OveruseEnforcer(Cluster(), default_policy="off")


@pytest.mark.timeout(30)
def test_a_container_over_its_slice_is_evicted_with_nobody_scraping(tmp_path):
    """Enforcement runs on the monitor's own clock (``--scan-interval``): no Prometheus,
    no probe, still an eviction within two intervals."""
    import threading
    import time

    from hami_core.servers.monitor import scan_periodically

    host = Host(tmp_path)
    host.process(4242, cgroup_of(UID_A, CID_A), gpu=GPU0, used=5 * GiB)
    cluster = Cluster()
    monitor = monitor_for(tmp_path, host, [over_pod()], cluster, default_policy="evict")
    stop = threading.Event()
    loop = threading.Thread(target=scan_periodically, args=(monitor, 0.05, stop), daemon=True)
    loop.start()
    try:
        deadline = time.monotonic() + 10
        while not cluster.evictions and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        stop.set()
        loop.join(5)
    assert cluster.evictions == ["trainer"]
    assert not loop.is_alive(), "the loop ends when asked"


def test_a_failing_scan_does_not_end_the_periodic_loop():
    import threading

    from hami_core.servers.monitor import scan_periodically

    calls: list[float] = []
    stop = threading.Event()

    class Broken:
        def latest(self, max_age_s: float) -> None:
            calls.append(max_age_s)
            if len(calls) >= 3:
                stop.set()
            raise RuntimeError("a bug in a scan")

    scan_periodically(Broken(), 0.01, stop)  # type: ignore[arg-type]
    assert calls == [0.01, 0.01, 0.01]
