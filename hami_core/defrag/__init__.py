"""``hami defrag``: the consolidation planner (docs/consolidation.md).

- ``movable``: which running pods may move for a pending pod, and why not (controller,
  disruption budgets, priority, opt-out annotation and protected namespaces);
- ``planner``: ``Planner``, the fewest moves after which pending pods fit (or a goal is
  met), found with the scheduler's own filter on a copy of the cluster;
- ``exact`` / ``exactplan``: the integer program (HiGHS, the ``defrag`` extra) that
  chooses the fewest evictions for all pending pods of a priority at once on small
  clusters, and its answer carried out through the scheduler's fit;
- ``goal``: the goal "N whole free GPUs (of model M)" (``--goal``);
- ``sources``: the cluster, pending pods, budgets and Jobs from a snapshot file or the
  API server;
- ``render``: the plan as text and as JSON (``-o json``).
"""
