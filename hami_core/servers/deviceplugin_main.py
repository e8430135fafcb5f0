"""``hami device-plugin``: discovery, the node agent and the kubelet gRPC server in one
process (one backend, one vendor key, one extended resource per process)."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from hami_core.cluster.base import ClusterStore, KubeObject
from hami_core.deviceplugin.agent import NodeAgent
from hami_core.deviceplugin.allocator import Allocator
from hami_core.deviceplugin.cdi import CdiWriter
from hami_core.deviceplugin.loop import HealthLoop
from hami_core.deviceplugin.nodestate import FileNodeState
from hami_core.deviceplugin.podresources import PodResourcesSource
from hami_core.deviceplugin.state import DeviceState
from hami_core.errors import ConfigError, HamiError
from hami_core.model import DevicePluginFlags
from hami_core.plugin import BackendManager
from hami_core.protocol.config import HamiConfig, load_config
from hami_core.protocol.nodeconfig import NodeOverrides, load_node_overrides
from hami_core.protocol.signature import AllocationVerifier

from .deviceplugin import DevicePluginServicer, PluginServer
from .deviceplugin_metrics import DevicePluginMetrics
from .options import DevicePluginOptions
from .podresources import KubeletPodResources
from .signingkeys import CONFIGMAP_PREFIX, PublicKeyFiles, PublicKeysConfigMap

log = logging.getLogger(__name__)


def verifier_of(opts: DevicePluginOptions, *, api_client: Any = None) -> AllocationVerifier | None:
    """The allocation-signature verifier of ``--allocation-public-keys``, or None (only
    the pod a node lock names is served, HAMi's protocol; logged).

    Args:
        api_client: a ``kubernetes.client.ApiClient``, for ``configmap:NAMESPACE/NAME``.

    Raises:
        ConfigError: the path does not exist, the ConfigMap cannot be read, or a key is
            malformed (the flag named).
    """
    if not opts.allocation_public_keys:
        log.warning(
            "--allocation-public-keys not set: allocation signatures are not checked; "
            "only the pod a node lock names is served"
        )
        return None
    value, flag = opts.allocation_public_keys, "--allocation-public-keys"
    keys: PublicKeyFiles | PublicKeysConfigMap
    if value.startswith(CONFIGMAP_PREFIX):
        if api_client is None:
            raise ConfigError(f"{flag} {value}: a ConfigMap needs the API server")
        keys = PublicKeysConfigMap(api_client, value[len(CONFIGMAP_PREFIX) :], flag=flag)
    else:
        keys = PublicKeyFiles(value, flag=flag)
    if not keys.key_ids():
        log.warning(
            "--allocation-public-keys %s lists no key yet: signed pods are refused until "
            "one appears",
            opts.allocation_public_keys,
        )
    else:
        log.info("allocation keys: %s", ", ".join(keys.key_ids()))
    return AllocationVerifier(keys)


class DevicePluginProcess:
    """The parts of a running device plugin, wired together; tests build it over a
    ``MemoryCluster`` and a ``BackendManager`` of their choice."""

    def __init__(
        self,
        opts: DevicePluginOptions,
        *,
        store: ClusterStore,
        manager: BackendManager,
        async_release: bool = False,
        overrides: NodeOverrides | None = None,
        pod_resources: PodResourcesSource | None = None,
        trusted: Callable[[KubeObject], bool] | None = None,
        verifier: AllocationVerifier | None = None,
    ) -> None:
        """Args:
        overrides: this node's entry of the per-node file, already read (else read
            from ``opts.node_config`` here).
        async_release: write an answered pod's progress and release the node lock on
            one background thread after answering kubelet (the real process: nothing
            but cache reads on kubelet's critical path), rather than before returning
            (tests that read the pod or the lock right after ``Allocate``).
        pod_resources: kubelet's PodResources (default: the client of
            ``opts.pod_resources_socket``, none when that is "").
        trusted: whether a pod no node lock names may be served (``Allocator``);
            with ``pod_resources`` the node's handshake answer says binds need no lock.
        verifier: checks allocation signatures (default: ``verifier_of(opts)``, which
            reads ``--allocation-public-keys`` from a file or directory).

        Raises:
            ConfigError: unknown backend or vendor, bad per-node file.
        """
        vendor = backend_vendor(opts, manager)
        self.opts = opts
        self.store = store
        if overrides is None:
            overrides = load_node_overrides(opts.node_config, node=opts.node_name)
        self.state = DeviceState(numa_topology=overrides.numa_topology is not False)
        # One thread: an answered pod's writes run in the order they were answered.
        self._releaser = ThreadPoolExecutor(max_workers=1, thread_name_prefix="after-allocate")
        self.agent = NodeAgent(
            store,
            manager,
            backend=opts.backend,
            vendor=vendor,
            node=opts.node_name,
            overrides=overrides,
            link_scores=opts.link_scores,
        )
        dtype = self.agent.dtype
        # the names in force: the section's for a one-type backend, the type's own
        # (configured_resources) for one of several
        self.resource_name = dtype.resources.count
        self.cdi = (
            CdiWriter(spec_dir=Path(opts.cdi_spec_dir), backend=opts.backend) if opts.cdi else None
        )
        self.allocator = Allocator(
            store,
            self.agent.manager,
            vendor=vendor,
            node=opts.node_name,
            known_ids=self.state.known_ids,
            cdi=self.cdi,
            resource_name=self.resource_name,
            node_devices=lambda: self.state.devices,
            after_answer=self._release_later if async_release else None,
            state=FileNodeState(opts.state_dir),
            pod_resources=pod_resources
            if pod_resources is not None
            else (
                KubeletPodResources(opts.pod_resources_socket)
                if opts.pod_resources_socket
                else None
            ),
            trusted=trusted,
            verifier=verifier if verifier is not None else verifier_of(opts),
            unsigned=opts.unsigned_allocations,
        )
        self.agent.identifies_pods = lambda: self.allocator.identifies_pods
        self.metrics = DevicePluginMetrics(
            node=opts.node_name, vendor=vendor, devices=lambda: self.state.devices
        )
        socket_name = opts.socket_name or (
            f"{opts.backend}-{self.resource_name.rsplit('/', 1)[-1]}.sock"
        )
        self.server = PluginServer(
            DevicePluginServicer(
                self.state,
                self.allocator,
                allocate_timeout_s=opts.allocate_timeout_s,
                on_allocate=self.metrics.observe_allocate,
            ),
            plugin_dir=opts.plugin_dir,
            socket_name=socket_name,
            resource_name=self.resource_name,
            workers=opts.workers,
        )
        self.loop = HealthLoop(
            self.agent,
            self.state,
            store,
            health_interval_s=opts.health_interval_s,
            register_interval_s=opts.register_interval_s,
            cdi=self.cdi,
            allocator=self.allocator,
        )

    def _release_later(self, release: Callable[[], None]) -> None:
        self._releaser.submit(release)

    def start(self) -> None:
        """Discover, publish, serve and register, then keep all of it current.

        Raises:
            HamiError: discovery failed (the message says why).
            OSError: the socket cannot be served.
        """
        for path in self.agent.manager.prepare_node(self.opts.backend):
            log.info("installed for containers: %s", path)
        self.loop.first_round()
        self.server.start()
        self.loop.start()

    def stop(self) -> None:
        """Stop the loop and the server; the inventory stays on the node, the claim
        to tell pods apart goes (another device plugin may serve the node next)."""
        self.agent.withdraw()
        self.loop.stop()
        self.state.close()
        self.server.stop()
        self.loop.join()


def backend_vendor(opts: DevicePluginOptions, manager: BackendManager) -> str:
    """The vendor key this device plugin serves: ``--vendor``, else the backend's first.

    Raises:
        ConfigError: ``--backend`` is not installed, or ``--vendor`` is not one of its.
    """
    if opts.backend not in manager.infos:
        known = ", ".join(manager.infos) or "none"
        raise ConfigError(f"--backend {opts.backend!r} is not installed (installed: {known})")
    info = manager.infos[opts.backend]
    vendor = opts.vendor or info.vendors[0]
    if vendor not in info.vendors:
        raise ConfigError(
            f"--vendor {vendor!r} is not served by backend {opts.backend!r} "
            f"(it serves {', '.join(info.vendors)})"
        )
    return vendor


def check_serves_nodes(opts: DevicePluginOptions, manager: BackendManager) -> None:
    """Refuse a backend whose nodes hami's device plugin cannot run (no
    ``hami_discover``), before anything is contacted, naming what runs them
    (``BackendInfo.vendor_device_plugin``): it would otherwise exit later on every node
    with "is the driver installed?".

    Raises:
        ConfigError: ``--backend`` cannot discover devices.
    """
    record = next(r for r in manager.backends if r.name == opts.backend)
    if not record.serves_nodes:
        instead = record.info.vendor_device_plugin or "the vendor's own device plugin"
        raise ConfigError(
            f"--backend {opts.backend!r}: hami's device plugin cannot serve these nodes "
            f"(hami-{opts.backend} has no discovery); they are run by {instead}"
        )


def with_plugin_flags(
    config: HamiConfig, opts: DevicePluginOptions, manager: BackendManager
) -> HamiConfig:
    """``config`` with the section of ``opts.backend`` under HAMi's device-plugin flags
    (``--mig-strategy``, ``--disable-core-limit``), as that backend declares and applies
    them (``BackendInfo.device_plugin_flags``, ``hami_device_plugin_flags``; NVIDIA's:
    ``hami_nvidia.plugin_flags``); a flag given to a backend that does not read it is
    logged as ignored (``BackendManager.with_device_plugin_flags``)."""
    flags = DevicePluginFlags(
        mig_strategy=opts.mig_strategy, disable_core_limit=opts.disable_core_limit
    )
    return manager.with_device_plugin_flags(opts.backend, flags, config)


def run_device_plugin(opts: DevicePluginOptions, *, stop: threading.Event | None = None) -> None:
    """Run until SIGTERM / SIGINT (or ``stop`` is set).

    Raises:
        ConfigError: bad options or configuration files.
        HamiError: discovery failed at start and ``fail_on_init_error`` is set.
        OSError: the plugin socket cannot be served.
    """
    from hami_core.cluster.direct import NodeKubeCluster
    from hami_core.cluster.kube import make_api_client, set_request_timeout

    opts = opts.resolved()
    set_request_timeout(opts.api_timeout_s)
    manager = BackendManager.from_entry_points()
    config = load_config(opts.config, backends=manager.infos)
    manager = manager.with_config(with_plugin_flags(config, opts, manager))
    # every file and flag checked before the API server is contacted or a port bound
    backend_vendor(opts, manager)
    check_serves_nodes(opts, manager)
    in_api = (opts.allocation_public_keys or "").startswith(CONFIGMAP_PREFIX)
    verifier = None if in_api else verifier_of(opts)
    overrides = load_node_overrides(opts.node_config, node=opts.node_name)
    api = make_api_client(opts.kubeconfig)
    if in_api:
        verifier = verifier_of(opts, api_client=api)
    store = NodeKubeCluster(api, node=opts.node_name)
    process = DevicePluginProcess(
        opts,
        store=store,
        manager=manager,
        async_release=True,
        overrides=overrides,
        verifier=verifier,
    )
    done = stop or threading.Event()

    def shutdown(*_: Any) -> None:
        done.set()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, shutdown)
        signal.signal(signal.SIGINT, shutdown)
    if opts.metrics_port:
        from .metrics_http import serve_metrics

        serve_metrics(
            process.metrics.registry, host=opts.metrics_bind_address, port=opts.metrics_port
        )
    try:
        process.start()
    except HamiError as exc:
        if opts.fail_on_init_error:
            raise
        log.error("%s; idling without registering (--no-fail-on-init-error)", exc)
        done.wait()
        return
    store.start()  # this node and its pods, watched: Allocate reads nothing live
    log.info(
        "hami device plugin for %s on node %s is up (socket %s)",
        process.resource_name,
        opts.node_name,
        process.server.socket_path,
    )
    done.wait()
    log.info("stopping")
    process.stop()
    store.stop()
