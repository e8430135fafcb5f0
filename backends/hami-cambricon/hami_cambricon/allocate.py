"""What kubelet adds to a Cambricon container (PROTOCOL.md §3, §7 for the shape).

Sources:
    - cambricon-k8s-device-plugin ``pkg/mlu/server.go`` ``PrepareResponse``: with the
      Cambricon container runtime (cambricon-container-toolkit, ``--use-runtime``) the
      plugin answers only ``CAMBRICON_VISIBLE_DEVICES``, the comma-joined card indices
      (slots), and the runtime injects the device nodes; without it, the plugin exposes
      ``/dev/cambricon_dev<i>``, ``/dev/cambricon_ipcm<i>`` (MLU370 and later, when the
      host has it) and the control node ``/dev/cambricon_ctl``, and mounts the host
      ``cnmon`` read-only when ``--cnmon-path`` is set (``pkg/mlu/const.go`` names).
    - Memory and compute isolation of an sMLU slice is done by Cambricon's device plugin in
      dynamic-sMLU mode, which creates the sMLU instance from the pod's
      ``CAMBRICON_DSMLU_PROFILE`` annotation (``<index>_<cores>_<memory units>``, written
      at bind as HAMi's scheduler writes it: ``bind.py``). Nothing in a container's
      env limits an sMLU, so this backend adds no limit variables.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from hami_core.backend import ContainerAllocation, ContainerDevices, DeviceNode, Mount, VendorConfig

from . import options

VISIBLE_DEVICES = "CAMBRICON_VISIBLE_DEVICES"
DEVICE_NODE = "/dev/cambricon_dev{index}"
IPCM_NODE = "/dev/cambricon_ipcm{index}"
CONTROL_NODE = "/dev/cambricon_ctl"


def allocate(
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    devices: ContainerDevices,
    config: VendorConfig,
    *,
    indices: Mapping[str, int],
) -> ContainerAllocation:
    """Env, device nodes and mounts for one container given its MLU slices.

    Args:
        devices: the container's slices (empty: it has no MLU; nothing is added, since the
            Cambricon runtime documents no "none" value).
        indices: device UUID -> card index, from the node's devices ``hami_allocate`` receives.

    Returns:
        ``CAMBRICON_VISIBLE_DEVICES`` = the card indices in slice order. A UUID whose
        index is unknown on this machine (no ``cnmon``, e.g. ``hami simulate``) is written
        as the UUID itself: a value the runtime cannot take for another card's index.
        With ``useContainerRuntime: false`` also the device nodes of the cards whose
        index is known, and ``/dev/cambricon_ctl``; with ``mountCnmonPath`` the host cnmon.
    """
    if not devices:
        return ContainerAllocation()
    ids = [str(indices[d.uuid]) if d.uuid in indices else d.uuid for d in devices]
    envs = {VISIBLE_DEVICES: ",".join(ids)}
    nodes: list[DeviceNode] = []
    if not config.options[options.USE_RUNTIME]:
        for d in devices:
            if d.uuid not in indices:
                continue
            index = indices[d.uuid]
            path = DEVICE_NODE.format(index=index)
            nodes.append(DeviceNode(container_path=path, host_path=path))
            ipcm = IPCM_NODE.format(index=index)
            if os.path.exists(ipcm):
                nodes.append(DeviceNode(container_path=ipcm, host_path=ipcm))
        nodes.append(DeviceNode(container_path=CONTROL_NODE, host_path=CONTROL_NODE))
    mounts: list[Mount] = []
    cnmon = str(config.options[options.MOUNT_CNMON] or "")
    if cnmon:
        mounts.append(Mount(container_path=cnmon, host_path=cnmon, read_only=True))
    return ContainerAllocation(envs=envs, device_nodes=tuple(nodes), mounts=tuple(mounts))
