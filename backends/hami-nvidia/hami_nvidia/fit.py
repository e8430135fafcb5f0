"""Placing one container's NVIDIA request on one node (PROTOCOL.md §1, §2, §5).

The checks, policies and hints are the core's shared device-fit logic
(``hami_core.backend.fit``); this module names the NVIDIA filter annotations (HAMi's and
the handbook's; ``nvidia.com/vgpu-mode`` lists the inventory modes the pod accepts) and
adds two steps: a container's GPUs are all in one mode, and a GPU in mig mode takes an
instance of one of its MIG profiles (``mig``).

``fit(request, node, usage, pod, policy)`` chooses ``request.count`` distinct GPUs on the
node (a request naming a MIG profile: ``request.count`` instances of it, several on one GPU
allowed, ``named_instances``) or explains why not; ``fit_nodes(request, nodes, pod, policy)`` is the same on every
``(node, usage, allocated)`` of ``nodes``, the pod's filter annotations read once.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from hami_core.backend import (
    ContainerDevice,
    FilterKeys,
    FitCall,
    FitResult,
    ReasonCode,
    VendorFit,
    load,
    type_matches,
)

from . import mig
from .names import DEVICE_TYPE, NOUSE_TYPE, NOUSE_UUID, NUMA_BIND, USE_TYPE, USE_UUID, VGPU_MODE

__all__ = ["filters_of", "fit", "fit_nodes", "load", "type_matches"]

#: The order modes are tried in for a container of several GPUs on a node of mixed modes.
MODE_ORDER = ("hami-core", "mps", "mig")


def one_mode(call: FitCall[None]) -> FitResult:
    """The core's fit, then MIG instances. A container's GPUs are all in one mode (the
    device plugin serves a container in one mode): on a node whose GPUs are in several
    modes (static MIG GPUs beside shared ones) a request of several GPUs takes them from
    the first mode of ``MODE_ORDER`` that holds it whole."""
    request, usage = call.request, call.usage
    if request.info(mig.PROFILE_KEY):
        return named_instances(call)
    whole = call.fit()
    modes = {u.device.mode for u in usage}
    if request.count > 1 and len(modes) > 1 and whole.fits:
        for mode in sorted(modes, key=lambda m: (MODE_ORDER.index(m) if m in MODE_ORDER else 9, m)):
            group = [u for u in usage if u.device.mode == mode]
            if len(group) < request.count:
                continue
            result = call.fit(usage=group)
            if result.fits:
                return mig.with_instances(result, group, request)
        return FitResult(node_reason=ReasonCode.ALLOCATED_CARDS_INSUFFICIENT_REQUEST)
    return mig.with_instances(whole, usage, request)


def named_instances(call: FitCall[None]) -> FitResult:
    """A request naming a MIG profile (``nvidia.com/mig-<profile>: N``): N instances of
    that profile, one after another, each on the GPU the core's fit (filters, policy)
    chooses with the instances already taken counted as held, so several may sit on one
    GPU and none overlaps another. Under the NVIDIA device plugin's ``mixed`` strategy each
    instance is one unit of ``nvidia.com/mig-<profile>`` (NVIDIA k8s-device-plugin README,
    "MIG Support"), not a GPU. The first instance that cannot be had: that fit's no-fit
    (``CardMigTopologyInfeasible`` on a GPU whose free instances ran out).

    The answer lists the instances of one GPU next to each other, in the order they were
    chosen (``hami_order``): the device list HAMi writes for the same instances."""
    one = attrs.evolve(call.request, count=1)
    usage = list(call.usage)
    chosen = []
    for _ in range(call.request.count):
        result = mig.with_instances(call.fit(request=one, usage=usage), usage, one)
        if not result.fits:
            return result
        (d,) = result.devices
        chosen.append(d)
        usage = [mig.holding(u, d) if u.device.uuid == d.uuid else u for u in usage]
    return FitResult(devices=hami_order(chosen))


def hami_order(devices: Sequence[ContainerDevice]) -> tuple[ContainerDevice, ...]:
    """``devices`` (one container's MIG instances) with those of one GPU next to each
    other: GPUs in the order first chosen, each GPU's instances in the order chosen.

    HAMi 2.10 takes a GPU in ``mig`` mode again and again for one container until it
    holds no further instance (``pkg/device/nvidia/device.go`` ``Fit``: ``if dev.Mode ==
    "mig" { i++ }``), so its device list names a GPU once per instance with the entries
    of one GPU adjacent, and ``EncodeMigAllocations`` numbers them ``deviceIndex`` 0, 1,
    ... in that order. Its readers (the device plugin's ``GetContainerDeviceStrArray``,
    which matches each ``deviceIndex`` to the entry's GPU and needs as many entries as
    kubelet's device IDs; the scheduler's ``getNodesUsage``, which takes a GPU's
    reservations in array order) read that shape, which this order keeps."""
    groups: dict[str, list[ContainerDevice]] = {}
    for d in devices:
        groups.setdefault(d.uuid, []).append(d)
    return tuple(d for group in groups.values() for d in group)


#: HAMi's type and UUID filter annotations (with the handbook's aliases) ...
TYPE_AND_UUID = FilterKeys(
    use_type=USE_TYPE, nouse_type=NOUSE_TYPE, use_uuid=USE_UUID, nouse_uuid=NOUSE_UUID
)
#: ... and NVIDIA's own: NUMA binding and the inventory modes the pod accepts.
FILTERS = attrs.evolve(TYPE_AND_UUID, numa_bind=NUMA_BIND, mode=VGPU_MODE)

fit: VendorFit[None] = VendorFit(filters=FILTERS, rules=DEVICE_TYPE.fit_rules, place=one_mode)
filters_of = fit.filters_of
fit_nodes = fit.nodes
