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

from hami_core.backend import (
    ContainerAllocation,
    ContainerDevices,
    IndexedDevices,
    Mount,
    VendorConfig,
)

from . import options

VISIBLE_DEVICES = "CAMBRICON_VISIBLE_DEVICES"
DEVICE_NODE = "/dev/cambricon_dev{index}"
IPCM_NODE = "/dev/cambricon_ipcm{index}"
CONTROL_NODE = "/dev/cambricon_ctl"


def cnmon_mount(devices: ContainerDevices, config: VendorConfig) -> ContainerAllocation:
    """The host ``cnmon`` read-only at the same path, when ``mountCnmonPath`` names it."""
    cnmon = str(config.options[options.MOUNT_CNMON] or "")
    mounts = (Mount(container_path=cnmon, host_path=cnmon, read_only=True),) if cnmon else ()
    return ContainerAllocation(mounts=mounts)


#: ``allocate(devices, config, *, indices)``: env, device nodes and mounts
#: for one container given its MLU slices (``indices``: device UUID -> card index, from the
#: node's devices ``hami_allocate`` receives). ``CAMBRICON_VISIBLE_DEVICES`` = the card
#: indices in slice order (a UUID whose index is unknown, e.g. ``hami simulate``, stays
#: the UUID); a container without MLUs gets nothing (the Cambricon runtime documents no
#: "none" value). With ``useContainerRuntime: false`` also the device nodes of the cards
#: whose index is known (``ipcm`` where the host has it) and ``/dev/cambricon_ctl``;
#: with ``mountCnmonPath`` the host cnmon.
allocate = IndexedDevices(
    visible_devices=VISIBLE_DEVICES,
    device_nodes=(DEVICE_NODE,),
    host_optional_nodes=(IPCM_NODE,),
    control_nodes=(CONTROL_NODE,),
    extra=cnmon_mount,
)
