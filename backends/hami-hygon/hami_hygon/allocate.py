"""What kubelet adds to a Hygon DCU container (``hami_allocate``).

Hygon's container usage (DCU developer community "基于Docker使用DCU": ``docker run
--device=/dev/kfd --device=/dev/mkfd --device=/dev/dri -v /opt/hyhal:/opt/hyhal
--group-add video ...``; "DCU需要添加/dev/kfd、/dev/mkfd、/dev/dri") and HAMi's
dcu-vgpu-device-plugin (``internal/pkg/dcu/server.go`` ``Allocate``) give:

- device nodes: ``/dev/kfd`` and ``/dev/mkfd`` (shared control nodes, ``rwm``) and, per
  DCU, its own ``/dev/dri/card<N>`` and ``/dev/dri/renderD<M>`` (``rw``), found from its
  PCI address in sysfs at discovery; only these DCUs are visible in the container;
- mounts: the hyhal runtime (``/opt/hyhal``, where ``libhsa-runtime64.so`` lives) and the
  DTK at ``/opt/hygondriver`` (HAMi's ``HYGONPATH``), and for a virtual DCU the directory
  holding its ``vdev<N>.conf``, at ``/etc/vdev/docker`` (see ``vdev``);
- env: ``HIP_VISIBLE_DEVICES`` = ``0..n-1``, the container's DCUs as the HIP runtime
  numbers them once only their nodes are mounted (ROCm "GPU isolation techniques": the
  HIP runtime exposes the devices in ``HIP_VISIBLE_DEVICES``; device-node isolation
  renumbers them from 0). Hygon's runtime takes no other variable: memory and compute
  limits of a virtual DCU live in ``vdev<N>.conf``.

A container gets a virtual DCU when it holds one DCU and less than all its memory or
compute. A DCU's bus, DRM nodes and compute units come from the ``node_local`` facts
``hami_discover`` put on the node's devices (``node_devices``); one the node does not have
is refused. Where the node's devices are unknown (``hami simulate``) no device node is
added: a DCU that cannot be found is never replaced by another.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from hami_core.backend import (
    ContainerAllocation,
    ContainerDevices,
    DeviceInfo,
    DeviceNode,
    Mount,
    NodeState,
    VendorConfig,
    discovered,
)

from .discover import Dcu
from .vdev import VdevAllocator, render

VDEV_CONTAINER_DIR: Final = "/etc/vdev/docker"
DTK_CONTAINER_DIR: Final = "/opt/hygondriver"


def resolve(devices: ContainerDevices, node_devices: Sequence[DeviceInfo]) -> list[Dcu | None]:
    """The container's DCUs as discovery described them (None where the node's devices
    carry no discovery facts, as in ``hami simulate``, which reads the inventory).

    Raises:
        InvalidInputError: a DCU is not among the node's discovered devices.
    """
    if not node_devices:
        return [None for _ in devices]
    dcus = discovered(devices, node_devices, what="DCU", tool="hy-smi")
    return [Dcu.of(dev) if dev.node_local else None for dev in dcus]


def allocate(
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    devices: ContainerDevices,
    config: VendorConfig,
    node_devices: Sequence[DeviceInfo],
    state: NodeState,
) -> ContainerAllocation:
    """Device nodes, mounts, env and the vDCU file for one container given its slices
    (empty: none); ``state`` keeps the node's vDCUs.

    Raises:
        InvalidInputError: a DCU is not on this node, or a virtual DCU cannot be made
            (compute units unknown or taken).
    """
    if not devices:
        return ContainerAllocation()
    dcus = resolve(devices, node_devices)
    nodes = [
        DeviceNode(container_path="/dev/kfd", host_path="/dev/kfd", permissions="rwm"),
        DeviceNode(container_path="/dev/mkfd", host_path="/dev/mkfd", permissions="rwm"),
    ]
    for dcu in dcus:
        for name in (dcu.card, dcu.render) if dcu is not None else ():
            if name:
                path = f"/dev/dri/{name}"
                nodes.append(DeviceNode(container_path=path, host_path=path, permissions="rw"))
    hyhal = str(config.options["hyhalPath"]).rstrip("/")
    mounts = [Mount(container_path=hyhal, host_path=hyhal)] if hyhal else []
    dtk = str(config.options["dtkPath"]).rstrip("/")
    if dtk:
        mounts.append(Mount(container_path=DTK_CONTAINER_DIR, host_path=dtk))
    envs = {"HIP_VISIBLE_DEVICES": ",".join(str(i) for i in range(len(devices)))}

    files: dict[str, str] = {}
    first, dcu = devices[0], dcus[0]
    if len(devices) == 1 and dcu is not None:
        partial_memory = dcu.memory_mib and first.memory_mib < dcu.memory_mib
        if partial_memory or first.cores_pct < 100:
            meta = pod.get("metadata") or {}
            vdevs = VdevAllocator(
                Path(str(config.options["vdevPath"])),
                state,
            )
            directory, conf = vdevs.allocate(
                pod_uid=str(meta.get("uid", "")),
                container=str(container.get("name", "")),
                device_id=dcu.index,
                pci_bus_id=dcu.bus_id,
                compute_units=dcu.compute_units,
                memory_mib=first.memory_mib,
                cores_pct=first.cores_pct,
            )
            mounts.append(Mount(container_path=VDEV_CONTAINER_DIR, host_path=str(directory)))
            files[str(directory / f"vdev{conf.vdev_id}.conf")] = render(conf)
    return ContainerAllocation(
        envs=envs, mounts=tuple(mounts), device_nodes=tuple(nodes), files=files
    )
