"""Reading and defaulting MetaX requests (HAMi 2.10 ``pkg/device/metax``).

Whole GPUs (``Metax-GPU``, ``device.go``): ``metax-tech.com/gpu`` = N whole GPUs (all
memory, cores 100).

sGPUs (``Metax-SGPU``, ``sdevice.go``):

- ``metax-tech.com/sgpu`` = N sGPUs, more than 0;
- ``metax-tech.com/vmemory`` per sGPU: a plain number is GiB (x 1024 MiB); a quantity
  with a unit (``16Gi``, ``4096Mi``) is bytes, taken in MiB (HAMi's ``hasUnit`` rule);
  unset: the whole GPU;
- ``metax-tech.com/vcore`` percent per sGPU, 0..100, **default 100** (an sGPU without
  vcore takes the GPU's compute exclusively);
- pod annotations: ``metax-tech.com/sgpu-app-class`` (``online`` | ``offline``; such a
  pod asks one sGPU per container) and ``metax-tech.com/sgpu-qos-policy``
  (``best-effort`` | ``fixed-share`` | ``burst-share``; the webhook writes
  ``best-effort`` when an offline or unclassed pod names none). An ``online`` pod's
  compute is not accounted (HAMi charges it 0 cores).
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from hami_core.backend import (
    DeviceRequest,
    InvalidInputError,
    MutateResult,
    annotations_of,
    denies_invalid_input,
    pointer_token,
    read_quantity,
    reads_pod_annotations,
    resource_value,
    stated_quantities,
)

from . import GPU, SGPU
from .names import (
    APP_CLASS,
    APP_CLASSES,
    DEFAULT_QOS,
    GPU_RESOURCES,
    MEMORY_UNIT_MIB,
    QOS_POLICIES,
    QOS_POLICY,
    SGPU_RESOURCES,
)

INT32_MAX = 2**31 - 1


def _where(container: Mapping[str, Any]) -> str:
    return f"container {container.get('name', '?')!r}"


def _count(container: Mapping[str, Any], name: str) -> int | None:
    count = read_quantity(container, name)
    if count is not None and count <= 0:
        raise InvalidInputError(f"{_where(container)}: {name} must be greater than 0")
    return count


def vmemory_mib(container: Mapping[str, Any]) -> int | None:
    """``metax-tech.com/vmemory`` in MiB: plain numbers are GiB, quantities with a unit
    bytes (HAMi). None when unset.

    Raises:
        InvalidInputError: malformed, fractional, or above int32 MiB.
    """
    name = SGPU_RESOURCES.memory
    raw = resource_value(container, name)
    if raw is None:
        return None
    text = str(raw).strip()
    if any(c.isalpha() for c in text):
        value = read_quantity(container, name, maximum=INT32_MAX * 1024 * 1024)
        assert value is not None
        mib = int(Decimal(value) / (1024 * 1024))
    else:
        units = read_quantity(container, name, maximum=INT32_MAX // MEMORY_UNIT_MIB)
        assert units is not None
        mib = units * MEMORY_UNIT_MIB
    if mib > INT32_MAX:
        raise InvalidInputError(f"{_where(container)}: {name}: {raw!r} is above int32 MiB")
    return mib


def check_pod_annotations(pod: Mapping[str, Any], count: int, container: Mapping[str, Any]) -> None:
    """App class and QoS policy must be known values; an app-class pod asks one sGPU.

    Raises:
        InvalidInputError: naming the annotation and its value.
    """
    ann = annotations_of(pod)
    app = ann.get(APP_CLASS)
    if app is not None:
        if app not in APP_CLASSES:
            raise InvalidInputError(
                f"{APP_CLASS} must be one of {', '.join(APP_CLASSES)}, got {app!r}"
            )
        if count != 1:
            raise InvalidInputError(
                f"{_where(container)}: a pod with {APP_CLASS} must request a single sGPU, "
                f"got {SGPU_RESOURCES.count} {count}"
            )
    qos = ann.get(QOS_POLICY)
    if app != "online" and qos is not None and qos not in QOS_POLICIES:
        raise InvalidInputError(
            f"{QOS_POLICY} must be one of {', '.join(QOS_POLICIES)}, got {qos!r}"
        )


@reads_pod_annotations(APP_CLASS, QOS_POLICY)
def parse_request(pod: Mapping[str, Any], container: Mapping[str, Any]) -> DeviceRequest | None:
    """The container's MetaX request (whole GPUs first, then sGPUs), or None. Of the pod
    it reads the app class and QoS policy annotations only (the core keeps its answer per
    container content and their values).

    Raises:
        InvalidInputError: a count of 0 or below, malformed quantities, vcore above 100,
            an unknown app class or QoS policy, an app-class pod asking several sGPUs.
    """
    gpus = _count(container, GPU_RESOURCES.count)
    if gpus is not None:
        return DeviceRequest(vendor=GPU, count=gpus, memory_pct=100, cores_pct=100)
    count = _count(container, SGPU_RESOURCES.count)
    if count is None:
        return None
    check_pod_annotations(pod, count, container)
    cores = read_quantity(container, SGPU_RESOURCES.cores)
    if cores is not None and cores > 100:
        raise InvalidInputError(
            f"{_where(container)}: {SGPU_RESOURCES.cores} {cores} is above 100 percent"
        )
    cores_pct = 100 if cores is None else cores
    if annotations_of(pod).get(APP_CLASS) == "online":
        cores_pct = 0
    memory = vmemory_mib(container)
    if memory:
        return DeviceRequest(vendor=SGPU, count=count, memory_mib=memory, cores_pct=cores_pct)
    return DeviceRequest(vendor=SGPU, count=count, memory_pct=100, cores_pct=cores_pct)


@denies_invalid_input
def mutate(
    pod: Mapping[str, Any], container: Mapping[str, Any], container_path: str
) -> MutateResult | None:
    """Validate; copy the stated quantities to requests; write the default QoS policy
    ``best-effort`` on an sGPU pod that is not ``online`` and names none (HAMi's
    ``MutateAdmission``); a denial for an invalid quantity."""
    req = parse_request(pod, container)
    if req is None:
        return None
    names = GPU_RESOURCES if req.vendor == GPU else SGPU_RESOURCES
    quantities = stated_quantities(container, names.all())
    patch: list[dict[str, Any]] = []
    ann = annotations_of(pod)
    if req.vendor == SGPU and ann.get(APP_CLASS) != "online" and QOS_POLICY not in ann:
        if not (pod.get("metadata") or {}).get("annotations"):
            patch.insert(0, {"op": "add", "path": "/metadata/annotations", "value": {}})
        patch.append(
            {
                "op": "add",
                "path": f"/metadata/annotations/{pointer_token(QOS_POLICY)}",
                "value": DEFAULT_QOS,
            }
        )
    return MutateResult(resources=quantities, patch=tuple(patch))
