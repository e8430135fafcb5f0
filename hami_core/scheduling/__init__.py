"""The scheduling engine: what kube-scheduler's extender asks of hami, without HTTP.

- ``scheduler``: ``Scheduler``, the facade of the filter / prioritize / bind stages over
  a ``ClusterStore`` (the extender and ``hami simulate`` drive it; the scheduler's
  metrics read it through ``servers.metrics.SchedulerView``).
- The stages, as kube-scheduler's framework names them: ``cycle`` (PreFilter: one
  ``PodCycle`` per pod, read by every later stage), ``filtering`` (Filter: the one
  engine, over a node source of ``sources``: the cached state or given Node objects),
  ``prioritize`` (Score), ``reservations`` (the node answered best until its bind) and
  ``bind`` (Reserve / Permit / Bind under the node lock).
- ``state``: ``ClusterState``, the incremental view of nodes, usage and quotas kept by
  the store's events; the O(1) pre-filter.
- ``fitting``: the fit driver, a whole pod on one node (or a batch of nodes), container
  by container, through the backends' ``hami_fit`` / ``hami_fit_nodes``.
- ``nodeclass``: classes of identical nodes, so a new pod shape is fitted once per class.
- ``scoring``: node scores under the node policy, and their 0..10 extender form.

Who holds what (usage, quota, policy, node reading, the node lock, the handshake, a
pod's requests) is ``hami_core.facts``, which the other components read without this
engine.

The HTTP edge is ``hami_core.servers.extender``; the map of the whole core is
docs/architecture.md.
"""
