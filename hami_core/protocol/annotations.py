"""Annotation and label keys of the wire contract (PROTOCOL.md §2-5).

Only the keys shared by every vendor live here; a vendor's own keys (inventory,
device lists) come from its ``DeviceTypeInfo``.
"""

from __future__ import annotations

from hami_core.model.policy import GPU_POLICY_ANNOTATION
from hami_core.model.weights import DEVICE_SCORING_WEIGHTS_ANNOTATION

# Node (PROTOCOL.md §2, §4)
NODE_LOCK = "hami.io/mutex.lock"
DEVICE_CORDON = "hami.io/device-cordon"

# Pod allocation, written at bind (PROTOCOL.md §3)
VGPU_NODE = "hami.io/vgpu-node"
VGPU_TIME = "hami.io/vgpu-time"
BIND_PHASE = "hami.io/bind-phase"
BIND_TIME = "hami.io/bind-time"
DEVICE_ALLOCATED_JSON = "hami.io/device-allocated"
#: The scheduler's signature over the allocation it wrote (PROTOCOL.md §4a; ours, not
#: HAMi's: a pod without it is served only under a node lock naming it).
ALLOCATION_SIGNATURE = "hami.io/allocation-signature"

BIND_PHASE_ALLOCATING = "allocating"
BIND_PHASE_SUCCESS = "success"
BIND_PHASE_FAILED = "failed"

# Pod annotations read by the scheduler (PROTOCOL.md §5)
NODE_SCHEDULER_POLICY = "hami.io/node-scheduler-policy"
GPU_SCHEDULER_POLICY = GPU_POLICY_ANNOTATION
#: HAMi 2.10's per-pod device score weights (``hami_core.model.weights``).
DEVICE_SCORING_WEIGHTS = DEVICE_SCORING_WEIGHTS_ANNOTATION

# Gang groups, read by the scheduler (PROTOCOL.md §5; docs/preemption-and-gangs.md)
#: scheduler-plugins' coscheduling label: the pod's group, in its namespace.
POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
#: Volcano's annotation naming the pod's group (read when the label is absent).
VOLCANO_GROUP_NAME = "scheduling.k8s.io/group-name"
#: Ours: the group's minMember (the PodGroup CRD's field, which hami does not read).
GANG_MIN_MEMBER = "hami.io/gang-min-member"
#: Ours, written by the scheduler on a member when its group is placed (wakes it).
GANG_PLACED = "hami.io/gang-placed"

#: Label that keeps the webhook away from a namespace or object (PROTOCOL.md §6).
WEBHOOK_IGNORE_LABEL = "hami.io/webhook"
WEBHOOK_IGNORE_VALUE = "ignore"

#: Pod annotation keys only the scheduler may write; a pod that carries one at
#: admission is denied (PROTOCOL.md §6). Vendor device-list keys are added from each
#: backend's ``DeviceTypeInfo``.
SCHEDULER_OWNED = (
    VGPU_NODE,
    VGPU_TIME,
    BIND_PHASE,
    BIND_TIME,
    DEVICE_ALLOCATED_JSON,
    ALLOCATION_SIGNATURE,
)

#: The shim's opt-out variable (PROTOCOL.md §7) and the namespace label, set by an
#: administrator, that lets a container set it: the webhook admits it and the device
#: plugin honours it only in such a namespace (so a webhook outage cannot turn it on).
DISABLE_CONTROL_ENV = "CUDA_DISABLE_CONTROL"
DISABLE_CONTROL_LABEL = "hami.io/disable-control"
DISABLE_CONTROL_ALLOW = "allow"

#: What the node monitor does about a container whose device memory, measured from the
#: host (NVML per process), is over its allocation: ``report`` (a metric and a Warning
#: Event) or ``evict`` (also an eviction through the Eviction API). Read from the pod's
#: annotation, the namespace's label (an administrator's) and ``hami monitor
#: --overuse-policy``; the strictest wins, so a tenant can ask for eviction of its own
#: pod but never opt out of reporting (PROTOCOL.md §6).
OVERUSE_POLICY = "hami.io/overuse-policy"
OVERUSE_REPORT = "report"
OVERUSE_EVICT = "evict"
OVERUSE_POLICIES = (OVERUSE_REPORT, OVERUSE_EVICT)
