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
from .device import DEVICE_MODES, DeviceInfo, DeviceUsage, NodeInfo
from .fit import FitResult
from .policy import DevicePolicy, NodePolicy
from .reason import ReasonCode
from .request import ContainerRequest, DeviceRequest, PodRequest

__all__ = [
    "DEVICE_MODES",
    "Allocation",
    "BackendInfo",
    "ContainerAllocation",
    "ContainerDevice",
    "ContainerDevices",
    "ContainerRequest",
    "DeviceInfo",
    "DeviceNode",
    "DevicePolicy",
    "DeviceRequest",
    "DeviceTypeInfo",
    "DeviceUsage",
    "FitResult",
    "Mount",
    "MutateResult",
    "NodeInfo",
    "NodePolicy",
    "PodDevices",
    "PodRequest",
    "ReasonCode",
    "ResourceNames",
]
