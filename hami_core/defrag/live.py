"""An ``apply.Applier`` over the API server: what ``hami defrag --apply`` and the
scheduler's continuous consolidation run (docs/consolidation.md).

RBAC of whoever runs it: ``list`` nodes, pods, namespaces, resourcequotas, jobs and
poddisruptionbudgets (the planner's reading, ``sources.from_api``); ``create`` on
``pods/eviction``; ``patch`` on ``pods/status`` (nominations); ``create`` events;
``get``, ``create`` and ``update`` on the ledger ConfigMap.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

from hami_core.plugin import BackendManager

from .apply import Applier, ApplyLimits
from .ledger import ConfigMapLedger, parse_location
from .sources import from_api


def api_applier(
    manager: BackendManager,
    *,
    kubeconfig: str | None = None,
    api_client: Any = None,
    ledger: str,
    ledger_flag: str,
    limits: ApplyLimits,
    protected_namespaces: Collection[str],
    planner_options: Mapping[str, Any],
    is_leader: Callable[[], bool] = lambda: True,
    component: str = "hami-defrag",
) -> Applier:
    """An applier reading the cluster through ``api_client`` (None: one made from
    ``kubeconfig``) each round, evicting and
    nominating through it, its events written as ``component``, its ledger the
    ConfigMap ``ledger`` (``NAMESPACE/NAME``).

    Raises:
        InvalidInputError: ``ledger`` is not ``NAMESPACE/NAME`` (``ledger_flag`` named).
    """
    from hami_core.cluster.kube import KubeCluster, make_api_client
    from hami_core.cluster.kube_eviction import KubeEvictions

    namespace, name = parse_location(ledger, flag=ledger_flag)  # before the API is reached
    if api_client is None:
        api_client = make_api_client(kubeconfig)
    store = KubeCluster(api_client, component=component)  # its writes only: nothing watched
    return Applier(
        read=lambda: from_api(None, manager, api_client=api_client),
        manager=manager,
        evictions=KubeEvictions(store),
        events=store,
        ledger=ConfigMapLedger(api_client, namespace, name),
        limits=limits,
        protected_namespaces=protected_namespaces,
        planner_options=planner_options,
        is_leader=is_leader,
    )


__all__ = ["api_applier"]
