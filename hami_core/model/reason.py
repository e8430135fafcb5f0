"""Reason codes: why a device or a node cannot take a request (PROTOCOL.md §5)."""

from __future__ import annotations

import enum


class ReasonCode(enum.StrEnum):
    """HAMi's filter reason codes; the wire form is the member's value.

    Per-device codes are aggregated per node as ``"<n>/<devices> <Code>"``.
    Source: HAMi 2.10 ``pkg/device/common`` reason constants (PROTOCOL.md §5).
    """

    CARD_TYPE_MISMATCH = "CardTypeMismatch"
    CARD_UUID_MISMATCH = "CardUuidMismatch"
    CARD_TIME_SLICING_EXHAUSTED = "CardTimeSlicingExhausted"
    CARD_COMPUTE_UNITS_EXHAUSTED = "CardComputeUnitsExhausted"
    CARD_INSUFFICIENT_MEMORY = "CardInsufficientMemory"
    CARD_INSUFFICIENT_CORE = "CardInsufficientCore"
    CARD_NOT_HEALTH = "CardNotHealth"
    CARD_CORDONED = "CardCordoned"
    NUMA_NOT_FIT = "NumaNotFit"
    # A vendor's own per-device rule refused the device (HAMi's ``customFilterRule``:
    # Moore Threads and whole MetaX GPUs keep all containers of a pod on one device).
    CARD_NOT_FOUND_CUSTOM_FILTER_RULE = "CardNotFoundCustomFilterRule"
    EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT = "ExclusiveDeviceAllocateConflict"
    NODE_INSUFFICIENT_DEVICE = "NodeInsufficientDevice"
    ALLOCATED_CARDS_INSUFFICIENT_REQUEST = "AllocatedCardsInsufficientRequest"
    RESOURCE_QUOTA_NOT_FIT = "ResourceQuotaNotFit"
    NODE_UNREGISTERED = "NodeUnregistered"
    # Vendor-specific codes of HAMi 2.10 (``pkg/device/metax/sdevice.go``): an sGPU whose
    # current QoS policy or app class differs from the pod's.
    CARD_QOS_POLICY_MISMATCH = "CardQosPolicyMismatch"
    CARD_APP_CLASS_MISMATCH = "CardAppClassMismatch"
    # HAMi 2.10 ``pkg/device/nvidia/device.go`` Fit: no allowed MIG profile with a free
    # placement holds the request on a GPU in mig mode.
    CARD_MIG_TOPOLOGY_INFEASIBLE = "CardMigTopologyInfeasible"
    # HAMi 2.10 ``pkg/device/enflame/device.go`` Fit: no DRS profile of the node holds
    # the request (counted once per device, as HAMi does).
    # Also ``pkg/device/ascend/device.go`` Fit: a pod in the ``hami-core`` vNPU mode
    # on a node whose chips are not run in that mode (``hami-vnpu-core`` not "true").
    MODE_NOT_FIT = "ModeNotFit"
    # Ours (gang groups, docs/preemption-and-gangs.md): the pod's group cannot be placed
    # as a whole, or this member is reserved on another node.
    GROUP_DOES_NOT_FIT = "GroupDoesNotFit"
    GROUP_MEMBER_RESERVED = "GroupMemberReserved"
