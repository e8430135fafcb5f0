"""Hook specifications of the ``hami`` pluggy project.

Every hook a vendor backend can implement is specified here, and only here. The core
calls hooks exclusively through ``hami_core.plugin.BackendManager``, which dispatches by
vendor: ``hami_fit``, ``hami_score`` and ``hami_allocate`` go only to the backend that
owns the vendor key (so does the optional batch ``hami_fit_nodes``); ``hami_discover``, ``hami_watch_health`` and ``hami_link_scores`` go
to the one backend a device plugin serves; ``hami_node_devices`` to the backend of the
vendor key; ``hami_mutate`` to the backend whose request a container holds;
``hami_parse_request`` goes to every backend, and each answers ``None`` for a container
that asks nothing of its vendors (the conformance kit checks that it does). Hooks may take any subset of the arguments
(pluggy passes only those an implementation names), so specs can gain arguments
without breaking backends.

Pods and containers are the JSON form of Kubernetes ``v1.Pod`` / ``v1.Container``
(plain dicts, as the API server sends them). "Does not fit" is never an exception.
A hook may raise ``hami_core.errors.InvalidInputError`` for malformed input; any other
exception is reported as a ``BackendError`` naming the backend.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import pluggy

from hami_core.model import (
    BackendInfo,
    ContainerAllocation,
    ContainerDevices,
    ContainerUsage,
    DeviceInfo,
    DevicePluginFlags,
    DevicePolicy,
    DeviceRequest,
    DeviceUsage,
    FitResult,
    HostDevice,
    MutateResult,
    NodeInfo,
    NodePolicy,
    NodeState,
    PodDevices,
)
from hami_core.protocol.config import VendorConfig

PROJECT = "hami"
_hookspec = pluggy.HookspecMarker(PROJECT)

Pod = Mapping[str, Any]
Container = Mapping[str, Any]

#: The attribute ``reads_pod_annotations`` sets on a ``hami_parse_request`` implementation.
POD_ANNOTATIONS_ATTR = "hami_reads_pod_annotations"

F = TypeVar("F", bound=Callable[..., Any])


def reads_pod_annotations(*keys: str) -> Callable[[F], F]:
    """Declare that a ``hami_parse_request`` implementation reads of the pod only these
    annotations (HAMi's request annotations: Ascend's ``huawei.com/vnpu-mode``, MetaX's
    app class and QoS policy).

    The implementation is then passed, as ``pod``, only ``{"metadata": {"annotations":
    {...}}}`` holding those of ``keys`` the pod carries, and its answer is kept per
    container content and those annotations' values (``BackendManager.parse_requests``)
    instead of being asked again for every pod. Without the declaration an implementation
    that names ``pod`` gets the whole pod and is asked for every pod.

    Example::

        @reads_pod_annotations("huawei.com/vnpu-mode")
        def parse_request(pod, container, config): ...

    Raises:
        TypeError: no key, or a key that is not a non-empty string.
    """
    if not keys or not all(isinstance(k, str) and k for k in keys):
        raise TypeError(f"reads_pod_annotations needs annotation keys, got {keys!r}")

    def mark(fn: F) -> F:
        setattr(fn, POD_ANNOTATIONS_ATTR, frozenset(keys))
        return fn

    return mark


@_hookspec
def hami_backend_info() -> BackendInfo:  # type: ignore[empty-body]
    """Describe the backend: its name, vendor keys, resource names, annotation keys.

    Called by: ``BackendManager`` once, when the backend is loaded.
    Returns: ``BackendInfo`` whose ``name`` equals the entry-point name. Required.
    """


@_hookspec
def hami_check_config(config: VendorConfig) -> object | None:
    """Validate this backend's configuration section and parse it into the backend's form.

    Called by: ``BackendManager`` for every backend whenever it is built with a
    configuration (every ``hami`` process at start, before it serves anything), so a
    typo stops the process at start with the key named instead of denying pods later.
    Args:
        config: the section, complete: the common keys and ``options`` already merged
            with the backend's ``option_defaults`` (unknown keys were refused before).
    Returns: the backend's parsed settings (any object); every hook then receives it as
        ``config.settings``. None when the section needs no more than the core's checks.
    Raises: ``ConfigError`` naming the key as ``<backend>.<key>`` (e.g.
        ``ascend.vnpuMode``).
    """


@_hookspec
def hami_device_plugin_flags(flags: DevicePluginFlags, config: VendorConfig) -> VendorConfig | None:
    """Apply HAMi's device-plugin flags this backend reads to its configuration section.

    Called by: the device plugin at start, for its own backend only, when the backend
    names flags in ``BackendInfo.device_plugin_flags``; before the configuration is
    checked (``hami_check_config`` then checks what this returns; a node's entry of
    ``--node-config`` still overrides it later).
    Args:
        flags: what was given (None: a flag not given).
        config: the section as the configuration file states it (``VendorConfig()``
            without one); ``settings`` not yet set.
    Returns: the section to serve (``attrs.evolve`` of ``config``), or None to keep it.
    """


@_hookspec
def hami_prepare_node(config: VendorConfig) -> list[str] | None:
    """Install what containers on this node need from the backend into host paths.

    Called by: the device plugin at start, before it registers with kubelet (for
    NVIDIA: ``libvgpu.so`` and the ``ld.so.preload`` naming it, under ``hookPath``,
    which Allocate then mounts into containers).
    Returns: the host paths written or already current; None when nothing is needed.
    Raises: ``HamiError`` when a file cannot be installed (the plugin must not serve
        containers without their limits).
    """


@_hookspec
def hami_discover(config: VendorConfig) -> list[DeviceInfo] | None:
    """Find this vendor's physical devices on the local node.

    Called by: the device plugin's node agent: at start, after every
    ``hami_watch_health`` answer, and at least every ``--health-interval`` seconds.
    Args:
        config: this backend's configuration section (split count, scaling, ...).
    Returns: the devices, index order, with ``memory_mib`` / ``cores_pct`` already
        scaled as the inventory states them (PROTOCOL.md §2); ``[]`` when the node has
        none; ``None`` when the backend cannot discover on this node (no driver).
    """


@_hookspec
def hami_watch_health(config: VendorConfig, timeout_s: float) -> Sequence[str] | None:
    """Wait for this vendor's devices to change health, at most ``timeout_s`` seconds.

    Called by: the device plugin's health loop, over and over; after a non-empty answer
    it calls ``hami_discover`` again (whose ``healthy`` flags are the truth) and, when
    the list changed, re-sends the whole list to kubelet (``ListAndWatch``) and
    republishes the inventory.
    Args:
        config: this backend's configuration section.
        timeout_s: the longest the call may block, seconds (the loop uses it to stop
            and to re-check recovered devices).
    Returns: UUIDs whose health may have changed (``[]`` on timeout); ``None`` when the
        backend does not watch health, and the loop then re-discovers every
        ``timeout_s`` seconds instead.
    """


@_hookspec
def hami_link_scores(
    devices: Sequence[DeviceInfo], config: VendorConfig
) -> Mapping[str, Mapping[str, int]] | None:
    """Score the links between this node's devices, for topology-aware placement.

    Called by: the device plugin's node agent, after discovery, when link scores are
    enabled (``hami device-plugin --link-scores``); the agent publishes the answer under
    the vendor key's ``DeviceTypeInfo.link_score_annotation``, which a backend with this
    hook must declare (PROTOCOL.md §2: NVLink with k links 100*k, same board 60, one
    PCIe switch 50, several switches 40, same host bridge 30, same CPU 20, across CPUs 10).
    Args:
        devices: what ``hami_discover`` returned, index order.
    Returns: ``{uuid: {other_uuid: score}}`` for every pair of ``devices``; ``None``
        when the backend has no notion of links.
    """


@_hookspec
def hami_node_devices(
    node: Mapping[str, Any], vendor: str, config: VendorConfig
) -> list[DeviceInfo] | None:
    """Read one vendor's devices from a Node object, where HAMi reads them elsewhere
    than the vendor's register annotation.

    HAMi 2.10 reads some vendors from the node's ``status.capacity`` (Moore Threads
    ``pkg/device/mthreads``, AWS Neuron ``pkg/device/awsneuron``) or from an annotation
    the vendor's own device plugin writes (MetaX ``metax-tech.com/node-gpu-devices``,
    Enflame ``enflame.com/gcu-drs-capacity``), so that hami schedules beside the
    vendor's device plugin.

    Called by: the scheduler (and ``hami simulate``) for every node and every vendor key
    of the backend, before the register annotation is decoded.
    Args:
        node: the ``v1.Node`` as JSON; vendor: one of the backend's vendor keys.
    Returns: the devices in index order (``[]``: the node has none); ``None`` to let the
        core decode ``register_annotation`` as for every vendor.
    Raises: ``AnnotationError`` for a malformed value: that vendor is then unregistered
        on that node (``NodeInfo.unregistered``), other nodes are unaffected.
    """


@_hookspec
def hami_parse_request(
    pod: Pod, container: Container, init: bool, config: VendorConfig
) -> DeviceRequest | None:
    """Read one container's request for this backend's devices, defaults applied.

    Called by (``BackendManager.parse_requests``), for every container of a pod: the
    webhook (whether a container asks for devices, validation, the new pod's quota
    charge, and which vendors existing pods' allocations count for); the scheduler
    (filter, bind; which vendors a pod's allocation counts for in usage,
    quota and its metrics); the device plugin after it answers ``Allocate``, to learn
    which vendors each container asks, so an entry no container asks for does not hold
    the pod unallocated (``deviceplugin/done.py``; matching ``Allocate`` to a pod reads
    the pod's annotations, not this hook); ``hami top`` and ``hami simulate``.
    The answer must follow from the arguments alone: an implementation that does not
    name ``pod`` is asked once per container content (its answer kept for the other
    replicas, ``BackendManager.parse_requests``); one that reads the pod names it, and
    declares the annotations it reads with ``@reads_pod_annotations(...)`` to be asked
    once per container content and values of those annotations (it is then given only
    them); an undeclared one gets the whole pod and is asked for every pod.
    Args:
        pod: the pod; container: one of its containers; init: True for an init container.
        config: this backend's configuration section.
    Returns: the ``DeviceRequest`` (count of distinct devices, memory per device in MiB
        or percent, cores per device in percent), or ``None`` when the container asks
        nothing of this backend's vendors.
    Raises: ``InvalidInputError`` naming the container, the resource and the value.
    """


@_hookspec
def hami_mutate(
    pod: Pod,
    container: Container,
    container_path: str,
    config: VendorConfig,
    request: DeviceRequest,
) -> MutateResult | None:
    """Default and validate one container at admission: say what its spec should state.

    Called by: the webhook, once per container (init containers first) that asks for
    this backend's vendors (PROTOCOL.md §6), after it parsed the container once.
    Args:
        container_path: JSON pointer of the container in the pod, e.g.
            ``/spec/containers/1``, for operations in ``MutateResult.patch``.
        request: this backend's ``hami_parse_request`` answer for the container.
    Returns: ``MutateResult`` with the quantities both ``limits`` and ``requests`` must
        state, env, a RuntimeClass (the webhook writes them), or a ``denial`` message;
        ``None`` when the container asks nothing of this backend's vendors.
    """


@_hookspec
def hami_fit(
    request: DeviceRequest,
    node: NodeInfo,
    usage: Sequence[DeviceUsage],
    pod: Pod,
    policy: DevicePolicy,
    config: VendorConfig,
    allocated: Sequence[ContainerDevices],
) -> FitResult | None:
    """Place one container's request on one node, or say per device why not.

    Called by: the scheduler's fit driver, for each container in wire order (init
    containers one at a time, app containers cumulatively: ``usage`` already includes
    the pod's earlier app containers), on each candidate node. Only the backend that
    owns ``request.vendor`` is called.
    Args:
        request: the container's request for this vendor.
        node: the node (name, devices, link scores).
        usage: the node's devices of ``request.vendor`` with current usage, index order.
        pod: the pod (for type/UUID filter and NUMA annotations).
        policy: the device policy in force for this pod.
        allocated: what the pod's earlier containers of the same kind (init containers
            for an init container, app containers for an app one) were given of this
            vendor on this node, one entry per container (HAMi's ``allocated`` argument
            of ``Fit``: Moore Threads and whole MetaX GPUs keep a pod on one device).
    Returns: ``FitResult`` with ``request.count`` distinct devices, or empty devices with
        a reason for every rejected device (never raises for "does not fit").

    The scheduler relies on two properties (the conformance kit checks both): the answer
    depends on the pod only through its annotations and ``allocated`` (it is reused for another pod of the
    same requests, annotations and policy while the node's usage is unchanged), and a
    device that is unhealthy, cordoned, at its split count or short of the request's
    memory is never placed on (such nodes are rejected without calling this hook).
    A backend whose ``BackendInfo.fit_by_node_class`` is True also promises that the
    node's name and its devices' UUIDs are opaque labels here (and in
    ``hami_fit_nodes`` and ``hami_score``): a consistently renamed node gets the same
    answer renamed, so nodes identical but for those labels are fitted once
    (``hami_core.scheduling.nodeclass``; the kit checks it).
    """


@_hookspec
def hami_fit_nodes(
    request: DeviceRequest,
    nodes: Sequence[tuple[NodeInfo, Sequence[DeviceUsage], Sequence[ContainerDevices]]],
    pod: Pod,
    policy: DevicePolicy,
    config: VendorConfig,
) -> Sequence[FitResult] | None:
    """Optional batch form of ``hami_fit``: one container's request on many nodes.

    Called by: the scheduler's fit driver, once per container request and vendor for
    every candidate node whose fit is not known already (a pod of a new shape, nodes
    whose usage changed), instead of one ``hami_fit`` per node. Only the backend that
    owns ``request.vendor`` is called. A backend without it gets ``hami_fit`` per node
    (the core's default), so implementing it is only ever a speed-up.
    Args:
        nodes: ``(node, usage, allocated)`` triples, each as ``hami_fit`` receives
            them for that node.
        request, pod, policy, config: as ``hami_fit``.
    Returns: one ``FitResult`` per node, in order, each exactly what ``hami_fit`` would
        answer for that node (the conformance kit checks this); None to decline (the
        core then calls ``hami_fit`` per node).
    """


@_hookspec
def hami_score(
    node: NodeInfo,
    usage: Sequence[DeviceUsage],
    devices: ContainerDevices,
    policy: NodePolicy,
    config: VendorConfig,
    pod: Pod,
) -> float | None:
    """Score placing ``devices`` on ``node`` under the node policy.

    Called by: the scheduler's prioritize step, once per feasible node and vendor.
    Args:
        usage: the node's devices of this vendor with usage before the placement.
        devices: the slices the pod would take on this node (all containers).
        pod: the pod (for per-pod scoring annotations, e.g. MetaX's
            ``metax-tech.com/sgpu-topology-aware``); ``{}`` when the caller has none.
        config: this backend's configuration section (e.g. MetaX ``sgpuTopologyAware``).
    Returns: 0..100, higher is better (binpack: fuller is better; spread: emptier).
        The core normalises the node total to 0..10 for kube-scheduler.
    """


@_hookspec
def hami_bind_annotations(
    pod: Pod, vendor: str, node: NodeInfo, devices: PodDevices, config: VendorConfig
) -> Mapping[str, str] | None:
    """Extra pod annotations this vendor's device plugin needs, written at bind.

    Called by: the scheduler's ``/bind``, once per vendor key of the placement, after
    the pod was re-fitted on ``node`` and in the same patch as the allocation
    annotations of PROTOCOL.md §3 (rolled back with them if the bind fails).
    Args:
        vendor: the vendor key of ``devices``.
        devices: that vendor's slices, one entry per container (init containers first).
    Returns: annotation key -> value (e.g. Ascend's ``huawei.com/Ascend910B3`` that
        HAMi's Ascend device plugin reads), or None when the vendor needs none.
    """


@_hookspec
def hami_allocate(
    pod: Pod,
    container: Container,
    devices: ContainerDevices,
    config: VendorConfig,
    node_devices: Sequence[DeviceInfo],
    state: NodeState,
) -> ContainerAllocation | None:
    """Build what kubelet adds to one container: env, mounts, device nodes, CDI names.

    Called by: the device plugin's ``Allocate``, once per container of the pod being
    allocated, with the slices the scheduler wrote for that container (possibly empty).
    Args:
        node_devices: this node's devices of the backend's vendors as the device plugin
            discovered them (index, model, NUMA), for runtimes that select devices by
            index rather than by UUID; empty where unknown (``hami simulate``).
        state: this backend's node-local records (``NodeState``: ``read(name)`` /
            ``write(name, data)``, JSON), for choices that must stay disjoint across the
            node's containers (AMD's CU ranges). The only place a backend keeps state
            between calls: it never opens host files itself. The device plugin keeps the
            records under ``--state-dir``; ``hami simulate`` keeps them in memory.
            Files a container mounts go in ``ContainerAllocation.files``.
    Returns: ``ContainerAllocation`` (PROTOCOL.md §7 for NVIDIA).
    """


@_hookspec
def hami_usage_files(config: VendorConfig) -> Mapping[str, int | tuple[int, ...]] | None:
    """Name the per-container usage files this backend's containers write.

    Called by: the node monitor (``hami monitor``), at start. In every container
    directory under the monitor's root (``<root>/<pod UID>_<container name>/``) it
    opens each named file with ``O_NOFOLLOW | O_NONBLOCK``, requires a regular file of
    exactly a stated size, reads it whole and hands the bytes to
    ``hami_parse_usage``; any other file, or a file of another size, is skipped and
    counted (tenants write these files: PROTOCOL.md §6-7).
    Returns: file name (no ``/``) -> exact size in bytes, or a tuple of the sizes
        accepted (NVIDIA: ``vgpu.cache``, 724992 for region version 2 and 593920 for
        version 1, shim/REGION.md); None when the backend writes no usage files.
    """


@_hookspec
def hami_parse_usage(file_name: str, data: bytes, config: VendorConfig) -> ContainerUsage | None:
    """Decode one usage file that ``hami_usage_files`` named.

    Called by: the node monitor, on every scrape, for each file it read; only the
    backend that named ``file_name`` is called.
    Args:
        file_name: the file name; data: its whole content (exactly the declared size).
    Returns: the container's devices and processes (``ContainerUsage``); an empty one
        when the file is being created; None when ``file_name`` is not this backend's.
    Raises: ``InvalidInputError`` when the content is not a file this backend can
        read (wrong magic, unknown version, inconsistent geometry): the monitor skips
        it with one log line and counts it.
    """


@_hookspec
def hami_host_devices(config: VendorConfig) -> list[HostDevice] | None:
    """Report this node's devices as the host driver sees them, right now.

    Called by: the node monitor, on every scrape (NVIDIA: NVML's memory info and
    utilization rates, ``nvmlDeviceGetMemoryInfo`` / ``nvmlDeviceGetUtilizationRates``).
    Returns: one ``HostDevice`` per device, index order (``[]`` without devices);
        None when the backend cannot reach its driver on this node.
    Raises: ``HamiError`` when the driver fails; the monitor logs it and serves the
        container metrics without host figures.
    """


@_hookspec
def hami_release(
    pods: Sequence[Pod], devices: Sequence[DeviceInfo], config: VendorConfig, state: NodeState
) -> Sequence[str] | None:
    """Free on this node what no live pod holds any more.

    Called by: the device plugin, once before it serves kubelet (so what a crashed
    plugin left behind is freed at start) and after every inventory publication, for
    the backend it serves (NVIDIA: destroys dynamic MIG instances no live pod's
    ``hami.io/vgpu-mig-allocations`` names).
    Args:
        pods: every pod bound to this node, as the API server lists them (finished ones
            included; the backend decides what still holds).
        devices: what ``hami_discover`` returned.
        state: the backend's node-local records (``hami_allocate``'s ``state``), to drop
            those of pods that are gone (``hami_core.backend.live_pod_uids``); no
            ``Allocate`` runs meanwhile.
    Returns: what was freed, one line each, for the log; None when the backend holds
        nothing outside the pods' containers.
    Raises: ``HamiError`` when the driver fails (the plugin logs it and tries again on
        the next round; a backend must then free nothing rather than guess).
    """
