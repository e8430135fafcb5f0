"""``hami top``: the cluster's accelerators at a glance (the handbook's "no single
command tells how much accelerator capacity is free").

- ``view``: rows per device and per node (allocated from the allocations of live pods,
  as the scheduler counts them; used from the node monitors' metrics when given).
- ``sources``: where nodes and pods come from (the API server once, or a file) and
  where used figures come from (a Prometheus that scrapes ``hami monitor``).
- ``measured``: what GPUs and pods use, from the monitors' own /metrics (``exposition``
  parses their text) or a Prometheus; an endpoint that cannot be read is "n/a", not an
  error.
- ``render``: the table and the JSON form.
"""

from .measured import Measured, from_monitors, from_prometheus
from .render import render_json, render_table
from .sources import cluster_from_api, cluster_from_file, usage_from_prometheus
from .view import DeviceRow, DeviceUse, NodeRow, PodSlice, PodUse, TopView, build_view

__all__ = [
    "DeviceRow",
    "DeviceUse",
    "Measured",
    "NodeRow",
    "PodSlice",
    "PodUse",
    "TopView",
    "build_view",
    "cluster_from_api",
    "cluster_from_file",
    "from_monitors",
    "from_prometheus",
    "render_json",
    "render_table",
    "usage_from_prometheus",
]
