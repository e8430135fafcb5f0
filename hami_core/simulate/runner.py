"""Running workloads through the whole pipeline on an embedded copy of a cluster.

``simulate()`` submits every pod, in order, to ``Pipeline.submit`` (webhook -> filter ->
prioritize -> bind -> allocate, the functions the servers use) and keeps, per pod, what
happened and what the pod asked for. ``report.py`` turns the result into text or JSON.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import attrs

import hami_core
from hami_core.errors import HamiError, InvalidInputError, NotFoundError
from hami_core.facts.policy import device_policy_option, node_policy_option
from hami_core.model import (
    DevicePolicy,
    DevicePolicyChain,
    DeviceUsage,
    NodeInfo,
    NodePolicy,
    PodRequest,
)
from hami_core.plugin import BackendManager
from hami_core.protocol.config import HamiConfig, load_config, with_overrides

from .loader import LoadedCluster, WorkloadPod, Workloads, load_cluster, load_workloads
from .pipeline import KUBE_APISERVER, Outcome, Pipeline
from .podtopology import not_modelled

log = logging.getLogger(__name__)


#: Above this many pods, progress is shown on stderr.
PROGRESS_THRESHOLD = 200


@attrs.frozen(kw_only=True)
class Observation:
    """The cluster as one pod saw it just before it was submitted (for ``--explain``).

    Attributes:
        nodes: node name -> its devices, every node, sorted by name.
        usage: node name -> uuid -> usage by the pods already running there.
    """

    nodes: Mapping[str, NodeInfo]
    usage: Mapping[str, Mapping[str, DeviceUsage]]


@attrs.frozen(kw_only=True)
class PodRun:
    """One submitted pod.

    Attributes:
        workload: the pod and where it came from.
        outcome: what the pipeline did with it.
        request: its device requests as admitted (after the webhook's defaults), one
            entry per container, init containers first; None when denied or unreadable.
        observed: the cluster it saw, when it was the pod to explain.
        not_modelled: what kube-scheduler would weigh for this pod and the run did not
            (``podtopology.not_modelled``), one line each.
    """

    workload: WorkloadPod
    outcome: Outcome
    request: PodRequest | None = None
    observed: Observation | None = None
    not_modelled: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        """``namespace/name``."""
        return self.workload.key


@attrs.frozen(kw_only=True)
class Simulation:
    """The result of a run.

    Attributes:
        cluster: the cluster as loaded (before any workload).
        workloads: what was read.
        runs: one entry per pod, in submission order.
        pipeline: the pipeline after the run (its cluster holds the final state).
        node_policy / device_policy: the defaults in force (override, else config);
            ``device_policy`` as written, a single policy or a chain (``mutex,spread``).
        warnings: lines about skipped input.
    """

    cluster: LoadedCluster
    workloads: Workloads
    runs: tuple[PodRun, ...]
    pipeline: Pipeline
    node_policy: NodePolicy
    device_policy: DevicePolicyChain
    node_policy_overridden: bool = False
    device_policy_overridden: bool = False
    warnings: tuple[str, ...] = ()

    @property
    def manager(self) -> BackendManager:
        """The backends and configuration used."""
        return self.pipeline.manager

    def find(self, pod: str) -> PodRun:
        """The run of ``namespace/name`` or of a name unique across namespaces.

        Raises:
            InvalidInputError: no such pod, or the bare name is in several namespaces.
        """
        return self.runs[find_pod(self.workloads.pods, pod)]


def find_pod(pods: Sequence[WorkloadPod], ref: str) -> int:
    """Position of the pod named ``ref`` (``namespace/name`` or a bare name) in ``pods``.

    Raises:
        InvalidInputError: not found (the message lists a few names), or ambiguous.
    """
    if "/" in ref:
        hits = [i for i, p in enumerate(pods) if p.key == ref]
    else:
        hits = [i for i, p in enumerate(pods) if p.name == ref]
    if len(hits) == 1:
        return hits[0]
    if not hits:
        names = ", ".join(p.key for p in pods[:8]) + (", ..." if len(pods) > 8 else "")
        raise InvalidInputError(f"no pod {ref!r} among the workloads ({names or 'none'})")
    if "/" not in ref and len({pods[i].namespace for i in hits}) > 1:
        options = ", ".join(pods[i].key for i in hits)
        raise InvalidInputError(f"pod name {ref!r} is in several namespaces: {options}")
    return hits[0]


def bundled_examples() -> Path:
    """The bundled example: ``cluster.yaml`` and ``workloads/``.

    A wheel carries the repository's ``examples/`` as package data (``hami_core/examples``,
    copied at build time by setup.py); an editable install reads ``examples/`` of the
    source tree it points at.

    Raises:
        InvalidInputError: neither is there.
    """
    package = Path(hami_core.__file__).resolve().parent
    candidates = [package / "examples", package.parent / "examples"]
    for root in candidates:
        if (root / "cluster.yaml").is_file() and (root / "workloads").is_dir():
            return root
    raise InvalidInputError(
        f"the bundled example is not installed (looked in {', '.join(map(str, candidates))}); "
        "give a cluster file and workloads: hami simulate --cluster FILE WORKLOADS..."
    )


def make_manager(config_path: str | Path | None = None) -> BackendManager:
    """The installed backends (entry points) under the configuration file given.

    Raises:
        ConfigError: the file is unreadable or invalid (names the key).
        BackendError: a backend fails to load.
    """
    manager = BackendManager.from_entry_points()
    if config_path is None:
        return manager
    return manager.with_config(load_config(config_path, backends=manager.infos))


def simulate(
    cluster: LoadedCluster,
    workloads: Workloads,
    manager: BackendManager,
    *,
    node_policy: NodePolicy | None = None,
    device_policy: DevicePolicy | DevicePolicyChain | None = None,
    explain: str | None = None,
    progress: Callable[[int], None] | None = None,
) -> Simulation:
    """Submit every workload pod, in order, to a fresh embedded copy of ``cluster``.

    Args:
        node_policy / device_policy: override the configured defaults (pod annotations
            still win).
        explain: ``namespace/name`` or name of a pod whose view of the cluster is kept
            (``PodRun.observed``) for ``--explain``.
        progress: called with 1 after each pod (a progress bar's ``update``).

    Returns:
        The ``Simulation``. Pods that do not fit are results, never errors; a pod that
        breaks the pipeline is recorded with ``outcome.error``.

    Raises:
        InvalidInputError: ``explain`` names no workload pod.
    """
    explain_at = find_pod(workloads.pods, explain) if explain is not None else -1
    memory = cluster.to_memory()
    for quota in workloads.quotas:
        memory.add_quota(quota)
    pipeline = Pipeline(
        memory,
        manager,
        node_policy=node_policy,
        device_policy=device_policy,
        priority_classes=(*cluster.priority_classes, *workloads.priority_classes),
    )
    seen: set[str] = set()
    runs: list[PodRun] = []
    namespaces = frozenset(str((n.get("metadata") or {}).get("name")) for n in cluster.namespaces)
    for pos, wp in enumerate(workloads.pods):
        observed = _observe(pipeline) if pos == explain_at else None
        runs.append(_submit(pipeline, wp, seen, observed, namespaces))
        _wake(pipeline, runs)
        if progress is not None:
            progress(1)
    config = manager.config
    return Simulation(
        cluster=cluster,
        workloads=workloads,
        runs=tuple(runs),
        pipeline=pipeline,
        node_policy=node_policy or config.node_policy,
        device_policy=_chain(device_policy, config),
        node_policy_overridden=node_policy is not None,
        device_policy_overridden=device_policy is not None,
        warnings=cluster.warnings + workloads.warnings,
    )


def _submit(
    pipeline: Pipeline,
    wp: WorkloadPod,
    seen: set[str],
    observed: Observation | None,
    namespaces: frozenset[str] = frozenset(),
) -> PodRun:
    ns, name = wp.namespace, wp.name
    if wp.rejected:
        outcome = Outcome(namespace=ns, name=name, denied=wp.rejected, denied_by=KUBE_APISERVER)
        return PodRun(workload=wp, outcome=outcome, observed=observed)
    if wp.key in seen or _exists(pipeline, ns, name):
        # The API server answers AlreadyExists; replacing the pod would free its devices.
        outcome = Outcome(namespace=ns, name=name, error=f"pod {wp.key} already exists")
        return PodRun(workload=wp, outcome=outcome, observed=observed)
    seen.add(wp.key)
    try:
        outcome = pipeline.submit(wp.pod)
    except HamiError as exc:
        outcome = Outcome(namespace=ns, name=name, error=str(exc))
    except Exception as exc:  # a pod the pipeline cannot digest must not end the run
        log.debug("pod %s broke the pipeline", wp.key, exc_info=True)
        outcome = Outcome(
            namespace=ns, name=name, error=f"cannot process pod: {type(exc).__name__}: {exc}"
        )
    request = None
    if not outcome.denied:
        try:
            stored = pipeline.cluster.get_pod(ns, name)
            request = pipeline.scheduler.pod_request(stored)
        except HamiError:
            request = None
    skipped: tuple[str, ...] = ()
    if not outcome.denied and not outcome.left_to:
        skipped = tuple(not_modelled(wp.pod, described_namespaces=namespaces))
    return PodRun(
        workload=wp, outcome=outcome, request=request, observed=observed, not_modelled=skipped
    )


def _wake(pipeline: Pipeline, runs: list[PodRun]) -> None:
    """Schedule again the Pending pods a gang placement reserved a node for (the
    scheduler wakes them in a cluster: ``gangs.Gangs``), replacing their runs."""
    reserved = pipeline.scheduler.gangs.reserved()
    if not reserved:
        return
    for pos, run in enumerate(runs):
        o = run.outcome
        if o.scheduled or o.denied or o.error or o.left_to or o.unmanaged:
            continue
        try:
            uid = pipeline.cluster.get_pod(o.namespace, o.name)["metadata"]["uid"]
        except NotFoundError:
            continue
        if uid in reserved:
            try:
                outcome = pipeline.retry(o)
            except HamiError as exc:
                outcome = attrs.evolve(o, error=str(exc))
            runs[pos] = attrs.evolve(run, outcome=outcome)


def _exists(pipeline: Pipeline, namespace: str, name: str) -> bool:
    try:
        pipeline.cluster.get_pod(namespace, name)
    except NotFoundError:
        return False
    return True


def _observe(pipeline: Pipeline) -> Observation:
    sched = pipeline.scheduler
    nodes: dict[str, NodeInfo] = {}
    usage: dict[str, dict[str, DeviceUsage]] = {}
    for node in pipeline.cluster.list_nodes():
        info = sched.node_info(node)
        nodes[info.name] = info
        usage[info.name] = sched.node_usage(info)
    return Observation(nodes=nodes, usage=usage)


def run_files(
    *,
    cluster_path: str | Path | None,
    workload_paths: Sequence[str | Path],
    config_path: str | Path | None = None,
    node_policy: str | None = None,
    device_policy: str | None = None,
    explain: str | None = None,
    progress: Callable[[int], AbstractContextManager[Any]] | None = None,
    force_overwrite_default_scheduler: bool | None = None,
) -> Simulation:
    """Load the files and run them: what ``hami simulate`` does before printing.

    Args:
        cluster_path: the cluster file; None: the bundled ``examples/cluster.yaml``, whose
            GPUs of vendors no installed backend serves are left out with a warning.
        workload_paths: files and directories; empty: the bundled ``examples/workloads``.
        config_path: a hami configuration file, or None for the defaults.
        node_policy / device_policy: policy names overriding the configured defaults,
            read as the pod annotations are (``device_policy`` may be an ordered comma
            list: ``spread,numa``, ``mutex,spread``).
        explain: the pod to observe for ``--explain``.
        progress: given the number of pods, returns a context manager whose value has
            ``update(1)`` (``click.progressbar``); used only when there are more than
            ``PROGRESS_THRESHOLD`` pods.
        force_overwrite_default_scheduler: overrides the configuration's
            ``forceOverwriteDefaultScheduler`` (None: as the file says), as the
            webhook's flag of that name does.

    Raises:
        InvalidInputError (or a subclass): bad file, bad policy name, unknown pod.
    """
    manager = make_manager(config_path)
    if force_overwrite_default_scheduler is not None:
        manager = manager.with_config(
            with_overrides(
                manager.config, force_overwrite_default_scheduler=force_overwrite_default_scheduler
            )
        )
    bundled_cluster = cluster_path is None
    if cluster_path is None or not workload_paths:
        examples = bundled_examples()
        cluster_path = cluster_path if cluster_path is not None else examples / "cluster.yaml"
        workload_paths = workload_paths or [examples / "workloads"]
    node = node_policy_option(node_policy, "--node-policy") if node_policy else None
    device = device_policy_option(device_policy, "--gpu-policy") if device_policy else None
    # The bundled example runs with whatever backends are installed (hami-core alone:
    # no GPUs, with a warning saying which backend would bring them).
    cluster = load_cluster(cluster_path, manager, skip_unserved=bundled_cluster)
    workloads = load_workloads(workload_paths)
    if progress is None or len(workloads.pods) <= PROGRESS_THRESHOLD:
        return simulate(
            cluster, workloads, manager, node_policy=node, device_policy=device, explain=explain
        )
    with progress(len(workloads.pods)) as bar:
        return simulate(
            cluster,
            workloads,
            manager,
            node_policy=node,
            device_policy=device,
            explain=explain,
            progress=bar.update,
        )


def _chain(
    device_policy: DevicePolicy | DevicePolicyChain | None, config: HamiConfig
) -> DevicePolicyChain:
    if isinstance(device_policy, DevicePolicyChain):
        return device_policy
    if device_policy is not None:
        return DevicePolicyChain(primary=device_policy)
    return config.device_policy_chain or DevicePolicyChain(primary=config.device_policy)


__all__ = [
    "PROGRESS_THRESHOLD",
    "Observation",
    "PodRun",
    "Simulation",
    "bundled_examples",
    "find_pod",
    "make_manager",
    "run_files",
    "simulate",
]
