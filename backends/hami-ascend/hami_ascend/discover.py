"""Finding this node's Ascend chips with ``npu-smi`` (``hami_discover``).

Hardware access sits behind the kit's ``ToolRunner`` (``argv -> stdout or None``); tests use a
fake that answers from recorded samples. Discovery runs ``npu-smi info -m`` (chips and
logic ids), ``npu-smi info`` (name, health, PCIe address) and, per chip, ``npu-smi info -t
board -i <npu> -c <chip>`` (the VDie ID, HAMi's chip UUID). The inventory it returns is
what HAMi's ascend-device-plugin registers (``internal/server/register.go``): ``type`` is
the model's common word, ``devmem`` the model's ``memoryAllocatable``, ``count`` the number
of smallest templates a chip holds (template mode) or ``deviceSplitCount`` (hami-core
mode), indexes from 0 in logic-id order. ``devcore`` is 100 x ``deviceCoreScaling``
(percent; HAMi writes the AI Core count in template mode, which fit also understands).

The chips' physical ids, which Ascend Docker Runtime takes in ``ASCEND_VISIBLE_DEVICES``,
ride on each device's ``node_local`` (never in the inventory) for ``hami_allocate``, which
receives the node's discovered devices: the Phy-ID column of
``npu-smi info -m`` / ``npu-smi info`` when printed (Atlas A3), else the logic id (equal to
the physical id on the single-chip cards of Atlas A2 and 300I servers).
"""

from __future__ import annotations

import logging

from hami_core.backend import (
    DEFAULT_TOOL_TIMEOUT_S,
    WHOLE_CORES_PCT,
    DeviceInfo,
    SubprocessRunner,
    ToolRunner,
    scaled,
)

from .models import MODE_HAMI_CORE, AscendSettings, ModelSpec
from .npusmi import InfoRow, parse_board, parse_info, parse_mapping, vdie_uuid

log = logging.getLogger(__name__)


#: ``node_local`` keys a discovered chip carries (never in the inventory).
PHY_ID = "phyId"
NPU_ID = "npuId"
CHIP_ID = "chipId"


def runner_for(cfg: AscendSettings) -> ToolRunner:
    """The real ``npu-smi`` runner of the hooks (tests replace this function)."""
    return SubprocessRunner(timeout_s=DEFAULT_TOOL_TIMEOUT_S)


def _model_of(name: str, cfg: AscendSettings) -> ModelSpec | None:
    return next((m for m in cfg.models.values() if m.chip_matches(name)), None)


def discover(cfg: AscendSettings, runner: ToolRunner) -> list[DeviceInfo] | None:
    """Discover the node's chips.

    Returns: the chips of known models in logic-id order (``[]`` when there are none),
        each with its physical id, card and chip in ``node_local`` (``PHY_ID``,
        ``NPU_ID``, ``CHIP_ID``); None when ``npu-smi`` is missing or fails (no driver
        on this node).
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
                scaled(model.memory_allocatable_mib, common.memory_scaling),
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
                cores_pct=scaled(WHOLE_CORES_PCT, common.core_scaling),
                numa=0,
                healthy=(info.health.upper() == "OK") if info else False,
                node_local={
                    PHY_ID: str(phy if phy is not None else row.logic_id),
                    NPU_ID: str(row.npu_id),
                    CHIP_ID: str(row.chip_id),
                },
            )
        )
    return devices
