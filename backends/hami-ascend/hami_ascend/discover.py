"""Finding this node's Ascend chips with ``npu-smi`` (``hami_discover``).

Hardware access sits behind ``CommandRunner`` (``argv -> stdout or None``); tests use a
fake that answers from recorded samples. Discovery runs ``npu-smi info -m`` (chips and
logic ids), ``npu-smi info`` (name, health, PCIe address) and, per chip, ``npu-smi info -t
board -i <npu> -c <chip>`` (the VDie ID, HAMi's chip UUID). The inventory it returns is
what HAMi's ascend-device-plugin registers (``internal/server/register.go``): ``type`` is
the model's common word, ``devmem`` the model's ``memoryAllocatable``, ``count`` the number
of smallest templates a chip holds (template mode) or ``deviceSplitCount`` (hami-core
mode), indexes from 0 in logic-id order. ``devcore`` is 100 x ``deviceCoreScaling``
(percent; HAMi writes the AI Core count in template mode, which fit also understands).

The chips' physical ids, which Ascend Docker Runtime takes in ``ASCEND_VISIBLE_DEVICES``,
are kept in a node-local table (``CHIPS``) for ``hami_allocate``: the Phy-ID column of
``npu-smi info -m`` / ``npu-smi info`` when printed (Atlas A3), else the logic id (equal to
the physical id on the single-chip cards of Atlas A2 and 300I servers).
"""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Mapping, Sequence
from typing import Protocol

import attrs

from hami_core.backend import DeviceInfo

from .models import MODE_HAMI_CORE, AscendSettings, ModelSpec
from .npusmi import InfoRow, parse_board, parse_info, parse_mapping, vdie_uuid

log = logging.getLogger(__name__)


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
class Chip:
    """What allocation needs to know of one local chip.

    Attributes:
        uuid: the chip UUID (VDie ID).
        vendor: the model's vendor key.
        phy_id: the physical id (``/dev/davinci<phy_id>``, ``ASCEND_VISIBLE_DEVICES``).
        logic_id: the logic id.
        npu_id, chip_id: card and chip in card (``npu-smi -i`` / ``-c``).
        bus_id: PCIe address.
    """

    uuid: str
    vendor: str
    phy_id: int
    logic_id: int
    npu_id: int
    chip_id: int
    bus_id: str


@attrs.frozen(kw_only=True)
class Discovery:
    """The result of one discovery: the inventory and the local chip table."""

    devices: tuple[DeviceInfo, ...]
    chips: Mapping[str, Chip]


class ChipTable:
    """Node-local uuid -> ``Chip``, refreshed by every discovery (thread-safe enough:
    one assignment of a new dict)."""

    def __init__(self) -> None:
        self._chips: dict[str, Chip] = {}

    def replace(self, chips: Mapping[str, Chip]) -> None:
        self._chips = dict(chips)

    def get(self, uuid: str) -> Chip | None:
        return self._chips.get(uuid)

    def __len__(self) -> int:
        return len(self._chips)


#: The table ``hami_discover`` fills and ``hami_allocate`` reads.
CHIPS = ChipTable()
#: The runner the hooks use (tests replace it).
RUNNER: list[CommandRunner] = [SubprocessRunner()]


def _model_of(name: str, cfg: AscendSettings) -> ModelSpec | None:
    return next((m for m in cfg.models.values() if m.chip_matches(name)), None)


def discover(cfg: AscendSettings, runner: CommandRunner) -> Discovery | None:
    """Discover the node's chips.

    Returns: the chips of known models in logic-id order (``[]`` when there are none);
        None when ``npu-smi`` is missing or fails (no driver on this node).
    """
    mapping_text = runner([cfg.npu_smi, "info", "-m"])
    info_text = runner([cfg.npu_smi, "info"])
    if mapping_text is None or info_text is None:
        return None
    try:
        mapping = parse_mapping(mapping_text)
        table = {(r.npu_id, r.chip_id): r for r in parse_info(info_text)}
    except ValueError as exc:
        log.warning("cannot read npu-smi output: %s", exc)
        return None
    common = cfg.common
    per_vendor: dict[str, int] = {}
    devices: list[DeviceInfo] = []
    chips: dict[str, Chip] = {}
    for row in sorted(mapping, key=lambda r: r.logic_id):
        info: InfoRow | None = table.get((row.npu_id, row.chip_id))
        model = _model_of(info.name if info else row.chip_name, cfg) or _model_of(
            row.chip_name, cfg
        )
        if model is None:
            log.info(
                "npu %d chip %d (%s): no configured model", row.npu_id, row.chip_id, row.chip_name
            )
            continue
        board = runner(
            [cfg.npu_smi, "info", "-t", "board", "-i", str(row.npu_id), "-c", str(row.chip_id)]
        )
        bus = info.bus_id if info else ""
        uuid = vdie_uuid(parse_board(board)) if board else None
        if uuid is None:
            uuid = f"{model.vendor}-{bus or row.logic_id}"
            log.warning("npu %d chip %d: no VDie ID, using %s", row.npu_id, row.chip_id, uuid)
        phy = row.phy_id if row.phy_id is not None else (info.phy_id if info else None)
        index = per_vendor.get(model.vendor, 0)
        per_vendor[model.vendor] = index + 1
        if cfg.mode == MODE_HAMI_CORE:
            split, memory = (
                common.split_count,
                int(model.memory_allocatable_mib * common.memory_scaling),
            )
        else:
            split, memory = model.template_split_count, model.memory_allocatable_mib
        devices.append(
            DeviceInfo(
                uuid=uuid,
                vendor=model.vendor,
                model=model.vendor,
                index=index,
                split_count=split,
                memory_mib=memory,
                cores_pct=round(100 * common.core_scaling),
                numa=0,
                healthy=(info.health.upper() == "OK") if info else False,
            )
        )
        chips[uuid] = Chip(
            uuid=uuid,
            vendor=model.vendor,
            phy_id=phy if phy is not None else row.logic_id,
            logic_id=row.logic_id,
            npu_id=row.npu_id,
            chip_id=row.chip_id,
            bus_id=bus,
        )
    return Discovery(devices=tuple(devices), chips=chips)


def discover_and_remember(cfg: AscendSettings) -> list[DeviceInfo] | None:
    """``hami_discover``: discover with the hooks' runner and refresh ``CHIPS``."""
    found = discover(cfg, RUNNER[0])
    if found is None:
        return None
    CHIPS.replace(found.chips)
    return list(found.devices)
