"""The unit a vendor counts compute in, and how every human-facing output writes it.

The model carries compute in fields named ``cores_pct`` (the inventory's ``devcore``, a
device list's fourth field, a request's cores) because NVIDIA and most vendors count in
percent of one device (PROTOCOL.md §1). Some do not: AMD's device lists carry compute
units (HAMi 2.10 ``pkg/device/amd``: ``devcore`` is the GPU's CU count), AWS Neuron's
carry a bit mask of NeuronCores (``pkg/device/awsneuron``: ``Devcore`` 3 for 2 cores),
Moore Threads counts 16 sGPU cores per GPU (``pkg/device/mthreads``:
``coresPerMthreadsGPU``), and count-only vendors (Biren, Vastai) do not account compute.
A ``DeviceTypeInfo`` names its unit (``cores_unit`` for what the devices and their
slices carry, ``request_cores_unit`` for its cores resource), so ``hami simulate``,
``hami top`` and messages write ``76/304 CU`` rather than ``76/304%``.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs


def _same(value: int) -> int:
    return value


def _bits(value: int) -> int:
    return bin(value).count("1") if value > 0 else 0


@attrs.frozen(kw_only=True)
class CoresUnit:
    """How a vendor's ``cores_pct`` values read to a person.

    Attributes:
        name: the unit's key in JSON output (``coresUnit``), one of ``CORES_UNITS``.
        symbol: what follows an amount in text: ``%`` is written against the number
            (``30%``), any other symbol after a space (``76 CU``); "" for a vendor that
            does not account compute (amounts are written ``-``).
        amount: a stored value -> the amount in this unit (AWS Neuron: the bits of a core
            mask); the identity for the others.
    """

    name: str
    symbol: str
    amount: Callable[[int], int] = _same

    @property
    def accounted(self) -> bool:
        """False for a vendor whose devices carry no compute figure."""
        return bool(self.symbol)

    @property
    def is_percent(self) -> bool:
        """True when the values are percent of one device."""
        return self.symbol == "%"

    def _symbol(self, n: int) -> str:
        # "1 sGPU core", "2 sGPU cores"; abbreviations ("CU") stay as they are
        return self.symbol[:-1] if n == 1 and self.symbol.endswith("s") else self.symbol

    def show(self, n: int) -> str:
        """An amount (already through ``amount``) with the unit: ``30%``, ``76 CU``,
        ``1 NeuronCore``; ``-`` when the vendor does not account compute."""
        if not self.accounted:
            return "-"
        return f"{n}%" if self.is_percent else f"{n} {self._symbol(n)}"

    def show_ratio(self, used: int, total: int) -> str:
        """Amounts ``used`` of ``total``: ``30/100%``, ``76/304 CU``, ``-``."""
        if not self.accounted:
            return "-"
        return f"{used}/{total}%" if self.is_percent else f"{used}/{total} {self.symbol}"

    def share_pct(self, used: int, total: int) -> int:
        """Amount ``used`` as a percentage of a device whose capacity is the amount
        ``total``, rounded down; a percent amount is that already. 0 when the device
        carries no compute."""
        if self.is_percent:
            return used
        return used * 100 // total if self.accounted and total > 0 else 0


#: Percent of one device (NVIDIA, Ascend, Cambricon, Hygon, Kunlunxin, Iluvatar, MetaX,
#: Enflame; the default of a device type that declares nothing).
PERCENT = CoresUnit(name="percent", symbol="%")
#: AMD compute units (CUs) of a GPU: ``devcore`` is the GPU's CU count.
COMPUTE_UNITS = CoresUnit(name="compute-units", symbol="CU")
#: AWS NeuronCores: values are bit masks of the cores (1 = core 0, 3 = cores 0 and 1),
#: amounts their bit counts; a request counts cores.
NEURON_CORE_MASK = CoresUnit(name="neuroncore-mask", symbol="NeuronCores", amount=_bits)
#: AWS NeuronCores counted (the ``aws.amazon.com/neuroncore`` resource).
NEURON_CORES = CoresUnit(name="neuroncores", symbol="NeuronCores")
#: Moore Threads sGPU cores, 16 to a GPU (``mthreads.com/sgpu-core``).
SGPU_CORES = CoresUnit(name="sgpu-cores", symbol="sGPU cores")
#: The devices carry no compute figure (count-only vendors: Biren, Vastai).
NOT_ACCOUNTED = CoresUnit(name="none", symbol="")

#: The units the core knows, by ``name``; the conformance kit checks a backend declares
#: one of them (a new vendor unit is added here, with its docs).
CORES_UNITS: dict[str, CoresUnit] = {
    u.name: u
    for u in (PERCENT, COMPUTE_UNITS, NEURON_CORE_MASK, NEURON_CORES, SGPU_CORES, NOT_ACCOUNTED)
}

__all__ = [
    "COMPUTE_UNITS",
    "CORES_UNITS",
    "NEURON_CORES",
    "NEURON_CORE_MASK",
    "NOT_ACCOUNTED",
    "PERCENT",
    "SGPU_CORES",
    "CoresUnit",
]
