"""Placing one container's NVIDIA request on one node (PROTOCOL.md §1, §2, §5).

The checks, policies and hints are the core's shared device-fit logic
(``hami_core.backend.fit``); this module names the NVIDIA filter annotations (HAMi's and
the handbook's; ``nvidia.com/vgpu-mode`` lists the inventory modes the pod accepts) and
adds two steps: a container's GPUs are all in one mode, and a GPU in mig mode takes an
instance of one of its MIG profiles (``mig``).

``fit(request, node, usage, pod, policy)`` chooses ``request.count`` distinct GPUs on the
node (a request naming a MIG profile: ``request.count`` instances of it, several on one GPU
allowed, ``named_instances``; a request distinct GPUs cannot hold: instances of the GPUs
in ``mig`` mode, ``several_instances``) or explains why not; ``fit_nodes(request, nodes,
pod, policy)`` is the same on every
``(node, usage, allocated)`` of ``nodes``, the pod's filter annotations read once.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from hami_core.backend import (
    ContainerDevice,
    DeviceRequest,
    DeviceUsage,
    FilterKeys,
    FitCall,
    FitResult,
    ReasonCode,
    VendorFit,
    largest_accepted,
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
    the first mode of ``MODE_ORDER`` that holds it whole. A request of several GPUs that
    distinct GPUs cannot hold may still take several instances of the node's GPUs in
    ``mig`` mode (``several_instances``, as HAMi 2.10 does)."""
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
        shared = several_instances(call)
        if shared is not None and shared.fits:
            return shared
        return FitResult(node_reason=ReasonCode.ALLOCATED_CARDS_INSUFFICIENT_REQUEST)
    if not whole.fits:
        shared = several_instances(call)
        if shared is None:
            return whole
        # on a node of MIG GPUs only, the instances' reason is the one (HAMi's Fit's)
        return shared if shared.fits or modes == {mig.MIG_MODE} else whole
    return mig.with_instances(whole, usage, request)


def several_instances(call: FitCall[None]) -> FitResult | None:
    """A request of N > 1 GPUs as N MIG instances of the node's GPUs in ``mig`` mode,
    several on one GPU allowed (``instances``), for when distinct GPUs cannot hold it;
    None when the request is of one GPU or the node has no such GPU.

    HAMi 2.10 means ``nvidia.com/gpu: N`` so on a node with GPUs in ``mig`` mode: its
    scheduler skips the device-count check there (``pkg/scheduler/score.go``
    ``isMIGRequest``, unless the pod's ``nvidia.com/vgpu-mode`` leaves out ``mig``) and
    its ``Fit`` takes a ``mig`` GPU again for the same container
    (``pkg/scheduler/mig_allocation_test.go``
    ``TestFitInDevicesAllowsMultipleMigPlacementsOnSingleGPU``: ``nvidia.com/gpu: 2``,
    ``gpumem: 4000`` on one GPU of seven ``1g.5gb`` placements gets two of them). Here
    distinct GPUs are tried first (the pod's filters, policy and NUMA binding whole);
    instances of one GPU only where those cannot hold the request. A ``single``-strategy
    instance device (one holder) never takes two."""
    group = [u for u in call.usage if u.device.mode == mig.MIG_MODE and u.device.split_count > 1]
    if call.request.count < 2 or not group:
        return None
    return instances(call, group)


def named_instances(call: FitCall[None]) -> FitResult:
    """A request naming a MIG profile (``nvidia.com/mig-<profile>: N``): N instances of
    that profile (``instances``). Under the NVIDIA device plugin's ``mixed`` strategy each
    instance is one unit of ``nvidia.com/mig-<profile>`` (NVIDIA k8s-device-plugin README,
    "MIG Support"), not a GPU."""
    return instances(call, call.usage)


def instances(call: FitCall[None], usage: Sequence[DeviceUsage]) -> FitResult:
    """``call.request.count`` MIG instances on the GPUs of ``usage``, one after another,
    each on the GPU the core's fit (filters, policy) chooses with the instances already
    taken counted as held, so several may sit on one GPU and none overlaps another. The
    first instance that cannot be had: that fit's no-fit (``CardMigTopologyInfeasible``
    on a GPU whose free instances ran out).

    The answer lists the instances of one GPU next to each other, in the order they were
    chosen (``hami_order``): the device list HAMi writes for the same instances.

    On a no-fit of several instances, ``largest_memory_mib`` / ``largest_cores_pct`` are
    the most memory / compute per instance that ``count`` instances would get here (the
    same steps, bisected: ``largest_accepted``), not what one more instance could get."""
    result = _instances(call, usage, call.request)
    request = call.request
    if result.fits or request.count < 2:
        return result

    def accepts(changed: DeviceRequest) -> bool:
        return _instances(call, usage, changed).fits

    most_memory = max((u.free_memory_mib for u in usage), default=0)
    return attrs.evolve(
        result,
        largest_memory_mib=largest_accepted(
            lambda m: accepts(attrs.evolve(request, memory_mib=m, memory_pct=0)), most_memory
        ),
        largest_cores_pct=largest_accepted(
            lambda c: accepts(attrs.evolve(request, cores_pct=c)), 100
        ),
    )


def _instances(
    call: FitCall[None], usage: Sequence[DeviceUsage], request: DeviceRequest
) -> FitResult:
    one = attrs.evolve(request, count=1)
    left = list(usage)
    chosen = []
    for _ in range(request.count):
        result = mig.with_instances(call.fit(request=one, usage=left), left, one)
        if not result.fits:
            return result
        (d,) = result.devices
        chosen.append(d)
        left = [mig.holding(u, d) if u.device.uuid == d.uuid else u for u in left]
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
