"""Every variable a backend's Allocate gives a container in the bundled examples (all 13
vendors; hami-core, MPS and MIG modes) is one the webhook denies in the tenant's own env
(kubelet lets the container's env win over the device plugin's): ``allocate_env`` and
the shim's names cover what Allocate really sets, not a list kept by hand."""

import json

import pytest
from click.testing import CliRunner

from hami_core.cli import cli
from hami_core.simulate.loader import load_workloads
from hami_core.webhook import Admission
from hami_core.webhook.trust import (
    allocate_env_patterns,
    is_shim_variable,
    mount_denial,
    protected_path_roots,
)

from .helpers import EXAMPLES, manager

RUNS = [
    ("cluster-all-vendors.yaml", "workloads-all-vendors"),
    ("cluster-modes.yaml", "workloads-modes"),
    ("cluster.yaml", "workloads"),
]
#: Written by the webhook itself from nvidia.com/priority, which the tenant chooses.
TENANT_CHOSEN = {"CUDA_TASK_PRIORITY"}


def allocations():
    """``(pod, container env)`` of every placed container of the example runs."""
    for cluster, workloads in RUNS:
        result = CliRunner().invoke(
            cli,
            [
                "simulate",
                "--cluster",
                str(EXAMPLES / cluster),
                str(EXAMPLES / workloads),
                "-o",
                "json",
            ],
        )
        assert result.exit_code == 0, result.output
        for p in json.loads(result.output)["pods"]:
            for c in p.get("containers") or []:
                yield p, c["env"]


def test_every_variable_allocate_sets_is_denied_to_the_tenant():
    patterns = allocate_env_patterns(manager())
    seen = {k for _, env in allocations() for k in env}
    assert {"ASCEND_VISIBLE_DEVICES", "CXPU_CONTAINER_MEMORY_LIMIT", "HSA_CU_MASK"} <= seen
    assert {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "NVIDIA_VISIBLE_DEVICES"} <= seen
    loose = sorted(k for k in seen - TENANT_CHOSEN if not is_shim_variable(k, patterns))
    assert loose == []


@pytest.mark.parametrize("cluster, workloads", RUNS)
def test_a_placed_pod_that_sets_its_own_values_is_denied(cluster, workloads):
    """Each example pod again, its first device container carrying the values the device
    plugin gave it (as a tenant copying them to raise them would): denied, naming one."""
    result = CliRunner().invoke(
        cli,
        ["simulate", "--cluster", str(EXAMPLES / cluster), str(EXAMPLES / workloads), "-o", "json"],
    )
    report = json.loads(result.output)
    admission = Admission(manager())
    checked = 0
    pods = {
        (w.pod["metadata"].get("namespace", "default"), w.pod["metadata"]["name"]): w.pod
        for w in load_workloads([EXAMPLES / workloads]).pods
    }
    for p in report["pods"]:
        envs = [c for c in p.get("containers") or [] if set(c["env"]) - TENANT_CHOSEN]
        if p["status"] != "placed" or not envs:
            continue
        pod = json.loads(json.dumps(pods[(p["namespace"], p["name"])]))
        target = next(c for c in pod["spec"]["containers"] if c["name"] == envs[0]["name"])
        own = {k: v for k, v in envs[0]["env"].items() if k not in TENANT_CHOSEN}
        target["env"] = [
            *(target.get("env") or []),
            *({"name": k, "value": v} for k, v in own.items()),
        ]
        out = admission.review(pod)
        assert not out.allowed and out.reason == "ProtectedEnv", (p["name"], out)
        checked += 1
    assert checked >= 3


def test_every_nvidia_mount_is_a_path_a_tenant_volume_may_not_cover():
    """What the shim relies on (library, preload, limits, region, priority boards, MPS
    pipe) is mounted only where the webhook refuses a tenant's volume."""
    roots = protected_path_roots(manager())
    paths = {
        m["containerPath"]
        for cluster, workloads in RUNS
        for p in _report(cluster, workloads)["pods"]
        for c in p.get("containers") or []
        if "NVIDIA_VISIBLE_DEVICES" in c["env"]
        for m in c["mounts"]
    }
    assert {"/etc/ld.so.preload", "/usr/local/vgpu/limits", "/tmp/nvidia-mps"} <= paths
    covered = [
        p for p in sorted(paths) if mount_denial({"volumeMounts": [{"mountPath": p}]}, roots)
    ]
    assert covered == sorted(paths)


def _report(cluster, workloads):
    result = CliRunner().invoke(
        cli,
        ["simulate", "--cluster", str(EXAMPLES / cluster), str(EXAMPLES / workloads), "-o", "json"],
    )
    assert result.exit_code == 0, result.output
    return json.loads(result.output)
