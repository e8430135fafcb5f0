"""Finding this node's Hygon DCUs with ``hy-smi`` (``hami_discover``).

Hardware access sits behind ``CommandRunner`` (``argv -> stdout or None``) and a sysfs
root directory; tests use a fake runner that answers from recorded samples and a
temporary sysfs tree. Discovery runs ``hy-smi --showproductname --showbus --showmeminfo
vram --showserial --json`` (falling back to the same without ``--json``) and, for the
compute units vDCU slicing needs, ``hy-smi virtual -show-device-info``. The inventory is
what HAMi's dcu-vgpu-device-plugin registers (``internal/pkg/dcu/register.go``): ``id``
``DCU-<serial>``, ``type`` ``DCU-<series>``, ``devmem`` the VRAM total in MiB, ``devcore``
100 (times ``deviceCoreScaling``); ``count`` is ``deviceSplitCount`` (HAMi writes 4).

Each DCU's ``/dev/dri`` nodes are found from its PCI address under
``<sysfs>/bus/pci/devices/<address>/drm/`` (``card<N>``, ``renderD<M>``) and its NUMA node
from ``.../numa_node``; they are kept in the node-local table ``DCUS`` for
``hami_allocate``.
"""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

import attrs

from hami_core.backend import DeviceInfo, VendorConfig

from . import VENDOR
from .hysmi import HyDevice, device_uuid, parse_json, parse_text, parse_virtual_info

log = logging.getLogger(__name__)

QUERY = ("--showproductname", "--showbus", "--showmeminfo", "vram", "--showserial")


class CommandRunner(Protocol):
    """Runs a management tool: ``argv`` -> its standard output, or None when the tool is
    missing or fails."""

    def __call__(self, argv: Sequence[str]) -> str | None: ...


@attrs.frozen
class SubprocessRunner:
    """The real runner: ``subprocess.run`` with a timeout (seconds)."""

    timeout_s: float = 15.0

    def __call__(self, argv: Sequence[str]) -> str | None:
        try:
            proc = subprocess.run(
                list(argv), capture_output=True, text=True, timeout=self.timeout_s, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            log.debug("%s: %s", argv[0], exc)
            return None
        if proc.returncode != 0:
            log.warning("%s exited %d: %s", " ".join(argv), proc.returncode, proc.stderr.strip())
            return None
        return proc.stdout


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


@attrs.frozen(kw_only=True)
class Discovery:
    """The result of one discovery: the inventory and the local DCU table."""

    devices: tuple[DeviceInfo, ...]
    dcus: Mapping[str, Dcu]


class DcuTable:
    """Node-local uuid -> ``Dcu``, refreshed by every discovery."""

    def __init__(self) -> None:
        self._dcus: dict[str, Dcu] = {}

    def replace(self, dcus: Mapping[str, Dcu]) -> None:
        self._dcus = dict(dcus)

    def get(self, uuid: str) -> Dcu | None:
        return self._dcus.get(uuid)

    def __len__(self) -> int:
        return len(self._dcus)


#: The table ``hami_discover`` fills and ``hami_allocate`` reads.
DCUS = DcuTable()
#: The runner the hooks use (tests replace it).
RUNNER: list[CommandRunner] = [SubprocessRunner()]


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


def _query(hy: str, runner: CommandRunner) -> list[HyDevice] | None:
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
    config: VendorConfig, runner: CommandRunner, *, sysfs: Path | None = None
) -> Discovery | None:
    """Discover the node's DCUs.

    Returns: the DCUs by index (``[]`` when there are none); None when ``hy-smi`` is
        missing or fails (no driver on this node).
    """
    hy = str(config.options["hySmiPath"])
    root = Path(str(config.options["sysfsPath"])) if sysfs is None else sysfs
    found = _query(hy, runner)
    if found is None:
        return None
    virt_text = runner([hy, "virtual", "-show-device-info"])
    units = {v.index: v.compute_units for v in parse_virtual_info(virt_text or "")}
    devices: list[DeviceInfo] = []
    dcus: dict[str, Dcu] = {}
    for d in found:
        uuid = device_uuid(d)
        memory = int(d.memory_total_mib * config.memory_scaling)
        card, render = drm_nodes(root, d.bus_id) if d.bus_id else ("", "")
        devices.append(
            DeviceInfo(
                uuid=uuid,
                vendor=VENDOR,
                model=f"DCU-{d.series}" if d.series else "DCU",
                index=d.index,
                split_count=config.split_count,
                memory_mib=memory,
                cores_pct=round(100 * config.core_scaling),
                numa=numa_node(root, d.bus_id) if d.bus_id else 0,
                healthy=d.memory_total_mib > 0,
            )
        )
        dcus[uuid] = Dcu(
            uuid=uuid,
            index=d.index,
            bus_id=d.bus_id,
            card=card,
            render=render,
            compute_units=units.get(d.index, 0),
            memory_mib=d.memory_total_mib,
        )
    return Discovery(devices=tuple(devices), dcus=dcus)


def discover_and_remember(config: VendorConfig) -> list[DeviceInfo] | None:
    """``hami_discover``: discover with the hooks' runner and refresh ``DCUS``."""
    found = discover(config, RUNNER[0])
    if found is None:
        return None
    DCUS.replace(found.dcus)
    return list(found.devices)
