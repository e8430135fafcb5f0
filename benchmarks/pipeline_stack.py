"""The real pipeline's stack, shared by ``bench_pipeline.py`` and ``bench_gang.py``:
etcd + kube-apiserver (``tests/e2e/controlplane.py``), ``hami webhook`` mutating the
pods of ``HAMI_NS``, ``hami scheduler`` (its own process, leader-elected) and the
stand-in kubelets of every node (``tests/standin_kubelet.py``), whose device plugins
allocate each bound pod under a ``--trust`` mode. ``running_stack`` starts them all
and stops them in reverse; nodes and kube-scheduler are the caller's (each bench adds
nodes and starts kube-scheduler when its measure needs).
"""

from __future__ import annotations

import collections
import contextlib
import datetime as dt
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import hami_nvidia.plugin  # noqa: E402
from kubernetes import client as k8s  # noqa: E402
from workload import node_object  # noqa: E402

from hami_core.cluster.direct import DirectKubeCluster  # noqa: E402
from hami_core.cluster.kube import CONNECTION_POOL_SIZE, KubeCluster  # noqa: E402
from hami_core.plugin import BackendManager  # noqa: E402
from hami_core.protocol.config import parse_config  # noqa: E402
from hami_core.protocol.handshake import (  # noqa: E402
    HandshakeState,
    encode_handshake,
    podresources_key,
)
from hami_core.protocol.signature import AllocationVerifier  # noqa: E402
from hami_core.servers.signingkeys import PublicKeyFiles  # noqa: E402
from tests.e2e.controlplane import (  # noqa: E402
    LOOPBACK,
    ControlPlane,
    _set_pdeathsig,
    find_kube_binaries,
)
from tests.e2e.hami_servers import signing_keys, spawn_scheduler, start_webhook  # noqa: E402
from tests.standin_kubelet import StandInKubelet  # noqa: E402

MANAGED = [
    "nvidia.com/gpu",
    "nvidia.com/gpumem",
    "nvidia.com/gpumem-percentage",
    "nvidia.com/gpucores",
    "nvidia.com/cores",
    "nvidia.com/priority",
]
HAMI_NS = "bench-hami"
WRITES = ("POST", "PUT", "PATCH", "DELETE")
#: ``--trust``: which pods a device plugin serves without a node lock naming them.
TRUST_MODES = ("signed", "off", "all")


def trust_options(mode: str, public_keys: Path) -> dict[str, Any]:
    """The stand-in device plugins' ``Allocator`` options of a ``--trust`` mode.

    - ``signed`` (the default): as ``hami device-plugin --allocation-public-keys FILE``
      ships: the real ``AllocationVerifier`` over ``public_keys`` (the public half of the
      key ``hami scheduler --allocation-signing-key`` signs with); a pod whose signature
      verifies is served without a lock, and nodes claim PodResources, so binds lock
      nothing.
    - ``off``: no trust check (no verifier): only a node lock's owner is served, nodes
      claim nothing and every bind takes HAMi's node lock (nodes still running HAMi's
      device plugin).
    - ``all``: every allocation trusted, no signature read (an upper bound of the
      lock-free path: the cost of verifying left out).

    Raises:
        ValueError: an unknown mode.
    """
    if mode == "off":
        return {}
    if mode == "all":
        return {"trusted": lambda pod: True}
    if mode == "signed":
        keys = PublicKeyFiles(str(public_keys), flag="--allocation-public-keys")
        return {"verifier": AllocationVerifier(keys)}
    raise ValueError(f"--trust {mode!r}: expected one of {', '.join(TRUST_MODES)}")


def claims_podresources(mode: str) -> bool:
    """Whether a ``--trust`` mode's nodes claim they tell pods apart (binds take no lock)."""
    return mode != "off"


#: hami-nvidia's handshake annotation (its ``DeviceType.handshake_annotation``).
HANDSHAKE = "hami.io/node-handshake"


def published_annotations(name: str, *, claims: bool) -> dict[str, str]:
    """Node ``name``'s annotations as its device plugin publishes them: the inventory
    (``workload.node_object``: 8 A100-80GB, split 10) and a handshake answer, with
    (``claims``) the capability to tell pods apart beside it
    (``protocol.handshake.identifies_pods``), as ``NodeAgent`` writes it for an
    ``Allocator`` that reads PodResources and has a trust check: binds to such a node
    take no node lock."""
    answer = encode_handshake(HandshakeState.REPORTED, dt.datetime.now(dt.UTC))
    annotations = {**node_object(name)["metadata"]["annotations"], HANDSHAKE: answer}
    if claims:
        annotations[podresources_key(HANDSHAKE)] = answer
    return annotations


class WriteCounter:
    """Wraps an API client's pool manager and counts its writes by (verb, resource)."""

    def __init__(self, pool: Any) -> None:
        self._pool = pool
        self._lock = threading.Lock()
        self.counts: collections.Counter[tuple[str, str]] = collections.Counter()

    def request(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        if method in WRITES:
            with self._lock:
                self.counts[(method, _resource_of(url))] += 1
        return self._pool.request(method, url, *args, **kwargs)

    def snapshot(self) -> collections.Counter[tuple[str, str]]:
        with self._lock:
            return collections.Counter(self.counts)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pool, name)


def _resource_of(url: str) -> str:
    """``.../api/v1/namespaces/ns/pods/p/binding?x`` -> ``pods/binding``; nodes alike."""
    parts = url.split("?", 1)[0].split("/api/v1/", 1)[-1].split("/")
    if parts and parts[0] == "namespaces" and len(parts) >= 3:
        parts = parts[2:]
    resource = parts[0] if parts else ""
    return f"{resource}/{parts[2]}" if len(parts) >= 3 else resource


class BoundWatch:
    """When each pod was first seen bound, per namespace, from a pod watch (no polling:
    a list every few hundred ms blurred short runs and loaded the API server)."""

    def __init__(self, store: KubeCluster) -> None:
        self._cond = threading.Condition()
        self._bound: dict[str, dict[str, float]] = collections.defaultdict(dict)
        store.subscribe(self._on_event)

    def _on_event(self, kind: str, old: Any, new: Any) -> None:
        if kind != "Pod":
            return
        obj = new if new is not None else old
        meta = obj.get("metadata") or {}
        ns, uid = str(meta.get("namespace") or ""), str(meta.get("uid") or "")
        with self._cond:
            if new is None:
                self._bound[ns].pop(uid, None)
            elif (new.get("spec") or {}).get("nodeName") and uid not in self._bound[ns]:
                self._bound[ns][uid] = time.monotonic()
                self._cond.notify_all()

    def time_until_bound(self, ns: str, n: int, start: float, timeout_s: float) -> float:
        """Seconds from ``start`` (monotonic) until ``n`` pods of ``ns`` were bound."""
        deadline = start + timeout_s
        with self._cond:
            while len(self._bound[ns]) < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(
                        f"{ns}: only {len(self._bound[ns])}/{n} pods bound after {timeout_s:.0f} s"
                    )
                self._cond.wait(min(left, 1.0))
            return sorted(self._bound[ns].values())[n - 1] - start


class StandIn:
    """The stand-in kubelets of every node (``StandInKubelet``) on their own counted
    client, serving the pods of ``HAMI_NS`` under hami-nvidia's device-plugin config."""

    def __init__(
        self,
        cp: ControlPlane,
        workdir: Path,
        delay_s: float,
        trust: dict[str, Any],
    ) -> None:
        cfg = cp.client_configuration()
        cfg.connection_pool_maxsize = CONNECTION_POOL_SIZE  # as the device plugin's client
        api = k8s.ApiClient(cfg)
        self.writes = WriteCounter(api.rest_client.pool_manager)
        api.rest_client.pool_manager = self.writes
        self.store = KubeCluster(api, component="bench-device-plugin")
        self.store.start()
        self.bound = BoundWatch(self.store)
        base = BackendManager.from_plugins({"nvidia": hami_nvidia.plugin})
        hooks = workdir / "device-plugin-hooks"
        manager = base.with_config(
            parse_config({"version": "v1", "nvidia": {"hookPath": str(hooks)}}, backends=base.infos)
        )
        self.kubelet = StandInKubelet(
            self.store,
            manager,
            admission_delay_s=delay_s,
            selects=lambda pod: (pod.get("metadata") or {}).get("namespace") == HAMI_NS,
            allocator_options=trust,
            # as the device plugin's NodeKubeCluster: live reads when the caches lag
            live_view=lambda node: DirectKubeCluster(api, node=node),
        ).start()

    def stop(self) -> None:
        self.kubelet.stop()
        self.store.stop()


def start_hami(
    cp: ControlPlane, workdir: Path, extra: Sequence[str] = ()
) -> tuple[str, subprocess.Popen[bytes]]:
    """``hami scheduler`` (flags ``extra`` added) as its own process; its extender URL
    once it leads."""
    proc, url, metrics = spawn_scheduler(
        cp,
        workdir / "hami-scheduler.log",
        "--log-level",
        "warning",
        # No Requesting_ round during the benchmark: nothing answers it but the
        # nodes' first answer (add_nodes), and it is no part of a bind.
        "--handshake-period",
        "3600",
        *extra,
        preexec_fn=_set_pdeathsig,  # never outlives the benchmark
    )
    cp.wait_for(lambda: _ok(f"{url}/-/leader", b'"leader":true'), timeout=90, message="hami leader")
    global METRICS_URL
    METRICS_URL = f"http://{LOOPBACK}:{metrics}/metrics"
    return url, proc


METRICS_URL = ""


def _ok(url: str, needle: bytes) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status == 200 and needle in r.read()
    except OSError:
        return False


@attrs.frozen
class Stack:
    """What ``running_stack`` started.

    Attributes:
        cp: the control plane (kube-scheduler not started).
        core: a CoreV1Api client of it.
        url: ``hami scheduler``'s extender URL.
        hami: its process.
        standin: the stand-in kubelets.
    """

    cp: ControlPlane
    core: k8s.CoreV1Api
    url: str
    hami: subprocess.Popen[bytes]
    standin: StandIn


@contextlib.contextmanager
def running_stack(
    *,
    trust: str,
    admission_delay_s: float,
    namespaces: Iterable[str] = (),
    scheduler_args: Sequence[str] = (),
) -> Iterator[Stack]:
    """Start the stack (module docstring) under ``--trust`` mode ``trust``; the stand-in
    kubelets admit a bound pod ``admission_delay_s`` after seeing it; ``hami scheduler``
    gets ``scheduler_args`` too. ``HAMI_NS`` (the webhook's) and ``namespaces`` are
    created. Everything is stopped on exit."""
    with (
        ControlPlane(find_kube_binaries(), ready_timeout=180) as cp,
        tempfile.TemporaryDirectory() as tmp,
    ):
        assert cp.workdir is not None
        core = k8s.CoreV1Api(cp.api_client())
        for ns in namespaces:
            core.create_namespace({"metadata": {"name": ns}})
        core.create_namespace({"metadata": {"name": HAMI_NS, "labels": {"hami-bench": "on"}}})
        start_webhook(
            cp,
            config_name="hami-bench",
            secret_name="hami-bench-webhook",
            namespace_labels={"hami-bench": "on"},
        )
        url, hami = start_hami(cp, cp.workdir, scheduler_args)
        options = trust_options(trust, signing_keys(cp)[1])
        standin = StandIn(cp, Path(tmp), admission_delay_s, options)
        try:
            yield Stack(cp=cp, core=core, url=url, hami=hami, standin=standin)
        finally:
            standin.stop()
            hami.terminate()
            with contextlib.suppress(Exception):
                hami.wait(10)
