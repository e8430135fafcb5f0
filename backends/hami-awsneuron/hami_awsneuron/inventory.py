"""A node's Neuron devices from its capacity, as HAMi 2.10 reads them (``GetNodeDevices``).

``status.capacity`` ``aws.amazon.com/neuron`` (devices) and ``aws.amazon.com/neuroncore``
(cores, all devices) are what the Neuron device plugin advertises. Device ``i`` is
``<node>-AWSNeuron-<i>``; its ``count`` (sharers) is its core count, its ``devcore`` the
bit mask of its cores (``3`` for 2 cores), its memory 0; the node's instance type
(label ``node.kubernetes.io/instance-type``) is kept for placement (HAMi's
``AWSNodeType``). A node where hami's own device plugin published
``hami.io/node-aws-neuron-register`` is read from that annotation instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hami_core.backend import DeviceInfo, capacity_quantities

from . import VENDOR
from .names import DEVICE_TYPE, INSTANCE_TYPE_LABEL, MAX_CORES_PER_DEVICE, NODE_TYPE, RESOURCES


def device(node_name: str, index: int, cores: int, instance_type: str) -> DeviceInfo:
    """One Neuron device as HAMi registers it."""
    return DeviceInfo(
        uuid=f"{node_name}-{VENDOR}-{index}",
        vendor=VENDOR,
        model=VENDOR,
        index=index,
        split_count=cores,
        memory_mib=0,
        cores_pct=(1 << cores) - 1,
        custom=((NODE_TYPE, instance_type),),
    )


def node_devices(node: Mapping[str, Any]) -> list[DeviceInfo] | None:
    """The node's devices from capacity; None when hami's register annotation is present
    or the capacity names no devices.

    Raises:
        AnnotationError: a capacity value is not a whole number.
    """
    meta = node.get("metadata") or {}
    if DEVICE_TYPE.register_annotation in (meta.get("annotations") or {}):
        return None
    stated = capacity_quantities(node, {RESOURCES.count: 2**16, RESOURCES.cores: 2**20})
    if not stated or not stated[0]:
        return None
    count, cores = stated
    name = str(meta.get("name", ""))
    per_device = cores // count or MAX_CORES_PER_DEVICE
    instance_type = str((meta.get("labels") or {}).get(INSTANCE_TYPE_LABEL, ""))
    return [device(name, i, per_device, instance_type) for i in range(count)]
