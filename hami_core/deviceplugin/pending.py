"""Which pod is kubelet allocating? (PROTOCOL.md §3, §4)

Kubelet's ``Allocate`` names device IDs only, never the pod. HAMi takes the pod named by
the node lock, and so do we: only the pod a valid node lock names (decodable, not
expired, no stamp from the future) is served (PROTOCOL.md §6). It must also be bound to
this node by our scheduler (``hami.io/vgpu-node``), still ``hami.io/bind-phase:
allocating``, its ``hami.io/bind-time`` must fall within the lock's era (the scheduler
writes both from one clock at one bind: data a tenant cannot write on the Node), and its
next containers waiting for this vendor's devices must ask exactly the number of devices
kubelet asks for, so a lost or stale lock cannot hand one pod's limits to another.

The scheduler's signature (``hami.io/allocation-signature``, PROTOCOL.md §4a) is the trust
anchor that does not need the lock: a pod whose signature verifies is ``signed``; one
whose signature fails is never a candidate, lock or not.

Progress is kept on the pod itself, as HAMi does: the entry of each container that has
been answered is emptied in ``*-devices-to-allocate`` (``*-devices-allocated`` keeps the
full list for accounting), so a pod with several GPU containers is matched container
after container across kubelet's separate ``Allocate`` calls.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from hami_core.cluster.base import ClusterStore, KubeObject
from hami_core.errors import AnnotationError, HamiError, NotFoundError
from hami_core.model import ContainerDevices, DeviceTypeInfo, PodDevices
from hami_core.protocol import annotations as keys
from hami_core.protocol.devicelist import decode_pod_devices
from hami_core.protocol.lock import DEFAULT_LOCK_EXPIRY_S, NodeLock, decode_lock, taken_for_bind
from hami_core.protocol.pods import containers, is_live, pod_ref
from hami_core.protocol.signature import AllocationVerifier

from .podresources import KubeletPod

#: ``--unsigned-allocations``: serve a pod without a signature under a node lock naming
#: it (HAMi's protocol: HAMi's scheduler, a rolling upgrade), or never.
UNSIGNED_LOCK = "lock"
UNSIGNED_REFUSE = "refuse"
UNSIGNED_MODES = (UNSIGNED_LOCK, UNSIGNED_REFUSE)
#: How the reason of a pod refused for its signature begins (``Candidates.skipped``).
SIGNATURE_REFUSED = "allocation signature refused: "


@attrs.frozen(kw_only=True)
class PendingContainer:
    """A container still waiting for its devices of one vendor.

    Attributes:
        position: its index in wire order (init containers first, PROTOCOL.md §3).
        name: the container name.
        spec: the container (``v1.Container`` JSON).
        devices: the slices the scheduler assigned to it (never empty here).
    """

    position: int
    name: str
    spec: Mapping[str, Any]
    devices: ContainerDevices

    @property
    def uuids(self) -> frozenset[str]:
        """The physical devices assigned."""
        return frozenset(d.uuid for d in self.devices)


@attrs.frozen(kw_only=True)
class PendingPod:
    """A pod bound to this node whose allocation is not finished.

    Attributes:
        pod: the pod as read.
        entries: its decoded ``*-devices-to-allocate`` list, one entry per container.
        remaining: the containers with a non-empty entry, wire order.
        lock_owner: True when the node lock names this pod.
        bind_time: ``hami.io/bind-time`` in unix seconds (0 when missing).
        signed: its allocation signature verifies for this pod, this node and its
            values (PROTOCOL.md §4a): the scheduler wrote exactly this allocation, so
            it may be served without the node lock naming it.
    """

    pod: KubeObject
    entries: PodDevices
    remaining: tuple[PendingContainer, ...]
    lock_owner: bool = False
    bind_time: int = 0
    signed: bool = False

    @property
    def namespace(self) -> str:
        return str((self.pod.get("metadata") or {}).get("namespace") or "default")

    @property
    def name(self) -> str:
        return str((self.pod.get("metadata") or {}).get("name") or "")

    @property
    def ref(self) -> str:
        """``namespace/name``."""
        return pod_ref(self.pod)

    def fits(self, counts: Sequence[int]) -> bool:
        """True when the next ``len(counts)`` waiting containers ask exactly ``counts``."""
        return len(self.remaining) >= len(counts) and all(
            len(c.devices) == n for c, n in zip(self.remaining, counts, strict=False)
        )


@attrs.frozen(kw_only=True)
class Candidates:
    """Every pod on the node that could be the one being allocated, and the lock.

    Attributes:
        pods: pending pods, in no particular order.
        lock: the decoded node lock, or None when not held (or unreadable).
        lock_pod: the pod the lock names, when it exists.
        skipped: ``namespace/name: reason`` for pods on the node that claim to be
            allocating here but cannot be (wrong node, malformed list, a signature that
            does not verify, ...), for errors.
        lock_value: the lock annotation exactly as read (for a conditional release).
        refused: the pods whose allocation signature failed, each with the reason
            (the device plugin records it on the pod as an event).
    """

    pods: tuple[PendingPod, ...]
    lock: NodeLock | None
    lock_pod: KubeObject | None
    skipped: tuple[str, ...] = ()
    lock_value: str | None = None
    refused: tuple[tuple[KubeObject, str], ...] = ()


def find_candidates(
    store: ClusterStore,
    *,
    node: str,
    dtype: DeviceTypeInfo,
    now: dt.datetime | None = None,
    expiry_s: float = DEFAULT_LOCK_EXPIRY_S,
    adjust: Callable[[KubeObject], KubeObject] | None = None,
    verifier: AllocationVerifier | None = None,
    unsigned: str = UNSIGNED_LOCK,
) -> Candidates:
    """Read the node lock and the pods on ``node`` that wait for ``dtype`` devices.

    A pod qualifies when it is live, not being deleted, bound to ``node``
    (``spec.nodeName``), placed on ``node`` by the scheduler (``hami.io/vgpu-node``),
    in ``hami.io/bind-phase: allocating``, and has a well-formed
    ``dtype.to_allocate_annotation`` with one entry per container and at least one
    non-empty entry left.

    With a ``verifier``, a pod carrying ``hami.io/allocation-signature`` qualifies only
    when it verifies for its UID, namespace, name, this node and the signed values, and
    its ``*-devices-to-allocate`` entries are the signed ``*-devices-allocated`` ones
    (or emptied, answered): then ``signed``. A signature that fails makes the pod no
    candidate, lock or not (a forged, altered or replayed allocation: its reason in
    ``skipped`` and ``refused``). A pod without one is HAMi's protocol: a candidate
    (served only under a lock naming it) when ``unsigned`` is ``UNSIGNED_LOCK``, none
    when ``UNSIGNED_REFUSE``. Without a verifier no signature is read (the lock alone).

    Args:
        adjust: applied to every pod read (the device plugin lays over the cached pod
            the progress it answered and has not seen come back yet,
            ``progress.ProgressOverlay``).
        verifier: checks allocation signatures (``--allocation-public-keys``).
        unsigned: what becomes of pods without a signature (``--unsigned-allocations``).

    Raises:
        NotFoundError: the node does not exist.
    """
    node_obj = store.cached_node(node)  # the store's cache, else a read
    lock_value = ((node_obj.get("metadata") or {}).get("annotations") or {}).get(keys.NODE_LOCK)
    lock: NodeLock | None = None
    if lock_value:
        try:
            lock = decode_lock(lock_value)
        except AnnotationError:
            lock = None
    current = now or dt.datetime.now(dt.UTC)
    valid = lock is not None and not lock.expired(current, expiry_s=expiry_s)
    pods: dict[tuple[str, str], KubeObject] = {}
    for pod in store.pods_on_node(node):
        if adjust is not None:
            pod = adjust(pod)
        meta = pod.get("metadata") or {}
        pods[(str(meta.get("namespace") or "default"), str(meta.get("name") or ""))] = pod
    lock_pod: KubeObject | None = None
    if lock is not None and lock.pod:
        key = (lock.namespace, lock.pod)
        lock_pod = pods.get(key)
        if lock_pod is None:
            try:
                lock_pod = store.get_pod(lock.namespace, lock.pod)
                if adjust is not None:
                    lock_pod = adjust(lock_pod)
            except NotFoundError:
                lock_pod = None
        if lock_pod is not None:
            pods[key] = lock_pod
    out: list[PendingPod] = []
    skipped: list[str] = []
    refused: list[tuple[KubeObject, str]] = []
    for (namespace, name), pod in sorted(pods.items()):
        owner = valid and lock is not None and lock.owned_by(namespace, name)
        if owner and lock is not None and not _bound_under(pod, lock):
            skipped.append(
                f"{namespace}/{name}: {keys.BIND_TIME} does not match the node lock's stamp "
                f"{lock.acquired_at:%Y-%m-%dT%H:%M:%SZ}"
            )
            owner = False
        pending, why = _pending(pod, node=node, dtype=dtype, lock_owner=owner)
        if pending is not None and verifier is not None:
            pending, why = _signed(pending, verifier, node=node, dtype=dtype, unsigned=unsigned)
            if pending is None and why.startswith(SIGNATURE_REFUSED):
                refused.append((pod, why))
        if pending is not None:
            out.append(pending)
        elif why:
            skipped.append(f"{namespace}/{name}: {why}")
    return Candidates(
        pods=tuple(out),
        lock=lock,
        lock_pod=lock_pod,
        skipped=tuple(skipped),
        lock_value=lock_value or None,
        refused=tuple(refused),
    )


def _signed(
    pending: PendingPod,
    verifier: AllocationVerifier,
    *,
    node: str,
    dtype: DeviceTypeInfo,
    unsigned: str,
) -> tuple[PendingPod | None, str]:
    """``pending`` marked ``signed`` when its signature verifies, or None and why."""
    check = verifier.check(
        pending.pod,
        node=node,
        required=(keys.VGPU_NODE, keys.BIND_TIME, dtype.allocated_annotation),
    )
    if not check.present:
        if unsigned == UNSIGNED_LOCK:
            return pending, ""
        return None, (
            f"carries no {keys.ALLOCATION_SIGNATURE} and this device plugin serves no "
            "unsigned allocation (--unsigned-allocations refuse)"
        )
    if not check.verified:
        return None, SIGNATURE_REFUSED + check.reason
    ann = (pending.pod.get("metadata") or {}).get("annotations") or {}
    try:
        signed = decode_pod_devices(ann[dtype.allocated_annotation])
    except AnnotationError as exc:
        return None, f"{SIGNATURE_REFUSED}{dtype.allocated_annotation}: {exc}"
    if len(signed) != len(pending.entries) or any(
        e and e != s for e, s in zip(pending.entries, signed, strict=True)
    ):
        return None, (
            f"{SIGNATURE_REFUSED}{dtype.to_allocate_annotation} is not the signed "
            f"{dtype.allocated_annotation} (entries may only be emptied as they are answered)"
        )
    return attrs.evolve(pending, signed=True), ""


def _bound_under(pod: KubeObject, lock: NodeLock) -> bool:
    ann = (pod.get("metadata") or {}).get("annotations") or {}
    return bool(taken_for_bind(lock, ann.get(keys.BIND_TIME)))


def select_pod(
    candidates: Sequence[PendingPod],
    counts: Sequence[int],
    *,
    kubelet_uuids: Sequence[frozenset[str]] = (),
) -> PendingPod | None:
    """The pod kubelet is allocating: the valid lock's owner when it matches ``counts``,
    else None (no other pod is ever served).

    Args:
        candidates: from ``find_candidates``.
        counts: devices kubelet asks for, one number per container request.
        kubelet_uuids: per container request, the physical UUIDs of kubelet's IDs.
    """
    matching = [p for p in candidates if p.lock_owner and p.fits(counts)]

    def same_gpus(p: PendingPod) -> bool:
        return bool(kubelet_uuids) and all(
            c.uuids == u for c, u in zip(p.remaining, kubelet_uuids, strict=False)
        )

    matching.sort(
        key=lambda p: (
            not p.lock_owner,
            not same_gpus(p),
            p.bind_time or 2**62,
            str((p.pod.get("metadata") or {}).get("creationTimestamp") or ""),
            p.ref,
        )
    )
    return matching[0] if matching else None


class AmbiguousAllocateError(HamiError):
    """Kubelet lists several pods that could be the one being admitted, and their
    answers differ: serving either could hand one pod another's slice."""

    grpc_code = "FAILED_PRECONDITION"


def identify(
    candidates: Sequence[PendingPod],
    counts: Sequence[int],
    *,
    kubelet: Sequence[KubeletPod],
    resource: str,
    trusted: Callable[[KubeObject], bool],
    kubelet_uuids: Sequence[frozenset[str]] = (),
) -> PendingPod | None:
    """The pod kubelet is admitting, told by its PodResources ``List`` (PROTOCOL.md §4).

    Kubelet admits one pod at a time and records a container's devices only once its
    ``Allocate`` answered, so the pod being admitted is the candidate kubelet lists whose
    next waiting containers have no ``resource`` devices yet. Of those, the pod the
    valid node lock names is served first (HAMi's lock mode, a rolling upgrade); a pod
    no lock names is served only when ``trusted`` (its allocation's signature checks
    out: a tenant's forged annotations past a webhook outage are never served). When
    several remain (a pod kubelet refused before its status reached us), they are served
    only if interchangeable: their next containers were charged the same slices, so the
    answer is the same whichever kubelet admits; the one on kubelet's GPUs, then the
    latest bound, is named.

    Args:
        candidates / counts / kubelet_uuids: as ``select_pod``.
        kubelet: kubelet's pods (``PodResourcesSource.list``).
        resource: the extended resource being allocated (``nvidia.com/gpu``).
        trusted: whether a pod no lock names may be served.

    Raises:
        AmbiguousAllocateError: several candidates remain and their answers differ.
    """
    listed = {(p.namespace, p.name): p for p in kubelet}

    def admitting(p: PendingPod) -> bool:
        seen = listed.get((p.namespace, p.name))
        if seen is None or not p.fits(counts):
            return False
        return not any(seen.devices_of(c.name, resource) for c in p.remaining[: len(counts)])

    found = [p for p in candidates if admitting(p) and (p.lock_owner or trusted(p.pod))]
    owners = [p for p in found if p.lock_owner]
    if owners:
        return owners[0]
    if len(found) <= 1:
        return found[0] if found else None
    shapes = {tuple(c.devices for c in p.remaining[: len(counts)]) for p in found}
    if len(shapes) > 1:
        raise AmbiguousAllocateError(
            f"kubelet lists {', '.join(sorted(p.ref for p in found))} as admitting, each "
            f"waiting for {', '.join(str(n) for n in counts)} device(s) of {resource} with "
            "different slices; none is served"
        )

    def same_gpus(p: PendingPod) -> bool:
        return bool(kubelet_uuids) and all(
            c.uuids == u for c, u in zip(p.remaining, kubelet_uuids, strict=False)
        )

    found.sort(key=lambda p: (not same_gpus(p), -p.bind_time, p.ref))
    return found[0]


def consumed(entries: PodDevices, positions: Sequence[int]) -> PodDevices:
    """``entries`` with the entries at ``positions`` emptied (answered containers)."""
    done = set(positions)
    return tuple(() if i in done else e for i, e in enumerate(entries))


def _pending(
    pod: KubeObject, *, node: str, dtype: DeviceTypeInfo, lock_owner: bool
) -> tuple[PendingPod | None, str]:
    meta = pod.get("metadata") or {}
    ann: Mapping[str, str] = meta.get("annotations") or {}
    phase = ann.get(keys.BIND_PHASE)
    if phase != keys.BIND_PHASE_ALLOCATING:
        return None, (f"{keys.BIND_PHASE} is {phase!r}" if lock_owner else "")
    if dtype.to_allocate_annotation not in ann:
        return None, ""  # allocating for another vendor
    if meta.get("deletionTimestamp") or not is_live(pod):
        return None, "the pod is finished or being deleted"
    bound = (pod.get("spec") or {}).get("nodeName")
    placed = ann.get(keys.VGPU_NODE)
    if bound != node or placed != node:
        return None, f"bound to {bound!r} and placed on {placed!r}, not on {node!r}"
    try:
        entries = decode_pod_devices(ann[dtype.to_allocate_annotation])
    except AnnotationError as exc:
        return None, f"{dtype.to_allocate_annotation}: {exc}"
    specs = list(containers(pod))
    if len(entries) != len(specs):
        return None, (
            f"{dtype.to_allocate_annotation} has {len(entries)} entries for {len(specs)} containers"
        )
    remaining = tuple(
        PendingContainer(position=i, name=str(spec.get("name", "")), spec=spec, devices=devs)
        for i, ((spec, _, _), devs) in enumerate(zip(specs, entries, strict=True))
        if devs
    )
    if not remaining:
        return None, "every container already has its devices"
    try:
        bind_time = int(ann.get(keys.BIND_TIME) or 0)
    except ValueError:
        bind_time = 0
    return (
        PendingPod(
            pod=pod,
            entries=entries,
            remaining=remaining,
            lock_owner=lock_owner,
            bind_time=bind_time,
        ),
        "",
    )
