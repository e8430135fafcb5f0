"""AWS Neuron resource names, annotation keys and constants (HAMi 2.10
``pkg/device/awsneuron/device.go``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from hami_core.backend import (
    NEURON_CORE_MASK,
    NEURON_CORES,
    ContainerDevice,
    DeviceRequest,
    DeviceTypeInfo,
    FitRules,
    ResourceNames,
    hami_annotation_keys,
)

from . import VENDOR

RESOURCES: Final = ResourceNames(count="aws.amazon.com/neuron", cores="aws.amazon.com/neuroncore")

#: NeuronCores a request may address per device (HAMi ``maxCoresPerNeuronDevice``).
MAX_CORES_PER_DEVICE: Final = 2
#: A request's ``cores_pct`` for whole devices (``aws.amazon.com/neuron``).
WHOLE: Final = 100


def request_cores(request: DeviceRequest) -> int:
    """NeuronCores a request charges per device against an ``aws.amazon.com/neuroncore``
    quota at admission: its cores, a whole device as HAMi's ``coresPerAWSNeuron`` at
    most (2); fit charges the cores actually taken (``slice_cores``)."""
    return MAX_CORES_PER_DEVICE if request.cores_pct == WHOLE else request.cores_pct


def slice_cores(device: ContainerDevice, container: Mapping[str, Any]) -> int:
    """NeuronCores an allocated slice holds: the bits of its core mask."""
    return bin(device.cores_pct).count("1")


#: HAMi writes only the ``-allocated`` list (the Neuron device plugin reads
#: ``AWS_NEURON_IDS``); the register key is where hami's own device plugin publishes.
DEVICE_TYPE: Final = DeviceTypeInfo(
    vendor=VENDOR,
    resources=RESOURCES,
    **hami_annotation_keys("aws-neuron"),
    # the core's node score counts sharers only: cores are masks, devices have no memory
    fit_rules=FitRules(cores_capacity=lambda u: None),
    # quota counts NeuronCores, not masks
    quota_request_cores=request_cores,
    quota_slice_cores=slice_cores,
    # devices and slices carry core masks; aws.amazon.com/neuroncore counts cores
    cores_unit=NEURON_CORE_MASK,
    request_cores_unit=NEURON_CORES,
    # what allocate.py sets: the NeuronCores the Neuron runtime uses
    allocate_env=("NEURON_RT_VISIBLE_CORES",),
)

USE_UUID: Final = "aws.amazon.com/use-neuron-uuid"
NOUSE_UUID: Final = "aws.amazon.com/nouse-neuron-uuid"
#: Node label of the EC2 instance type (a Kubernetes well-known label).
INSTANCE_TYPE_LABEL: Final = "node.kubernetes.io/instance-type"
#: ``DeviceInfo.custom`` key of the instance type (HAMi's ``AWSNodeType``).
NODE_TYPE: Final = "AWSNodeType"
OPTION_DEFAULTS: Final[dict[str, Any]] = {
    # The Neuron tool discovery runs (``neuron-ls --json-output``).
    "neuronLsPath": "neuron-ls",
}

#: Pod annotations the Neuron device plugin reads, written at bind (HAMi's names; the
#: first four not prefixed).
ASSIGNED_IDS: Final = "AWS_NEURON_IDS"
ALLOC_TIME: Final = "NEURON_ALLOC_TIME"
RESOURCE_TYPE: Final = "NEURON_RESOURCE_TYPE"
ALLOCATED: Final = "NEURON_ALLOCATED"
ASSIGNED_NODE: Final = "aws.amazon.com/predicate-node"
