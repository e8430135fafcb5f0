"""The domain model: attrs classes with units in field names. Imports nothing of ours."""

from .allocation import Allocation, ContainerDevice, ContainerDevices, PodDevices
from .backend import (
    BackendInfo,
    ContainerAllocation,
    DeviceNode,
    DeviceTypeInfo,
    Mount,
    MutateResult,
    ResourceNames,
)
from .charge import (
    Charge,
    collapse,
    device_charges,
    effective_request,
    init_containers_finished,
    init_flags,
    is_sidecar,
    vendor_charge,
)
from .cores import (
    COMPUTE_UNITS,
    CORES_UNITS,
    NEURON_CORE_MASK,
    NEURON_CORES,
    NOT_ACCOUNTED,
    PERCENT,
    SGPU_CORES,
    CoresUnit,
)
from .device import (
    DEVICE_MODES,
    PARENT_UUID,
    PART_INDEX,
    PART_UUIDS,
    DeviceInfo,
    DeviceUsage,
    NodeInfo,
)
from .fit import FitResult
from .fitrules import Chooser, CoresCapacity, ExtraCheck, FitRules, LinkGroup, device_cores
from .mig import MIG_PROFILE_INFO, MigPlacement, MigProfile, MigSlot
from .monitor import ContainerUsage, HostDevice, ProcessDeviceSample, ProcessSample, RegionDevice
from .nodestate import MemoryNodeState, NodeState, ScopedNodeState
from .policy import (
    DEVICE_POLICY_TOKENS,
    GPU_POLICY_ANNOTATION,
    DevicePolicy,
    DevicePolicyChain,
    NodePolicy,
)
from .reason import ReasonCode
from .request import ContainerRequest, DeviceRequest, PodRequest
from .weights import DEVICE_SCORING_WEIGHTS_ANNOTATION, DeviceScoringWeights

__all__ = [
    "COMPUTE_UNITS",
    "CORES_UNITS",
    "NEURON_CORES",
    "NEURON_CORE_MASK",
    "NOT_ACCOUNTED",
    "PERCENT",
    "SGPU_CORES",
    "CoresUnit",
    "DEVICE_MODES",
    "PARENT_UUID",
    "PART_INDEX",
    "PART_UUIDS",
    "Allocation",
    "BackendInfo",
    "Charge",
    "ContainerAllocation",
    "ContainerDevice",
    "ContainerDevices",
    "ContainerRequest",
    "ContainerUsage",
    "DeviceInfo",
    "DeviceNode",
    "DevicePolicy",
    "DevicePolicyChain",
    "DEVICE_POLICY_TOKENS",
    "GPU_POLICY_ANNOTATION",
    "DeviceRequest",
    "DeviceTypeInfo",
    "DeviceUsage",
    "Chooser",
    "CoresCapacity",
    "ExtraCheck",
    "FitResult",
    "FitRules",
    "LinkGroup",
    "HostDevice",
    "MigPlacement",
    "MigProfile",
    "MigSlot",
    "MIG_PROFILE_INFO",
    "Mount",
    "MutateResult",
    "NodeInfo",
    "NodePolicy",
    "PodDevices",
    "PodRequest",
    "ProcessDeviceSample",
    "ProcessSample",
    "MemoryNodeState",
    "NodeState",
    "ReasonCode",
    "DEVICE_SCORING_WEIGHTS_ANNOTATION",
    "DeviceScoringWeights",
    "ScopedNodeState",
    "RegionDevice",
    "ResourceNames",
    "collapse",
    "device_charges",
    "device_cores",
    "init_containers_finished",
    "is_sidecar",
    "effective_request",
    "init_flags",
    "vendor_charge",
]
