"""Finding this node's Neuron devices with ``neuron-ls --json-output`` (``hami_discover``).

The Neuron SDK documents ``neuron-ls --json-output`` as a JSON array with one object per
device: ``neuron_device`` (index), ``bdf``, ``connected_to`` (indices of linked
devices), ``nc_count`` (NeuronCores), ``memory_size`` (bytes) and ``neuron_processes``.
A device becomes the inventory HAMi derives from capacity (``inventory.device``): id
``<node>-AWSNeuron-<index>``, sharers = cores, ``devcore`` = core mask; the node name
is ``NODE_NAME`` (set by the device plugin's DaemonSet), else the host name.
"""

from __future__ import annotations

import json
import logging
import os
import socket

from hami_core.backend import DeviceInfo, ToolRunner, VendorConfig

from . import inventory

log = logging.getLogger(__name__)


def parse(text: str, *, node_name: str, instance_type: str = "") -> list[DeviceInfo]:
    """``neuron-ls --json-output`` -> devices by index. Raises ``ValueError`` when the
    text is not such an array."""
    items = json.loads(text)
    if not isinstance(items, list):
        raise ValueError("neuron-ls --json-output: expected a JSON array")
    out = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("neuron_device"), int):
            raise ValueError(f"neuron-ls --json-output: bad device {item!r}")
        cores = item.get("nc_count")
        out.append(
            inventory.device(
                node_name,
                item["neuron_device"],
                cores if isinstance(cores, int) and cores > 0 else 2,
                instance_type,
            )
        )
    return sorted(out, key=lambda d: d.index)


def discover(config: VendorConfig, runner: ToolRunner) -> list[DeviceInfo] | None:
    """The node's Neuron devices; None when ``neuron-ls`` is missing, fails or is
    unreadable."""
    text = runner([str(config.options.get("neuronLsPath", "neuron-ls")), "--json-output"])
    if text is None:
        return None
    try:
        return parse(text, node_name=os.environ.get("NODE_NAME") or socket.gethostname())
    except ValueError as exc:
        log.warning("%s", exc)
        return None
