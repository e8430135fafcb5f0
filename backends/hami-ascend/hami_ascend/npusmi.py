"""Parsers of ``npu-smi`` output (pure functions; tested on recorded samples).

Formats, from Huawei's documentation of ``npu-smi`` (Ascend HDK "npu-smi 命令参考": ``info``,
``info -m``, ``info -t board -i <id> -c <chip_id>``; examples reproduced in MindCluster's
docs, Ascend/mind-cluster ``docs/zh``) and the Ascend Docker Runtime guide:

``npu-smi info`` prints one two-line block per chip::

    | NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|
    | Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |
    +===========================+===============+====================================================+
    | 0     910B3               | OK            | 93.6        40                0    / 0             |
    | 0                         | 0000:C1:00.0  | 0           0    / 0          3161 / 65536         |

The second header line names the second row's columns: ``Chip`` (Atlas A2), ``Chip
Device`` (Atlas 300I Duo / 310P: chip in card, logic device id) or ``Chip Phy-ID``
(Atlas A3 / 910C: two chips per NPU, with their physical ids). Memory is ``HBM-Usage``
when present (910), else ``Memory-Usage`` (310P), both MB used / total. A second table of
processes follows and is ignored.

``npu-smi info -m`` maps cards and chips to logic ids; rows whose logic id is ``-`` are
the card's MCU, not an NPU::

    NPU ID     Chip ID    Chip Logic ID    [Chip Phy-ID]    Chip Name
    0          0          0                [0]              Ascend 910B3
    0          1          -                [-]              Mcu

``npu-smi info -t board -i <npu> -c <chip>`` prints ``key : value`` lines, among them
``VDie ID : 42C711D4 20B03704 4A10C8D4 14CC040A D2102003``; HAMi's ascend-device-plugin
uses the VDie ID as the chip UUID, formatted by npu-exporter's ``DcGetDieID`` as the five
words upper-case, joined by ``-``.
"""

from __future__ import annotations

import re

import attrs

_PAIR = re.compile(r"(\d+)\s*/\s*(\d+)")
_COLUMNS = re.compile(r"\t+|\s{2,}")


@attrs.frozen(kw_only=True)
class MapRow:
    """One NPU chip of ``npu-smi info -m``.

    Attributes:
        npu_id: the card (``-i``).
        chip_id: the chip in the card (``-c``).
        logic_id: the chip's logic id.
        phy_id: the chip's physical id when the tool prints it (``Chip Phy-ID``), else None.
        chip_name: e.g. ``Ascend 910B3``.
    """

    npu_id: int
    chip_id: int
    logic_id: int
    phy_id: int | None
    chip_name: str


@attrs.frozen(kw_only=True)
class InfoRow:
    """One chip of the ``npu-smi info`` table.

    Attributes:
        npu_id, chip_id: card and chip in card.
        name: the chip name, e.g. ``910B3``, ``310P3``, ``Ascend910``.
        health: ``OK``, ``Warning``, ``Alarm``, ``Critical`` (as printed).
        bus_id: PCIe address, e.g. ``0000:C1:00.0``.
        memory_total_mib: HBM total (910), else DDR total (310P), MB as printed.
        device_id: the logic device id of a ``Chip Device`` layout, else None.
        phy_id: the physical id of a ``Chip Phy-ID`` layout, else None.
    """

    npu_id: int
    chip_id: int
    name: str
    health: str
    bus_id: str
    memory_total_mib: int
    device_id: int | None = None
    phy_id: int | None = None


def _int(text: str) -> int | None:
    text = text.strip()
    return int(text) if text.isdigit() else None


def parse_mapping(text: str) -> list[MapRow]:
    """Parse ``npu-smi info -m``; the MCU rows (logic id ``-``) are left out.

    Raises:
        ValueError: there is no ``NPU ID ... Chip Logic ID`` header.
    """
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    header_at = next((i for i, ln in enumerate(lines) if ln.startswith("NPU ID")), None)
    if header_at is None:
        raise ValueError("npu-smi info -m: no 'NPU ID' header line")
    header = [h.strip().lower() for h in _COLUMNS.split(lines[header_at])]
    if "chip logic id" not in header:
        raise ValueError(f"npu-smi info -m: no 'Chip Logic ID' column in {lines[header_at]!r}")
    col = {name: i for i, name in enumerate(header)}
    phy_col = next(
        (col[n] for n in ("chip phy-id", "chip phy-id ", "chip phyid") if n in col), None
    )
    rows = []
    for line in lines[header_at + 1 :]:
        cells = _COLUMNS.split(line)
        if len(cells) < len(header):
            continue
        npu, chip = _int(cells[col["npu id"]]), _int(cells[col["chip id"]])
        logic = _int(cells[col["chip logic id"]])
        if npu is None or chip is None or logic is None:
            continue  # MCU rows and anything that is not a chip
        rows.append(
            MapRow(
                npu_id=npu,
                chip_id=chip,
                logic_id=logic,
                phy_id=_int(cells[phy_col]) if phy_col is not None else None,
                chip_name=" ".join(cells[col["chip name"] :]).strip() if "chip name" in col else "",
            )
        )
    return rows


def parse_info(text: str) -> list[InfoRow]:
    """Parse the chip table of ``npu-smi info`` (the process table after it is ignored).

    Raises:
        ValueError: a chip block is cut short or its numbers do not parse.
    """
    rows: list[InfoRow] = []
    second_col = ""
    pending: tuple[int, str, str] | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        first = cells[0].split()
        if first[:1] == ["Chip"]:  # the second header line names the second row's layout
            second_col = first[1].lower() if len(first) > 1 else ""
            continue
        if len(cells) >= 2 and cells[1].lower().startswith("process id"):
            break  # the process table follows the chip table
        if not first or not first[0].isdigit() or len(cells) < 3:
            continue
        if pending is None:
            if len(first) < 2:
                raise ValueError(f"npu-smi info: chip line without a name: {line!r}")
            pending = (int(first[0]), " ".join(first[1:]), cells[1])
            continue
        npu_id, name, health = pending
        pending = None
        pairs = _PAIR.findall(cells[2])
        if not pairs:
            raise ValueError(f"npu-smi info: no memory usage in {line!r}")
        other = _int(first[1]) if len(first) > 1 else None
        rows.append(
            InfoRow(
                npu_id=npu_id,
                chip_id=int(first[0]),
                name=name,
                health=health,
                bus_id=cells[1],
                memory_total_mib=int(pairs[-1][1]),
                device_id=other if second_col == "device" else None,
                phy_id=other if second_col.startswith("phy") else None,
            )
        )
    if pending is not None:
        raise ValueError("npu-smi info: the last chip block has no second line")
    return rows


def parse_board(text: str) -> dict[str, str]:
    """Parse ``npu-smi info -t board -i <npu> -c <chip>`` into ``{key: value}``."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip():
            out[key.strip()] = value.strip()
    return out


def vdie_uuid(board: dict[str, str]) -> str | None:
    """The chip UUID HAMi's ascend-device-plugin uses: the VDie ID's five words,
    upper-case, joined by ``-`` (``42C711D4-20B03704-4A10C8D4-14CC040A-D2102003``); None
    when the board output has no VDie ID."""
    value = board.get("VDie ID") or board.get("Die ID")
    if not value:
        return None
    words = value.split()
    if not words or not all(re.fullmatch(r"[0-9A-Fa-f]{1,8}", w) for w in words):
        return None
    return "-".join(w.upper().zfill(8) for w in words)
