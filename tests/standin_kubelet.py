"""A stand-in for kubelet's device manager on many fake nodes, calling the real device
plugin use cases (``hami_core.deviceplugin.Allocator``) as kubelet 1.20 calls them.

What it plays, per node (one kubelet each), and why:

- kubelet learns a pod is bound to its node from its watch, adds it to its pod manager,
  and admits it later: ``admission_delay_s`` after the stand-in saw the pod bound
  (default 0.3 s: the sync loop, volume and admission work before the device manager
  runs). Until a pod's Allocate has answered, the device plugin's records (node lock,
  progress) stay as the scheduler left them, so a bench that answered at bind time
  would release a node lock sooner than any real cluster.
- Admission is serial per node (kubelet's ``HandlePodAdditions`` admits one pod after
  the other) and parallel across nodes.
- For each container that asks the resource (init containers first, then containers,
  spec order), the device manager takes ``n`` of its free device IDs: it asks the
  plugin's ``GetPreferredAllocation`` (``Allocator.preferred``) with every free ID,
  takes its answer when it is ``n`` free IDs, else the first ``n`` free ones, then calls
  ``Allocate`` (``Allocator.allocate``) with them. IDs are kubelet's once handed out and
  free again when the pod is deleted (kubelet also frees a failed admission's IDs).
- A failed Allocate fails the pod's admission (``UnexpectedAdmissionError``); kubelet
  1.20 does not retry it. The stand-in records the error (``failures``); it writes no pod
  status.
- The device plugin writes after answering kubelet (``after_answer``) on one thread per
  node, in order, as ``hami device-plugin`` does.
- Each node's kubelet serves its PodResources ``List`` (``pod_resources``) as kubelet
  1.20 does: the pods of its pod manager (each added when its admission starts, kept
  until deleted, also when refused) with the device IDs of every container whose
  ``Allocate`` has answered. Every node's allocator reads it (``pending.identify``):
  with ``verifier`` (``hami device-plugin --allocation-public-keys``) or ``trusted``
  set too (``allocator_options``), pods are told apart without the node lock, as our
  device plugin does when it claims the capability.

Every node's allocator shares one ``ClusterStore`` (the bench's cluster-wide caches; the
real plugin watches its own node's pods): only reads of the node's pods and the node
are asked of it. ``live_view`` gives a node's allocator the live reads the real one
falls back on when its caches lag kubelet (``NodeKubeCluster.live``). Device IDs come from the node's inventory annotation
(``<UUID>-<i>``, ``i`` below each device's split count, ``devices.fake_ids``), as the
device plugin advertises them.
"""

from __future__ import annotations

import collections
import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import attrs

from hami_core.cluster.base import ClusterStore, KubeObject
from hami_core.deviceplugin import Allocator, PreferredRequest
from hami_core.deviceplugin.devices import fake_ids
from hami_core.deviceplugin.podresources import KubeletContainer, KubeletPod
from hami_core.errors import HamiError
from hami_core.plugin import BackendManager
from hami_core.protocol import decode_inventory
from hami_core.protocol.quantity import parse_quantity_int

log = logging.getLogger(__name__)

#: kubelet's delay between seeing a pod bound and its device manager's Allocate (seconds).
DEFAULT_ADMISSION_DELAY_S = 0.3


@attrs.frozen(kw_only=True)
class Admission:
    """One pod's admission on its node.

    Attributes:
        ref: ``namespace/name``.
        uid: the pod's uid.
        node: the node that admitted it.
        seen_bound: monotonic time the stand-in saw the pod bound.
        admitted: monotonic time its last Allocate answered (or failed).
        devices: per container asking the resource, name -> the IDs kubelet gave it.
        error: why admission failed (an Allocate raised), else None.
    """

    ref: str
    uid: str
    node: str
    seen_bound: float
    admitted: float
    devices: Mapping[str, tuple[str, ...]]
    error: str | None = None


@attrs.define
class _Queued:
    pod: KubeObject
    due: float
    seen: float


class _SerialQueues:
    """Runs callables one at a time per key, keys in parallel, on a shared pool."""

    def __init__(self, pool: ThreadPoolExecutor) -> None:
        self._pool = pool
        self._guard = threading.Lock()
        self._queues: dict[str, collections.deque[Callable[[], None]]] = {}

    def submit(self, key: str, fn: Callable[[], None]) -> None:
        with self._guard:
            queue = self._queues.get(key)
            if queue is not None:
                queue.append(fn)
                return
            self._queues[key] = collections.deque([fn])
        self._pool.submit(self._drain, key)

    def _drain(self, key: str) -> None:
        while True:
            with self._guard:
                queue = self._queues[key]
                if not queue:
                    del self._queues[key]
                    return
                fn = queue[0]
            try:
                fn()
            except Exception:  # the device plugin's writer logs its own failures
                log.exception("after-answer writes on %s failed", key)
            with self._guard:
                self._queues[key].popleft()


class KubeletPods:
    """kubelet's pod manager and device assignments, per node, as its PodResources
    ``List`` reports them (kubelet 1.20): a pod is listed from its admission on and until
    it is deleted (also when its admission was refused), each container with the device
    IDs its answered ``Allocate`` gave it. ``StandInKubelet`` keeps its nodes' here;
    ``benchmarks/bench_allocate.py``, which calls ``Allocate`` itself, keeps its node's.
    Thread-safe.
    """

    def __init__(self, resource: str) -> None:
        """Args:
        resource: the extended resource the IDs are of (``nvidia.com/gpu``).
        """
        self.resource = resource
        self._lock = threading.Lock()
        # node -> uid -> (namespace, name, container names): kubelet's pod manager
        self._listed: dict[str, dict[str, tuple[str, str, tuple[str, ...]]]] = {}
        self._held: dict[str, dict[str, tuple[str, ...]]] = {}  # node -> uid/container -> IDs
        # node -> uid -> the pod as ``listed`` answers it, built again only when the pod
        # changes: kubelet keeps these in its (Go) pod manager on the GPU node, which the
        # benchmarks' one process should not pay for per List.
        self._answers: dict[str, dict[str, KubeletPod]] = {}

    def admit(self, node: str, pod: KubeObject) -> None:
        """``pod`` is being admitted on ``node``: listed from now on, no device yet."""
        meta = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        ordered = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
        with self._lock:
            uid = str(meta.get("uid") or "")
            self._listed.setdefault(node, {})[uid] = (
                str(meta.get("namespace") or "default"),
                str(meta.get("name") or ""),
                tuple(str(c.get("name") or "") for c in ordered),
            )
            self._answers.get(node, {}).pop(uid, None)

    def give(self, node: str, uid: str, container: str, ids: Sequence[str]) -> None:
        """The ``Allocate`` of pod ``uid``'s ``container`` answered with ``ids``."""
        with self._lock:
            self._held.setdefault(node, {})[f"{uid}/{container}"] = tuple(ids)
            self._answers.get(node, {}).pop(uid, None)

    def free(self, node: str, uid: str) -> None:
        """Pod ``uid``'s device IDs are free again (a failed admission: it stays listed)."""
        with self._lock:
            held = self._held.get(node, {})
            for key in [k for k in held if k.startswith(f"{uid}/")]:
                del held[key]
            self._answers.get(node, {}).pop(uid, None)

    def forget(self, node: str, uid: str) -> None:
        """Pod ``uid`` was deleted: no longer listed, its IDs free."""
        self.free(node, uid)
        with self._lock:
            self._listed.get(node, {}).pop(uid, None)

    def held_ids(self, node: str) -> dict[str, tuple[str, ...]]:
        """``uid/container`` -> device IDs handed out on ``node``."""
        with self._lock:
            return dict(self._held.get(node, {}))

    def listed(self, node: str) -> list[KubeletPod]:
        """What kubelet's PodResources ``List`` answers on ``node`` now."""
        with self._lock:
            held = self._held.get(node, {})
            answers = self._answers.setdefault(node, {})
            out = []
            for uid, (ns, name, containers) in self._listed.get(node, {}).items():
                pod = answers.get(uid)
                if pod is None:
                    pod = answers[uid] = KubeletPod(
                        namespace=ns,
                        name=name,
                        containers=tuple(
                            KubeletContainer(
                                name=c,
                                devices={self.resource: held[f"{uid}/{c}"]}
                                if f"{uid}/{c}" in held
                                else {},
                            )
                            for c in containers
                        ),
                    )
                out.append(pod)
            return out

    def source(self, node: str) -> _PodResources:
        """Kubelet's PodResources ``List`` on ``node`` (a ``PodResourcesSource``)."""
        return _PodResources(self, node)


class StandInKubelet:
    """kubelet's device manager for every node of ``store`` (see the module docstring).

    Attributes:
        admissions: uid -> ``Admission`` of every pod admitted or refused so far.
    """

    def __init__(
        self,
        store: ClusterStore,
        manager: BackendManager,
        *,
        vendor: str = "NVIDIA",
        admission_delay_s: float = DEFAULT_ADMISSION_DELAY_S,
        selects: Callable[[KubeObject], bool] = lambda pod: True,
        workers: int = 16,
        allocator_options: Mapping[str, Any] | None = None,
        live_view: Callable[[str], ClusterStore] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Args:
        store: the cluster: pods (watched through ``subscribe``) and nodes.
        manager: the backends under the device plugin's configuration.
        vendor: the vendor the device plugins serve (``NVIDIA``).
        admission_delay_s: seconds from seeing a pod bound to admitting it.
        selects: which bound pods kubelet admits here (others are left alone: a bench's
            pods of kube-scheduler alone have no device plugin in the loop).
        workers: threads admitting (nodes at once) and, as many again, writing.
        allocator_options: more keyword arguments of every ``Allocator`` (host-file
            writers, the node state, the trust check ...).
        live_view: node -> that node's data read live (``DirectKubeCluster``), the
            ``live`` of its allocator's store; None: ``store.live``.
        clock: monotonic seconds (tests pass a fake).
        """
        self.store = store
        self.manager = manager
        self.vendor = vendor
        self.delay_s = admission_delay_s
        self.selects = selects
        self.clock = clock
        self.resource = manager.device_type(vendor).resources.count
        self._register_key = manager.device_type(vendor).register_annotation
        self._allocator_options = dict(allocator_options or {})
        self._live_view = live_view
        self._admit_pool = ThreadPoolExecutor(workers, thread_name_prefix="kubelet-admit")
        self._write_pool = ThreadPoolExecutor(workers, thread_name_prefix="plugin-writes")
        self._writes = _SerialQueues(self._write_pool)
        self._cond = threading.Condition()
        self._queues: dict[str, collections.deque[_Queued]] = {}
        self._scheduled: set[str] = set()  # nodes in the heap or being admitted
        self._heap: list[tuple[float, int, str]] = []
        self._seq = itertools.count()
        self._seen: set[str] = set()
        self.pods = KubeletPods(self.resource)
        self._allocators: dict[str, Allocator] = {}
        self.admissions: dict[str, Admission] = {}
        self._stopped = False
        self._thread = threading.Thread(target=self._dispatch, name="kubelet-dispatch", daemon=True)

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> StandInKubelet:
        """Watch pods and admit those bound from now on (and those bound already)."""
        self._thread.start()
        self.store.subscribe(self._on_event)
        return self

    def stop(self) -> None:
        """Stop admitting; writes already handed to the pool finish."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        self._thread.join(5)
        self._admit_pool.shutdown(wait=True, cancel_futures=True)
        self._write_pool.shutdown(wait=True)

    # -- what the bench reads ----------------------------------------------------------

    def failures(self) -> list[Admission]:
        """Admissions refused so far (an Allocate raised)."""
        with self._cond:
            return [a for a in self.admissions.values() if a.error is not None]

    def wait_admitted(self, uids: Sequence[str], timeout_s: float) -> bool:
        """True once every pod of ``uids`` has an ``Admission`` (within ``timeout_s``)."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while not all(u in self.admissions for u in uids):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.5))
        return True

    def pod_resources(self, node: str) -> _PodResources:
        """Kubelet's PodResources ``List`` on ``node`` (a ``PodResourcesSource``)."""
        return self.pods.source(node)

    def listed(self, node: str) -> list[KubeletPod]:
        """What kubelet's PodResources ``List`` answers on ``node`` now."""
        return self.pods.listed(node)

    def held_ids(self, node: str) -> dict[str, tuple[str, ...]]:
        """``uid/container`` -> device IDs kubelet handed out on ``node`` (PodResources)."""
        return self.pods.held_ids(node)

    # -- the watch ---------------------------------------------------------------------

    def _on_event(self, kind: str, old: KubeObject | None, new: KubeObject | None) -> None:
        if kind != "Pod":
            return
        if new is None:
            if old is not None:
                self._forget(old)
            return
        meta = new.get("metadata") or {}
        node = (new.get("spec") or {}).get("nodeName")
        uid = str(meta.get("uid") or "")
        if not node or not uid or meta.get("deletionTimestamp") or not self.selects(new):
            return
        now = self.clock()
        with self._cond:
            if uid in self._seen or self._stopped:
                return
            self._seen.add(uid)
            self._queues.setdefault(node, collections.deque()).append(
                _Queued(pod=new, due=now + self.delay_s, seen=now)
            )
            if node not in self._scheduled:
                self._scheduled.add(node)
                heapq.heappush(self._heap, (now + self.delay_s, next(self._seq), node))
                self._cond.notify_all()

    def _forget(self, pod: KubeObject) -> None:
        """A deleted pod: its device IDs are free, a queued admission dropped."""
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid") or "")
        node = (pod.get("spec") or {}).get("nodeName")
        with self._cond:
            self._seen.discard(uid)
            self.admissions.pop(uid, None)
            if node:
                self.pods.forget(node, uid)
                queue = self._queues.get(node)
                if queue:
                    kept = [q for q in queue if (q.pod.get("metadata") or {}).get("uid") != uid]
                    queue.clear()
                    queue.extend(kept)

    # -- admission, serial per node ----------------------------------------------------

    def _dispatch(self) -> None:
        while True:
            with self._cond:
                while not self._stopped and (not self._heap or self._heap[0][0] > self.clock()):
                    wait = self._heap[0][0] - self.clock() if self._heap else None
                    self._cond.wait(wait if wait is None else max(wait, 0.001))
                if self._stopped:
                    return
                _, _, node = heapq.heappop(self._heap)
            self._admit_pool.submit(self._admit_next, node)

    def _admit_next(self, node: str) -> None:
        with self._cond:
            queue = self._queues.get(node)
            item = queue.popleft() if queue else None
        try:
            if item is not None:
                self._admit(node, item)
        except Exception:
            log.exception("admission on %s failed unexpectedly", node)
        finally:
            with self._cond:
                queue = self._queues.get(node)
                if queue and not self._stopped:
                    due = max(queue[0].due, self.clock())
                    heapq.heappush(self._heap, (due, next(self._seq), node))
                else:
                    self._scheduled.discard(node)
                self._cond.notify_all()

    def _admit(self, node: str, item: _Queued) -> None:
        pod = item.pod
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid") or "")
        ref = f"{meta.get('namespace') or 'default'}/{meta.get('name')}"
        spec = pod.get("spec") or {}
        given: dict[str, tuple[str, ...]] = {}
        error: str | None = None
        ordered = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
        with self._cond:  # kubelet's pod manager has the pod from its admission on
            if uid not in self._seen:
                return  # deleted while it waited
            self.pods.admit(node, pod)
        try:
            allocator = self._allocator(node)
            for container in ordered:
                n = self._count(container)
                if n <= 0:
                    continue
                ids = self._take(allocator, node, n)
                allocator.allocate([list(ids)])
                name = str(container.get("name") or "")
                given[name] = ids
                self.pods.give(node, uid, name, ids)
        except HamiError as exc:
            error = str(exc)
            log.info("kubelet %s: pod %s not admitted: %s", node, ref, exc)
            self.pods.free(node, uid)  # kubelet frees what a failed admission was given
        with self._cond:
            if uid in self._seen:  # not deleted meanwhile
                self.admissions[uid] = Admission(
                    ref=ref,
                    uid=uid,
                    node=node,
                    seen_bound=item.seen,
                    admitted=self.clock(),
                    devices=given,
                    error=error,
                )
            self._cond.notify_all()

    def _count(self, container: Mapping[str, Any]) -> int:
        resources = container.get("resources") or {}
        value = (resources.get("limits") or {}).get(self.resource) or (
            resources.get("requests") or {}
        ).get(self.resource)
        if value is None:
            return 0
        return parse_quantity_int(value, resource=self.resource)

    def _take(self, allocator: Allocator, node: str, n: int) -> tuple[str, ...]:
        """``n`` free IDs of ``node``: the plugin's preference when it names ``n`` free
        IDs (kubelet's ``GetPreferredAllocation``), else the first free ones."""
        used = {i for ids in self.pods.held_ids(node).values() for i in ids}
        free = sorted(allocator.known_ids() - used)
        if len(free) < n:
            raise _KubeletRefused(f"{n} {self.resource} asked, {len(free)} free on {node}")
        (preferred,) = allocator.preferred([PreferredRequest(available=tuple(free), size=n)])
        if len(preferred) == n and set(preferred) <= set(free):
            return tuple(preferred)
        return tuple(free[:n])

    def _allocator(self, node: str) -> Allocator:
        with self._cond:
            existing = self._allocators.get(node)
        if existing is not None:
            return existing
        ids = self._node_ids(node)
        store = self.store
        if self._live_view is not None:
            store = _WithLive(self.store, self._live_view(node))
        allocator = Allocator(
            store,
            self.manager,
            vendor=self.vendor,
            node=node,
            known_ids=lambda: ids,
            after_answer=lambda fn: self._writes.submit(node, fn),
            pod_resources=self.pod_resources(node),
            **self._allocator_options,
        )
        with self._cond:
            return self._allocators.setdefault(node, allocator)

    def _node_ids(self, node: str) -> frozenset[str]:
        annotations = (self.store.cached_node(node).get("metadata") or {}).get("annotations") or {}
        value = annotations.get(self._register_key)
        if not value:
            raise _KubeletRefused(f"node {node} has no {self._register_key} (no device plugin)")
        devices = decode_inventory(value, node=node, vendor=self.vendor)
        return frozenset(i for d in devices if d.healthy for i in fake_ids(d))


class _WithLive:
    """``store`` with ``live`` replaced: one node's device-plugin view of shared caches."""

    def __init__(self, store: ClusterStore, live: ClusterStore) -> None:
        self._store = store
        self.live = live

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


class _PodResources:
    """One node's PodResources ``List`` (``PodResourcesSource``)."""

    version = "stand-in"

    def __init__(self, pods: KubeletPods, node: str) -> None:
        self._pods = pods
        self._node = node

    def list(self) -> Sequence[KubeletPod]:
        return self._pods.listed(self._node)


class _KubeletRefused(HamiError):
    """kubelet's own refusal before any Allocate (no plugin, too few free devices)."""


__all__ = ["DEFAULT_ADMISSION_DELAY_S", "Admission", "KubeletPods", "StandInKubelet"]
