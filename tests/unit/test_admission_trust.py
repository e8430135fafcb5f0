"""The webhook's trust checks (issue #12 items 1-2, PROTOCOL.md §6-7): what a tenant
writes into its pod must never raise its share or fool the accounting."""

import copy

import pytest

from hami_core.webhook import Admission
from hami_core.webhook.trust import is_shim_variable, prefix_may_form_shim_variable
from tests.builders import container, manager, pod

SCHED = "system:serviceaccount:kube-system:hami-scheduler"
PLUGIN = "system:serviceaccount:kube-system:hami-device-plugin"


def admission():
    return Admission(manager(), trusted_users=frozenset({SCHED, PLUGIN}))


def with_env(*env, envfrom=None, **res):
    c = container(**(res or {"gpu": 1, "gpumem": 3000}))
    c["env"] = [{"name": n, "value": v} for n, v in env]
    if envfrom is not None:
        c["envFrom"] = envfrom
    return pod("p", c)


@pytest.mark.parametrize(
    "name, value",
    [
        ("CUDA_DEVICE_MEMORY_LIMIT_0", "16384m"),
        ("CUDA_DEVICE_MEMORY_LIMIT", "16g"),
        ("CUDA_DEVICE_SM_LIMIT", "100"),
        ("CUDA_DEVICE_SM_LIMIT_1", "100"),
        ("CUDA_DEVICE_CORE_LIMIT", "100"),
        ("CUDA_DISABLE_CONTROL", "true"),
        ("NVIDIA_VISIBLE_DEVICES", "all"),
        ("CUDA_DEVICE_MEMORY_SHARED_CACHE", "/tmp/mine"),
        ("CUDA_OVERSUBSCRIBE", "true"),
        ("GPU_CORE_UTILIZATION_POLICY", "disable"),
        # MPS mode: the client's share and daemon (the device plugin sets them)
        ("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "100"),
        ("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=81920M"),
        ("CUDA_MPS_PIPE_DIRECTORY", "/tmp/my-own-daemon"),
        # the shim's tuning knobs (reconcile -1: NVML's extra memory not charged)
        ("HAMI_SHIM_RECONCILE_MS", "-1"),
        ("HAMI_SHIM_LOCK_TIMEOUT_MS", "1"),
        ("HAMI_SHIM_LIMITS_FILE", "/tmp/mine"),
    ],
)
def test_a_gpu_container_may_not_set_the_shims_variables(name, value):
    out = admission().review(with_env((name, value)))
    assert not out.allowed and out.reason == "ProtectedEnv"
    assert name in out.message and "'main'" in out.message


# Other vendors' device plugins hand devices and limits over the same way: by env the
# vendor's container runtime or limiter reads (DeviceTypeInfo.allocate_env).
VENDOR_ENV = [
    ({"huawei.com/Ascend910B3": "1"}, "ASCEND_VISIBLE_DEVICES", "0,1,2,3"),
    ({"huawei.com/Ascend910B3": "1"}, "ASCEND_VNPU_SPECS", "vir10_3c_32g"),
    ({"huawei.com/Ascend910B3": "1"}, "NPU_MEM_QUOTA", "65536"),
    ({"huawei.com/Ascend910B3": "1"}, "NPU_PRIORITY", "100"),
    ({"huawei.com/Ascend910B3": "1"}, "NPU_GLOBAL_SHM_PATH", "/tmp/mine"),
    ({"cambricon.com/vmlu": "1"}, "CAMBRICON_VISIBLE_DEVICES", "0,1"),
    ({"kunlunxin.com/vxpu": "1"}, "CXPU_VISIBLE_DEVICES", "0,1"),
    ({"kunlunxin.com/vxpu": "1"}, "CXPU_CONTAINER_MEMORY_LIMIT", "103079215104"),
    ({"amd.com/gpu": "1"}, "HIP_DEVICE_MEMORY_LIMIT", "196592m"),
    ({"amd.com/gpu": "1"}, "HSA_CU_MASK", "0:0-303"),
    ({"amd.com/gpu": "1"}, "ROCR_VISIBLE_DEVICES", "0,1"),
    ({"hygon.com/dcunum": "1"}, "HIP_VISIBLE_DEVICES", "0,1"),
    ({"mthreads.com/vgpu": "1"}, "MTHREADS_VISIBLE_DEVICES", "all"),
    ({"aws.amazon.com/neuroncore": "1"}, "NEURON_RT_VISIBLE_CORES", "0-1"),
    # another vendor's names are no tenant's either (a node may run several runtimes)
    ({"nvidia.com/gpu": "1"}, "ASCEND_VISIBLE_DEVICES", "0"),
]


def vendor_pod(limits, env=(), envfrom=None):
    c = {"name": "main", "image": "x", "resources": {"limits": dict(limits)}}
    c["env"] = [{"name": n, "value": v} for n, v in env]
    if envfrom is not None:
        c["envFrom"] = envfrom
    return pod("p", c)


@pytest.mark.parametrize("limits, name, value", VENDOR_ENV)
def test_a_device_container_may_not_set_its_vendors_allocate_variables(limits, name, value):
    assert admission().review(vendor_pod(limits)).allowed  # the pod itself is fine
    out = admission().review(vendor_pod(limits, [(name, value)]))
    assert not out.allowed and out.reason == "ProtectedEnv"
    assert f"env {name} is set by the device plugin" in out.message


@pytest.mark.parametrize(
    "prefix, allowed",
    [
        ("NPU_", False),
        ("ASCEND_", False),
        ("CXPU_CONTAINER_", False),
        ("HSA_", False),
        ("A", False),
        ("APP_", True),
        ("NPUX_", True),
    ],
)
def test_env_from_that_could_carry_a_vendors_variables_is_denied(prefix, allowed):
    source = [{"configMapRef": {"name": "cfg"}, "prefix": prefix}]
    out = admission().review(vendor_pod({"huawei.com/Ascend910B3": "1"}, envfrom=source))
    assert out.allowed is allowed, out.message


def with_volume(path, *, field="volumeMounts", **res):
    c = container(**(res or {"gpu": 1, "gpumem": 3000}))
    key = "mountPath" if field == "volumeMounts" else "devicePath"
    c[field] = [{"name": "v", key: path}]
    return pod("p", c, init=None)


@pytest.mark.parametrize(
    "path",
    [
        "/etc/ld.so.preload",  # the shim would not be preloaded
        "/usr/local/vgpu/limits",  # the tenant's own limits file
        "/usr/local/vgpu/libvgpu.so",
        "/usr/local/vgpu",
        "/usr/local/vgpu/priority/GPU-1",
        "/usr/local//vgpu/limits/",
        "usr/local/vgpu/../vgpu/limits",
        "/tmp/nvidia-mps",  # its own MPS daemon
    ],
)
def test_a_gpu_container_may_not_cover_the_limiters_files_with_a_volume(path):
    out = admission().review(with_volume(path))
    assert not out.allowed and out.reason == "ProtectedPath"
    assert f"volumeMounts[0].mountPath {path!r}" in out.message


@pytest.mark.parametrize(
    "path, res",
    [
        ("/etc/ld.so.preload", {"gpu": 1}),
        ("/hami-vnpu-core/libvnpu.so", None),
        ("/hami-shared-region", None),
    ],
)
def test_volume_devices_and_other_vendors_paths_too(path, res):
    if res is None:  # an Ascend container: hami-core mode's limiter
        p = vendor_pod({"huawei.com/Ascend910B3": "1"})
        p["spec"]["containers"][0]["volumeMounts"] = [{"name": "v", "mountPath": path}]
    else:
        p = with_volume(path, field="volumeDevices", **res)
    out = admission().review(p)
    assert not out.allowed and out.reason == "ProtectedPath", out.message


@pytest.mark.parametrize(
    "path", ["/etc", "/usr/local", "/usr/local/vgpu2", "/data", "/dev/shm", "/tmp/nvidia-mps-x"]
)
def test_other_volumes_are_fine(path):
    assert admission().review(with_volume(path)).allowed


def test_a_container_without_devices_may_mount_anything():
    p = pod(
        "p",
        container(gpu=1),
        {
            "name": "side",
            "image": "x",
            "volumeMounts": [{"name": "v", "mountPath": "/etc/ld.so.preload"}],
        },
    )
    assert admission().review(p).allowed


def test_init_containers_are_checked_too():
    bad = container("init", gpu=1)
    bad["env"] = [{"name": "CUDA_DEVICE_SM_LIMIT", "value": "100"}]
    out = admission().review(pod("p", container(gpu=1), init=[bad]))
    assert not out.allowed and "'init'" in out.message


def test_other_env_and_non_gpu_containers_are_fine():
    assert admission().review(with_env(("APP_MODE", "fast"), ("CUDA_VISIBLE_DEVICES", "0"))).allowed
    cpu = container("side")
    cpu["env"] = [{"name": "CUDA_DEVICE_MEMORY_LIMIT_0", "value": "1g"}]
    assert admission().review(pod("p", container(gpu=1), cpu)).allowed


def test_disable_control_is_an_administrators_opt_out():
    p = with_env(("CUDA_DISABLE_CONTROL", "true"))
    denied = admission().review(p, namespace_labels={})
    assert not denied.allowed and "hami.io/disable-control=allow" in denied.message
    ok = admission().review(p, namespace_labels={"hami.io/disable-control": "allow"})
    assert ok.allowed and ok.mutated
    # The opt-out covers only that variable, never the limits themselves.
    both = with_env(("CUDA_DISABLE_CONTROL", "true"), ("CUDA_DEVICE_MEMORY_LIMIT_0", "80g"))
    assert (
        not admission().review(both, namespace_labels={"hami.io/disable-control": "allow"}).allowed
    )


@pytest.mark.parametrize(
    "source, allowed",
    [
        ({"configMapRef": {"name": "cfg"}}, False),
        ({"secretRef": {"name": "s"}, "prefix": ""}, False),
        ({"configMapRef": {"name": "cfg"}, "prefix": "CUDA_"}, False),
        ({"configMapRef": {"name": "cfg"}, "prefix": "CUDA_DEVICE_SM_LIMIT_9"}, False),
        ({"configMapRef": {"name": "cfg"}, "prefix": "CUDA_MPS_"}, False),
        ({"configMapRef": {"name": "cfg"}, "prefix": "N"}, False),
        ({"configMapRef": {"name": "cfg"}, "prefix": "HAMI_"}, False),
        ({"configMapRef": {"name": "cfg"}, "prefix": "HAMI_SHIM_X"}, False),
        ({"configMapRef": {"name": "cfg"}, "prefix": "APP_"}, True),
        ({"configMapRef": {"name": "cfg"}, "prefix": "CUDA_X_"}, True),
    ],
)
def test_env_from_that_could_carry_the_variables_is_denied(source, allowed):
    out = admission().review(with_env(envfrom=[source]))
    assert out.allowed is allowed
    if not allowed:
        assert out.reason == "ProtectedEnv" and "envFrom[0]" in out.message


def test_name_rules():
    assert is_shim_variable("CUDA_DEVICE_MEMORY_LIMIT_12") and not is_shim_variable("CUDA_HOME")
    assert prefix_may_form_shim_variable("") and prefix_may_form_shim_variable("CUDA_DEVICE_")
    assert not prefix_may_form_shim_variable("MY_")


# -- scheduler-owned annotations --------------------------------------------------------

FORGED = {
    "hami.io/vgpu-devices-to-allocate": "GPU-A,NVIDIA,81920,100:;",
    "hami.io/bind-phase": "allocating",
}


def forged(scheduler=None, labels=None, resources=None):
    p = pod("evil", container(**(resources or {"gpu": 1})), annotations=dict(FORGED))
    if scheduler:
        p["spec"]["schedulerName"] = scheduler
    p["spec"]["nodeName"] = "node-1"
    if labels:
        p["metadata"]["labels"] = labels
    return p


@pytest.mark.parametrize(
    "p",
    [
        forged(),
        forged(scheduler="volcano"),
        forged(labels={"hami.io/webhook": "ignore"}),
        forged(scheduler="volcano", resources={"cpu": "1"}),
    ],
    ids=["ours", "other-scheduler", "ignore-label", "non-gpu"],
)
def test_owned_annotations_are_denied_on_create_for_every_pod(p):
    out = admission().review(p, user="alice")
    assert not out.allowed and out.reason == "SchedulerOwnedAnnotation"
    assert "hami.io/bind-phase" in out.message and "alice" in out.message


def test_owned_annotations_in_an_ignored_namespace_are_still_denied():
    out = admission().review(forged(), namespace_labels={"hami.io/webhook": "ignore"})
    assert not out.allowed


def _running():
    p = pod(
        "p",
        container(gpu=1),
        annotations={"hami.io/vgpu-devices-allocated": "GPU-A,NVIDIA,3000,0:;"},
    )
    p["spec"].update(schedulerName="hami-scheduler", nodeName="node-1")
    return p


@pytest.mark.parametrize(
    "change",
    [
        lambda a: a.update({"hami.io/vgpu-devices-allocated": "GPU-A,NVIDIA,1,0:;"}),
        lambda a: a.pop("hami.io/vgpu-devices-allocated"),
        lambda a: a.update({"hami.io/vgpu-devices-to-allocate": "GPU-B,NVIDIA,1,0:;"}),
        lambda a: a.update({"hami.io/bind-phase": "allocating"}),
        # MIG (#17): the instances chosen at bind, written by the scheduler and the
        # device plugin only (a forged one would name another pod's instance)
        lambda a: a.update({"hami.io/vgpu-mig-allocations": "[]"}),
    ],
    ids=["rewrite", "delete", "add-to-allocate", "add-phase", "add-mig-instances"],
)
def test_update_of_owned_annotations_by_a_tenant_is_denied(change):
    old = _running()
    new = copy.deepcopy(old)
    change(new["metadata"]["annotations"])
    out = admission().review_update(old, new, user="alice")
    assert not out.allowed and out.reason == "SchedulerOwnedAnnotation"
    assert admission().review_update(old, new, user=SCHED).allowed
    assert admission().review_update(old, new, user=PLUGIN).allowed
    assert not admission().review_update(old, new, user=None).allowed


def test_other_updates_pass():
    old = _running()
    new = copy.deepcopy(old)
    new["metadata"]["annotations"]["team"] = "a"
    new["metadata"].setdefault("labels", {})["x"] = "y"
    assert admission().review_update(old, new, user="alice").allowed


def test_the_scheduler_account_may_create_with_owned_annotations():
    assert admission().review(forged(scheduler="volcano"), user=SCHED).allowed


def test_every_backends_owned_keys_are_denied_on_create():
    """Each backend's device-list keys (and MIG key, where it has one) are owned: a new
    backend's or mode's annotation is in the denial list without touching the webhook."""
    from hami_core.webhook.trust import owned_annotation_keys

    m = manager()
    owned = owned_annotation_keys(m)
    for t in m.device_types():
        for key in (t.to_allocate_annotation, t.allocated_annotation, t.mig_annotation):
            if not key:
                continue
            assert key in owned
            p = pod("p", container(), annotations={key: "x"})
            out = admission().review(p, user="alice")
            assert not out.allowed and key in out.message, (t.vendor, key)
