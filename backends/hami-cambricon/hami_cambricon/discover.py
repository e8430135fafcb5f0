"""Finding the node's MLUs from ``cnmon info`` (Cambricon's management tool).

The output format of ``cnmon info``: one block per card, opened by a ``Card <n>`` line
and made of ``<Field> : <value>`` lines; sections such as ``Physical Memory Usage`` hold
indented ``Total`` / ``Used`` / ``Free`` lines in MiB. Source: the layout real-output
parsers rely on (SwanLab's Cambricon collector reads ``Card``, ``Product Name`` and the
``Total`` after ``Physical Memory Usage`` from ``cnmon info -m``); Cambricon's CNMon User
Guide itself was not available when this was written, so the parser is lenient: it
reads ``Product Name`` (the model, e.g. ``MLU370-X8``), ``UUID`` or ``MLU UUID``, the
``Total`` of ``Physical Memory Usage``, and the card number, and ignores everything else.
Device ids carry the ``MLU-`` prefix Cambricon's device plugin gives them
(``cardUUID = "MLU-" + ...`` in cambricon-k8s-device-plugin ``pkg/cndev``), which is also
the form of HAMi's documented ``hami.io/node-mlu-register`` example.

``cnmon`` runs through the kit's ``ToolRunner`` (``ConfiguredTool``: the section's
command and timeout; None when it is missing), which tests replace by a fake or by a
``cat`` of a recorded sample.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import attrs

from hami_core.backend import (
    DeviceInfo,
    InvalidInputError,
    ToolRunner,
    VendorConfig,
    inventory_device,
)

from . import VENDOR, options

_CARD = re.compile(r"^\s*Card\s*:?\s*(\d+)\s*$", re.IGNORECASE)
_FIELD = re.compile(r"^(\s*)([^:]+?)\s*:\s*(.*?)\s*$")
_MIB = re.compile(r"^(\d+)\s*(MiB|MB)?$", re.IGNORECASE)
_SEPARATORS = ",:;"


@attrs.frozen(kw_only=True)
class CnmonCard:
    """One card as ``cnmon info`` reports it.

    Attributes:
        index: the card number (``Card <n>``), the index ``CAMBRICON_VISIBLE_DEVICES`` uses.
        model: ``Product Name``, e.g. ``MLU370-X8``.
        uuid: the device id, ``MLU-`` prefixed.
        memory_mib: ``Physical Memory Usage`` -> ``Total``, MiB.
    """

    index: int
    model: str
    uuid: str
    memory_mib: int


def _normalise_uuid(value: str, *, card: int) -> str:
    uuid = value.strip()
    if not uuid.upper().startswith("MLU-"):
        uuid = f"MLU-{uuid}"
    if any(sep in uuid for sep in _SEPARATORS) or " " in uuid:
        raise InvalidInputError(
            f"cnmon info: card {card}: UUID {value!r} contains a separator of the device list"
        )
    return uuid


def parse_cnmon_info(text: str) -> list[CnmonCard]:
    """Parse ``cnmon info`` output into cards, in card order.

    Raises:
        InvalidInputError: a card block lacks ``Product Name``, a UUID or the physical
            memory total, or a value is malformed; the message names the card.
    """
    blocks: list[tuple[int, list[str]]] = []
    for line in text.splitlines():
        m = _CARD.match(line)
        if m:
            blocks.append((int(m.group(1)), []))
        elif blocks:
            blocks[-1][1].append(line)
    cards = []
    for index, lines in blocks:
        fields: dict[str, str] = {}
        section = ""
        section_indent = -1
        for line in lines:
            m = _FIELD.match(line)
            if not m:
                continue
            indent, key, value = len(m.group(1).expandtabs()), m.group(2).strip(), m.group(3)
            if section and indent <= section_indent:
                section = ""
            if not value:
                section, section_indent = key, indent
                continue
            fields[f"{section}/{key}" if section else key] = value
        where = f"cnmon info: card {index}"
        model = fields.get("Product Name", "").strip()
        if not model:
            raise InvalidInputError(f"{where}: no Product Name")
        raw_uuid = fields.get("UUID") or fields.get("MLU UUID")
        if not raw_uuid:
            raise InvalidInputError(f"{where}: no UUID")
        total = fields.get("Physical Memory Usage/Total")
        if total is None:
            raise InvalidInputError(f"{where}: no Physical Memory Usage Total")
        mm = _MIB.match(total.strip())
        if not mm:
            raise InvalidInputError(f"{where}: memory total {total!r} is not a MiB count")
        cards.append(
            CnmonCard(
                index=index,
                model=model,
                uuid=_normalise_uuid(raw_uuid, card=index),
                memory_mib=int(mm.group(1)),
            )
        )
    return sorted(cards, key=lambda c: c.index)


def to_devices(cards: Iterable[CnmonCard], config: VendorConfig) -> list[DeviceInfo]:
    """Cards as inventory devices (PROTOCOL.md §2), index order.

    ``memory_mib`` is the physical total x ``deviceMemoryScaling`` (rounded down),
    ``cores_pct`` is 100 x ``deviceCoreScaling``, ``split_count`` is ``deviceSplitCount``.
    ``cnmon info`` reports no health, so discovered cards are healthy; the device plugin's
    health checks mark them otherwise.
    """
    return [
        inventory_device(
            config,
            uuid=c.uuid,
            vendor=VENDOR,
            model=c.model,
            index=c.index,
            memory_mib=c.memory_mib,
            healthy=True,
        )
        for c in sorted(cards, key=lambda c: c.index)
    ]


def discover(config: VendorConfig, runner: ToolRunner | None = None) -> list[DeviceInfo] | None:
    """The node's MLUs, or None when ``cnmon`` is not available (no Cambricon driver).

    Raises:
        InvalidInputError: the output cannot be parsed (see ``parse_cnmon_info``).
    """
    text = options.CNMON.output(config, runner)
    return None if text is None else to_devices(parse_cnmon_info(text), config)
