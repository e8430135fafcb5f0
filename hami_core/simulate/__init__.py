"""``hami simulate``: the what-if, every pod through the servers' own code on an embedded cluster.

- ``loader``: reading a cluster (the simple form or a ``kubectl get -o yaml`` snapshot)
  and the workloads to place on it.
- ``apiserver``: kube-apiserver's per-object checks (decoding, validation), so an object
  the real server refuses is refused here, the others go on.
- ``kubechecks``, ``podtopology``: kube-scheduler's own filters (``NodeAffinity``,
  ``TaintToleration``, ``NodeResourcesFit``, ..., ``InterPodAffinity``,
  ``PodTopologySpread``), which decide the nodes the extender sees.
- ``pipeline``: ``Pipeline.submit``, one pod's trip webhook -> filter -> prioritize ->
  bind -> allocate with the functions the servers use.
- ``kubelet``: kubelet's side of ``Allocate``, driving the device plugin's ``Allocator``.
- ``runner``: every workload through the pipeline, in order; ``report``: the text or
  JSON report and one pod's explanation.

The command is ``hami_core.cli``; the map of the whole core is docs/architecture.md.
"""
