"""What the planner reads: nodes, bound pods, pending pods, PodDisruptionBudgets, Jobs and
namespaces' labels, from a snapshot file (``kubectl get
nodes,pods,pdb,jobs,namespaces -A -o yaml``) or from the API server."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from hami_core.cluster.memory import MemoryCluster
from hami_core.errors import NotFoundError
from hami_core.plugin import BackendManager
from hami_core.protocol.pods import is_live
from hami_core.simulate.loader import display_path, load_cluster, read_documents


@attrs.frozen(kw_only=True)
class DefragInput:
    """The cluster as the planner reads it.

    Attributes:
        cluster: nodes and bound pods (a copy the planner may change).
        pending: live pods of our scheduler bound to no node, in the order read.
        budgets: PodDisruptionBudget objects.
        jobs: Job objects.
        namespace_labels: namespace -> its labels.
        warnings: what was skipped, one line each.
        refused: ``namespace/name`` -> why the snapshot's Pod was refused (one its API
            server could not have stored: ``simulate.loader``): in none of the above, so
            no decision reads it; whoever is asked about it says so, with the reason.
    """

    cluster: MemoryCluster
    pending: tuple[dict[str, Any], ...] = ()
    budgets: tuple[dict[str, Any], ...] = ()
    jobs: tuple[dict[str, Any], ...] = ()
    namespace_labels: Mapping[str, Mapping[str, str]] = attrs.field(factory=dict)
    warnings: tuple[str, ...] = ()
    refused: Mapping[str, str] = attrs.field(factory=dict)


def _items(docs: Sequence[Any]) -> Iterator[dict[str, Any]]:
    """Every object of ``docs``, ``List`` items flattened (their kind from the list's);
    what is not an object is left to ``load_cluster``'s warnings."""
    for doc in docs:
        if not isinstance(doc, dict):
            continue
        kind = doc.get("kind")
        if isinstance(kind, str) and kind.endswith("List") and isinstance(doc.get("items"), list):
            for item in doc["items"]:
                if isinstance(item, dict):
                    yield {**item, "kind": item.get("kind") or kind.removesuffix("List")}
        else:
            yield doc


def is_pending_for(pod: Mapping[str, Any], scheduler_name: str) -> bool:
    """A live pod of ``scheduler_name`` bound to no node."""
    spec = pod.get("spec") or {}
    return (
        is_live(pod)
        and not spec.get("nodeName")
        and spec.get("schedulerName") == scheduler_name
        and (pod.get("status") or {}).get("phase", "Pending") == "Pending"
    )


def _labels(obj: Mapping[str, Any]) -> dict[str, str]:
    raw = (obj.get("metadata") or {}).get("labels") or {}
    return {str(k): str(v) for k, v in raw.items()} if isinstance(raw, Mapping) else {}


def from_file(path: str | Path, manager: BackendManager) -> DefragInput:
    """Read a snapshot file: its nodes, bound and pending pods and namespaces as ``hami
    simulate`` reads them (``simulate.loader.load_cluster``: a Pod or Namespace its API
    server could not have stored is left out, a refused Pod named in ``refused``), plus
    its budgets and Jobs.

    Raises:
        InvalidInputError: the file is unreadable or holds no nodes (the message names it).
    """
    loaded = load_cluster(path, manager)
    scheduler = manager.config.scheduler_name
    pending = [p for p in loaded.unbound_pods if is_pending_for(p, scheduler)]
    budgets, jobs = [], []
    for obj in _items(read_documents(Path(path))):
        kind = obj.get("kind")
        if kind == "PodDisruptionBudget":
            budgets.append(obj)
        elif kind == "Job":
            jobs.append(obj)
    labels = {str(ns["metadata"]["name"]): _labels(ns) for ns in loaded.namespaces}
    warnings = [
        w
        for w in loaded.warnings
        if "PodDisruptionBudget" not in w and "kind Job" not in w  # read here
    ]
    if not pending:
        warnings.append(f"{display_path(Path(path))}: no pending pods of {scheduler}")
    return DefragInput(
        cluster=loaded.to_memory(),
        pending=tuple(pending),
        budgets=tuple(budgets),
        jobs=tuple(jobs),
        namespace_labels=labels,
        warnings=tuple(warnings),
        refused=dict(loaded.refused_pods),
    )


@attrs.frozen(kw_only=True)
class Listing:
    """Nodes, pods and ResourceQuotas as one listing of the API server finds them
    (``list_cluster``).

    Attributes:
        cluster: the nodes, the live pods bound to a node, the quotas.
        pending: live pods of the scheduler bound to no node, in the order listed.
        quota_namespaces: namespaces holding a ResourceQuota.
    """

    cluster: MemoryCluster
    pending: tuple[dict[str, Any], ...]
    quota_namespaces: frozenset[str]


def list_cluster(core: Any, scheduler_name: str) -> Listing:
    """List nodes, pods and ResourceQuotas once through ``core`` (a
    ``kubernetes.client.CoreV1Api``): three ``list`` calls, nothing else read (the web
    view's RBAC allows no more; ``from_api`` lists the rest itself).

    Raises:
        HamiError: the API server cannot be reached or refuses (the message says which).
    """
    from hami_core.cluster.kube import call

    cluster = MemoryCluster()
    for node in call("list nodes", core.list_node).get("items") or []:
        cluster.add_node(node)
    pending = []
    for pod in call("list pods", core.list_pod_for_all_namespaces).get("items") or []:
        if is_pending_for(pod, scheduler_name):
            pending.append(pod)
        elif is_live(pod) and (pod.get("spec") or {}).get("nodeName"):
            cluster.add_pod(pod)
    namespaces = set()
    quotas = call("list resourcequotas", core.list_resource_quota_for_all_namespaces)
    for quota in quotas.get("items") or []:
        cluster.add_quota(quota)
        namespaces.add(str((quota.get("metadata") or {}).get("namespace") or ""))
    return Listing(cluster=cluster, pending=tuple(pending), quota_namespaces=frozenset(namespaces))


def from_api(
    kubeconfig: str | None, manager: BackendManager, *, api_client: Any = None
) -> DefragInput:
    """List nodes, pods and quotas (``list_cluster``), PodDisruptionBudgets
    (``policy/v1``, else ``v1beta1`` as Kubernetes 1.20 serves), Jobs and namespaces
    once, through ``api_client`` (None: one made from ``kubeconfig``).

    Raises:
        HamiError: the API server cannot be reached or refuses (the message says which).
    """
    from kubernetes import client as k8s

    from hami_core.cluster.kube import call, make_api_client

    api = api_client if api_client is not None else make_api_client(kubeconfig)
    core = k8s.CoreV1Api(api)
    listed = list_cluster(core, manager.config.scheduler_name)
    labels = {
        str(ns["metadata"]["name"]): _labels(ns)
        for ns in call("list namespaces", core.list_namespace).get("items") or []
    }
    custom = k8s.CustomObjectsApi(api)  # PDBs as plain JSON, whichever version is served
    try:
        budgets = call(
            "list poddisruptionbudgets",
            custom.list_cluster_custom_object,
            "policy",
            "v1",
            "poddisruptionbudgets",
        ).get("items")
    except NotFoundError:  # Kubernetes before 1.21 serves policy/v1beta1 only
        budgets = call(
            "list poddisruptionbudgets",
            custom.list_cluster_custom_object,
            "policy",
            "v1beta1",
            "poddisruptionbudgets",
        ).get("items")
    jobs = call("list jobs", k8s.BatchV1Api(api).list_job_for_all_namespaces).get("items")
    return DefragInput(
        cluster=listed.cluster,
        pending=listed.pending,
        budgets=tuple(budgets or ()),
        jobs=tuple(jobs or ()),
        namespace_labels=labels,
    )
