"""Finding this node's Hygon DCUs with ``hy-smi`` (``hami_discover``).

Hardware access sits behind the kit's ``ToolRunner`` (``argv -> stdout or None``) and a sysfs
root directory; tests use a fake runner that answers from recorded samples and a
temporary sysfs tree. Discovery runs ``hy-smi --showproductname --showbus --showmeminfo
vram --showserial --json`` (falling back to the same without ``--json``) and, for the
compute units vDCU slicing needs, ``hy-smi virtual -show-device-info``. The inventory is
what HAMi's dcu-vgpu-device-plugin registers (``internal/pkg/dcu/register.go``): ``id``
``DCU-<serial>``, ``type`` ``DCU-<series>``, ``devmem`` the VRAM total in MiB, ``devcore``
100 (times ``deviceCoreScaling``); ``count`` is ``deviceSplitCount`` (HAMi writes 4).

Each DCU's ``/dev/dri`` nodes are found from its PCI address under
``<sysfs>/bus/pci/devices/<address>/drm/`` (``card<N>``, ``renderD<M>``) and its NUMA node
from ``.../numa_node``; they ride on each device's ``node_local`` (never in the inventory) for
``hami_allocate``, which receives the node's discovered devices.
"""

from __future__ import annotations

import logging
from pathlib import Path

import attrs

from hami_core.backend import (
    DEFAULT_TOOL_TIMEOUT_S,
    DeviceInfo,
    SubprocessRunner,
    ToolRunner,
    VendorConfig,
    inventory_device,
)

from . import VENDOR
from .hysmi import HyDevice, device_uuid, parse_json, parse_text, parse_virtual_info

log = logging.getLogger(__name__)

QUERY = ("--showproductname", "--showbus", "--showmeminfo", "vram", "--showserial")


def runner_for(config: VendorConfig) -> ToolRunner:
    """The real ``hy-smi`` runner of the hooks (tests replace this function)."""
    return SubprocessRunner(timeout_s=DEFAULT_TOOL_TIMEOUT_S)


@attrs.frozen(kw_only=True)
class Dcu:
    """What allocation needs to know of one local DCU.

    Attributes:
        uuid: ``DCU-<serial>``.
        index: the hy-smi index (``device_id`` of a vDCU configuration).
        bus_id: PCIe address (``PciBusId`` of a vDCU configuration).
        card: the DRM card node name (``card1``), "" when unknown.
        render: the DRM render node name (``renderD129``), "" when unknown.
        compute_units: the DCU's compute units, 0 when unknown.
        memory_mib: VRAM total, MiB.
    """

    uuid: str
    index: int
    bus_id: str
    card: str = ""
    render: str = ""
    compute_units: int = 0
    memory_mib: int = 0

    def node_local(self) -> dict[str, str]:
        """The facts as ``DeviceInfo.node_local`` carries them."""
        return {
            "busId": self.bus_id,
            "card": self.card,
            "render": self.render,
            "computeUnits": str(self.compute_units),
            "memoryMiB": str(self.memory_mib),
        }

    @classmethod
    def of(cls, device: DeviceInfo) -> Dcu:
        """The facts discovery put on ``device`` (empty where it put none)."""
        local = device.node_local
        return cls(
            uuid=device.uuid,
            index=device.index,
            bus_id=local.get("busId", ""),
            card=local.get("card", ""),
            render=local.get("render", ""),
            compute_units=int(local.get("computeUnits", "0")),
            memory_mib=int(local.get("memoryMiB", "0")),
        )


def drm_nodes(sysfs: Path, bus_id: str) -> tuple[str, str]:
    """``(card<N>, renderD<M>)`` of a PCI device from ``<sysfs>/bus/pci/devices/<bus>/drm``;
    empty strings when sysfs does not say."""
    drm = sysfs / "bus" / "pci" / "devices" / bus_id.lower() / "drm"
    try:
        names = sorted(p.name for p in drm.iterdir())
    except OSError:
        return "", ""
    card = next((n for n in names if n.startswith("card") and n[4:].isdigit()), "")
    render = next((n for n in names if n.startswith("renderD") and n[7:].isdigit()), "")
    return card, render


def numa_node(sysfs: Path, bus_id: str) -> int:
    """The PCI device's NUMA node (``numa_node``), 0 when unknown or ``-1``."""
    try:
        value = int((sysfs / "bus" / "pci" / "devices" / bus_id.lower() / "numa_node").read_text())
    except (OSError, ValueError):
        return 0
    return max(0, value)


def _query(hy: str, runner: ToolRunner) -> list[HyDevice] | None:
    text = runner([hy, *QUERY, "--json"])
    if text is not None:
        try:
            found = parse_json(text)
        except ValueError as exc:
            log.info("hy-smi --json unreadable (%s); trying the text form", exc)
        else:
            if found:
                return found
    text = runner([hy, *QUERY])
    return None if text is None else parse_text(text)


def discover(
    config: VendorConfig, runner: ToolRunner, *, sysfs: Path | None = None
) -> list[DeviceInfo] | None:
    """Discover the node's DCUs.

    Returns: the DCUs by index (``[]`` when there are none), each with its ``Dcu`` facts
        in ``node_local``; None when ``hy-smi`` is missing or fails (no driver on this
        node).
    """
    hy = str(config.options["hySmiPath"])
    root = Path(str(config.options["sysfsPath"])) if sysfs is None else sysfs
    found = _query(hy, runner)
    if found is None:
        return None
    virt_text = runner([hy, "virtual", "-show-device-info"])
    units = {v.index: v.compute_units for v in parse_virtual_info(virt_text or "")}
    devices: list[DeviceInfo] = []
    for d in found:
        uuid = device_uuid(d)
        card, render = drm_nodes(root, d.bus_id) if d.bus_id else ("", "")
        dcu = Dcu(
            uuid=uuid,
            index=d.index,
            bus_id=d.bus_id,
            card=card,
            render=render,
            compute_units=units.get(d.index, 0),
            memory_mib=d.memory_total_mib,
        )
        devices.append(
            inventory_device(
                config,
                uuid=uuid,
                vendor=VENDOR,
                model=f"DCU-{d.series}" if d.series else "DCU",
                index=d.index,
                memory_mib=d.memory_total_mib,
                numa=numa_node(root, d.bus_id) if d.bus_id else 0,
                healthy=d.memory_total_mib > 0,
                node_local=dcu.node_local(),
            )
        )
    return devices
