"""The scheduling engine: what kube-scheduler's extender asks of hami, without HTTP.

- ``scheduler``: ``Scheduler``, the facade of the filter / prioritize / bind stages over
  a ``ClusterStore`` (the extender, ``hami simulate`` and ``hami top`` drive it).
- The stages, as kube-scheduler's framework names them: ``cycle`` (PreFilter: one
  ``PodCycle`` per pod, read by every later stage), ``filtering`` (Filter: the one
  engine, over a node source of ``sources``: the cached state or given Node objects),
  ``prioritize`` (Score), ``reservations`` (the node answered best until its bind) and
  ``bind`` (Reserve / Permit / Bind under the node lock); ``holdings`` reads what one
  pod holds for the state.
- ``state``: ``ClusterState``, the incremental view of nodes, usage and quotas kept by
  the store's events; the O(1) pre-filter.
- ``fitting``: the fit driver, a whole pod on one node (or a batch of nodes), container
  by container, through the backends' ``hami_fit`` / ``hami_fit_nodes``.
- ``nodeclass``: classes of identical nodes, so a new pod shape is fitted once per class.
- ``scoring``: node scores under the node policy, and their 0..10 extender form.
- ``nodelock``: the node lock (PROTOCOL.md §4) a bind holds until ``Allocate`` ends.
- Facts other components read too: ``usage`` (what live pods hold, the trust rule),
  ``quota`` (namespace quotas, §8), ``policy`` (which node / device policy applies),
  ``nodes`` (a node's devices from its annotations), ``handshake`` (the scheduler's side
  of the node handshake, §2), ``podspec`` (a pod's device requests in wire order).

The HTTP edge is ``hami_core.servers.extender``; the map of the whole core is
docs/architecture.md.
"""
