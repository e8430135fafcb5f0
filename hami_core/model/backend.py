"""What a backend says about itself (``hami_backend_info``), and node-side results."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeAlias

import attrs

from .allocation import ContainerDevice
from .cores import PERCENT, CoresUnit
from .device import DeviceInfo, DeviceUsage
from .fitrules import FitRules
from .request import DeviceRequest

#: Per device, what a request charges against the cores quota, in the resource's unit.
RequestCores: TypeAlias = Callable[[DeviceRequest], int]
#: Per device, ``(MiB, cores in the resource's unit)`` a request charges at admission when
#: only the devices it may land on say so, given a call that lists the cluster's devices
#: of the vendor (read only when needed); None: its ``memory_mib`` and requested cores.
RequestCharge: TypeAlias = Callable[
    [DeviceRequest, Callable[[], Sequence[DeviceInfo]]], "tuple[int, int] | None"
]
#: What one allocated slice charges against the cores quota, in the resource's unit,
#: given the container spec (a v1.Container) that holds it.
SliceCores: TypeAlias = Callable[[ContainerDevice, Mapping[str, Any]], int]
#: A device type's resource names under its backend's checked section (a
#: ``hami_core.protocol.config.VendorConfig``, ``settings`` set by ``hami_check_config``).
ConfiguredResources: TypeAlias = Callable[[Any], "ResourceNames"]


@attrs.frozen(kw_only=True)
class ResourceNames:
    """Extended-resource names of one vendor key (PROTOCOL.md §1).

    Attributes:
        count: number of devices, e.g. ``nvidia.com/gpu``.
        memory: memory per device, e.g. ``nvidia.com/gpumem`` (unit: see ``memory_unit_mib``).
        memory_pct: memory per device in percent, or "" when the vendor has none.
        cores: compute per device in percent, or "" when the vendor has none.
        memory_unit_mib: MiB per unit of the memory resource (256 for Cambricon).
        cores_alias: another accepted name of the cores resource (``nvidia.com/cores``).
    """

    count: str
    memory: str = ""
    memory_pct: str = ""
    cores: str = ""
    memory_unit_mib: int = 1
    cores_alias: str = ""

    def all(self) -> tuple[str, ...]:
        """Every non-empty resource name."""
        return tuple(n for n in (self.count, self.memory, self.memory_pct, self.cores) if n)


@attrs.frozen(kw_only=True)
class DeviceTypeInfo:
    """One vendor key a backend serves, with its resource names and annotation keys.

    Attributes:
        vendor: the vendor key used in device lists, e.g. ``NVIDIA``.
        resources: the extended-resource names.
        register_annotation: node inventory key, e.g. ``hami.io/node-nvidia-register``.
        handshake_annotation: node handshake key, e.g. ``hami.io/node-handshake``.
        to_allocate_annotation: pod key the device plugin consumes, e.g.
            ``hami.io/vgpu-devices-to-allocate``.
        allocated_annotation: pod key kept for accounting, e.g.
            ``hami.io/vgpu-devices-allocated``.
        link_score_annotation: node key of the link scores between this vendor's
            devices (PROTOCOL.md §2), e.g. ``hami.io/node-nvidia-score``; "" when the
            vendor publishes none. The device plugin writes it from ``hami_link_scores``
            and the scheduler reads it for topology-aware placement.
        mig_annotation: pod key of the MIG instances chosen at bind (HAMi 2.10
            ``hami.io/vgpu-mig-allocations``), owned by the scheduler and the device plugin
            like the device lists; "" for a vendor without MIG.
        fit_rules: the vendor's variations of the shared fit steps; the core scores a
            placement with them (``hami_core.backend.fit.node_score``) when the backend
            has no ``hami_score``.
        quota_request_cores / quota_slice_cores: for a vendor whose requests or device
            lists do not carry compute in the cores resource's own unit (AWS Neuron's
            core masks, AMD's compute units), what a request charges per device at
            admission and what an allocated slice charges, against the cores quota
            (PROTOCOL.md §8); None: ``cores_pct`` as carried.
        quota_request_charge: for a request whose size the devices decide (NVIDIA's
            ``nvidia.com/mig-<profile>``: the profile's memory and cores), what it charges
            per device at admission (``RequestCharge``), so the webhook's quota check
            charges what the placement will book; None: as carried.
        cores_unit: what the devices' and their slices' ``cores_pct`` count
            (``hami_core.model.cores``): percent of a device (the default), AMD's compute
            units, AWS Neuron's core masks, Moore Threads' sGPU cores, or nothing
            (count-only vendors). Every human-facing output writes compute with it.
        request_cores_unit: what the cores resource (a request's ``cores_pct`` through
            ``quota_request_cores``, and the cores quota) counts, when it differs from
            ``cores_unit`` (AMD: percent; AWS Neuron: NeuronCores); None: the same.
        memory_unit_option: the name of the backend's section option that multiplies the
            memory resource's unit (Hygon's ``memoryFactor``: ``hygon.com/dcumem: 800``
            with factor 2 books 1600 MiB), or "". ``BackendManager.device_types`` folds
            it into ``resources.memory_unit_mib``, so a quota on the resource is read in
            the pod's own units, as HAMi's ``fitResourceQuota`` reads it.
        configured_resources: for a backend of several device types whose section
            renames each type's resources (Ascend's ``vnpus.<model>.resourceName``,
            ``resourceMemoryName``, ``resourceCoreName``; HAMi's ``vnpus.configs[]``
            keys), the type's names under the checked section (``ConfiguredResources``);
            ``BackendManager.device_types`` puts its count, memory, memory-percent and
            cores names in force, so quotas, the webhook's checks and ``hami simulate``
            read the names pods request. None: the declared names (a backend of one
            type: the section's common ``resource...Name`` keys).
        other_resources: further resource names the backend reads beyond ``resources``,
            as ``fnmatch`` patterns (NVIDIA: ``nvidia.com/priority`` and the NVIDIA device
            plugin's ``nvidia.com/mig-*``), so that a name of the vendor's domain that
            none of these matches is told apart as unmanaged (a typo such as
            ``nvidia.com/gpumemory``).
        allocate_env: the environment variables the vendor's Allocate sets in a container
            (device selection read by its container runtime, limits read by its limiter),
            as ``fnmatch`` patterns (Ascend: ``ASCEND_VISIBLE_DEVICES``, ``NPU_MEM_QUOTA``,
            ...). A container's own ``env`` wins over the device plugin's in kubelet, so
            the webhook denies these in the ``env`` of a container that asks for managed
            devices, and ``envFrom`` whose prefix could form them (PROTOCOL.md §6-7);
            the conformance kit checks that what ``hami_allocate`` sets is declared.
        protected_paths: container paths where the device plugin mounts what the vendor's
            limiter relies on (its library, ``/etc/ld.so.preload``, its limits and shared
            files; NVIDIA: ``/usr/local/vgpu``). kubelet hands a runtime the device plugin's
            mounts before the pod's volumes and the runtime mounts paths of equal depth
            in that order (Kubernetes ``GenerateRunContainerOptions``; containerd's CRI
            sorts mounts stably by depth), so a volume at such a path would cover the
            device plugin's: the webhook denies ``volumeMounts`` / ``volumeDevices`` at or
            under one in a container that asks for managed devices.
        visible_devices_env: ``(variable, value)`` pairs: a variable the vendor's container
            runtime documents as read from any container's env to choose the devices it
            hands the container, and its value for none (NVIDIA's container toolkit:
            ``NVIDIA_VISIBLE_DEVICES`` / ``none``, honoured from unprivileged containers by
            default, ``accept-nvidia-visible-devices-envvar-when-unprivileged = true``; NVIDIA's
            CUDA images set it to ``all`` in the image config). In a pod the webhook
            mutates, every container that asks for none of the vendor's devices gets the
            value and is denied its own other value (PROTOCOL.md §6); a backend whose
            section has a boolean ``overwriteEnv`` option (HAMi's nvidia key) that is true
            has it done in every other pod too. A value of None: the runtime documents no
            value for none (Ascend Docker Runtime's ``ASCEND_VISIBLE_DEVICES``, Moore
            Threads' container toolkit's ``MTHREADS_VISIBLE_DEVICES``; unset hands none):
            the variable is only denied. Empty: the vendor's variables only filter devices
            already mounted (a library's, such as ``HIP_VISIBLE_DEVICES``).
    """

    vendor: str
    resources: ResourceNames
    register_annotation: str
    handshake_annotation: str
    to_allocate_annotation: str
    allocated_annotation: str
    link_score_annotation: str = ""
    mig_annotation: str = ""
    fit_rules: FitRules = attrs.field(factory=FitRules)
    quota_request_cores: RequestCores | None = None
    quota_slice_cores: SliceCores | None = None
    quota_request_charge: RequestCharge | None = None
    cores_unit: CoresUnit = PERCENT
    request_cores_unit: CoresUnit | None = None
    other_resources: tuple[str, ...] = ()
    memory_unit_option: str = ""
    configured_resources: ConfiguredResources | None = attrs.field(default=None, eq=False)
    allocate_env: tuple[str, ...] = ()
    protected_paths: tuple[str, ...] = ()
    visible_devices_env: tuple[tuple[str, str | None], ...] = ()

    @property
    def resource_cores_unit(self) -> CoresUnit:
        """The unit of the cores resource and of requests (see ``request_cores_unit``)."""
        return self.request_cores_unit or self.cores_unit

    def cores_capacity(self, usage: DeviceUsage) -> int:
        """A device's compute as a person reads it, in ``cores_unit``: for percent, what
        fit reads (``fit_rules.cores_capacity``: an Ascend chip registered by HAMi's
        device plugin with its AI Core count as ``devcore`` is 100 %), else the
        device's ``cores_pct`` as carried."""
        if self.cores_unit.is_percent:
            fit = self.fit_rules.cores_capacity(usage)
            if fit is not None:
                return fit
        return usage.device.cores_pct

    def requested_cores(self, request: DeviceRequest) -> int:
        """Per device, the compute ``request`` asks, in ``resource_cores_unit``
        (``quota_request_cores`` when the vendor has one, else ``cores_pct``)."""
        convert = self.quota_request_cores
        return request.cores_pct if convert is None else max(0, convert(request))


@attrs.frozen(kw_only=True)
class DevicePluginFlags:
    """HAMi's device-plugin flags as ``hami device-plugin`` was given them (HAMi's chart
    passes them to every vendor's plugin); None: not given. A backend that reads them
    names them in ``BackendInfo.device_plugin_flags`` and applies them in
    ``hami_device_plugin_flags``.

    Attributes:
        mig_strategy: ``--mig-strategy`` (``none``, ``single``, ``mixed``).
        disable_core_limit: ``--disable-core-limit`` (True: switch the compute limit off).
    """

    mig_strategy: str | None = None
    disable_core_limit: bool | None = None

    def given(self) -> tuple[str, ...]:
        """The flags given with a value that would change something (``--mig-strategy``
        other than ``none``, ``--disable-core-limit=true``): what a backend that does not
        read them ignores with a warning."""
        out = []
        if self.mig_strategy not in (None, "none"):
            out.append("--mig-strategy")
        if self.disable_core_limit is True:
            out.append("--disable-core-limit")
        return tuple(out)


@attrs.frozen(kw_only=True)
class BackendInfo:
    """The answer of ``hami_backend_info``.

    Attributes:
        name: the backend's name; the manager checks it equals the entry-point name.
        device_types: the vendor keys this backend serves (at least one).
        description: one line for ``hami backends``.
        option_defaults: backend-specific configuration keys and their defaults, beyond
            the common per-vendor keys; any other key in the backend's config section is
            an error.
        fit_by_node_class: True declares that ``hami_fit``, ``hami_fit_nodes`` and
            ``hami_score`` treat a node's name and its devices' UUIDs as opaque labels:
            they compare and order them but never read into them (no per-node setting
            looked up by name, no UUID parsed), so two nodes that differ only in those
            labels, consistently renamed in the same sort order, get the same answer
            relabelled. The scheduler then fits one node of each class of such nodes
            for a new pod shape and relabels the answer for the others
            (``hami_core.scheduling.nodeclass``); the conformance kit checks the
            property. False (the default): every node is fitted on its own.
        vendor_device_plugin: what runs this vendor's nodes in place of hami's device
            plugin, as in HAMi: the vendor's device plugin (and where to get it) that
            publishes the inventory the scheduler reads and serves kubelet's Allocate.
            "" (the default): hami's device plugin runs them (the backend implements
            ``hami_discover``). Non-empty on a backend that also implements
            ``hami_discover``: the vendor's plugin is the default node side and hami's is
            the alternative (never both on one node: both would register the same
            resources with kubelet). The chart deploys hami's device plugin by this
            (``charts/hami/backends.yaml``) and prints it for the user to install.
        device_plugin_flags: the flags of ``DevicePluginFlags`` this backend reads
            (``"--mig-strategy"``, ``"--disable-core-limit"``), applied by its
            ``hami_device_plugin_flags``; the device plugin logs any other given as
            ignored. Empty (the default): it reads none.
    """

    name: str
    device_types: tuple[DeviceTypeInfo, ...] = attrs.field(validator=attrs.validators.min_len(1))
    description: str = ""
    option_defaults: Mapping[str, Any] = attrs.field(factory=dict)
    fit_by_node_class: bool = False
    vendor_device_plugin: str = ""
    device_plugin_flags: tuple[str, ...] = ()

    @property
    def vendors(self) -> tuple[str, ...]:
        """The vendor keys served."""
        return tuple(t.vendor for t in self.device_types)


@attrs.frozen(kw_only=True)
class Mount:
    """A host path mounted into a container (kubelet ``Mount``)."""

    container_path: str
    host_path: str
    read_only: bool = True


@attrs.frozen(kw_only=True)
class DeviceNode:
    """A device node exposed to a container (kubelet ``DeviceSpec``)."""

    container_path: str
    host_path: str
    permissions: str = "rw"


@attrs.frozen(kw_only=True)
class ContainerAllocation:
    """The answer of ``hami_allocate``: what kubelet adds to one container.

    Attributes:
        envs: environment variables (PROTOCOL.md §7).
        mounts: host paths to mount.
        device_nodes: device nodes to expose.
        cdi_devices: fully-qualified CDI device names, in CDI mode.
        annotations: container annotations for the runtime.
        files: host path -> content of files the device plugin writes before it
            answers (each one reaches the container through a read-only mount), e.g.
            the shim's limits file, which a container's own env cannot override.
        pod_annotations: pod annotations the device plugin writes with its progress
            (e.g. the runtime identity of NVIDIA MIG instances it created); only keys the
            backend's ``DeviceTypeInfo`` owns (``mig_annotation``) are written.
        shared_files: host path -> size in bytes of a file the container writes (e.g.
            the shim's shared region): the device plugin creates it before it answers,
            zero-filled (sparse) and mode 0666, in a directory of its own (0755), and
            keeps one that is already there; a writable mount of that path mounts the
            file alone. A container's writable host paths should be such files, never
            directories: a writable host directory lets a tenant fill the node's disk
            (issue 24 item 16); the monitor truncates a file grown past its size.
    """

    envs: Mapping[str, str] = attrs.field(factory=dict)
    mounts: tuple[Mount, ...] = ()
    device_nodes: tuple[DeviceNode, ...] = ()
    cdi_devices: tuple[str, ...] = ()
    annotations: Mapping[str, str] = attrs.field(factory=dict)
    files: Mapping[str, str] = attrs.field(factory=dict)
    pod_annotations: Mapping[str, str] = attrs.field(factory=dict)
    shared_files: Mapping[str, int] = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class MutateResult:
    """The answer of ``hami_mutate`` for one container: what its spec should state.

    The webhook writes it (PROTOCOL.md §6); a backend says what, not how.

    Attributes:
        resources: resource name -> quantity that both ``limits`` and ``requests``
            must state (the defaulted request as the scheduler reads it). A quantity the
            container already states for that name and that means the same number
            (``"5k"`` for 5000) is kept as written.
        env: environment variables added to the container when it does not set them.
        runtime_class_name: set as the pod's ``runtimeClassName`` when it names none.
        patch: RFC 6902 operations on the whole pod for what the fields above cannot
            say (e.g. a container ``lifecycle`` hook), applied after them.
        denial: when set, the pod is denied with this message (naming the container,
            the resource and the value); everything else is then ignored.
    """

    resources: Mapping[str, int | str] = attrs.field(factory=dict)
    env: Mapping[str, str] = attrs.field(factory=dict)
    runtime_class_name: str = ""
    patch: tuple[Mapping[str, Any], ...] = ()
    denial: str | None = None
