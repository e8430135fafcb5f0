"""Who holds what: the facts the scheduler, the webhook, the device plugin, the monitor,
the metrics and ``hami top`` all read, kept apart from the scheduling engine so that
reading them never pulls the engine in (the import contracts in pyproject.toml).

- ``usage``: what live pods hold on a node's devices, under the trust rule of
  PROTOCOL.md §6 (``pod_holdings``, ``node_usage``, ``pod_allocation``).
- ``holdings``: ``HoldingsReader``, one pod's devices and quota charge for a backend
  manager (what the scheduler's state and ``hami top`` read), and ``ProblemLog``.
- ``quota``: namespace quotas (§8): the one charge of a pod (``pod_charge``), the limits
  and what a namespace uses.
- ``policy``: which node / device policy applies to a pod (annotations over the config).
- ``nodes``: a node's devices and registration from its annotations (``read_node``).
- ``nodelock``: the node lock (§4) a bind takes and ``Allocate`` releases.
- ``handshake``: the scheduler's side of the node handshake (§2).
- ``podrequest``: a pod's device requests in wire order (``read_pod_request``).

The wire codecs these read (the lock and handshake values, device lists, inventories) are
``hami_core.protocol``; a pod's name for messages (``pod_ref``) and the one liveness rule
(``is_live``) are ``hami_core.protocol.pods``, below the backend kit that needs them too.
"""
