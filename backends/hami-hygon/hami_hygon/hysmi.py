"""Parsers of ``hy-smi`` output (pure functions; tested on recorded samples).

``hy-smi`` is Hygon's fork of AMD's ``rocm-smi`` (shipped in hyhal / DTK) and keeps its
output shapes (ROCm SMI documentation: ``--showproductname``, ``--showbus``,
``--showmeminfo vram``, ``--showserial``, ``--json``):

- text: one ``<LABEL>[<index>] : <key>: <value>`` line per device and field between
  ``System Management Interface`` banners, the label being ``DCU`` or, on newer
  drivers, ``HCU``::

      DCU[0]          : Card Series:           K100_AI
      DCU[0]          : vram Total Memory (MiB): 65520
      HCU[0]          : PCI Bus: 0000:05:00.0 --> SN: 2500238601000586

- ``--json``: ``{"card<index>": {"<key>": "<value>", ...}, ...}`` with the same keys;

- ``hy-smi virtual -show-device-info`` (HAMi's DCU guide; the "HAMi + Hygon DCU vDCU"
  article) describes each physical DCU for vDCU slicing::

      Device 0:
          Actual Device: 0
          Compute units: 60
          Global memory: 34342961152 bytes

Keys are matched case-insensitively (``Card Series`` / ``Card series``). The ``PCI Bus``
value may carry ``--> SN: <serial> --> OAM ID: <n>`` after the address (newer hy-smi).
"""

from __future__ import annotations

import json
import re

import attrs

_LINE = re.compile(r"^\s*(?:DCU|HCU|GPU)\s*\[\s*(\d+)\s*\]\s*:\s*([^:]+?)\s*:\s+(.*?)\s*$")
_VIRTUAL_DEVICE = re.compile(r"^\s*Device\s+(\d+)\s*:\s*$")
_KEY_VALUE = re.compile(r"^\s*([^:]+?)\s*:\s*(.*?)\s*$")


@attrs.frozen(kw_only=True)
class HyDevice:
    """One DCU as ``hy-smi`` describes it.

    Attributes:
        index: the DCU index (``DCU[i]`` / ``card<i>``, ``hy-smi -d``).
        series: the card series, e.g. ``K100_AI``, ``Z100L`` ("" when not printed).
        bus_id: PCIe address, e.g. ``0000:9F:00.0`` ("" when not printed).
        serial: the serial number ("" when not printed or ``N/A``).
        memory_total_mib: VRAM total, MiB (0 when not printed).
    """

    index: int
    series: str = ""
    bus_id: str = ""
    serial: str = ""
    memory_total_mib: int = 0


@attrs.frozen(kw_only=True)
class VirtualInfo:
    """One physical DCU of ``hy-smi virtual -show-device-info``.

    Attributes:
        index: ``Device <i>``.
        compute_units: compute units (CUs) of the DCU.
        memory_bytes: global memory, bytes.
    """

    index: int
    compute_units: int
    memory_bytes: int


def _device(index: int, fields: dict[str, str]) -> HyDevice:
    low = {k.strip().lower(): v.strip() for k, v in fields.items()}
    bus_field = low.get("pci bus", "")
    parts = [p.strip() for p in bus_field.split("-->")]
    bus = parts[0] if parts else ""
    serial = low.get("serial number", "")
    for extra in parts[1:]:
        key, _, value = extra.partition(":")
        if key.strip().upper() == "SN" and not serial:
            serial = value.strip()
    if serial.upper() in ("N/A", "NA", "UNKNOWN"):
        serial = ""
    memory = low.get("vram total memory (mib)", "")
    if not memory and low.get("vram total memory (b)", "").isdigit():
        memory = str(int(low["vram total memory (b)"]) // (1024 * 1024))
    return HyDevice(
        index=index,
        series=low.get("card series", ""),
        bus_id=bus,
        serial=serial,
        memory_total_mib=int(memory) if memory.isdigit() else 0,
    )


def parse_text(text: str) -> list[HyDevice]:
    """Parse the text form (``DCU[i] : key: value`` lines), devices by index."""
    fields: dict[int, dict[str, str]] = {}
    for line in text.splitlines():
        m = _LINE.match(line)
        if m:
            fields.setdefault(int(m.group(1)), {})[m.group(2)] = m.group(3)
    return [_device(i, fields[i]) for i in sorted(fields)]


def parse_json(text: str) -> list[HyDevice]:
    """Parse the ``--json`` form (``{"card<i>": {...}}``), devices by index.

    Raises:
        ValueError: the text is not a JSON object.
    """
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("hy-smi --json: expected an object")
    out = []
    for key, value in data.items():
        m = re.fullmatch(r"card(\d+)", str(key))
        if m and isinstance(value, dict):
            out.append(_device(int(m.group(1)), {str(k): str(v) for k, v in value.items()}))
    return sorted(out, key=lambda d: d.index)


def parse_virtual_info(text: str) -> list[VirtualInfo]:
    """Parse ``hy-smi virtual -show-device-info``, devices by index."""
    out: list[VirtualInfo] = []
    current: int | None = None
    fields: dict[str, str] = {}

    def flush() -> None:
        if current is None:
            return
        cu = fields.get("compute units", "")
        mem = fields.get("global memory", "").split()
        out.append(
            VirtualInfo(
                index=current,
                compute_units=int(cu) if cu.isdigit() else 0,
                memory_bytes=int(mem[0]) if mem and mem[0].isdigit() else 0,
            )
        )

    for line in text.splitlines():
        m = _VIRTUAL_DEVICE.match(line)
        if m:
            flush()
            current, fields = int(m.group(1)), {}
            continue
        kv = _KEY_VALUE.match(line)
        if kv and current is not None:
            fields[kv.group(1).lower()] = kv.group(2)
    flush()
    return sorted(out, key=lambda v: v.index)


def device_uuid(device: HyDevice) -> str:
    """The DCU UUID HAMi's dcu-vgpu-device-plugin registers: ``DCU-<serial number>``
    (``GetDeviceUUIDFromDevSerialNumber``), or its older ``DCU-<index>`` when the serial
    number is unknown. Characters outside ``[A-Za-z0-9._-]`` become ``-`` (the pod device
    list uses ``,`` ``:`` ``;`` as separators, PROTOCOL.md §3)."""
    serial = re.sub(r"[^A-Za-z0-9._-]", "-", device.serial)
    return f"DCU-{serial or device.index}"
