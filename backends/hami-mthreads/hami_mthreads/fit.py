"""Fit and bind annotations for Moore Threads GPUs (HAMi 2.10 ``pkg/device/mthreads``).

The checks are the core's (``hami_core.backend.fit``) in HAMi's order, with compute read as
the GPU's 16 sGPU cores (so a request of 16 cores, a whole GPU, is refused on a GPU
already shared by reason of cores, as HAMi's ``Totalcore - Usedcores < Coresreq``). UUID
filters ``mthreads.ai/use-gpuuuid`` / ``nouse-gpuuuid``; HAMi has no type filter for this
vendor. All containers of a pod share one GPU: once an earlier container holds a GPU, a
later one takes only that GPU (HAMi's ``customFilterRule``, ``CardNotFoundCustomFilterRule``
elsewhere). At bind the pod gets what Moore Threads' device plugin reads: the chosen GPUs'
indices (``mthreads.com/gpu-index``), the node (``mthreads.com/predicate-node``) and the
time in nanoseconds (``mthreads.com/predicate-time``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from hami_core.backend import (
    ContainerDevices,
    FilterKeys,
    FitCall,
    FitRules,
    NodeInfo,
    PodDevices,
    VendorFit,
    same_device_rules,
)

from .names import ASSIGNED_INDEX, ASSIGNED_NODE, NOUSE_UUID, PREDICATE_TIME, USE_UUID


def same_device(call: FitCall[Sequence[ContainerDevices] | None]) -> FitRules:
    """HAMi's ``customFilterRule`` over the pod's earlier containers' GPUs (``extra``)."""
    return same_device_rules(call.extra or ())


#: ``fit(request, node, usage, pod, policy, allocated=())``: ``request.count`` distinct GPUs,
#: or per GPU why not (``allocated``: the pod's earlier containers' GPUs, which a later
#: container must share).
fit: VendorFit[Sequence[ContainerDevices]] = VendorFit(
    filters=FilterKeys(use_uuid=USE_UUID, nouse_uuid=NOUSE_UUID), rules=same_device
)


def bind_annotations(
    node: NodeInfo, devices: PodDevices, *, clock_ns: Callable[[], int] = time.time_ns
) -> dict[str, str]:
    """``mthreads.com/gpu-index`` (comma list of GPU indices of the last container with
    GPUs, as HAMi's ``PatchAnnotations`` leaves it), ``mthreads.com/predicate-node`` and
    ``mthreads.com/predicate-time`` (unix nanoseconds); empty without GPUs."""
    index = {d.uuid: d.index for d in node.devices}
    out: dict[str, str] = {}
    for container in devices:
        if container:
            out[ASSIGNED_INDEX] = ",".join(str(index.get(d.uuid, 0)) for d in container)
    if out:
        out[PREDICATE_TIME] = str(clock_ns())
        out[ASSIGNED_NODE] = node.name
    return out
