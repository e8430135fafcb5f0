"""``CoresUnit``: how each vendor's compute figures are written, the default for a
backend that declares none, the conformance kit's check of a declared unit, and a device
held whole holding its own compute (not 100 of a non-percent unit)."""

from __future__ import annotations

import importlib
import sys
import types
from pathlib import Path

import attrs
import pytest

from hami_core.facts.usage import hold_whole
from hami_core.model import (
    COMPUTE_UNITS,
    CORES_UNITS,
    NEURON_CORE_MASK,
    NEURON_CORES,
    NOT_ACCOUNTED,
    PERCENT,
    SGPU_CORES,
    BackendInfo,
    CoresUnit,
    DeviceInfo,
    DeviceRequest,
    DeviceUsage,
)
from hami_core.plugin import BackendManager, hookimpl
from hami_core.testing import BackendConformance

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "backend-example"


def test_each_unit_writes_amounts_and_ratios() -> None:
    assert (PERCENT.show(30), PERCENT.show_ratio(30, 100)) == ("30%", "30/100%")
    assert (COMPUTE_UNITS.show(76), COMPUTE_UNITS.show_ratio(76, 304)) == ("76 CU", "76/304 CU")
    assert NEURON_CORES.show(1) == "1 NeuronCore" and NEURON_CORES.show(2) == "2 NeuronCores"
    assert SGPU_CORES.show(1) == "1 sGPU core" and SGPU_CORES.show_ratio(4, 16) == "4/16 sGPU cores"
    assert NOT_ACCOUNTED.show(0) == "-" and NOT_ACCOUNTED.show_ratio(0, 0) == "-"


def test_neuron_masks_count_their_bits() -> None:
    assert [NEURON_CORE_MASK.amount(m) for m in (0, 1, 2, 3, 15)] == [0, 1, 1, 2, 4]
    assert NEURON_CORES.amount(3) == 3  # a count stays a count


def test_share_of_the_device() -> None:
    assert COMPUTE_UNITS.share_pct(76, 304) == 25
    assert SGPU_CORES.share_pct(4, 16) == 25
    assert NEURON_CORE_MASK.share_pct(1, 2) == 50  # amounts, after the bit count
    assert PERCENT.share_pct(30, 200) == 30  # percent already
    assert NOT_ACCOUNTED.share_pct(0, 0) == 0 and COMPUTE_UNITS.share_pct(5, 0) == 0


def test_the_known_units_by_name() -> None:
    assert set(CORES_UNITS) == {
        "percent",
        "compute-units",
        "neuroncore-mask",
        "neuroncores",
        "sgpu-cores",
        "none",
    }


def test_a_backend_that_declares_nothing_counts_percent() -> None:
    if str(EXAMPLE) not in sys.path:
        sys.path.insert(0, str(EXAMPLE))
    names = importlib.import_module("hami_example.names")
    assert names.DEVICE_TYPE.cores_unit is PERCENT
    assert names.DEVICE_TYPE.resource_cores_unit is PERCENT


def test_the_vendor_units_as_declared() -> None:
    m = BackendManager.from_entry_points(disabled=[])
    declared = {
        v: (m.device_type(v).cores_unit.name, m.device_type(v).resource_cores_unit.name)
        for v in ("AMD", "AWSNeuron", "Mthreads", "Biren", "Vastai", "NVIDIA", "BI-V150", "MLU")
    }
    assert declared == {
        "AMD": ("compute-units", "percent"),
        "AWSNeuron": ("neuroncore-mask", "neuroncores"),
        "Mthreads": ("sgpu-cores", "sgpu-cores"),
        "Biren": ("none", "none"),
        "Vastai": ("none", "none"),
        "NVIDIA": ("percent", "percent"),
        "BI-V150": ("percent", "percent"),
        "MLU": ("percent", "percent"),
    }
    # a whole Neuron device asks its two cores, not the whole-device marker 100
    neuron = m.device_type("AWSNeuron")
    whole = DeviceRequest(vendor="AWSNeuron", count=1, memory_pct=100, cores_pct=100)
    assert neuron.requested_cores(whole) == 2


def test_the_kit_refuses_a_unit_it_does_not_know() -> None:
    """A third-party backend inventing a unit fails ``test_info`` with the unit named."""
    if str(EXAMPLE) not in sys.path:
        sys.path.insert(0, str(EXAMPLE))
    plugin = importlib.import_module("hami_example.plugin")
    info = plugin.hami_backend_info()
    odd = CoresUnit(name="furlongs", symbol="fur")
    bad_info = attrs.evolve(
        info, device_types=tuple(attrs.evolve(t, cores_unit=odd) for t in info.device_types)
    )
    bad = types.ModuleType("odd_backend")
    for name in dir(plugin):
        if name.startswith("hami_"):
            setattr(bad, name, getattr(plugin, name))

    @hookimpl
    def hami_backend_info() -> BackendInfo:
        return bad_info

    bad.hami_backend_info = hami_backend_info  # type: ignore[attr-defined]
    kit = BackendConformance()
    kit.backend_name = "example"
    good = BackendManager.from_plugins({"example": plugin})
    kit.test_info(good)  # the example as it is passes
    with pytest.raises(AssertionError, match="cores unit 'furlongs' is not one of"):
        kit.test_info(BackendManager.from_plugins({"example": bad}))


def test_a_device_held_whole_holds_its_own_compute() -> None:
    def held(cores: int) -> int:
        d = DeviceInfo(uuid="u", vendor="V", memory_mib=1000, cores_pct=cores, split_count=4)
        return hold_whole(DeviceUsage(device=d)).used_cores_pct

    assert held(304) == 304  # AMD: every CU
    assert held(16) == 16  # Moore Threads: every sGPU core, not 100 of 16
    assert held(3) == 3  # AWS Neuron: the whole mask
    assert held(100) == 100 and held(0) == 100  # percent; a device stating none


def test_the_binding_event_writes_each_vendors_unit() -> None:
    from hami_core.model import Allocation, ContainerDevice
    from hami_core.scheduling.scheduler import describe

    allocation = Allocation(
        node="n1",
        devices={
            "AMD": (
                (ContainerDevice(uuid="GPU-a", vendor="AMD", memory_mib=16384, cores_pct=76),),
            ),
            "AWSNeuron": (
                (ContainerDevice(uuid="n-0", vendor="AWSNeuron", memory_mib=0, cores_pct=3),),
            ),
            "Biren": ((ContainerDevice(uuid="br-0", vendor="Biren", memory_mib=0, cores_pct=0),),),
            "NVIDIA": (
                (ContainerDevice(uuid="GPU-n", vendor="NVIDIA", memory_mib=4000, cores_pct=30),),
            ),
        },
    )
    units = {"AMD": COMPUTE_UNITS, "AWSNeuron": NEURON_CORE_MASK, "Biren": NOT_ACCOUNTED}
    assert describe(allocation, units) == (
        "GPU-a 16384MiB 76 CU, n-0 0MiB 2 NeuronCores, br-0 0MiB, GPU-n 4000MiB 30%"
    )
    assert describe(allocation).endswith("GPU-n 4000MiB 30%")  # no units: percent
