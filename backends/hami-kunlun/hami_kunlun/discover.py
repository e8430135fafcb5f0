"""Finding the node's XPUs from ``xpu-smi`` (``xpu_smi`` on older XRE releases).

Source of the output format: Kunlunxin XRE user guide, §4.1 "xpu_smi": the ``DEVICES``
table has one row per compute device with the columns ``DevID`` (device number, the
``/dev/xpu<n>`` index), ``PCI Addr``, ``Model``, ``SN``, ``INODE``, ``State`` (``N``
normal, ``E`` error), ``UseRate``, ``L3``, ``Memory`` (``used / total MB``),
``Power(W)``, ``Temp``, ``Freq(MHz)``, ``Firmware Version``, ``CPLD Version``; further
tables (``VIDEO``, ``PROCESSES``) follow. Older releases print fewer columns (no
``State``; PaddlePaddle's Kunlun XPU install guide shows them), so columns are found by
their header names. §4.2.4 of the same guide: with SR-IOV on, the physical function
(model ``<model>-PF``) "no longer has compute" and the virtual functions are devices of
their own, so ``-PF`` rows are skipped.

Device ids: HAMi's Kunlunxin vXPU guide gives the device id format as the bus id; a PCI
address contains ``:``, which separates devices in the pod device list (PROTOCOL.md
§3), so the id is ``XPU-`` + the address with ``:`` replaced by ``-``
(``0000:53:00.0`` -> ``XPU-0000-53-00.0``), with ``-<DevID>`` appended when two devices
share an address (a Kunlun 1 K200 exposes two devices per board).

Hardware access sits behind the kit's ``ToolRunner`` (argv -> stdout, or None when the tool is
missing); tests pass a fake or a ``cat`` of a recorded sample.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

import attrs

from hami_core.backend import (
    DeviceInfo,
    InvalidInputError,
    ToolRunner,
    VendorConfig,
    inventory_device,
)

from . import VENDOR, options

_MEMORY = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*(MB|MiB)?\s*$", re.IGNORECASE)


@attrs.frozen(kw_only=True)
class XpuSmiDevice:
    """One row of the ``DEVICES`` table.

    Attributes:
        index: ``DevID``, the index ``CXPU_VISIBLE_DEVICES`` uses.
        pci: ``PCI Addr``, e.g. ``0000:53:00.0``.
        model: ``Model``, e.g. ``P800``.
        memory_mib: the total of ``Memory``, MiB (xpu-smi writes ``MB``).
        healthy: False when ``State`` is ``E``.
    """

    index: int
    pci: str
    model: str
    memory_mib: int
    healthy: bool


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def parse_xpu_smi(text: str) -> list[XpuSmiDevice]:
    """Parse the ``DEVICES`` table of ``xpu-smi`` output, in ``DevID`` order.

    Raises:
        InvalidInputError: no ``DEVICES`` table header, a row with another number of
            cells than the header, or a malformed ``DevID`` / ``Memory`` cell; the
            message names the row.
    """
    lines = text.splitlines()
    header_at = next(
        (i for i, line in enumerate(lines) if line.lstrip().startswith("|") and "DevID" in line),
        None,
    )
    if header_at is None:
        if not text.strip():
            return []
        raise InvalidInputError("xpu-smi: no DEVICES table (no header row with DevID)")
    header = _cells(lines[header_at])
    needed = ("DevID", "PCI Addr", "Model", "Memory")
    missing = [n for n in needed if n not in header]
    if missing:
        raise InvalidInputError(f"xpu-smi: DEVICES table lacks column(s) {', '.join(missing)}")
    col = {name: header.index(name) for name in header}
    devices: list[XpuSmiDevice] = []
    for line in lines[header_at + 1 :]:
        stripped = line.strip()
        if not stripped or set(stripped) <= {"-", "="}:
            if devices:
                break  # the table's closing rule
            continue
        if not stripped.startswith("|"):
            break
        cells = _cells(stripped)
        where = f"xpu-smi: DEVICES row {stripped!r}"
        if len(cells) != len(header):
            raise InvalidInputError(f"{where}: {len(cells)} cells, header has {len(header)}")
        try:
            index = int(cells[col["DevID"]])
        except ValueError:
            raise InvalidInputError(f"{where}: DevID is not a number") from None
        mem = _MEMORY.match(cells[col["Memory"]])
        if mem is None:
            raise InvalidInputError(
                f"{where}: Memory {cells[col['Memory']]!r} is not 'used / total MB'"
            )
        state = cells[col["State"]].upper() if "State" in col else "N"
        devices.append(
            XpuSmiDevice(
                index=index,
                pci=cells[col["PCI Addr"]],
                model=cells[col["Model"]],
                memory_mib=int(mem.group(2)),
                healthy=state != "E",
            )
        )
    return sorted(devices, key=lambda d: d.index)


def device_ids(devices: Sequence[XpuSmiDevice]) -> dict[int, str]:
    """``DevID`` -> device id: ``XPU-<PCI address, ':' as '-'>``, ``-<DevID>`` appended
    when the address is shared."""
    shared = Counter(d.pci for d in devices)
    out = {}
    for d in devices:
        base = "XPU-" + d.pci.replace(":", "-")
        uuid = f"{base}-{d.index}" if shared[d.pci] > 1 else base
        if any(sep in uuid for sep in ",:;") or " " in uuid:
            raise InvalidInputError(f"xpu-smi: device {d.index}: address {d.pci!r} is malformed")
        out[d.index] = uuid
    return out


def is_compute_device(device: XpuSmiDevice) -> bool:
    """False for an SR-IOV physical function (model ``<model>-PF``), which has no compute."""
    return not device.model.upper().endswith("-PF")


def to_devices(rows: Sequence[XpuSmiDevice], config: VendorConfig) -> list[DeviceInfo]:
    """Rows as inventory devices (PROTOCOL.md §2), ``DevID`` order, SR-IOV PFs left out.

    ``memory_mib`` is the total x ``deviceMemoryScaling`` (rounded down), ``cores_pct``
    100 x ``deviceCoreScaling``; ``split_count`` is ``deviceSplitCount`` capped at the
    number of smallest partitions a card holds (98304 / 24576 = 4 on a P800).
    """
    tiers = options.memory_tiers(config)
    split = min(config.split_count, max(1, tiers[-1] // tiers[0]))
    ids = device_ids(rows)
    return [
        inventory_device(
            config,
            uuid=ids[d.index],
            vendor=VENDOR,
            model=d.model,
            index=d.index,
            split_count=split,
            memory_mib=d.memory_mib,
            healthy=d.healthy,
        )
        for d in rows
        if is_compute_device(d)
    ]


def discover(config: VendorConfig, runner: ToolRunner | None = None) -> list[DeviceInfo] | None:
    """The node's XPUs, or None when ``xpu-smi`` is not available (no Kunlunxin driver).

    Raises:
        InvalidInputError: the output cannot be parsed (see ``parse_xpu_smi``).
    """
    text = options.XPU_SMI.output(config, runner)
    return None if text is None else to_devices(parse_xpu_smi(text), config)
