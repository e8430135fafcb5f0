"""The real cluster store: the API server through the official ``kubernetes`` client.

Reads come from list+watch caches of nodes, pods and resource quotas (raw JSON
objects, exactly as the API server sends them). A watch that drops is resumed from
the last ``resourceVersion``; a ``410 Gone`` forces a fresh list (Kubernetes API
concepts, "Efficient detection of changes"). Writes go to the API server and, when
they succeed, straight into the cache, so the process never reads its own writes
stale. Node reads used for the node lock bypass the cache: the lock needs the
current ``resourceVersion``.
"""

from __future__ import annotations

import contextlib
import copy
import datetime as dt
import functools
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import urllib3
import yaml
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from hami_core.errors import ConflictError, HamiError, InvalidInputError, NotFoundError
from hami_core.protocol.annotations import VGPU_NODE
from hami_core.protocol.config import yaml_problem

from .backoff import Backoff
from .base import ClusterStore, KubeObject, Listener

log = logging.getLogger(__name__)

#: Server-side watch timeout; the watch is re-opened from the last resourceVersion.
WATCH_TIMEOUT_S = 240
#: Wait before re-listing / re-watching after an error.
RETRY_DELAY_S = 1.0
#: Attempts of a read-modify-write that loses optimistic-concurrency races.
CONFLICT_RETRIES = 5


#: Connections kept open to the API server. The client's default (5 per CPU) is below
#: what one process uses at once (a watch per informer, binds waiting on their own
#: threads, the event writer): every request over it opened and dropped a TLS
#: connection, a handshake's CPU on both ends per write.
CONNECTION_POOL_SIZE = 64


def _missing_kubeconfig(kubeconfig: str | None) -> str | None:
    """Why no kubeconfig file can be read, when none of the files named exists, else None.

    ``kubeconfig`` is a path list as ``KUBECONFIG`` holds it (``os.pathsep``-separated;
    the kubernetes client merges the files and skips missing ones silently, then says only
    "No configuration found"). None: the in-cluster service account, else
    ``~/.kube/config``, is what would be read.
    """
    if kubeconfig:
        files = [f for f in kubeconfig.split(os.pathsep) if f]
        if files and not any(os.path.exists(os.path.expanduser(f)) for f in files):
            what = "no such file" if len(files) == 1 else "none of these files exists"
            return f"{kubeconfig}: {what} (--kubeconfig / KUBECONFIG)"
        return None
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return None  # in a pod: the service account's token is read
    default = os.path.expanduser("~/.kube/config")
    if not os.path.exists(default):
        return (
            f"not in a cluster (KUBERNETES_SERVICE_HOST unset) and {default} does not exist; "
            "pass --kubeconfig or set KUBECONFIG"
        )
    return None


def make_api_client(kubeconfig: str | None = None) -> k8s.ApiClient:
    """A client from ``kubeconfig``; else in-cluster config; else ``$KUBECONFIG`` /
    ``~/.kube/config`` (the kubernetes client's own lookup); with a connection pool of
    ``CONNECTION_POOL_SIZE``.

    Raises:
        HamiError: no usable configuration was found.
    """
    from kubernetes import config as kconfig

    configuration = k8s.Configuration()
    missing = _missing_kubeconfig(kubeconfig)
    if missing:
        raise HamiError(f"no Kubernetes configuration: {missing}")
    try:
        if kubeconfig:
            kconfig.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
        else:
            try:
                kconfig.load_incluster_config(client_configuration=configuration)
            except kconfig.ConfigException:
                configuration = k8s.Configuration()
                kconfig.load_kube_config(client_configuration=configuration)
    except (kconfig.ConfigException, OSError) as exc:
        raise HamiError(f"no Kubernetes configuration: {exc}") from exc
    except (TypeError, AttributeError, KeyError, ValueError, yaml.YAMLError) as exc:
        # the client indexes the file's YAML as it goes: a file that parses to a list or
        # a string, or is not YAML, fails inside it with no name of the file
        where = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
        why = (
            yaml_problem(exc) if isinstance(exc, yaml.YAMLError) else f"{type(exc).__name__}: {exc}"
        )
        raise HamiError(f"{where}: not a kubeconfig file ({why})") from exc
    configuration.connection_pool_maxsize = CONNECTION_POOL_SIZE
    if not configuration.verify_ssl:
        # The kubeconfig asks for it (insecure-skip-tls-verify): say so once, not in a
        # warning per request.
        log.warning("the kubeconfig disables TLS verification of the API server")
        urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
    return k8s.ApiClient(configuration)


class ApiUnavailableError(HamiError):
    """The API server could not be reached (connection refused, reset, timed out).

    Temporary: the caller retries.
    """

    http_status = 503
    grpc_code = "UNAVAILABLE"


class ApiError(HamiError):
    """The API server refused a request for another reason than 404 / 409."""

    def __init__(self, what: str, exc: ApiException) -> None:
        super().__init__(f"{what}: HTTP {exc.status} {exc.reason}: {_message(exc)}")
        self.status = exc.status


def _message(exc: ApiException) -> str:
    try:
        return str(json.loads(exc.body or "{}").get("message", exc.body))
    except (ValueError, AttributeError):
        return str(exc.body)


#: ``(connect, read)`` seconds of every API request made through ``call``; no request
#: waits forever on a paused API server (issue #12 item 11). ``set_request_timeout``
#: shortens it in the device plugin, whose Allocate must answer kubelet quickly.
_REQUEST_TIMEOUT: tuple[float, float] = (5.0, 30.0)


def set_request_timeout(seconds: float) -> None:
    """Bound every later ``call`` of this process to ``seconds`` (connect and read)."""
    global _REQUEST_TIMEOUT
    if seconds <= 0:
        raise ValueError(f"a request timeout must be > 0, got {seconds}")
    _REQUEST_TIMEOUT = (min(5.0, seconds), seconds)


def call(what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call a client method without deserialising into models; return parsed JSON.

    Every request is bounded by the process's request timeout (``set_request_timeout``);
    a request that times out raises ``ApiUnavailableError``.

    Raises:
        NotFoundError (404), ConflictError (409), InvalidInputError (400/422),
        ApiError (anything else).
    """
    kwargs.setdefault("_request_timeout", _REQUEST_TIMEOUT)
    try:
        resp = fn(*args, _preload_content=False, **kwargs)
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise ApiUnavailableError(f"{what}: the API server is unreachable: {exc}") from None
    except ApiException as exc:
        if exc.status == 404:
            raise NotFoundError(f"{what}: not found") from None
        if exc.status == 409:
            raise ConflictError(f"{what}: {_message(exc)}") from None
        if exc.status in (400, 422):
            raise InvalidInputError(f"{what}: {_message(exc)}") from None
        raise ApiError(what, exc) from None
    data = resp.data
    return json.loads(data) if data else {}


#: How long a watch re-opened after a break must have been open before the cache is
#: trusted again (seconds): a watch resumed from the last version sends what was missed
#: at once; a re-list replaces the whole cache in one step.
SETTLE_S = 5.0


def _rv(obj: Mapping[str, Any]) -> int:
    try:
        return int((obj.get("metadata") or {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


class Informer:
    """A list+watch cache of one resource (raw JSON objects keyed by namespace/name)."""

    def __init__(
        self,
        name: str,
        list_fn: Callable[..., Any],
        *,
        index_fn: Callable[[Mapping[str, Any]], set[str]] | None = None,
    ) -> None:
        """Args:
        index_fn: the index values of an object (e.g. the nodes a pod is on), for
            ``indexed``; stored objects are never changed in place, so indexed reads
            can hand out the stored snapshots without copying them.
        """
        self.name = name
        self._list_fn = list_fn
        # Two locks: ``_lock`` orders the writers and their handlers (a handler may wait
        # for a lock of its own, e.g. the scheduler's state during a /filter); ``_data``
        # guards only the dicts, so a reader never waits for a handler still running.
        self._lock = threading.RLock()
        self._data = threading.Lock()
        self._items: dict[str, KubeObject] = {}
        self._index_fn = index_fn
        self._index: dict[str, set[str]] = {}
        self._synced = threading.Event()
        self._stop = threading.Event()
        self._resp: Any = None  # the open watch response, closed by stop()
        self._progress: str | None = None  # version of the last event applied
        self._thread: threading.Thread | None = None
        self._handlers: list[Callable[[KubeObject | None, KubeObject | None], None]] = []
        self.relists = 0
        #: ``time.monotonic()`` of the last list or watch event applied (None before the
        #: first list): how fresh the cache is, for the scheduler's metrics.
        self.last_update_monotonic: float | None = None
        self._watch_opened: float | None = None  # monotonic, while a watch is open
        self._gap_since: float | None = None  # the watch broke: events may be missing

    def settled(self, *, settle_s: float = SETTLE_S) -> bool:
        """True when the cache can be trusted to hold every change up to about now: a
        watch is open, and since the last time the watch broke (an API-server restart, a
        dropped connection, 410 Gone) one has been open for ``settle_s`` (it delivers what
        was missed first, from the last version applied). False before the first list.
        Callers that must not act on a stale object read it live meanwhile."""
        opened = self._watch_opened
        if opened is None or not self._synced.is_set():
            return False
        gap = self._gap_since
        if gap is None:
            return True
        if opened > gap and time.monotonic() - opened >= settle_s:
            self._gap_since = None
            return True
        return False

    def add_handler(self, handler: Callable[[KubeObject | None, KubeObject | None], None]) -> None:
        """Call ``handler(old, new)`` after every change of the cache (``old`` None: added,
        ``new`` None: deleted), under the cache's lock so changes arrive in order; the
        objects cached now are replayed first as additions. Reads of the cache never wait
        for a handler: one may see an object its handlers have not been told of yet."""
        with self._lock:
            for obj in self._items.values():
                handler(None, obj)
            self._handlers.append(handler)

    def _notify(self, old: KubeObject | None, new: KubeObject | None) -> None:
        for handler in self._handlers:
            try:
                handler(old, new)
            except Exception:  # a broken handler must not stop the watch
                log.exception("%s event handler failed", self.name)

    @staticmethod
    def key(obj: Mapping[str, Any]) -> str:
        meta = obj.get("metadata") or {}
        ns = meta.get("namespace") or ""
        return f"{ns}/{meta.get('name', '')}" if ns else str(meta.get("name", ""))

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"informer-{self.name}", daemon=True)
        self._thread.start()

    def wait_synced(self, timeout_s: float) -> bool:
        return self._synced.wait(timeout_s)

    def stop(self) -> None:
        """Stop watching; never blocks. An open watch is cut at the socket: closing the
        response directly would wait for the reading thread's buffer lock, that is for
        the next event or the server-side timeout."""
        self._stop.set()
        resp = self._resp
        if resp is None:
            return
        conn = getattr(resp, "connection", None) or getattr(resp, "_connection", None)
        sock = getattr(conn, "sock", None)
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        threading.Thread(target=_close_quietly, args=(resp,), daemon=True).start()

    def items(self) -> list[KubeObject]:
        with self._data:
            stored = [v for _, v in sorted(self._items.items())]
        return [copy.deepcopy(v) for v in stored]  # snapshots never change in place

    def get(self, key: str) -> KubeObject | None:
        with self._data:
            obj = self._items.get(key)
        return copy.deepcopy(obj) if obj is not None else None

    def peek(self, key: str) -> KubeObject | None:
        """The stored object itself (a shared snapshot: read-only), or None."""
        with self._data:
            return self._items.get(key)

    def indexed(self, value: str) -> list[KubeObject]:
        """Stored objects whose ``index_fn`` includes ``value``: shared snapshots, read-only."""
        with self._data:
            return [self._items[k] for k in sorted(self._index.get(value, ()))]

    def put(self, obj: KubeObject, *, owned: bool = False) -> None:
        """Store ``obj`` unless the cache already holds a newer version.

        Args:
            owned: the caller hands ``obj`` over (a watch event just decoded): stored
                as is, not copied.
        """
        key = self.key(obj)
        with self._lock:
            with self._data:
                old = self._items.get(key)
                if old is not None and _rv(obj) < _rv(old):
                    return
            stored = _slim(obj if owned else copy.deepcopy(obj))
            with self._data:
                self._items[key] = stored
                self._reindex(key, old, stored)
            self._notify(old, stored)

    def remove(self, obj: Mapping[str, Any]) -> None:
        key = self.key(obj)
        with self._lock:
            with self._data:
                old = self._items.pop(key, None)
                self._reindex(key, old, None)
            if old is not None:
                self._notify(old, None)

    def _reindex(self, key: str, old: KubeObject | None, new: KubeObject | None) -> None:
        if self._index_fn is None:
            return
        for value in self._index_fn(old) if old is not None else ():
            self._index.get(value, set()).discard(key)
        for value in self._index_fn(new) if new is not None else ():
            self._index.setdefault(value, set()).add(key)

    def _relist(self) -> str:
        data = call(f"list {self.name}", self._list_fn)
        items = {self.key(o): _slim(o) for o in data.get("items") or []}
        index: dict[str, set[str]] = {}
        if self._index_fn is not None:
            for key, obj in items.items():
                for value in self._index_fn(obj):
                    index.setdefault(value, set()).add(key)
        with self._lock:
            with self._data:
                before = self._items
                self._items, self._index = items, index
            # Tell the handlers what the re-list changed (a list carries no deletions).
            for key, gone in before.items():
                if key not in items:
                    self._notify(gone, None)
            for key, obj in items.items():
                prev = before.get(key)
                if prev is None or _rv(prev) != _rv(obj):
                    self._notify(prev, obj)
        self.relists += 1
        self.last_update_monotonic = time.monotonic()
        self._synced.set()
        return str((data.get("metadata") or {}).get("resourceVersion") or "")

    def _run(self) -> None:
        rv: str | None = None
        backoff = Backoff(f"{self.name} watch", log, base_s=RETRY_DELAY_S)
        while not self._stop.is_set():
            try:
                if rv is None:
                    rv = self._relist()
                    backoff.succeeded()
                rv = self._watch_from(rv, on_event=backoff.succeeded)
            except GoneError:
                log.info("%s watch expired (410 Gone): re-listing", self.name)
                rv = self._progress = None
                self._gap_since = self._gap_since or time.monotonic()
            except Exception as exc:  # dropped connections, API server restarts
                if self._stop.is_set():
                    break
                self._gap_since = self._gap_since or time.monotonic()
                rv = self._progress or rv  # resume after the last event applied
                self._stop.wait(backoff.failed(exc))

    def _watch_from(self, rv: str, *, on_event: Callable[[], None] = lambda: None) -> str:
        """Apply the events of one watch from ``rv``; return the last version seen.

        Reads the raw event stream itself: the client's ``Watch`` cannot hand over an
        ``ERROR`` event undeserialised, and a 410 arrives as one (Kubernetes API
        concepts, "Resource versions": "410 Gone ... the client must re-list").

        Raises:
            GoneError: the version is too old; the caller re-lists.
        """
        try:
            resp = self._list_fn(
                watch=True,
                resource_version=rv,
                timeout_seconds=WATCH_TIMEOUT_S,
                allow_watch_bookmarks=True,
                _preload_content=False,
            )
        except ApiException as exc:
            if exc.status == 410:
                raise GoneError(str(exc)) from None
            raise
        self._resp = resp
        self._progress = rv
        on_event()  # the API server answered: reachable again
        self._watch_opened = time.monotonic()
        try:
            status = getattr(resp, "status", 200)
            if isinstance(status, int) and not 200 <= status < 300:
                if status == 410:
                    raise GoneError(f"HTTP {status}")
                raise RuntimeError(f"watch answered HTTP {status}")
            for line in iter_resp_lines(resp):
                if self._stop.is_set():
                    break
                if not line:
                    continue
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    if isinstance(obj, dict) and obj.get("code") == 410:
                        raise GoneError(str(obj.get("message", "")))
                    raise RuntimeError(f"watch error: {obj}")
                if kind in ("ADDED", "MODIFIED"):
                    self.put(obj, owned=True)
                elif kind == "DELETED":
                    self.remove(obj)
                self.last_update_monotonic = time.monotonic()  # bookmarks count: the watch is alive
                new_rv = (obj.get("metadata") or {}).get("resourceVersion")
                if new_rv:
                    rv = self._progress = str(new_rv)
        finally:
            self._watch_opened = None
            self._resp = None
            resp.close()
            resp.release_conn()
        return rv


def _slim(obj: KubeObject) -> KubeObject:
    """Drop ``metadata.managedFields`` (server-side apply bookkeeping, often the largest
    part of an object, never read here), as client-go informers' transforms do."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return obj


def _close_quietly(resp: Any) -> None:
    with contextlib.suppress(Exception):
        resp.close()


class GoneError(Exception):
    """The watched resourceVersion is too old (HTTP 410): re-list."""


def _pod_nodes(pod: Mapping[str, Any]) -> set[str]:
    """The nodes a pod is assigned to: ours (``hami.io/vgpu-node``) or kube-scheduler's."""
    nodes = {
        ((pod.get("metadata") or {}).get("annotations") or {}).get(VGPU_NODE),
        (pod.get("spec") or {}).get("nodeName"),
    }
    return {str(n) for n in nodes if n}


def _forward(listener: Listener, kind: str, old: KubeObject | None, new: KubeObject | None) -> None:
    listener(kind, old, new)


class KubeCluster:
    """A ``ClusterStore`` over the API server. Call ``start()`` before use."""

    def __init__(
        self,
        api_client: k8s.ApiClient,
        *,
        component: str = "hami-scheduler",
        scheduler_name: str | None = None,
    ) -> None:
        """Args:
        api_client: a configured client (in-cluster, kubeconfig, or a test's).
        component: reporting controller name written on events.
        scheduler_name: cache only the pods whose ``spec.schedulerName`` is this one
            (the pod watch's field selector: the API server sends no other pod's events,
            and a pod read or written here of another scheduler is not cached). Exactly
            the pods the scheduler's usage and the webhook's quota count (PROTOCOL.md §6,
            §8: ``usage.bound_here``, ``quota.placed_by_us``); ``spec.schedulerName`` is
            immutable, so a pod never moves in or out of the selection. None: every pod.
        """
        self.api = api_client
        self.core = k8s.CoreV1Api(api_client)
        self.events_api = k8s.EventsV1Api(api_client)
        self.component = component
        self.instance = socket.gethostname()
        self.scheduler_name = scheduler_name
        self.nodes = Informer("nodes", self.core.list_node)
        list_pods: Callable[..., Any] = self.core.list_pod_for_all_namespaces
        if scheduler_name:
            list_pods = functools.partial(
                list_pods, field_selector=f"spec.schedulerName={scheduler_name}"
            )
        self.pods = Informer("pods", list_pods, index_fn=_pod_nodes)
        self.quotas = Informer("resourcequotas", self.core.list_resource_quota_for_all_namespaces)
        self._informers: tuple[Informer, ...] = (self.nodes, self.pods, self.quotas)

    def start(self, *, timeout_s: float = 30.0) -> None:
        """Start the caches and wait until each has listed once.

        Raises:
            HamiError: a cache could not list within ``timeout_s``.
        """
        for inf in self._informers:
            inf.start()
        for inf in self._informers:
            if not inf.wait_synced(timeout_s):
                raise HamiError(f"cannot list {inf.name} from the API server within {timeout_s}s")

    def stop(self) -> None:
        for inf in self._informers:
            inf.stop()

    # -- reads -----------------------------------------------------------------------

    def list_nodes(self) -> list[KubeObject]:
        return self.nodes.items()

    def get_node(self, name: str) -> KubeObject:
        node: KubeObject = call(f"get node {name}", self.core.read_node, name)
        self._remember(self.nodes, node)
        return node

    def cached_node(self, name: str) -> KubeObject:
        node = self.nodes.peek(name)
        if node is None:
            return self.get_node(name)
        return node

    def subscribe(self, listener: Listener) -> None:
        """``ClusterStore.subscribe`` over the three informers (nodes, quotas, pods)."""
        for kind, informer in (
            ("Node", self.nodes),
            ("ResourceQuota", self.quotas),
            ("Pod", self.pods),
        ):
            informer.add_handler(functools.partial(_forward, listener, kind))

    def list_pods(self, *, namespace: str | None = None) -> list[KubeObject]:
        pods = self.pods.items()
        if namespace is None:
            return pods
        return [p for p in pods if (p.get("metadata") or {}).get("namespace") == namespace]

    def pods_on_node(self, node: str) -> list[KubeObject]:
        """Shared snapshots from the cache's node index (read-only; see ``ClusterStore``)."""
        return self.pods.indexed(node)

    def get_pod(self, namespace: str, name: str) -> KubeObject:
        cached = self.pods.get(f"{namespace}/{name}")
        if cached is not None:
            return cached
        pod: KubeObject = call(
            f"get pod {namespace}/{name}", self.core.read_namespaced_pod, name, namespace
        )
        self._remember(self.pods, pod)
        return pod

    def pods_settled(self) -> bool:
        """``Informer.settled`` of the pod cache: False while it may miss recent changes
        (after an API-server restart), when a bind reads its pod live."""
        return self.pods.settled()

    def read_pod_live(self, namespace: str, name: str) -> KubeObject:
        """The pod as the API server has it now, bypassing the cache (a bind's rollback
        decides on it). Raises ``NotFoundError``."""
        pod: KubeObject = call(
            f"get pod {namespace}/{name}", self.core.read_namespaced_pod, name, namespace
        )
        self._remember(self.pods, pod)
        return pod

    @property
    def live(self) -> ClusterStore | None:
        """``ClusterStore.live``: None. Its caches span the cluster and a view without
        them would list every pod per read; its callers (the scheduler's bind) read the
        one pod they decide on with ``read_pod_live``."""
        return None

    def namespace_labels(self, name: str) -> dict[str, str]:
        """The labels of namespace ``name``, read from the API server (asked only for a
        container that sets ``CUDA_DISABLE_CONTROL``, so not cached). Raises
        ``NotFoundError``, ``ApiUnavailableError``."""
        ns: KubeObject = call(f"get namespace {name}", self.core.read_namespace, name)
        return dict((ns.get("metadata") or {}).get("labels") or {})

    def list_quotas(self, namespace: str) -> list[KubeObject]:
        return [
            q
            for q in self.quotas.items()
            if (q.get("metadata") or {}).get("namespace") == namespace
        ]

    # -- writes ----------------------------------------------------------------------

    def patch_node_annotations(
        self,
        name: str,
        annotations: Mapping[str, str | None],
        *,
        resource_version: str | None = None,
    ) -> KubeObject:
        meta: dict[str, Any] = {"annotations": dict(annotations)}
        if resource_version is not None:
            meta["resourceVersion"] = resource_version  # a stale one is refused with 409
        node: KubeObject = call(
            f"patch node {name}",
            self.core.patch_node,
            name,
            {"metadata": meta},
            _content_type="application/merge-patch+json",
        )
        self._remember(self.nodes, node)
        return node

    def remove_node_annotation(self, name: str, key: str, *, value: str) -> bool:
        """Remove annotation ``key`` of node ``name`` only if it still equals ``value``:
        one JSON patch (RFC 6902 ``test`` + ``remove``), no read. Returns False when the
        value changed or is gone (the API server answers 422) or the node is gone."""
        path = "/metadata/annotations/" + key.replace("~", "~0").replace("/", "~1")
        patch = [{"op": "test", "path": path, "value": value}, {"op": "remove", "path": path}]
        try:
            node: KubeObject = call(
                f"patch node {name}",
                self.core.patch_node,
                name,
                patch,
                _content_type="application/json-patch+json",
            )
        except (InvalidInputError, NotFoundError):
            return False
        self._remember(self.nodes, node)
        return True

    def patch_pod_metadata(
        self,
        namespace: str,
        name: str,
        *,
        annotations: Mapping[str, str | None] | None = None,
        labels: Mapping[str, str | None] | None = None,
        resource_version: str | None = None,
    ) -> KubeObject:
        meta: dict[str, Any] = {}
        if annotations:
            meta["annotations"] = dict(annotations)
        if labels:
            meta["labels"] = dict(labels)
        if resource_version is not None:
            meta["resourceVersion"] = resource_version
        pod: KubeObject = call(
            f"patch pod {namespace}/{name}",
            self.core.patch_namespaced_pod,
            name,
            namespace,
            {"metadata": meta},
            _content_type="application/merge-patch+json",
        )
        self._remember(self.pods, pod)
        return pod

    #: Writes go into the caches at once (so this process never reads itself stale);
    #: a store without watches turns it off, or its caches would only ever grow.
    cache_writes = True

    def _remember(self, informer: Informer, obj: KubeObject) -> None:
        if not self.cache_writes:
            return
        if (
            informer is self.pods
            and self.scheduler_name
            and (obj.get("spec") or {}).get("schedulerName") != self.scheduler_name
        ):
            return  # outside the watch's selection: never updated or removed once cached
        informer.put(obj)

    def bind_pod(
        self,
        namespace: str,
        name: str,
        *,
        uid: str,
        node: str,
        annotations: Mapping[str, str] | None = None,
    ) -> None:
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace, "uid": uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        if annotations:
            body["metadata"]["annotations"] = dict(annotations)
        call(
            f"bind pod {namespace}/{name} to {node}",
            self.core.create_namespaced_binding,
            namespace,
            body,
        )
        # A Binding answers a Status, not the pod: put what the API server now holds
        # into the cache (at the cached resourceVersion, so the watch's event replaces
        # it), so this process's next filter counts the pod on ``node`` at once.
        cached = self.pods.peek(f"{namespace}/{name}") if self.cache_writes else None
        if cached is not None and (cached.get("metadata") or {}).get("uid") == uid:
            meta = cached.get("metadata") or {}
            bound = {
                **cached,
                "metadata": {
                    **meta,
                    "annotations": {**(meta.get("annotations") or {}), **(annotations or {})},
                },
                "spec": {**(cached.get("spec") or {}), "nodeName": node},
            }
            self._remember(self.pods, bound)

    def record_event(self, obj: KubeObject, *, type: str, reason: str, message: str) -> None:
        """Write an ``events.k8s.io/v1`` Event about ``obj`` (shown by ``kubectl describe``)."""
        self.record_event_series(obj, type=type, reason=reason, message=message, count=1)

    def record_event_series(
        self,
        obj: KubeObject,
        *,
        type: str,
        reason: str,
        message: str,
        count: int,
        existing: str | None = None,
    ) -> str:
        """Create an ``events.k8s.io/v1`` Event about ``obj``, or, with ``existing``, set
        that Event's ``series`` (``count`` >= 2, ``lastObservedTime``) and note: one
        PATCH for a repeat (client-go ``tools/events``). A series whose Event is gone
        (expired) starts a new Event. Returns the Event's name."""
        meta = obj.get("metadata") or {}
        namespace = meta.get("namespace") or "default"
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        if existing is not None and count >= 2:
            patch = {"series": {"count": count, "lastObservedTime": now}, "note": message[:1024]}
            try:
                call(
                    f"update event {reason}",
                    self.events_api.patch_namespaced_event,
                    existing,
                    namespace,
                    patch,
                    _content_type="application/merge-patch+json",
                )
                return existing
            except NotFoundError:
                pass
        name = f"{meta.get('name', 'object')}.{uuid.uuid4().hex[:16]}"
        body = {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "eventTime": now,
            "reportingController": f"hami.io/{self.component}",
            "reportingInstance": f"{self.component}-{self.instance}",
            "action": reason.removesuffix("Succeed").removesuffix("Failed") or reason,
            "reason": reason,
            "note": message[:1024],
            "type": type,
            "regarding": {
                "apiVersion": obj.get("apiVersion", "v1"),
                "kind": obj.get("kind", "Pod"),
                "name": meta.get("name"),
                "namespace": namespace,
                "uid": meta.get("uid"),
                "resourceVersion": meta.get("resourceVersion"),
            },
        }
        call(f"record event {reason}", self.events_api.create_namespaced_event, namespace, body)
        return name
