"""The ``Allocate`` and ``GetPreferredAllocation`` use cases, without gRPC.

``Allocator.allocate`` takes kubelet's container requests (lists of fake device IDs)
and, in small steps (the NVIDIA k8s-device-plugin lesson):

1. validates every ID against the IDs this plugin advertises;
2. finds the pod being allocated (``pending.find_candidates`` / ``select_pod``: node
   lock, node name, ``bind-phase``, device counts);
3. maps the requests, in order, onto that pod's next containers still waiting for this
   vendor's devices (kubelet calls ``Allocate`` once per container, init containers
   first, in spec order: the order of the device list);
4. builds each answer through ``BackendManager.allocate`` (``hami_allocate``), creates
   the host directory of every writable mount (the per-container shared region) and, in
   CDI mode, writes the CDI spec;
5. records progress on the pod (answered entries emptied in ``*-devices-to-allocate``)
   and, when no container is left, sets ``hami.io/bind-phase: success`` and releases the
   node lock. In the device plugin these writes run after kubelet has its answer
   (``after_answer``): ``Allocate`` itself reads only the watch caches and writes nothing;
   until the pod watch brings the progress back, this process lays it over the cached pod
   (``progress.ProgressOverlay``), so the pod's next container and a retried call see it.

Any failure once the pod is known sets ``bind-phase: failed``, releases the lock and
raises ``AllocateFailedError`` naming the pod, with the gRPC code of the cause; except an
unreachable API server (``UNAVAILABLE``): the pod then keeps waiting under its lock for
kubelet's retry. Only the pod a valid node lock names is served (``pending``), and never
one whose allocation signature fails (a Warning event ``AllocationRefused`` names why). A request
that matches no pod raises ``NoPendingPodError`` or ``DeviceCountMismatchError`` (the
lock is released when its owner is gone or done) unless it repeats, with the same device
IDs, a request answered lately for a pod that still lives: that gets the same answer
(kubelet retries an Allocate it gave up on, and the first one may have been committed).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import stat
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from hami_core.backend import remove_tree
from hami_core.cluster.base import ClusterStore, KubeObject
from hami_core.errors import AnnotationError, HamiError, InvalidInputError, NotFoundError
from hami_core.facts.nodelock import release_node_lock, release_node_lock_value
from hami_core.model import ContainerAllocation, DeviceInfo, MemoryNodeState, NodeState
from hami_core.plugin import BackendManager
from hami_core.protocol import annotations as keys
from hami_core.protocol.devicelist import decode_pod_devices, encode_pod_devices
from hami_core.protocol.lock import decode_lock
from hami_core.protocol.pods import is_live, pod_ref
from hami_core.protocol.signature import AllocationVerifier

from .allocate import finish_allocation
from .cdi import CdiWriter
from .devices import physical_uuid, preferred_allocation
from .done import vendors_waiting
from .optout import allowed_container
from .pending import (
    UNSIGNED_LOCK,
    Candidates,
    PendingPod,
    consumed,
    find_candidates,
    identify,
    select_pod,
)
from .podresources import PodResourcesSource, PodResourcesUnavailableError
from .progress import ProgressOverlay

log = logging.getLogger(__name__)

#: How long an answer is kept for kubelet's retry of the same Allocate (seconds). Fake
#: device IDs are reused only after the container ends, far later than a retry.
ANSWER_KEPT_S = 120.0
ANSWERS_KEPT = 256
#: Tries of a progress write made after the answer (a brief API-server outage); waits
#: between them in seconds. The overlay keeps the progress in this process meanwhile.
COMMIT_WAITS_S = (0.2, 1.0, 3.0)


class NoPendingPodError(NotFoundError):
    """No pod on the node waits for devices of this resource."""


class DeviceCountMismatchError(HamiError):
    """Pods wait on the node, but none for the number of devices kubelet asks."""

    grpc_code = "FAILED_PRECONDITION"


class NotLockedError(HamiError):
    """Pods wait for these devices, but no valid node lock names one of them."""

    grpc_code = "FAILED_PRECONDITION"


class AllocateFailedError(HamiError):
    """Allocation of a known pod failed; the pod is marked ``failed``, the lock released.

    Attributes:
        pod: ``namespace/name`` of the pod.
        grpc_code: the gRPC code of the cause.
    """

    def __init__(self, pod: str, cause: BaseException) -> None:
        super().__init__(f"pod {pod}: {cause}")
        self.pod = pod
        self.grpc_code = getattr(cause, "grpc_code", "INTERNAL")


@attrs.frozen(kw_only=True)
class PreferredRequest:
    """One container of a ``GetPreferredAllocation`` call (kubelet's fields)."""

    available: tuple[str, ...]
    must_include: tuple[str, ...] = ()
    size: int = 1


def make_shared_dir(path: str) -> None:
    """Create a writable host directory for a container, open to every user but sticky
    (01777, like /tmp): the container's processes may run as any user and must create
    the shared region file in it, but none may delete or rename another user's file
    (to swap in a symlink or a file of its own, issue #12 item 4)."""
    os.makedirs(path, mode=0o777, exist_ok=True)
    os.chmod(path, 0o1777)


def make_shared_file(path: str, size: int) -> None:
    """Create a file a container writes through a file mount (``shared_files``):
    ``size`` bytes of zeros (sparse), mode 0666 (the container's processes may run as
    any user), in a directory of the device plugin's (0755: the container cannot add
    files beside it). A regular file already there is kept (a restarted container's
    processes may map it); anything else there (a link, a directory an older version
    left writable) is removed first, never followed.

    Raises:
        OSError: the file or its directory cannot be made.
    """
    directory = os.path.dirname(path) or "."
    name = os.path.basename(path)
    os.makedirs(directory, mode=0o755, exist_ok=True)
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        # a directory made writable (01777) by an older version becomes the host's
        os.fchmod(dir_fd, 0o755)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(name, flags, 0o666, dir_fd=dir_fd)
        except FileExistsError:
            if stat.S_ISREG(os.lstat(name, dir_fd=dir_fd).st_mode):
                return
            remove_tree(name, dir_fd=dir_fd)
            fd = os.open(name, flags, 0o666, dir_fd=dir_fd)
        try:
            os.ftruncate(fd, size)
            os.fchmod(fd, 0o666)
        finally:
            os.close(fd)
    finally:
        os.close(dir_fd)


def write_host_file(path: str, content: str) -> None:
    """Write a file a container sees read-only (0644, owned by the device plugin),
    atomically: a temporary file renamed over ``path``, never following a link."""
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(content)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


class Allocator:
    """Answers kubelet's ``Allocate`` for one vendor of one backend on one node.

    Calls are serialised: kubelet makes one at a time, and the pod's progress
    annotation must not be written by two answers at once.
    """

    def __init__(
        self,
        store: ClusterStore,
        manager: BackendManager,
        *,
        vendor: str,
        node: str,
        known_ids: Callable[[], frozenset[str]],
        cdi: CdiWriter | None = None,
        make_dir: Callable[[str], None] = make_shared_dir,
        write_file: Callable[[str, str], None] = write_host_file,
        make_file: Callable[[str, int], None] = make_shared_file,
        resource_name: str | None = None,
        node_devices: Callable[[], Sequence[DeviceInfo]] = tuple,
        after_answer: Callable[[Callable[[], None]], None] | None = None,
        state: NodeState | None = None,
        observe_pods: bool = True,
        pod_resources: PodResourcesSource | None = None,
        trusted: Callable[[KubeObject], bool] | None = None,
        verifier: AllocationVerifier | None = None,
        unsigned: str = UNSIGNED_LOCK,
    ) -> None:
        """Args:
        store: the cluster (pods and the node).
        manager: the backends, under this node's configuration.
        vendor: the vendor key served (e.g. ``NVIDIA``).
        node: this node's name.
        known_ids: the device IDs currently advertised to kubelet.
        cdi: the CDI writer in CDI mode, else None (env, mounts, device nodes).
        make_dir: creates the host directory of a writable mount.
        write_file: writes a file of ``ContainerAllocation.files`` on the host
            (``hami simulate`` writes none).
        make_file: creates a file of ``ContainerAllocation.shared_files`` on the host
            (path, size in bytes).
        resource_name: the extended resource served (for messages); default the
            vendor's default count resource.
        node_devices: the devices discovered on this node, handed to ``hami_allocate``
            (runtimes that select devices by index need them).
        after_answer: runs the writes of an answered call (the node lock's release,
            then the pod's progress and phase) after kubelet has its answer; it must run
            them in the order given (the device plugin: one background thread). Default
            None: the progress is written before returning (a failed write fails the
            call and leaves the pod retryable), then the lock is released.
        state: the node-local records handed to ``hami_allocate`` (the device
            plugin: ``FileNodeState`` under ``--state-dir``); default one in memory
            (``hami simulate``, tests: nothing written on the host).
        observe_pods: before answering a pod that carries a MIG reservation, hand
            the backend the node's pods (``hami_release``, ``observe_holders``), so
            it knows which instances other live pods hold now; ``hami simulate``,
            which realises no instance, passes False.
        pod_resources: kubelet's PodResources API; with it the pod being admitted is
            told by what kubelet lists (``pending.identify``), else only the pod the
            node lock names is served (``pending.select_pod``, HAMi's protocol).
        trusted: whether a pod no node lock names may be served; None: the pods whose
            allocation signature ``verifier`` verified (``PendingPod.signed``), or none
            without a verifier. With ``pod_resources`` and either, the node's handshake
            answer says binds here need no lock (``identifies_pods``).
        verifier: checks the scheduler's allocation signatures
            (``--allocation-public-keys``, PROTOCOL.md §4a); a pod whose signature
            fails is never served. None: no signature is read, only the pod a valid
            node lock names is served (HAMi's protocol alone).
        unsigned: with a verifier, whether a pod without a signature may still be
            served under a lock naming it (``pending.UNSIGNED_LOCK``) or never
            (``UNSIGNED_REFUSE``; ``--unsigned-allocations``).
        """
        self._after_answer = after_answer
        self._overlay = ProgressOverlay()
        self.store = store
        self.manager = manager
        self.vendor = vendor
        self.node = node
        self.dtype = manager.device_type(vendor)
        self.known_ids = known_ids
        self.cdi = cdi
        self.make_dir = make_dir
        self.write_file = write_file
        self.make_file = make_file
        self.resource_name = resource_name or self.dtype.resources.count
        self.node_devices = node_devices
        self.state: NodeState = state if state is not None else MemoryNodeState()
        self.observe_pods = observe_pods
        self.pod_resources = pod_resources
        self.trusted = trusted
        self.verifier = verifier
        self.unsigned = unsigned
        self._lock = threading.Lock()
        #: Recent answers by kubelet's device IDs, for a retried Allocate:
        #: ids -> (monotonic time, (namespace, name, uid), answers).
        self._recent: OrderedDict[
            tuple[tuple[str, ...], ...],
            tuple[float, tuple[str, str, str], list[ContainerAllocation]],
        ] = OrderedDict()

    # -- GetPreferredAllocation --------------------------------------------------------

    def preferred(self, requests: Sequence[PreferredRequest]) -> list[list[str]]:
        """Per container request, the IDs kubelet should take: on the GPUs the
        scheduler assigned to the matching container of the pod being allocated when it
        can be found, else spread over distinct GPUs. Never raises for a lookup failure
        (kubelet fails the pod when this call fails); the choice is only a preference.
        """
        wanted: list[list[str]] = [[] for _ in requests]
        try:
            cands = self._candidates()
            pending = self._select(cands, [r.size for r in requests], [])
            if pending is not None:
                for i, container in enumerate(pending.remaining[: len(requests)]):
                    wanted[i] = [d.uuid for d in container.devices]
        except HamiError as exc:
            log.warning("GetPreferredAllocation: cannot look up the pod being allocated: %s", exc)
        return [
            preferred_allocation(r.available, r.must_include, r.size, wanted_uuids=w)
            for r, w in zip(requests, wanted, strict=True)
        ]

    # -- Allocate ----------------------------------------------------------------------

    def allocate(self, requests: Sequence[Sequence[str]]) -> list[ContainerAllocation]:
        """Answer one ``Allocate`` call: one ``ContainerAllocation`` per request, in order.

        Args:
            requests: per container, kubelet's device IDs (``<UUID>-<i>``).

        Raises:
            InvalidInputError: empty request, or an ID this plugin does not advertise.
            NoPendingPodError: no pod on the node waits for these devices.
            DeviceCountMismatchError: pods wait, but for other device counts.
            AllocateFailedError: the pod was found but answering failed; it is marked
                ``failed`` and the lock released.
        """
        with self._lock:
            counts = self._validate(requests)
            key = tuple(tuple(sorted(ids)) for ids in requests)
            uuids = [frozenset(physical_uuid(i) for i in ids) for ids in requests]
            cands = self._candidates()
            pending = self._select(cands, counts, uuids)
            live = self.store.live
            if pending is None and live is not None:  # the caches may lag kubelet
                cands = find_candidates(
                    live,
                    node=self.node,
                    dtype=self.dtype,
                    adjust=self._overlay.apply,
                    verifier=self.verifier,
                    unsigned=self.unsigned,
                )
                pending = self._select(cands, counts, uuids)
            if pending is None:
                again = self._previous(key)
                if again is not None:
                    # kubelet retries an Allocate it gave up on (its deadline, or ours in
                    # the gRPC edge) with the same IDs; the first was committed meanwhile.
                    log.info("Allocate %s again: answering as before", [list(k) for k in key])
                    return again
                self._report_refused(cands)
                raise self._no_match(cands, counts)
            self.observe_holders(pending.pod)
            try:
                answers = self._answer(pending, len(requests), lock_value=cands.lock_value)
            except (HamiError, OSError) as exc:
                if getattr(exc, "grpc_code", "") == "UNAVAILABLE":
                    # The API server is unreachable: the pod stays waiting under its lock
                    # (which expires on its own), so kubelet's retry can still be served.
                    log.warning("pod %s: API server unreachable; kubelet will retry", pending.ref)
                    raise AllocateFailedError(pending.ref, exc) from exc
                self._fail(pending, exc)
                raise AllocateFailedError(pending.ref, exc) from exc
            self._remember(key, pending, answers)
            return answers

    def observe_holders(self, pod: KubeObject) -> None:
        """When ``pod`` carries a MIG reservation (the vendor's ``mig_annotation``), run
        the backend's ``hami_release`` on the node's pods first (from the watch cache):
        it learns which instances the live pods hold now, so ``Allocate`` never hands
        ``pod`` an instance another live pod holds, and frees those of pods gone since
        the last round, so a slot the scheduler gave again is not refused for a pod that
        has ended. A failure is logged: the backend then decides on the last pods it
        read (it refuses an instance whose holder it cannot tell)."""
        key = self.dtype.mig_annotation
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        if not (self.observe_pods and key and key in annotations):
            return
        try:
            freed = self.manager.release(
                self.manager.backend_of(self.vendor),
                self.store.pods_on_node(self.node),
                self.node_devices(),
                state=self.state,
            )
        except HamiError as exc:
            log.warning("cannot read which pods hold this node's MIG instances: %s", exc)
            return
        for line in freed:
            log.info("released %s", line)

    @property
    def identifies_pods(self) -> bool:
        """True when this allocator serves pods no node lock names: it reads kubelet's
        PodResources, which answers now (one ``List``: a socket missing or down serves
        no unlocked pod), and checks allocations' signatures (the node's handshake
        answer then says so, ``protocol.handshake.identifies_pods``)."""
        if self.pod_resources is None or (self.trusted is None and self.verifier is None):
            return False
        try:
            self.pod_resources.list()
        except PodResourcesUnavailableError as exc:
            log.warning("binds on this node take the node lock: %s", exc)
            return False
        return True

    def _select(
        self, cands: Candidates, counts: Sequence[int], uuids: Sequence[frozenset[str]]
    ) -> PendingPod | None:
        """The pod kubelet is allocating: by kubelet's PodResources when there is a
        source (``identify``), else (or when it cannot be read) the node lock's owner
        only (``select_pod``)."""
        if self.pod_resources is None:
            return select_pod(cands.pods, counts, kubelet_uuids=uuids)
        try:
            listed = self.pod_resources.list()
        except PodResourcesUnavailableError as exc:
            log.warning("only the node lock's owner can be served: %s", exc)
            return select_pod(cands.pods, counts, kubelet_uuids=uuids)
        found = identify(
            cands.pods,
            counts,
            kubelet=listed,
            resource=self.resource_name,
            trusted=self.trusted or _signed_among(cands),
            kubelet_uuids=uuids,
        )
        log.debug(
            "kubelet's PodResources (%s) lists %d pods; admitting: %s",
            getattr(self.pod_resources, "version", None) or "a stand-in",
            len(listed),
            found.ref if found is not None else "none of the candidates",
        )
        return found

    def _candidates(self) -> Candidates:
        return find_candidates(
            self.store,
            node=self.node,
            dtype=self.dtype,
            expiry_s=self.manager.config.node_lock_expiry_s,
            adjust=self._overlay.apply,
            verifier=self.verifier,
            unsigned=self.unsigned,
        )

    def _report_refused(self, cands: Candidates) -> None:
        """Log, and record on the pod as a Warning event, each pod refused for its
        allocation signature (a forged, altered or replayed allocation); a node lock
        such a pod holds is released (it would block the node until it expires)."""
        for pod, why in cands.refused:
            log.warning("pod %s: not served: %s", pod_ref(pod), why)
            meta = pod.get("metadata") or {}
            namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name"))
            if cands.lock is not None and cands.lock.owned_by(namespace, name):
                try:
                    release_node_lock(self.store, self.node, namespace=namespace, pod=name)
                except HamiError as exc:
                    log.error("cannot release the lock of node %s: %s", self.node, exc)
            try:
                self.store.record_event(
                    pod,
                    type="Warning",
                    reason="AllocationRefused",
                    message=f"node {self.node}: {why}",
                )
            except Exception as exc:  # events are best effort
                log.warning("cannot record event AllocationRefused: %s", exc)

    def _previous(self, key: tuple[tuple[str, ...], ...]) -> list[ContainerAllocation] | None:
        """The answer given for these IDs lately, while the pod it went to still lives."""
        now = time.monotonic()
        for k in [k for k, hit in self._recent.items() if now - hit[0] > ANSWER_KEPT_S]:
            del self._recent[k]
        hit = self._recent.get(key)
        if hit is None:
            return None
        _, (namespace, name, uid), answers = hit
        try:
            pod = self.store.get_pod(namespace, name)
        except HamiError:
            return None
        meta = pod.get("metadata") or {}
        if meta.get("uid") != uid or meta.get("deletionTimestamp") or not is_live(pod):
            return None
        return list(answers)

    def _remember(
        self,
        key: tuple[tuple[str, ...], ...],
        pending: PendingPod,
        answers: list[ContainerAllocation],
    ) -> None:
        uid = str((pending.pod.get("metadata") or {}).get("uid") or "")
        self._recent[key] = (time.monotonic(), (pending.namespace, pending.name, uid), answers)
        while len(self._recent) > ANSWERS_KEPT:
            self._recent.popitem(last=False)

    def _validate(self, requests: Sequence[Sequence[str]]) -> list[int]:
        if not requests:
            raise InvalidInputError("Allocate without container requests")
        known = self.known_ids()
        for n, ids in enumerate(requests):
            if not ids:
                raise InvalidInputError(f"container request #{n} names no device")
            unknown = sorted(set(ids) - known)
            if unknown:
                raise InvalidInputError(
                    f"container request #{n}: unknown device IDs {unknown} "
                    f"(this plugin advertises {len(known)} IDs of {self.resource_name})"
                )
            if len(set(ids)) != len(ids):
                raise InvalidInputError(f"container request #{n} repeats a device ID: {ids}")
        return [len(ids) for ids in requests]

    def release(
        self, pods: Sequence[Mapping[str, Any]], devices: Sequence[DeviceInfo]
    ) -> tuple[str, ...]:
        """The backend's ``hami_release`` with this node's records (``state``), between
        two ``Allocate`` calls, never during one: a record being written is not lost.

        Raises:
            BackendError: as ``BackendManager.release``.
        """
        with self._lock:
            return self.manager.release(
                self.manager.backend_of(self.vendor), pods, devices, state=self.state
            )

    def _answer(
        self, pending: PendingPod, n: int, *, lock_value: str | None = None
    ) -> list[ContainerAllocation]:
        meta = pending.pod.get("metadata") or {}
        uid = str(meta.get("uid") or "")
        answers = []
        pod = pending.pod
        written: dict[str, str] = {}
        for container in pending.remaining[:n]:
            spec = allowed_container(container.spec, pending.namespace, self.store.namespace_labels)
            alloc = self.manager.allocate(
                self.vendor,
                pod,
                spec,
                container.devices,
                node_devices=self.node_devices(),
                state=self.state,
            )
            own = {k: v for k, v in alloc.pod_annotations.items() if k == self.dtype.mig_annotation}
            if own:
                # The next container of this call reads what this one wrote.
                written.update(own)
                pmeta = dict(pod.get("metadata") or {})
                pmeta["annotations"] = {**(pmeta.get("annotations") or {}), **own}
                pod = {**pod, "metadata": pmeta}
            for mount in alloc.mounts:
                if not mount.read_only and mount.host_path not in alloc.shared_files:
                    self.make_dir(mount.host_path)
            for host_path, size in alloc.shared_files.items():
                self.make_file(host_path, size)
            for host_path, content in alloc.files.items():
                self.write_file(host_path, content)
            if self.cdi is not None:
                alloc = self.cdi.write(pod_uid=uid, container=container.name, allocation=alloc)
            answers.append(alloc)
        rest = consumed(pending.entries, [c.position for c in pending.remaining[:n]])
        progress: dict[str, str | None] = {
            self.dtype.to_allocate_annotation: encode_pod_devices(rest),
            **written,
        }
        done = [c.name for c in pending.remaining[:n]]
        # The pod is done when every vendor it asks for is (``done``): with another
        # vendor's containers still waiting as last read, this answer is final only if
        # the write of its progress shows them answered meanwhile (``_commit``).
        others = vendors_waiting(pod, self.manager, besides=self.vendor) if not any(rest) else ()
        final = not any(rest) and not others
        if final:
            # The last containers: progress and phase in one write, so a failure leaves
            # the pod retryable (entries still there) rather than answered but
            # "allocating".
            progress[keys.BIND_PHASE] = keys.BIND_PHASE_SUCCESS
        log.info(
            "pod %s: answered containers %s; %s",
            pending.ref,
            done,
            "bind-phase success"
            if final
            else f"{', '.join(others)} still to come"
            if others
            else "more to come",
        )
        if self._after_answer is None:
            self._commit(
                pending,
                progress,
                final=final,
                lock_value=lock_value,
                others_waited=bool(others),
                once=True,
            )
            return answers
        # Kubelet gets its answer now; what it answered is this process's from here on
        # (the overlay), and reaches the API server right after.
        self._overlay.record(uid, progress)
        self._after_answer(
            functools.partial(
                self._commit,
                pending,
                progress,
                final=final,
                lock_value=lock_value,
                others_waited=bool(others),
            )
        )
        return answers

    def _commit(
        self,
        pending: PendingPod,
        progress: Mapping[str, str | None],
        *,
        final: bool,
        lock_value: str | None,
        others_waited: bool = False,
        once: bool = False,
    ) -> None:
        """The writes of an answered call, off kubelet's critical path: the lock first
        (the node's next bind waits for it; only the pod a lock names is ever served, so
        releasing it before the phase write serves no other pod), then the progress, tried
        again over a brief outage. A pod gone meanwhile needs neither.

        When this vendor's containers are all answered but another vendor's were still
        waiting as last read (``others_waited``), the pod the progress write returns
        decides: the API server applies writes one at a time, so of two vendors' device
        plugins finishing together the later write sees the other's progress, and that one sets ``bind-phase: success`` and frees the lock
        (both may: each write is idempotent, and the release is the owner's only).

        Args:
            once: no ``after_answer``: the progress first, once, a failure raised (the
                caller fails the call and the pod stays retryable), then the lock.
        """
        if once:
            after = self.store.patch_pod_metadata(
                pending.namespace, pending.name, annotations=progress
            )
            if final:
                self._release(pending, lock_value)
            elif others_waited:
                self._finish_if_done(pending, after, lock_value)
            return
        if final:
            self._release(pending, lock_value)
        uid = str((pending.pod.get("metadata") or {}).get("uid") or "")
        for attempt, wait_s in enumerate((*COMMIT_WAITS_S, None)):
            try:
                after = self.store.patch_pod_metadata(
                    pending.namespace, pending.name, annotations=progress
                )
                if others_waited:
                    self._finish_if_done(pending, after, lock_value)
                return
            except NotFoundError:
                self._overlay.forget(uid)
                return
            except HamiError as exc:
                if wait_s is None:
                    log.error(
                        "pod %s: answered, but its progress could not be written after %d "
                        "tries: %s",
                        pending.ref,
                        attempt + 1,
                        exc,
                    )
                    return
                log.warning(
                    "pod %s: progress write failed, again in %.1fs: %s", pending.ref, wait_s, exc
                )
                time.sleep(wait_s)

    def _finish_if_done(self, pending: PendingPod, pod: KubeObject, lock_value: str | None) -> None:
        """After this vendor's last progress write: when ``pod`` (as that write returned
        it) has no other vendor waiting, the pod is done: free the lock, then set
        ``bind-phase: success``. A failed phase write is logged only: every container
        has its devices, and the lock is free (an owner whose lists are all answered
        holds nothing, ``_answered``)."""
        others = vendors_waiting(pod, self.manager, besides=self.vendor)
        if others:
            log.info("pod %s: waiting for %s", pending.ref, ", ".join(others))
            return
        log.info("pod %s: every vendor answered; bind-phase success", pending.ref)
        self._release(pending, lock_value)
        uid = str((pending.pod.get("metadata") or {}).get("uid") or "")
        phase = {keys.BIND_PHASE: keys.BIND_PHASE_SUCCESS}
        if self._after_answer is not None:
            self._overlay.record(uid, phase)
        try:
            self.store.patch_pod_metadata(pending.namespace, pending.name, annotations=phase)
        except NotFoundError:
            self._overlay.forget(uid)
        except HamiError as exc:
            log.error("pod %s: answered, but bind-phase success not written: %s", pending.ref, exc)

    def _release(self, pending: PendingPod, lock_value: str | None) -> None:
        """Release the node lock if ``pending`` owns it as read (``lock_value``): one
        conditional write, and a read and release (``release_node_lock``) only when
        that value changed meanwhile.

        A lock the read did not show as ``pending``'s (none, or another pod's: a pod
        served by its signature, PROTOCOL.md §4) is left alone, with no read of the
        node: had the scheduler locked for ``pending`` after all (a node cache behind
        its pod cache), the lock holds nothing once the progress write that follows
        sets ``bind-phase: success`` (``facts.nodelock``'s ``_holds``), so the next
        bind takes it over. That saves a GET of the node per signed pod."""
        try:
            lock = decode_lock(lock_value) if lock_value else None
        except AnnotationError:
            lock = None
        if lock is None or not lock.owned_by(pending.namespace, pending.name):
            return
        assert lock_value is not None
        try:
            if release_node_lock_value(self.store, self.node, lock_value):
                return
            release_node_lock(self.store, self.node, namespace=pending.namespace, pod=pending.name)
        except HamiError as exc:
            log.error("pod %s: cannot release the node lock: %s", pending.ref, exc)

    def _fail(self, pending: PendingPod, cause: BaseException) -> None:
        log.error("pod %s: allocation failed: %s", pending.ref, cause)
        try:
            finish_allocation(self.store, pending.pod, node=self.node, success=False)
        except HamiError as exc:
            log.error("pod %s: cannot mark the allocation failed: %s", pending.ref, exc)
        self._event(pending.pod, f"allocation on {self.node} failed: {cause}")

    def _no_match(self, cands: Candidates, counts: list[int]) -> HamiError:
        resource = self.resource_name
        asked = ", ".join(str(c) for c in counts)
        lock = cands.lock
        lock_text = "not held"
        if lock is not None:
            owner = f"{lock.namespace}/{lock.pod}" if lock.pod else "an unnamed owner"
            lock_text = f"held by {owner}"
        owner_pending = next((p for p in cands.pods if p.lock_owner), None)
        if owner_pending is not None:
            # The lock names a pod waiting here for other counts: this request is another
            # pod's (only the lock owner is ever served); the owner keeps waiting.
            return DeviceCountMismatchError(
                f"kubelet asks {asked} device(s) of {resource}, but pod "
                f"{owner_pending.ref} (holder of the node lock) waits for "
                f"{_waits(owner_pending)}; only the pod the node lock names is served"
            )
        self._release_dead_lock(cands)
        if any(p.fits(counts) for p in cands.pods):
            waiting = ", ".join(p.ref for p in cands.pods if p.fits(counts))
            rule = (
                "only the pod kubelet's PodResources shows being admitted is served, and "
                "one no node lock names only when its allocation signature verifies"
                if self.identifies_pods
                else "only the pod a valid node lock names is served"
            )
            return NotLockedError(
                f"pods {waiting} wait on node {self.node} for {asked} device(s) of "
                f"{resource}, but the node lock ({lock_text}) names none of them: {rule}"
            )
        if cands.pods:
            waiting = "; ".join(f"{p.ref} waits for {_waits(p)}" for p in cands.pods)
            return DeviceCountMismatchError(
                f"kubelet asks {asked} device(s) of {resource} on node {self.node}, but no "
                f"pod waits for that many: {waiting} (node lock {lock_text})"
            )
        skipped = f"; not candidates: {'; '.join(cands.skipped)}" if cands.skipped else ""
        return NoPendingPodError(
            f"no pod on node {self.node} waits for {resource} devices: none is bound here "
            f"with {keys.BIND_PHASE}={keys.BIND_PHASE_ALLOCATING} and an entry left in "
            f"{self.dtype.to_allocate_annotation} (node lock {lock_text}){skipped}"
        )

    def _release_dead_lock(self, cands: Candidates) -> None:
        """Release a lock whose owner is gone, finished or already answered; keep one
        whose owner is still being bound (its annotations may not be written yet)."""
        lock = cands.lock
        if lock is None or not lock.pod:
            return
        pod = cands.lock_pod
        meta = (pod or {}).get("metadata") or {}
        phase = (meta.get("annotations") or {}).get(keys.BIND_PHASE)
        dead = (
            pod is None
            or not is_live(pod)
            or bool(meta.get("deletionTimestamp"))
            or phase in (keys.BIND_PHASE_SUCCESS, keys.BIND_PHASE_FAILED)
            or (pod is not None and self._answered(pod))
        )
        if dead:
            try:
                if release_node_lock(self.store, self.node, namespace=lock.namespace, pod=lock.pod):
                    log.info(
                        "released the lock of node %s held by %s/%s (gone or done)",
                        self.node,
                        lock.namespace,
                        lock.pod,
                    )
            except HamiError as exc:
                log.error("cannot release the lock of node %s: %s", self.node, exc)

    def _answered(self, pod: KubeObject) -> bool:
        """The owner still says ``allocating`` but every container has had its devices,
        of every vendor it asks for (its phase write failed): holding the lock for it
        would block the node."""
        meta = pod.get("metadata") or {}
        value = (meta.get("annotations") or {}).get(self.dtype.to_allocate_annotation)
        if value is None:
            return False  # still being bound: the scheduler writes it with the phase
        try:
            if any(decode_pod_devices(value)):
                return False
        except HamiError:
            return False
        return not vendors_waiting(pod, self.manager, besides=self.vendor)

    def _event(self, pod: KubeObject, message: str) -> None:
        try:
            self.store.record_event(pod, type="Warning", reason="AllocateFailed", message=message)
        except Exception as exc:  # events are best effort
            log.warning("cannot record event AllocateFailed: %s", exc)


def _signed_among(cands: Candidates) -> Callable[[KubeObject], bool]:
    """Whether a pod is one of ``cands`` whose allocation signature verified (by UID):
    without a verifier none is, so only the pod a lock names is served."""
    signed = {str((p.pod.get("metadata") or {}).get("uid") or "") for p in cands.pods if p.signed}
    signed.discard("")
    return lambda pod: str((pod.get("metadata") or {}).get("uid") or "") in signed


def _waits(pending: PendingPod) -> str:
    return ", ".join(f"{len(c.devices)} in container {c.name!r}" for c in pending.remaining)
