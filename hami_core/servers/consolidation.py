"""Continuous consolidation in ``hami scheduler`` (``--consolidation``, off by default):
the settings read into a ``defrag.continuous.Consolidator`` (docs/consolidation.md)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from hami_core.cluster.kube import KubeCluster
from hami_core.defrag import exact
from hami_core.defrag.apply import ApplyLimits
from hami_core.defrag.continuous import Consolidator
from hami_core.defrag.ledger import RememberingLedger
from hami_core.defrag.live import api_applier
from hami_core.defrag.movable import DEFAULT_PROTECTED_NAMESPACES
from hami_core.defrag.planner import policy_overrides
from hami_core.scheduling.scheduler import Scheduler

from .options import SchedulerOptions

log = logging.getLogger(__name__)

#: How long the scheduler's consolidation waits on a PodDisruptionBudget's refusal
#: before that pod's plan stops (its worker is busy meanwhile).
BUDGET_WAIT_S = 10.0


def start_consolidation(
    opts: SchedulerOptions,
    api: Any,
    scheduler: Scheduler,
    store: KubeCluster,
    *,
    is_leader: Callable[[], bool],
) -> Consolidator | None:
    """The consolidator over the scheduler's API client and policies, started; None when
    ``--consolidation`` is off. Logs which planner it has (``exact.describe``: the
    integer program needs the ``defrag`` extra).

    Raises:
        InvalidInputError: ``--consolidation-ledger`` is not ``NAMESPACE/NAME``.
    """
    if not opts.consolidation:
        return None
    applier = api_applier(
        scheduler.manager,
        api_client=api,
        ledger=opts.consolidation_ledger,
        ledger_flag="--consolidation-ledger",
        limits=ApplyLimits(
            max_evictions=opts.consolidation_max_evictions,
            max_evictions_per_hour=opts.consolidation_max_evictions_per_hour,
            replacement_wait_s=0,  # the next rounds nominate them
            budget_wait_s=BUDGET_WAIT_S,
        ),
        protected_namespaces=DEFAULT_PROTECTED_NAMESPACES,
        planner_options=policy_overrides(opts.node_policy, opts.gpu_policy),
        is_leader=is_leader,
        component="hami-scheduler",
    )
    log.info("consolidation on, planning with %s", exact.describe())
    # the filter holds the room of plans in progress as the ledger has them
    ledger = RememberingLedger(applier.ledger)
    applier.ledger = ledger
    if scheduler.engine.held is not None:
        scheduler.engine.held.leaving = ledger.leaving
    return Consolidator(
        applier, read_pod=store.get_pod, after_s=opts.consolidation_after_s, is_leader=is_leader
    ).start()


__all__ = ["start_consolidation"]
