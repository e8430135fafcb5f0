"""Finding this node's AMD GPUs with the ROCm tools (``hami_discover``).

Two documented outputs are read, through ``ToolRunner`` (``argv -> stdout or None``)
so tests answer from samples:

- ``rocm-smi --showproductname --showmeminfo vram --showuniqueid --showbus --json``: one
  object per ``cardN`` with ``Card series`` (the model), ``VRAM Total Memory (B)``,
  ``Unique ID`` (``0x`` + 16 hex digits) and ``PCI Bus``;
- ``rocminfo``: one block per HSA agent; for ``Device Type: GPU`` agents ``Uuid``
  (``GPU-`` + the same 16 hex digits, the form ``ROCR_VISIBLE_DEVICES`` takes),
  ``Marketing Name`` and ``Compute Unit`` (the CU count).

A GPU becomes ``DeviceInfo(uuid=GPU-<hex>, model=<series>, memory_mib=VRAM x
deviceMemoryScaling, cores_pct=<CUs>, split_count=deviceSplitCount)``, the inventory
HAMi's AMD device plugin registers under ``hami.io/node-amd-register``
(``docs/develop/amd-vgpu.md`` §4.1: ``devmem`` MiB, ``devcore`` the CU count).
"""

from __future__ import annotations

import json
import logging
import re

import attrs

from hami_core.backend import DeviceInfo, ToolRunner, VendorConfig

from . import VENDOR

log = logging.getLogger(__name__)

SMI_ARGS = ("--showproductname", "--showmeminfo", "vram", "--showuniqueid", "--showbus", "--json")


@attrs.frozen(kw_only=True)
class SmiCard:
    """One ``cardN`` of ``rocm-smi --json``."""

    index: int
    series: str
    vram_bytes: int
    unique_id: str  # 16 lower-case hex digits, "" when unknown
    bus: str


@attrs.frozen(kw_only=True)
class Agent:
    """One GPU agent of ``rocminfo``."""

    uuid: str
    name: str
    compute_units: int


def _hex(value: str) -> str:
    text = value.strip().lower().removeprefix("gpu-").removeprefix("0x")
    return text if re.fullmatch(r"[0-9a-f]+", text) else ""


def parse_smi(text: str) -> list[SmiCard]:
    """``rocm-smi --json`` -> cards by index. Raises ``ValueError`` when not JSON."""
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("rocm-smi --json: expected an object")
    cards = []
    for key, item in data.items():
        m = re.fullmatch(r"card(\d+)", key)
        if not m or not isinstance(item, dict):
            continue
        vram = str(item.get("VRAM Total Memory (B)", "0")).strip()
        cards.append(
            SmiCard(
                index=int(m.group(1)),
                series=str(item.get("Card series", "")).strip() or VENDOR,
                vram_bytes=int(vram) if vram.isdigit() else 0,
                unique_id=_hex(str(item.get("Unique ID", ""))),
                bus=str(item.get("PCI Bus", "")).strip(),
            )
        )
    return sorted(cards, key=lambda c: c.index)


def parse_rocminfo(text: str) -> list[Agent]:
    """``rocminfo`` -> its GPU agents in order (CPU agents are skipped)."""
    agents: list[Agent] = []
    for block in re.split(r"\n\*+\s*\nAgent \d+\s*\n\*+\s*\n", "\n" + text):
        fields: dict[str, str] = {}
        for line in block.splitlines():
            key, sep, value = line.strip().partition(":")
            if sep and key and key not in fields:
                fields[key.strip()] = value.strip()
        if fields.get("Device Type") != "GPU":
            continue
        units = fields.get("Compute Unit", "0")
        agents.append(
            Agent(
                uuid=fields.get("Uuid", ""),
                name=fields.get("Marketing Name", ""),
                compute_units=int(units) if units.isdigit() else 0,
            )
        )
    return agents


def discover(config: VendorConfig, runner: ToolRunner) -> list[DeviceInfo] | None:
    """The node's AMD GPUs; None when ``rocm-smi`` is missing or fails.

    A card is matched to its ``rocminfo`` agent by unique id, else by position; its
    UUID is the agent's ``GPU-<hex>`` (or ``GPU-<unique id>``, or ``AMD-card<N>``).
    """
    smi = runner([str(config.options.get("rocmSmiPath", "rocm-smi")), *SMI_ARGS])
    if smi is None:
        return None
    try:
        cards = parse_smi(smi)
    except ValueError as exc:
        log.warning("rocm-smi output unreadable: %s", exc)
        return None
    info = runner([str(config.options.get("rocminfoPath", "rocminfo"))]) or ""
    agents = parse_rocminfo(info)
    by_hex = {_hex(a.uuid): a for a in agents if _hex(a.uuid)}
    out = []
    for pos, card in enumerate(cards):
        agent = by_hex.get(card.unique_id) or (agents[pos] if pos < len(agents) else None)
        if agent is not None and agent.uuid:
            uuid = agent.uuid
        elif card.unique_id:
            uuid = f"GPU-{card.unique_id}"
        else:
            uuid = f"AMD-card{card.index}"
        out.append(
            DeviceInfo(
                uuid=uuid,
                vendor=VENDOR,
                model=card.series if card.series != VENDOR or agent is None else agent.name,
                index=card.index,
                split_count=config.split_count,
                memory_mib=int(card.vram_bytes // (1024 * 1024) * config.memory_scaling),
                cores_pct=agent.compute_units if agent is not None else 0,
            )
        )
    return out
