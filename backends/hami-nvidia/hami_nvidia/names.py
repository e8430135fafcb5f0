"""NVIDIA resource names, annotation keys and their handbook aliases (PROTOCOL.md §1-5)."""

from __future__ import annotations

from hami_core.backend import DeviceTypeInfo, FitRules, ResourceNames

from . import VENDOR, mig

DEFAULT_RESOURCES = ResourceNames(
    count="nvidia.com/gpu",
    memory="nvidia.com/gpumem",
    memory_pct="nvidia.com/gpumem-percentage",
    cores="nvidia.com/gpucores",
    cores_alias="nvidia.com/cores",  # the handbook's name
)
CORES_ALIAS = DEFAULT_RESOURCES.cores_alias
PRIORITY_RESOURCE = "nvidia.com/priority"

DEVICE_TYPE = DeviceTypeInfo(
    vendor=VENDOR,
    resources=DEFAULT_RESOURCES,
    register_annotation="hami.io/node-nvidia-register",
    handshake_annotation="hami.io/node-handshake",
    to_allocate_annotation="hami.io/vgpu-devices-to-allocate",
    allocated_annotation="hami.io/vgpu-devices-allocated",
    # HAMi's NVIDIA device plugin publishes pair scores here (pkg/device/nvidia)
    link_score_annotation="hami.io/node-nvidia-score",
    # HAMi 2.10 pkg/device/nvidia/mig_allocations.go: the MIG instances chosen at bind
    mig_annotation="hami.io/vgpu-mig-allocations",
    # a GPU in mig mode: compute per profile (mig.check), not the core's percent check
    fit_rules=FitRules(cores_capacity=mig.cores_capacity, extra_check=mig.check),
    # read beyond the sharing resources: the priority limit and MIG profile requests
    # (requests.MIG_RESOURCE's shape, <slices>g.<GB>gb[+me]: a misspelt profile such as
    # nvidia.com/mig-1g.10g is no resource of ours, kube-scheduler leaves it Pending)
    other_resources=(
        PRIORITY_RESOURCE,
        "nvidia.com/mig-[1-9]g.[1-9]*gb",
        "nvidia.com/mig-[1-9]g.[1-9]*gb+me",
    ),
    # a nvidia.com/mig-<profile> request is charged its profile at admission
    quota_request_charge=mig.quota_charge,
    # what allocate.py sets (PROTOCOL.md §7), also the core's SHIM_ENV; not
    # CUDA_TASK_PRIORITY, which the webhook itself writes from nvidia.com/priority (the
    # tenant's to choose) and the shim reads from the limits file
    allocate_env=(
        "NVIDIA_VISIBLE_DEVICES",
        "CUDA_DEVICE_MEMORY_LIMIT*",
        "CUDA_DEVICE_SM_LIMIT*",
        "CUDA_DEVICE_MEMORY_SHARED_CACHE",
        "CUDA_OVERSUBSCRIBE",
        "GPU_CORE_UTILIZATION_POLICY",
        "CUDA_MPS_*",
    ),
    # where allocate.py mounts the shim, its preload, limits file, region and priority
    # boards (CONTAINER_HOOK_DIR), and the MPS daemon's pipe directory
    protected_paths=("/etc/ld.so.preload", "/usr/local/vgpu", "/tmp/nvidia-mps"),
    # NVIDIA container toolkit: the runtime hook reads NVIDIA_VISIBLE_DEVICES from the
    # container's env (image config included; `none` = no GPU, driver libraries only),
    # also in unprivileged containers unless accept-nvidia-visible-devices-envvar-when-
    # unprivileged is false: a container asking for no GPU would otherwise get them all
    visible_devices_env=(("NVIDIA_VISIBLE_DEVICES", "none"),),
)

# Pod annotations (PROTOCOL.md §5): HAMi's names first, then the handbook's aliases.
USE_TYPE = ("nvidia.com/use-gputype", "hami.io/gpu-type")
NOUSE_TYPE = ("nvidia.com/nouse-gputype",)
USE_UUID = ("nvidia.com/use-gpuuuid", "hami.io/gpu-uuid-include", "hami.io/gpu-uuid-white-list")
NOUSE_UUID = ("nvidia.com/nouse-gpuuuid", "hami.io/gpu-uuid-exclude")
NUMA_BIND = ("nvidia.com/numa-bind", "hami.io/numa-hint")
CORE_POLICY = ("hami.io/core-policy",)
#: HAMi ``AllocateMode``: a comma list of the device modes the pod accepts.
VGPU_MODE = ("nvidia.com/vgpu-mode",)
TASK_PRIORITY = ("hami.io/task-priority",)
