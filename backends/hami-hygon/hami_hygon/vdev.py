"""vDCU configuration files: what limits a container to a slice of a DCU.

Hygon's runtime (hyhal / DTK user space) reads ``/etc/vdev/docker/vdev<N>.conf`` inside a
container and confines it to the compute units and memory it names ("HAMi + Hygon DCU:
vDCU" article: ``docker run --device=/dev/kfd --device=/dev/dri --device=/dev/mkfd -v
/etc/vdev/vdev0.conf:/etc/vdev/docker/vdev0.conf:ro``). The format is the one HAMi's
dcu-vgpu-device-plugin writes (``internal/pkg/dcu/server.go`` ``createvdevFile``)::

    PciBusId: 0000:9f:00.0
    cu_mask: 0x000000000000000f
    cu_mask: 0x0000000000000000
    cu_count: 4
    mem: 2000 MiB
    device_id: 0
    vdev_id: 0
    pipe_id: 0
    enable: 1

``cu_mask`` is two 64-bit masks of compute units (CUs 0-63, then 64-127), 16 hex
digits each; ``cu_count`` is their number of set bits (the runtime checks it against the
masks' Hamming weight); ``vdev_id`` must be the ``<N>`` of the file name. Containers on
one DCU get disjoint CU masks, node-wide distinct ``vdev_id`` and per-DCU distinct
``pipe_id`` (HAMi allows 200 vDCUs per node and 20 pipes per DCU).

The vDCUs handed out are kept in the record ``vdevs`` of the core's ``NodeState``
(``{"<podUID>_<container>_<index>": fields}``); each container's file lies in its own
directory, ``<root>/<podUID>_<container>_<index>``, mounted at ``/etc/vdev/docker``, and
is written by the device plugin from ``ContainerAllocation.files`` (``hami simulate``
writes none). ``prune`` drops the records of pods that are gone (HAMi's plugin does it by
listing pods).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final

import attrs

from hami_core.backend import InvalidInputError, NodeState

MAX_VDEVS: Final = 200
MAX_PIPES: Final = 20
MASK_BITS: Final = 64
#: The ``NodeState`` record of the vDCUs handed out.
RECORD: Final = "vdevs"

_FIELD = re.compile(r"^\s*([A-Za-z_]+)\s*:\s*(.*?)\s*$")


@attrs.frozen(kw_only=True)
class VdevConfig:
    """One vDCU.

    Attributes:
        pci_bus_id: the physical DCU's PCIe address.
        cu_masks: the two CU masks (CUs 0-63, CUs 64-127).
        memory_mib: memory of the slice, MiB.
        device_id: the physical DCU's index.
        vdev_id: node-wide id, the ``<N>`` of ``vdev<N>.conf``.
        pipe_id: per-DCU pipe id.
    """

    pci_bus_id: str
    cu_masks: tuple[int, int]
    memory_mib: int
    device_id: int
    vdev_id: int
    pipe_id: int

    @property
    def cu_count(self) -> int:
        """Compute units of the slice: the masks' set bits."""
        return bin(self.cu_masks[0]).count("1") + bin(self.cu_masks[1]).count("1")

    @property
    def cu_bits(self) -> int:
        """Both masks as one 128-bit integer."""
        return self.cu_masks[0] | (self.cu_masks[1] << MASK_BITS)


def render(conf: VdevConfig) -> str:
    """The file's text (HAMi ``createvdevFile``)."""
    return (
        f"PciBusId: {conf.pci_bus_id}\n"
        f"cu_mask: 0x{conf.cu_masks[0]:016x}\n"
        f"cu_mask: 0x{conf.cu_masks[1]:016x}\n"
        f"cu_count: {conf.cu_count}\n"
        f"mem: {conf.memory_mib} MiB\n"
        f"device_id: {conf.device_id}\n"
        f"vdev_id: {conf.vdev_id}\n"
        f"pipe_id: {conf.pipe_id}\n"
        "enable: 1\n"
    )


def parse(text: str) -> VdevConfig:
    """Read a file written by ``render`` (or by HAMi's plugin).

    Raises:
        ValueError: a field is missing or malformed.
    """
    fields: dict[str, list[str]] = {}
    for line in text.splitlines():
        m = _FIELD.match(line)
        if m:
            fields.setdefault(m.group(1), []).append(m.group(2))
    try:
        masks = [int(v, 16) for v in fields["cu_mask"]]
        masks += [0] * (2 - len(masks))
        return VdevConfig(
            pci_bus_id=fields["PciBusId"][0],
            cu_masks=(masks[0], masks[1]),
            memory_mib=int(fields["mem"][0].split()[0]),
            device_id=int(fields["device_id"][0]),
            vdev_id=int(fields["vdev_id"][0]),
            pipe_id=int(fields["pipe_id"][0]),
        )
    except (KeyError, IndexError, ValueError) as exc:
        raise ValueError(f"vdev configuration: missing or bad field: {exc}") from exc


def cu_count_of(cores_pct: int, compute_units: int) -> int:
    """CUs of a slice: ``cores_pct`` percent of the DCU's CUs, rounded down, at least 1
    (HAMi: ``Usedcores * ComputeUnit / 100``)."""
    return max(1, cores_pct * compute_units // 100)


def _fields(conf: VdevConfig) -> dict[str, Any]:
    return {**attrs.asdict(conf), "cu_masks": list(conf.cu_masks)}


def _of_fields(fields: Any) -> VdevConfig | None:
    try:
        masks = fields["cu_masks"]
        return VdevConfig(
            pci_bus_id=str(fields["pci_bus_id"]),
            cu_masks=(int(masks[0]), int(masks[1])),
            memory_mib=int(fields["memory_mib"]),
            device_id=int(fields["device_id"]),
            vdev_id=int(fields["vdev_id"]),
            pipe_id=int(fields["pipe_id"]),
        )
    except (KeyError, IndexError, TypeError, ValueError):
        return None


class VdevAllocator:
    """Chooses one vDCU per container, kept in the core's ``NodeState``.

    ``allocate`` is idempotent per container: kubelet may call Allocate again for the
    same container, and gets the same vDCU back.
    """

    def __init__(self, root: Path, state: NodeState) -> None:
        self.root = root
        self.state = state

    def _existing(self) -> dict[str, VdevConfig]:
        out = {}
        for key, fields in self.state.read(RECORD).items():
            conf = _of_fields(fields)
            if conf is not None:
                out[key] = conf
        return out

    def allocate(
        self,
        *,
        pod_uid: str,
        container: str,
        device_id: int,
        pci_bus_id: str,
        compute_units: int,
        memory_mib: int,
        cores_pct: int,
    ) -> tuple[Path, VdevConfig]:
        """Choose (or find) the container's vDCU; returns its directory and configuration.

        Raises:
            InvalidInputError: the DCU's compute units are unknown, or too few CUs,
                vDCU ids or pipes are free.
        """
        key = f"{pod_uid}_{container}_{device_id}"
        directory = self.root / key
        existing = self._existing()
        if key in existing:
            return directory, existing[key]
        if compute_units <= 0:
            raise InvalidInputError(
                f"DCU {device_id}: its compute units are unknown (hy-smi virtual "
                "-show-device-info), so a vDCU slice cannot be made"
            )
        wanted = cu_count_of(cores_pct, compute_units)
        used_bits = 0
        used_vdevs, used_pipes = set(), set()
        for conf in existing.values():
            used_vdevs.add(conf.vdev_id)
            if conf.device_id == device_id:
                used_bits |= conf.cu_bits
                used_pipes.add(conf.pipe_id)
        free = [b for b in range(min(compute_units, 2 * MASK_BITS)) if not used_bits >> b & 1]
        if len(free) < wanted:
            raise InvalidInputError(
                f"DCU {device_id}: {wanted} compute units wanted, {len(free)} free"
            )
        vdev_id = next((i for i in range(MAX_VDEVS) if i not in used_vdevs), None)
        pipe_id = next((i for i in range(MAX_PIPES) if i not in used_pipes), None)
        if vdev_id is None or pipe_id is None:
            raise InvalidInputError(f"DCU {device_id}: no free vDCU id or pipe")
        bits = 0
        for b in free[:wanted]:
            bits |= 1 << b
        conf = VdevConfig(
            pci_bus_id=pci_bus_id,
            cu_masks=(bits & (2**MASK_BITS - 1), bits >> MASK_BITS),
            memory_mib=memory_mib,
            device_id=device_id,
            vdev_id=vdev_id,
            pipe_id=pipe_id,
        )
        self.state.write(
            RECORD, {**{k: _fields(c) for k, c in existing.items()}, key: _fields(conf)}
        )
        return directory, conf

    def prune(self, live_pod_uids: Iterable[str]) -> list[str]:
        """Drop the vDCUs of pods not in ``live_pod_uids``; returns their keys."""
        live = set(live_pod_uids)
        existing = self._existing()
        gone = sorted(k for k in existing if k.split("_", 1)[0] not in live)
        if gone:
            kept = {k: _fields(c) for k, c in existing.items() if k not in gone}
            self.state.write(RECORD, kept)
        return gone
