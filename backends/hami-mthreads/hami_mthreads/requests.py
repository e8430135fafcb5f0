"""Reading and defaulting a Moore Threads request (HAMi 2.10 ``pkg/device/mthreads``).

- ``mthreads.com/vgpu`` (count) must be a whole number above 0; memory or cores without
  a count ask nothing of this vendor (HAMi: a container is this vendor's only when it
  names the count resource).
- Card sizes: the section's ``memoryPerCard`` (512 MiB units per card model, default
  ``[96]``, the MTT S4000; ``[160]`` an MTT S5000; ``[96, 160]`` a cluster of both).
- One GPU: ``mthreads.com/sgpu-memory`` in 512 MiB units, only the powers of two from 2
  below a card size or a card size itself (HAMi ``legalMemoryslices``; 2 ... 64, 96 by
  default); ``mthreads.com/sgpu-core`` 0..16 of the GPU's 16 cores. Without memory the
  webhook writes a whole GPU (the card size, 16 cores), as HAMi's does; with one card
  size, that size is read as the whole GPU (100 % of its memory, whatever the GPU
  reports). With several sizes a stated size is that much memory, and the webhook
  writes no memory for a whole GPU (which size is unknown until fit).
- More than one GPU: whole GPUs; the webhook writes ``count x`` the card size (one size
  only) and ``count x 16`` cores whatever was stated (HAMi does the same) and annotates
  the pod with ``mthreads.com/request-gpu-num``. The stated totals are divided per GPU.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hami_core.backend import (
    DeviceRequest,
    InvalidInputError,
    MutateResult,
    VendorConfig,
    denies_invalid_input,
    pointer_token,
    read_quantity,
    resource_value,
    stated_quantities,
)

from . import VENDOR
from .names import (
    CORES_PER_GPU,
    MEMORY_UNIT_MIB,
    REQUEST_GPU_NUM,
    legal_memory_units,
    memory_per_card,
    resources,
)


def parse_request(container: Mapping[str, Any], config: VendorConfig) -> DeviceRequest | None:
    """The container's request, per GPU, or None when it names no ``mthreads.com/vgpu``.

    Returns: ``memory_mib`` = units x 512 / count (or ``memory_pct`` 100 when no memory
        is stated), ``cores_pct`` = sGPU cores / count (of 16 per GPU).
    Raises:
        InvalidInputError: a count of 0 or below, a malformed quantity, a one-GPU memory
            not legal for any card size (``legal_memory_units``), or cores above 16 per
            GPU.
    """
    names = resources(config)
    cname = container.get("name", "?")
    if resource_value(container, names.count) is None:
        return None
    count = read_quantity(container, names.count)
    if not count:
        raise InvalidInputError(f"container {cname!r}: {names.count} must be greater than 0")
    if count > 1:
        return DeviceRequest(vendor=VENDOR, count=count, memory_pct=100, cores_pct=CORES_PER_GPU)
    memory_units = read_quantity(container, names.memory, maximum=(2**31 - 1) // MEMORY_UNIT_MIB)
    cores = read_quantity(container, names.cores)
    sizes = memory_per_card(config)
    legal = legal_memory_units(sizes)
    if memory_units is not None and memory_units not in legal:
        raise InvalidInputError(
            f"container {cname!r}: {names.memory} {memory_units} is not a valid sGPU memory "
            f"(units of {MEMORY_UNIT_MIB} MiB); valid values are {', '.join(map(str, legal))}"
        )
    if cores is not None and cores > CORES_PER_GPU:
        raise InvalidInputError(
            f"container {cname!r}: {names.cores} {cores} is above the {CORES_PER_GPU} "
            "sGPU cores of one GPU"
        )
    if memory_units is None or (len(sizes) == 1 and memory_units == sizes[0]):
        # the card size is what HAMi's webhook writes for a whole GPU; taking it as 100 %
        # keeps a whole-GPU request placeable on GPUs reporting a little less.
        cores = CORES_PER_GPU if cores is None else cores
        return DeviceRequest(vendor=VENDOR, count=1, memory_pct=100, cores_pct=cores)
    return DeviceRequest(
        vendor=VENDOR,
        count=1,
        memory_mib=memory_units * MEMORY_UNIT_MIB,
        cores_pct=cores or 0,
    )


@denies_invalid_input
def mutate(
    pod: Mapping[str, Any], container: Mapping[str, Any], container_path: str, config: VendorConfig
) -> MutateResult | None:
    """HAMi's ``MutateAdmission``: whole GPUs written as ``count x`` the card size in
    memory units (with one ``memoryPerCard`` size; with several, memory is left as
    stated) and ``count x 16`` cores for a count above 1 or a request without memory
    (limits and requests both), ``mthreads.com/request-gpu-num`` on the pod for a count
    above 1.

    Returns: None for a container without ``mthreads.com/vgpu``; a denial naming the
        container, the resource and the value for an illegal one.
    """
    req = parse_request(container, config)
    if req is None:
        return None
    names = resources(config)
    values = stated_quantities(container, (names.count, names.memory, names.cores))
    whole = req.count > 1 or resource_value(container, names.memory) is None
    if whole:
        sizes = memory_per_card(config)
        if len(sizes) == 1:
            values[names.memory] = str(req.count * sizes[0])
        values[names.cores] = str(req.count * CORES_PER_GPU)
    patch: list[dict[str, Any]] = []
    if req.count > 1:
        ann = (pod.get("metadata") or {}).get("annotations")
        if ann is None:
            patch.insert(0, {"op": "add", "path": "/metadata/annotations", "value": {}})
        if (ann or {}).get(REQUEST_GPU_NUM) != str(req.count):
            patch.append(
                {
                    "op": "add",
                    "path": f"/metadata/annotations/{pointer_token(REQUEST_GPU_NUM)}",
                    "value": str(req.count),
                }
            )
    return MutateResult(resources=values, patch=tuple(patch))
