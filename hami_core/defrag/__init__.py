"""``hami defrag``: the consolidation planner (docs/consolidation.md).

- ``movable``: which running pods may move for a pending pod, and why not (controller,
  disruption budgets, priority, opt-out annotation and protected namespaces);
- ``planner``: ``Planner``, the fewest moves after which pending pods fit, found with
  the scheduler's own filter on a copy of the cluster;
- ``sources``: the cluster, pending pods, budgets and Jobs from a snapshot file or the
  API server;
- ``render``: the plan as text and as JSON (``-o json``).
"""
