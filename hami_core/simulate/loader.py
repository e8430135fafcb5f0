"""Reading what ``hami simulate`` runs: a cluster and the workloads to place on it.

A **cluster file** has one of two forms, told apart automatically:

1. *Simple*: one YAML mapping with a ``nodes`` list (and no ``kind``)::

       nodes:
       - name: gpu-a100-1
         labels: {zone: a}                 # optional, copied onto the Node (which also
                                           # gets kubernetes.io/hostname: <name>)
         annotations: {}                   # optional, e.g. hami.io/device-cordon
         gpus:                             # groups of identical devices, in index order
         - model: NVIDIA A100-SXM4-80GB
           memoryMiB: 81920                # per device, before the config's memory scaling
           count: 2                        # how many such devices (default 1)
           numa: 0                         # default 0
           splitCount: 10                  # default: the config's deviceSplitCount
           cores: 100                      # percent, default 100 (before core scaling)
           uuid: GPU-a100                  # optional prefix: GPU-a100-<index>
           healthy: true                   # default true
           vendor: NVIDIA                  # default NVIDIA
           mode: hami-core                 # hami-core | mig | mps
           # mode mig: the GPU's MIG profiles, in the inventory's migProfiles shape
           # (PROTOCOL.md §2): [{name, memoryMB, core, sliceCount, placements:
           # [{start, size}]}]; memoryMiB is then the physical memory (no scaling)
           migStrategy: single             # mode mig: as a device plugin with the node's
           # migstrategy: single publishes it: each placement of its one profile is an
           # existing instance, a device of its own (uuid MIG-<prefix>-<index>-<start>)
         links:                            # optional link scores (topology-aware policy)
         - {gpus: [0, 1], score: 200}      # device indexes; 100 per NVLink (PROTOCOL.md §2)
       quotas:                             # optional, per namespace
       - {namespace: team-a, name: gpu-quota, hard: {limits.nvidia.com/gpumem: "24000"}}

   Each node becomes a ``Node`` carrying its vendor's inventory annotation
   (``hami.io/node-nvidia-register`` for NVIDIA) with deterministic UUIDs
   ``GPU-<node>-<index>``, exactly what the device plugin would publish.

2. *Snapshot*: Kubernetes objects, as ``kubectl get nodes,pods,resourcequotas -A -o
   yaml`` prints them (a ``v1 List``, ``*List`` kinds or plain documents). Nodes are kept
   as they are (their HAMi inventory annotations are the devices); live pods that carry
   a device allocation (``hami.io/vgpu-devices-allocated`` and the like) are kept with
   their UID and count as existing usage (a bound one whose allocation cannot be read
   too, warned: it holds the devices it names whole, PROTOCOL.md §6, as in the
   scheduler's state); ``ResourceQuota`` objects are kept, and
   ``Namespace`` objects (``kubectl get nodes,pods,resourcequotas,namespaces``) for
   their labels.

**Workloads** are files or directories (searched recursively for ``*.yaml``, ``*.yml``
and ``*.json``, in sorted order), each holding one or more documents: ``Pod``,
``Deployment``, ``StatefulSet``, ``ReplicaSet`` (``spec.replicas`` pods) and ``Job``
(``spec.parallelism`` pods), expanded into pods named ``<name>-<i>`` from the pod
template; ``List`` items are read in order; ``ResourceQuota`` objects join the cluster;
other kinds are skipped with a warning.

Errors: a file that cannot be read or parsed (YAML/JSON syntax), and the simple form's
bad fields, raise ``InvalidInputError`` with a one-line message naming the file (and the
document or key); nothing here raises anything else for bad input. A malformed *object*
never stops the run, as a real API server refuses only that object: a workload the API
server would refuse becomes a ``WorkloadPod`` with ``rejected`` set (its message, see
``apiserver``), reported denied; a snapshot object it could not have stored, and a
document that is not an object, is left out with a warning.
"""

from __future__ import annotations

import copy
import datetime as dt
import hashlib
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import attrs
import yaml

from hami_core.cluster.memory import MemoryCluster
from hami_core.errors import AnnotationError, InvalidInputError
from hami_core.facts.nodes import read_node
from hami_core.facts.usage import pod_allocation
from hami_core.model import DEVICE_MODES, DeviceInfo, MigProfile
from hami_core.plugin import BackendManager
from hami_core.protocol import documents
from hami_core.protocol.annotations import VGPU_NODE
from hami_core.protocol.config import MAX_SPLIT_COUNT
from hami_core.protocol.documents import shown as _shown
from hami_core.protocol.inventory import decode_mig_profiles, encode_inventory
from hami_core.protocol.pods import is_live
from hami_core.protocol.quantity import INT32_MAX
from hami_core.protocol.topology import encode_link_scores

from . import apiserver

#: Most pods one run places: Kubernetes' limit for one cluster ("Considerations for
#: large clusters", kubernetes.io: no more than 150,000 pods). A replica count past it
#: is a typo, and expanding it would only exhaust memory.
MAX_PODS: Final = 150_000
#: Most devices of one ``gpus`` group of the simple form (a group is one node's
#: identical devices; no server holds this many).
MAX_DEVICES_PER_GROUP: Final = 1024

#: Kinds expanded into pods, and where their pod count lives in ``spec``.
REPLICATED_KINDS: Mapping[str, str] = {
    "Deployment": "replicas",
    "StatefulSet": "replicas",
    "ReplicaSet": "replicas",
    "Job": "parallelism",
}
WORKLOAD_SUFFIXES = (".yaml", ".yml", ".json")
SIMPLE = "simple"
#: The well-known label kubelet sets on its Node (kubernetes.io "Well-Known Labels,
#: Annotations and Taints": ``kubernetes.io/hostname``); the simple form sets it to the
#: node's name.
HOSTNAME_LABEL: Final = "kubernetes.io/hostname"
SNAPSHOT = "snapshot"

_NODE_KEYS = frozenset({"name", "labels", "annotations", "gpus", "links"})
_GPU_KEYS = frozenset(
    {"model", "memoryMiB", "count", "numa", "splitCount", "cores", "uuid", "healthy", "vendor"}
    | {"mode", "migProfiles", "migStrategy"}
)
_QUOTA_KEYS = frozenset({"name", "namespace", "hard"})
_SERVER_FIELDS = ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation")


@attrs.frozen(kw_only=True)
class LoadedCluster:
    """A cluster read from a file, ready to become a ``MemoryCluster``.

    Attributes:
        source: the file, as shown to the user.
        form: ``"simple"`` or ``"snapshot"``.
        nodes: Node objects (JSON form), sorted by name.
        pods: existing pods holding devices (snapshot form only), in file order.
        bound_pods: other live pods bound to a node (snapshot form only): they hold no
            device but count for kube-scheduler's CPU, memory and pod-count checks.
        quotas: ResourceQuota objects.
        namespaces: Namespace objects (snapshot form only): their labels are what a
            pod affinity term's ``namespaceSelector`` reads.
        ignored_pods: snapshot pods left out (finished, or bound to no node).
        warnings: one line per thing that was skipped.
        priority_classes: PriorityClass objects (snapshot form only).
        unbound_pods: live pods bound to no node (snapshot form only; pending ones among
            them), in file order; a refused one is not among them.
        refused_pods: ``namespace/name`` -> why its API server could not have stored
            that Pod (snapshot form only, ``snapshot_problem``): left out of everything
            above; a reader must say so where the pod is asked for, never read the
            file's object instead. A Pod without a readable name is only warned of.
    """

    source: str
    form: str
    nodes: tuple[dict[str, Any], ...]
    pods: tuple[dict[str, Any], ...] = ()
    bound_pods: tuple[dict[str, Any], ...] = ()
    quotas: tuple[dict[str, Any], ...] = ()
    namespaces: tuple[dict[str, Any], ...] = ()
    ignored_pods: int = 0
    warnings: tuple[str, ...] = ()
    priority_classes: tuple[dict[str, Any], ...] = ()
    unbound_pods: tuple[dict[str, Any], ...] = ()
    refused_pods: Mapping[str, str] = attrs.field(factory=dict)

    def to_memory(self) -> MemoryCluster:
        """A fresh ``MemoryCluster`` holding the nodes, existing pods, quotas and
        namespaces' labels."""
        cluster = MemoryCluster()
        for ns in self.namespaces:
            meta = ns.get("metadata") or {}
            cluster.label_namespace(str(meta.get("name", "")), meta.get("labels") or {})
        for node in self.nodes:
            cluster.add_node(node)
        for pod in (*self.pods, *self.bound_pods):
            cluster.add_pod(pod)
        for quota in self.quotas:
            cluster.add_quota(quota)
        return cluster


@attrs.frozen(kw_only=True)
class WorkloadPod:
    """One pod to submit, as it would be created from its manifest.

    Attributes:
        pod: the Pod object (JSON form, no ``status``, no server-set metadata); for a
            rejected object, a placeholder with its name and namespace.
        source: where it came from, e.g. ``workloads/web.yaml: Deployment web``.
        rejected: kube-apiserver's refusal of the object (``Pod "p" is invalid: ...``),
            or "": the run reports it denied and goes on.
    """

    pod: dict[str, Any]
    source: str
    rejected: str = ""

    @property
    def namespace(self) -> str:
        """The pod's namespace (``default`` when unset)."""
        return str(self.pod["metadata"].get("namespace") or "default")

    @property
    def name(self) -> str:
        """The pod's name."""
        return str(self.pod["metadata"]["name"])

    @property
    def key(self) -> str:
        """``namespace/name``."""
        return f"{self.namespace}/{self.name}"


@attrs.frozen(kw_only=True)
class Workloads:
    """Everything read from the workload paths.

    Attributes:
        pods: the pods to submit, in file order (paths in the order given, directory
            entries sorted, documents in file order, replicas by index).
        quotas: ResourceQuota objects found among the workloads (added to the cluster
            before any pod is submitted).
        sources: the files read, as shown to the user.
        warnings: one line per skipped object.
        priority_classes: PriorityClass objects found among the workloads (what
            kube-apiserver's Priority admission reads, ``priority``).
    """

    pods: tuple[WorkloadPod, ...]
    quotas: tuple[dict[str, Any], ...] = ()
    sources: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    priority_classes: tuple[dict[str, Any], ...] = ()


# -- files ---------------------------------------------------------------------------


def _yaml_loader() -> type[yaml.SafeLoader]:
    """A safe loader that keeps timestamps as strings (as the API server serves them)."""
    base: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class _Loader(base):  # type: ignore[misc]
        pass

    _Loader.yaml_implicit_resolvers = {
        key: [r for r in resolvers if r[0] != "tag:yaml.org,2002:timestamp"]
        for key, resolvers in base.yaml_implicit_resolvers.items()
    }
    return _Loader


_LOADER = _yaml_loader()


def display_path(path: Path) -> str:
    """``path`` relative to the working directory when it lies below it, else as given."""
    try:
        rel = os.path.relpath(path)
    except ValueError:  # another drive (Windows)
        return str(path)
    return str(path) if rel.startswith("..") else rel


def read_documents(path: Path) -> list[Any]:
    """The documents of a YAML (or JSON) file, empty documents dropped.

    Raises:
        InvalidInputError: unreadable file or malformed YAML/JSON; the message names
            the file, the line and the column.
    """
    try:
        text = documents.read_text(path, limit_bytes=documents.SNAPSHOT_LIMIT_BYTES)
        if path.suffix == ".json":
            return [documents.load_json(text)] if text.strip() else []
        docs = documents.load_yaml_all(text, _LOADER)
    except InvalidInputError as exc:
        raise InvalidInputError(f"{display_path(path)}: {exc}") from None
    return [d for d in docs if d is not None]


def _objects(
    docs: Iterable[Any], shown: str, warnings: list[str]
) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(where, object)`` for every Kubernetes object, ``List`` items flattened; a
    document or item that is not an object is skipped with a line in ``warnings`` (as
    ``kubectl apply`` refuses that one and goes on)."""
    for n, doc in enumerate(docs, start=1):
        where = f"{shown}: document {n}"
        if not isinstance(doc, dict):
            warnings.append(f"{where}: expected a Kubernetes object, got {_kind(doc)}; skipped")
            continue
        kind = doc.get("kind")
        if isinstance(kind, str) and (kind == "List" or kind.endswith("List")):
            items = doc.get("items") or []
            if not isinstance(items, list):
                warnings.append(
                    f"{where}: {documents.shown_key(kind)}.items must be a list; skipped"
                )
                continue
            for i, item in enumerate(items):
                if not isinstance(item, dict):
                    warnings.append(
                        f"{where}: item {i}: expected a Kubernetes object, got {_kind(item)}; "
                        "skipped"
                    )
                    continue
                item_kind = item.get("kind") or kind.removesuffix("List")
                yield f"{where} item {i}", {**item, "kind": item_kind}
        else:
            yield where, doc


def _kind(value: Any) -> str:
    return "a list" if isinstance(value, list) else f"{type(value).__name__} {_shown(value)}"


def _str_map(value: Any, where: str, what: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidInputError(f"{where}: {what} must be a mapping")
    for k, v in value.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise InvalidInputError(
                f"{where}: {what} values must be strings (quote them): "
                f"{documents.shown_key(k)}: {_shown(v)}"
            )
    return dict(value)


def _metadata(obj: Mapping[str, Any], where: str) -> dict[str, Any]:
    meta = obj.get("metadata")
    if meta is None:
        meta = {}
    if not isinstance(meta, dict):
        raise InvalidInputError(f"{where}: metadata must be a mapping")
    for key in ("labels", "annotations"):
        _str_map(meta.get(key), where, f"metadata.{key}")
    return meta


def _name_of(obj: Mapping[str, Any], where: str) -> str:
    meta = _metadata(obj, where)
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        kind = documents.shown_key(obj.get("kind", "object"))
        raise InvalidInputError(f"{where}: {kind} without metadata.name")
    return name


# -- cluster -------------------------------------------------------------------------


def load_cluster(
    path: str | Path, manager: BackendManager, *, skip_unserved: bool = False
) -> LoadedCluster:
    """Read a cluster file, simple or snapshot form (detected from its content).

    Args:
        path: the file.
        manager: the installed backends and configuration; the simple form uses them
            for the inventory annotation key, the default split count and the memory
            and core scaling of each vendor.
        skip_unserved: leave out (with a warning) the simple form's GPUs of vendors no
            installed backend serves, instead of failing; for the bundled example,
            which must run with hami-core alone.

    Returns:
        The cluster; call ``to_memory()`` for a ``MemoryCluster``.

    Raises:
        InvalidInputError: unreadable file, malformed YAML, no nodes, or a bad field;
            the message names the file and the field.
    """
    p = Path(path)
    shown = display_path(p)
    if not p.exists():
        raise InvalidInputError(f"{shown}: no such file")
    if p.is_dir():
        raise InvalidInputError(f"{shown}: is a directory, not a cluster file")
    return parse_cluster(
        read_documents(p), source=shown, manager=manager, skip_unserved=skip_unserved
    )


def parse_cluster(
    docs: Sequence[Any], *, source: str, manager: BackendManager, skip_unserved: bool = False
) -> LoadedCluster:
    """A cluster from already-parsed documents: one mapping with ``nodes`` (and no
    ``kind``) is the simple form, anything else a snapshot of Kubernetes objects.

    Args:
        docs: the file's documents (``read_documents``).
        source: how to name the input in messages.
        manager, skip_unserved: as for ``load_cluster``.

    Raises:
        InvalidInputError: as for ``load_cluster``.
    """
    simple = len(docs) == 1 and isinstance(docs[0], dict) and "kind" not in docs[0]
    if simple and "nodes" in docs[0]:
        return _simple_cluster(docs[0], source, manager, skip_unserved=skip_unserved)
    return _snapshot_cluster(list(docs), source, manager)


def _simple_cluster(
    doc: Mapping[str, Any], shown: str, manager: BackendManager, *, skip_unserved: bool = False
) -> LoadedCluster:
    unknown = sorted(set(doc) - {"nodes", "quotas"})
    if unknown:
        raise InvalidInputError(
            f"{shown}: unknown key {_shown(unknown[0])} (expected nodes, quotas)"
        )
    nodes_in = doc.get("nodes")
    if not isinstance(nodes_in, list) or not nodes_in:
        raise InvalidInputError(f"{shown}: nodes must be a non-empty list")
    nodes: dict[str, dict[str, Any]] = {}
    uuids: dict[str, str] = {}
    unserved: dict[str, int] | None = {} if skip_unserved else None
    for i, entry in enumerate(nodes_in):
        where = f"{shown}: nodes[{i}]"
        node, node_uuids = _simple_node(entry, where, manager, unserved)
        name = node["metadata"]["name"]
        if name in nodes:
            raise InvalidInputError(f"{where}: node {_shown(name)} is listed twice")
        for uuid in node_uuids:
            if uuid in uuids:
                raise InvalidInputError(
                    f"{where}: device uuid {_shown(uuid)} is also on node {_shown(uuids[uuid])}"
                )
            uuids[uuid] = name
        nodes[name] = node
    quotas = tuple(
        _simple_quota(q, f"{shown}: quotas[{i}]") for i, q in enumerate(_list(doc, "quotas", shown))
    )
    warnings = tuple(
        f"{shown}: no installed backend serves vendor {_shown(vendor)}, so its {n} GPU(s) are "
        "left out ("
        + ("pip install hami-nvidia)" if vendor == "NVIDIA" else "install its backend)")
        for vendor, n in sorted((unserved or {}).items())
    )
    return LoadedCluster(
        source=shown,
        form=SIMPLE,
        nodes=tuple(nodes[n] for n in sorted(nodes)),
        quotas=quotas,
        warnings=warnings,
    )


def _list(doc: Mapping[str, Any], key: str, where: str) -> list[Any]:
    value = doc.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise InvalidInputError(f"{where}: {key} must be a list")
    return value


def _int_field(
    entry: Mapping[str, Any],
    key: str,
    where: str,
    *,
    default: int | None = None,
    minimum: int = 0,
    maximum: int = INT32_MAX,
) -> int:
    value = entry.get(key)
    if value is None:  # null is unset, as the API server reads it: the default applies
        value = default
    if value is None:
        raise InvalidInputError(f"{where}: {key} is required")
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise InvalidInputError(
            f"{where}: {key} must be an integer >= {minimum}, got {_shown(value)}"
        )
    if value > maximum:
        raise InvalidInputError(f"{where}: {key} must be at most {maximum}, got {_shown(value)}")
    return value


def _simple_node(
    entry: Any, where: str, manager: BackendManager, unserved: dict[str, int] | None = None
) -> tuple[dict[str, Any], list[str]]:
    if not isinstance(entry, dict):
        raise InvalidInputError(f"{where}: expected a mapping with name and gpus")
    unknown = sorted(set(entry) - _NODE_KEYS)
    if unknown:
        raise InvalidInputError(
            f"{where}: unknown key {_shown(unknown[0])} (expected {', '.join(sorted(_NODE_KEYS))})"
        )
    name = entry.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidInputError(f"{where}: name is required")
    where = f"{where} ({name})"
    by_vendor: dict[str, list[DeviceInfo]] = {}
    index = 0
    left_out = False
    for g, group in enumerate(_list(entry, "gpus", where)):
        gwhere = f"{where}: gpus[{g}]"
        vendor = group.get("vendor", "NVIDIA") if isinstance(group, dict) else None
        if unserved is not None and isinstance(vendor, str) and vendor not in manager.vendors:
            count = group.get("count", 1)
            unserved[vendor] = unserved.get(vendor, 0) + (count if isinstance(count, int) else 1)
            left_out = True
            continue
        for device in _gpu_group(group, gwhere, node=name, first_index=index, manager=manager):
            by_vendor.setdefault(device.vendor, []).append(device)
            index = device.index + 1  # the instances of one GPU share its index
    annotations = _str_map(entry.get("annotations"), where, "annotations")
    allocatable: dict[str, str] = {}
    by_index: dict[int, str] = {}
    for vendor, devices in by_vendor.items():
        dtype = manager.device_type(vendor)
        annotations[dtype.register_annotation] = encode_inventory(devices)
        allocatable[dtype.resources.count] = str(sum(d.split_count for d in devices))
        by_index.update({d.index: d.uuid for d in devices})
    # Links name device indexes; with GPUs left out they would point at nothing.
    links = {} if left_out else _links(_list(entry, "links", where), where, by_index)
    for vendor, devices in by_vendor.items():
        key = manager.device_type(vendor).link_score_annotation
        mine = {d.uuid for d in devices}
        vendor_links = {
            a: {b: v for b, v in row.items() if b in mine} for a, row in links.items() if a in mine
        }
        if key and any(vendor_links.values()):
            annotations[key] = encode_link_scores(vendor_links)
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            # kubelet labels every node with its hostname (the node's name unless
            # --hostname-override), which pods' nodeSelectors commonly name
            "labels": {HOSTNAME_LABEL: name, **_str_map(entry.get("labels"), where, "labels")},
            "annotations": annotations,
        },
        "status": {"allocatable": allocatable, "capacity": dict(allocatable)},
    }
    return node, [d.uuid for ds in by_vendor.values() for d in ds]


def _gpu_group(
    group: Any, where: str, *, node: str, first_index: int, manager: BackendManager
) -> list[DeviceInfo]:
    if not isinstance(group, dict):
        raise InvalidInputError(f"{where}: expected a mapping with model and memoryMiB")
    unknown = sorted(set(group) - _GPU_KEYS)
    if unknown:
        raise InvalidInputError(
            f"{where}: unknown key {_shown(unknown[0])} (expected {', '.join(sorted(_GPU_KEYS))})"
        )
    vendor = group.get("vendor", "NVIDIA")
    if not isinstance(vendor, str) or not vendor:
        raise InvalidInputError(f"{where}: vendor must be a vendor key such as NVIDIA")
    try:
        config = manager.vendor_config(manager.backend_of(vendor))
    except KeyError:
        served = ", ".join(manager.vendors) or "none"
        raise InvalidInputError(
            f"{where}: no installed backend serves vendor {_shown(vendor)} (installed: {served})"
        ) from None
    model = group.get("model")
    if not isinstance(model, str) or not model:
        raise InvalidInputError(f"{where}: model is required (e.g. NVIDIA A100-SXM4-80GB)")
    memory = _int_field(group, "memoryMiB", where, minimum=1)
    count = _int_field(group, "count", where, default=1, minimum=1, maximum=MAX_DEVICES_PER_GROUP)
    split = _int_field(
        group, "splitCount", where, default=config.split_count, minimum=1, maximum=MAX_SPLIT_COUNT
    )
    cores = _int_field(group, "cores", where, default=100)
    numa = _int_field(group, "numa", where, default=0)
    healthy = group.get("healthy", True)
    if not isinstance(healthy, bool):
        raise InvalidInputError(f"{where}: healthy must be true or false")
    mode = group.get("mode", "hami-core")
    if mode not in DEVICE_MODES:
        raise InvalidInputError(f"{where}: mode must be one of {', '.join(DEVICE_MODES)}")
    mig_profiles = _mig_profiles(group, where, mode)
    prefix = group.get("uuid", f"GPU-{node}")
    if not isinstance(prefix, str) or not prefix:
        raise InvalidInputError(f"{where}: uuid must be a non-empty prefix")
    strategy = group.get("migStrategy", "none")
    if strategy not in ("none", "mixed", "single"):
        raise InvalidInputError(f"{where}: migStrategy must be one of none, mixed, single")
    if strategy == "single" and mode != "mig":
        raise InvalidInputError(f"{where}: migStrategy single is only for mode mig")
    if strategy == "single":
        return _single_instances(
            mig_profiles, where, prefix=prefix, first_index=first_index, count=count,
            vendor=vendor, model=model, numa=numa, healthy=healthy,
        )  # fmt: skip
    return [
        DeviceInfo(
            uuid=f"{prefix}-{first_index + i}",
            vendor=vendor,
            model=model,
            index=first_index + i,
            split_count=split
            if not mig_profiles or "splitCount" in group
            else max(len(p.placements) for p in mig_profiles),
            memory_mib=memory if mig_profiles else int(memory * config.memory_scaling),
            cores_pct=100 if mig_profiles else int(cores * config.core_scaling),
            numa=numa,
            mode=mode,
            healthy=healthy,
            mig_profiles=mig_profiles,
        )
        for i in range(count)
    ]


def _single_instances(
    profiles: tuple[MigProfile, ...],
    where: str,
    *,
    prefix: str,
    first_index: int,
    count: int,
    **same: Any,
) -> list[DeviceInfo]:
    """The devices a device plugin under ``migstrategy: single`` publishes for ``count``
    GPUs cut into the instances ``profiles`` lists (one profile, each placement an
    instance; hami-nvidia ``migdevices.instance_devices``): one device per instance,
    one sharer, the instance's memory, all its cores."""
    if len(profiles) != 1:
        raise InvalidInputError(
            f"{where}: migStrategy single needs the instances of one profile (NVIDIA's "
            f"single strategy), got {', '.join(p.name for p in profiles) or 'none'}"
        )
    (profile,) = profiles
    return [
        DeviceInfo(
            uuid=f"MIG-{prefix}-{first_index + i}-{place.start}",
            index=first_index + i,
            split_count=1,
            memory_mib=profile.memory_mib,
            cores_pct=100,
            mode="mig",
            mig_profiles=(attrs.evolve(profile, cores_pct=100, placements=(place,)),),
            **same,
        )
        for i in range(count)
        for place in sorted(profile.placements, key=lambda x: x.start)
    ]


def _mig_profiles(group: Mapping[str, Any], where: str, mode: str) -> tuple[MigProfile, ...]:
    """A ``mode: mig`` group's ``migProfiles`` (the inventory's shape), decoded by the
    inventory codec; required for mig, refused for other modes."""
    raw = group.get("migProfiles")
    if mode != "mig":
        if raw is not None:
            raise InvalidInputError(f"{where}: migProfiles is only for mode mig")
        return ()
    if not raw:
        raise InvalidInputError(
            f"{where}: mode mig needs migProfiles (e.g. [{{name: 1g.10gb, memoryMB: 9856, "
            "core: 15, sliceCount: 1, placements: [{start: 0, size: 1}]}])"
        )
    try:
        return decode_mig_profiles(raw, where)
    except AnnotationError as exc:
        raise InvalidInputError(str(exc)) from None


def _links(
    entries: Sequence[Any], where: str, by_index: Mapping[int, str]
) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for i, link in enumerate(entries):
        lwhere = f"{where}: links[{i}]"
        pair = link.get("gpus") if isinstance(link, dict) else None
        if (
            not isinstance(pair, list)
            or len(pair) != 2
            or any(not isinstance(x, int) or x not in by_index for x in pair)
            or pair[0] == pair[1]
        ):
            raise InvalidInputError(f"{lwhere}: gpus must be two distinct device indexes")
        score = _int_field(link, "score", lwhere, default=100)
        a, b = by_index[pair[0]], by_index[pair[1]]
        out.setdefault(a, {})[b] = score
        out.setdefault(b, {})[a] = score
    return out


def _simple_quota(entry: Any, where: str) -> dict[str, Any]:
    if isinstance(entry, dict) and entry.get("kind") == "ResourceQuota":
        _name_of(entry, where)
        return dict(entry)
    if not isinstance(entry, dict):
        raise InvalidInputError(f"{where}: expected a mapping with namespace, name and hard")
    unknown = sorted(set(entry) - _QUOTA_KEYS)
    if unknown:
        raise InvalidInputError(
            f"{where}: unknown key {_shown(unknown[0])} (expected hard, name, namespace)"
        )
    hard = entry.get("hard")
    if not isinstance(hard, dict) or not hard:
        raise InvalidInputError(f"{where}: hard must be a mapping of resource to limit")
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {
            "name": str(entry.get("name") or "quota"),
            "namespace": str(entry.get("namespace") or "default"),
        },
        "spec": {"hard": {str(k): str(v) for k, v in hard.items()}},
    }


def _snapshot_cluster(docs: list[Any], shown: str, manager: BackendManager) -> LoadedCluster:
    nodes: dict[str, dict[str, Any]] = {}
    pods: list[dict[str, Any]] = []
    bound_pods: list[dict[str, Any]] = []
    quotas: list[dict[str, Any]] = []
    namespaces: list[dict[str, Any]] = []
    classes: list[dict[str, Any]] = []
    unbound: list[dict[str, Any]] = []
    refused: dict[str, str] = {}
    skipped: dict[str, int] = {}
    warnings: list[str] = []
    ignored = 0
    types = manager.device_types()
    for where, obj in _objects(docs, shown, warnings):
        kind = obj.get("kind") if isinstance(obj.get("kind"), str) else None
        if kind == "PriorityClass":
            classes.append(obj)
            continue
        if kind not in ("Node", "Pod", "ResourceQuota", "Namespace"):
            what = str(kind or "object without kind")
            skipped[what] = skipped.get(what, 0) + 1
            continue
        # An object its API server could not have stored (a hand edit, a truncated
        # file) is left out with a line saying why; the rest of the snapshot runs.
        obj = apiserver.without_nulls(obj)
        problem = snapshot_problem(obj, str(kind))
        if problem:
            key = _object_key(obj, str(kind))
            named = f" ({documents.shown_key(key)})" if key else ""
            warnings.append(f"{where}: {kind} skipped{named}: {problem}")
            if kind == "Pod":
                ignored += 1
                if key:
                    refused[key] = problem
            continue
        name = obj["metadata"]["name"]
        if kind == "Node":
            nodes[name] = obj
        elif kind == "Pod":
            meta = obj["metadata"]
            if is_live(obj) and not (obj.get("spec") or {}).get("nodeName"):
                unbound.append(obj)
            bound = (meta.get("annotations") or {}).get(VGPU_NODE) or (obj.get("spec") or {}).get(
                "nodeName"
            )
            try:
                holds = bool(pod_allocation(obj, types))
            except InvalidInputError as exc:
                if not (is_live(obj) and bound):
                    warnings.append(f"{where}: allocation of pod {name} ignored: {exc}")
                    ignored += 1
                    continue
                # As the scheduler's state does with a live cluster (PROTOCOL.md §6, fail
                # closed): kept, and ``usage.pod_holdings`` holds what it names whole.
                warnings.append(
                    f"{where}: allocation of pod {name} unreadable, the devices it names "
                    f"(or all of that vendor on its node) held whole: {exc}"
                )
                holds = True
            if holds and is_live(obj) and not bound:
                warnings.append(f"{where}: pod {name} holds devices but names no node; ignored")
            if holds and is_live(obj) and bound:
                pods.append(obj)
            elif is_live(obj) and (obj.get("spec") or {}).get("nodeName"):
                bound_pods.append(obj)
            else:
                ignored += 1
        elif kind == "ResourceQuota":
            quotas.append(obj)
        else:
            namespaces.append(obj)
    if not nodes:
        raise InvalidInputError(
            f"{shown}: no nodes: expected a simple cluster (a 'nodes' list) or a "
            "'kubectl get nodes,pods -A -o yaml' snapshot"
        )
    warnings.extend(
        f"{shown}: skipped {n} object(s) of kind {what}" for what, n in sorted(skipped.items())
    )
    warnings.extend(_node_problems(nodes, manager))
    return LoadedCluster(
        source=shown,
        form=SNAPSHOT,
        nodes=tuple(nodes[n] for n in sorted(nodes)),
        pods=tuple(pods),
        bound_pods=tuple(bound_pods),
        quotas=tuple(quotas),
        namespaces=tuple(namespaces),
        ignored_pods=ignored,
        warnings=tuple(warnings),
        priority_classes=tuple(classes),
        unbound_pods=tuple(unbound),
        refused_pods=refused,
    )


def _object_key(obj: Mapping[str, Any], kind: str) -> str:
    """A refused object's name as its readers ask for it (``namespace/name`` for a
    Pod, the name for a Node), or "" when it has none that is readable."""
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    if not isinstance(name, str) or not name:
        return ""
    if kind != "Pod":
        return name
    namespace = meta.get("namespace") if isinstance(meta, Mapping) else None
    return f"{namespace if isinstance(namespace, str) and namespace else 'default'}/{name}"


def _node_problems(nodes: Mapping[str, Mapping[str, Any]], manager: BackendManager) -> list[str]:
    """Warnings for nodes the scheduler would not use as given: an unreadable inventory or
    link-score annotation, or a device id that another node also claims."""
    types = manager.device_types()
    owner: dict[str, str] = {}
    out = []
    for name in sorted(nodes):
        info = read_node(
            nodes[name], types, now=dt.datetime.now(dt.UTC), reader=manager.node_devices
        )
        for vendor, reason in sorted(info.unregistered.items()):
            out.append(f"node {name}: {vendor} devices unusable: {reason}")
        for key, reason in sorted(info.ignored.items()):
            out.append(
                f"node {name}: link scores ignored ({key}; topology-aware falls back to "
                f"spread, the devices stay usable): {reason}"
            )
        for d in info.devices:
            if d.uuid in owner:
                out.append(f"node {name}: device {d.uuid} is also on node {owner[d.uuid]}")
            owner.setdefault(d.uuid, name)
    return out


# -- workloads -----------------------------------------------------------------------


def workload_files(paths: Sequence[str | Path]) -> list[Path]:
    """The files to read, in order: each path as given; a directory's ``*.yaml``,
    ``*.yml`` and ``*.json`` files recursively, sorted by relative path, hidden ones
    skipped.

    Raises:
        InvalidInputError: a path does not exist.
    """
    files: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            found = [
                f
                for f in p.rglob("*")
                if f.is_file()
                and f.suffix in WORKLOAD_SUFFIXES
                and not any(part.startswith(".") for part in f.relative_to(p).parts)
            ]
            files.extend(sorted(found, key=lambda f: f.relative_to(p).as_posix()))
        elif p.exists():  # a file, or a pipe: <(kubectl get pods -o yaml), /dev/stdin
            files.append(p)
        else:
            raise InvalidInputError(f"{display_path(p)}: no such file or directory")
    return files


def load_workloads(paths: Sequence[str | Path]) -> Workloads:
    """Read the pods to submit from files and directories.

    Args:
        paths: files or directories, in the order they are to run.

    Returns:
        The pods, in file order, with warnings for skipped objects.

    Raises:
        InvalidInputError: a path is missing or a file is malformed (names the file and
            the document).
    """
    pods: list[WorkloadPod] = []
    quotas: list[dict[str, Any]] = []
    classes: list[dict[str, Any]] = []
    warnings: list[str] = []
    files = workload_files(paths)
    for f in files:
        shown = display_path(f)
        for where, obj in _objects(read_documents(f), shown, warnings):
            kind = obj.get("kind") if isinstance(obj.get("kind"), str) else None
            if kind == "Pod":
                pods.append(_pod(obj, where, shown))
            elif kind in REPLICATED_KINDS:
                pods.extend(_expand(obj, where, shown, REPLICATED_KINDS[str(kind)]))
            elif kind == "ResourceQuota":
                problem = snapshot_problem(obj, "ResourceQuota")
                if problem:
                    warnings.append(f"{where}: ResourceQuota skipped: {problem}")
                else:
                    quotas.append(obj)
            elif kind == "PriorityClass":
                classes.append(obj)
            else:
                meta = obj.get("metadata")
                name = str(meta.get("name", "")) if isinstance(meta, dict) else ""
                what = f"{kind} {name}".strip() if kind else "an object without kind"
                warnings.append(f"{where}: skipped {what} (not a workload)")
            if len(pods) > MAX_PODS:
                raise InvalidInputError(
                    f"{where}: the workloads come to more than {MAX_PODS} pods, "
                    "Kubernetes' limit for one cluster"
                )
    if not files:
        warnings.append(f"no workload files in {', '.join(str(p) for p in paths)}")
    return Workloads(
        pods=tuple(pods),
        quotas=tuple(quotas),
        sources=tuple(display_path(f) for f in files),
        warnings=tuple(warnings),
        priority_classes=tuple(classes),
    )


def _generated_name(meta: Mapping[str, Any], where: str) -> str:
    """``metadata.name``, else ``generateName`` plus five characters, as the API server
    completes it (derived from ``where``: the same input gives the same name)."""
    name = meta.get("name")
    if isinstance(name, str) and name:
        return name
    prefix = meta.get("generateName")
    if isinstance(prefix, str) and prefix:
        digest = hashlib.sha256(where.encode()).hexdigest()
        return prefix + "".join(_NAME_SUFFIX[int(c, 16) % len(_NAME_SUFFIX)] for c in digest[:5])
    return ""


#: The characters the API server's name generator draws from (``utilrand.String``).
_NAME_SUFFIX = "bcdfghjklmnpqrstvwxz2456789"


def _rejected(obj: Mapping[str, Any], where: str, source: str, message: str) -> WorkloadPod:
    """An object the API server refuses: a placeholder pod carrying its name and the
    refusal, so the report lists it (denied by kube-apiserver) and the run goes on."""
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    name, ns = _generated_name(meta, where), meta.get("namespace")
    placeholder = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns if isinstance(ns, str) and ns else "default"},
        "spec": {},
    }
    return WorkloadPod(pod=placeholder, source=source, rejected=message)


def _pod(obj: Mapping[str, Any], where: str, shown: str) -> WorkloadPod:
    """A Pod as ``kubectl create`` would send it: no status, no server-set metadata;
    one the API server cannot decode is a rejected placeholder (its validation runs in
    ``Pipeline.submit``, after the mutating webhook, as the API server orders them)."""
    source = f"{shown}: Pod"
    problem = apiserver.decode_problem(obj, kind="Pod")
    if problem:
        return _rejected(obj, where, source, apiserver.undecodable_message("Pod", problem))
    pod = apiserver.without_nulls(copy.deepcopy(dict(obj)))
    pod.pop("status", None)
    pod["apiVersion"] = pod.get("apiVersion") or "v1"
    meta = pod.setdefault("metadata", {})
    for key in _SERVER_FIELDS:
        meta.pop(key, None)
    meta["namespace"] = str(meta.get("namespace") or "default")
    meta["name"] = _generated_name(meta, where)
    if not meta["name"]:
        errors = apiserver.validate_pod(pod)
        return _rejected(obj, where, source, apiserver.invalid_message("Pod", "", errors))
    return WorkloadPod(pod=pod, source=source)


def _expand(obj: Mapping[str, Any], where: str, shown: str, count_key: str) -> list[WorkloadPod]:
    """The pods a workload's controller creates (``<name>-<i>``), or one rejected
    placeholder when the API server refuses the workload itself (undecodable, or
    invalid: its template is validated when it is created).

    Raises:
        InvalidInputError: a replica count past ``MAX_PODS`` (a typo that would only
            exhaust memory).
    """
    kind = str(obj["kind"])
    meta = obj.get("metadata")
    name = str(meta.get("name") or "") if isinstance(meta, Mapping) else ""
    source = f"{shown}: {kind} {name}".rstrip()
    problem = apiserver.decode_problem(obj, kind=kind)
    count = obj["spec"].get(count_key) if not problem else None
    if (
        not problem
        and count is not None
        and (not isinstance(count, int) or isinstance(count, bool))
    ):
        problem = f"spec.{count_key} must be an integer"
    if problem:
        return [_rejected(obj, where, source, apiserver.undecodable_message(kind, problem))]
    spec = obj["spec"]
    count = 1 if count is None else count
    errors = apiserver.validate_template(obj)
    if count < 0:
        errors.append(
            f"spec.{count_key}: Invalid value: {count}: must be greater than or equal to 0"
        )
    if errors:
        return [_rejected(obj, where, source, apiserver.invalid_message(kind, name, errors))]
    if count > MAX_PODS:
        raise InvalidInputError(
            f"{where} ({kind} {name}): {count_key} must be at most {MAX_PODS}, got {count!r}"
        )
    completions = spec.get("completions")
    if kind == "Job" and isinstance(completions, int) and not isinstance(completions, bool):
        count = min(count, max(completions, 0))
    template = spec["template"]
    tmeta = template.get("metadata") or {}
    out = []
    for i in range(count):
        pod_meta: dict[str, Any] = {
            "name": f"{name}-{i}",
            "namespace": str(obj["metadata"].get("namespace") or "default"),
        }
        for key in ("labels", "annotations"):
            if tmeta.get(key):
                pod_meta[key] = dict(tmeta[key])
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": pod_meta,
            "spec": copy.deepcopy(template["spec"]),
        }
        out.append(WorkloadPod(pod=pod, source=source))
    return out


def snapshot_problem(obj: Mapping[str, Any], kind: str) -> str | None:
    """Why a snapshot's ``kind`` object could not have come from an API server (no
    name, a field of the wrong type), or None; the object is then left out."""
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        return "metadata must be a mapping"
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        return "no metadata.name"
    if kind == "Pod":
        status = obj.get("status")
        if status is not None and not isinstance(status, Mapping):
            return "status must be a mapping"
        return apiserver.decode_problem(obj, kind="Pod")
    if kind == "Node":
        return apiserver.node_problem(obj)
    if kind == "ResourceQuota":
        return apiserver.quota_problem(obj)
    return apiserver.decode_problem({"metadata": meta, "spec": {"containers": []}}, kind="Pod")


__all__ = [
    "SIMPLE",
    "SNAPSHOT",
    "LoadedCluster",
    "WorkloadPod",
    "Workloads",
    "display_path",
    "load_cluster",
    "load_workloads",
    "parse_cluster",
    "read_documents",
    "workload_files",
]
