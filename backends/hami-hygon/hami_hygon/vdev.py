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

The allocator keeps its state in the files themselves: one directory per container,
``<root>/<podUID>_<container>_<index>``, mounted at ``/etc/vdev/docker``. Directories of
pods that are gone must be removed with ``prune`` (HAMi's plugin does it by listing pods).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Final

import attrs

from hami_core.backend import InvalidInputError

MAX_VDEVS: Final = 200
MAX_PIPES: Final = 20
MASK_BITS: Final = 64

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


class VdevAllocator:
    """Writes one vDCU configuration per container under ``root``.

    ``allocate`` is idempotent per container: kubelet may call Allocate again for the
    same container, and gets the same directory back.
    """

    def __init__(self, root: Path) -> None:
        self.root = root

    def _existing(self) -> list[tuple[Path, VdevConfig]]:
        out: list[tuple[Path, VdevConfig]] = []
        if not self.root.is_dir():
            return out
        for conf in sorted(self.root.glob("*/vdev*.conf")):
            try:
                out.append((conf.parent, parse(conf.read_text())))
            except (OSError, ValueError):
                continue
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
    ) -> Path:
        """Write (or find) the container's configuration; returns its directory.

        Raises:
            InvalidInputError: the DCU's compute units are unknown, or too few CUs,
                vDCU ids or pipes are free.
        """
        directory = self.root / f"{pod_uid}_{container}_{device_id}"
        existing = self._existing()
        for path, _ in existing:
            if path == directory:
                return directory
        if compute_units <= 0:
            raise InvalidInputError(
                f"DCU {device_id}: its compute units are unknown (hy-smi virtual "
                "-show-device-info), so a vDCU slice cannot be made"
            )
        wanted = cu_count_of(cores_pct, compute_units)
        used_bits = 0
        used_vdevs, used_pipes = set(), set()
        for _, conf in existing:
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
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"vdev{vdev_id}.conf").write_text(render(conf))
        return directory

    def prune(self, live_pod_uids: Iterable[str]) -> list[Path]:
        """Remove the directories of pods not in ``live_pod_uids``; returns them."""
        live = set(live_pod_uids)
        removed = []
        for path in sorted({p for p, _ in self._existing()}):
            if path.name.split("_", 1)[0] not in live:
                for f in path.iterdir():
                    f.unlink()
                path.rmdir()
                removed.append(path)
        return removed
