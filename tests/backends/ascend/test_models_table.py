"""The default Ascend models come from ``hami_ascend/vnpus.toml``, HAMi 2.10's ``vnpus``
table (chart ``device-configmap.yaml``), read through the checks an override goes through."""

from __future__ import annotations

import pytest
from hami_ascend.models import DEFAULT_MODELS, OPTION_DEFAULTS, ModelSpec, _checked, _fields

from hami_core.backend import ConfigError


def test_the_table_holds_hamis_seven_models_in_declaration_order():
    assert [m.vendor for m in DEFAULT_MODELS] == [
        "Ascend910A",
        "Ascend910B2",
        "Ascend910B3",
        "Ascend910B4",
        "Ascend910B4-1",
        "Ascend310P",
        "Ascend910C",
    ]
    a910, p310, c910 = DEFAULT_MODELS[0], DEFAULT_MODELS[5], DEFAULT_MODELS[6]
    assert (a910.chip_name, a910.memory_allocatable_mib, a910.ai_core, a910.ai_cpu) == (
        "910A",
        32768,
        30,
        0,
    )
    assert [(t.name, t.memory_mib, t.ai_core, t.ai_cpu) for t in a910.templates] == [
        ("vir02", 2184, 2, 0),
        ("vir04", 4369, 4, 0),
        ("vir08", 8738, 8, 0),
        ("vir16", 17476, 16, 0),
    ]
    assert (p310.chip_name, p310.memory_allocatable_mib, p310.memory_capacity_mib) == (
        "310P3",
        21527,
        24576,
    )
    assert (c910.chip_name, c910.chips_per_module, c910.hccs_group_size) == ("Ascend910", 2, 0)
    assert a910.hccs_group_size == 4


def test_resource_names_follow_from_the_common_word():
    b4 = DEFAULT_MODELS[4]
    assert (b4.resource_count, b4.resource_memory, b4.resource_cores) == (
        "huawei.com/Ascend910B4-1",
        "huawei.com/Ascend910B4-1-memory",
        "huawei.com/Ascend910B4-1-core",
    )
    assert OPTION_DEFAULTS["vnpus"]["Ascend310P"]["resourceMemoryName"] == (
        "huawei.com/Ascend310P-memory"
    )


def test_a_table_entry_is_checked_like_an_override():
    entry = {"commonWord": "X", "chipName": "x", "memoryAllocatable": 1024, "aiCore": 8}
    with pytest.raises(ConfigError, match="vnpus.toml: X.memoryCapacity: value 0"):
        fields = _fields({**entry, "memoryCapacity": 0}, vendor="X", where="vnpus.toml: X")
        _checked(ModelSpec(vendor="X", **fields), where="vnpus.toml: X")
    with pytest.raises(ConfigError, match="aiCore: expected int"):
        _fields({**entry, "aiCore": "8"}, vendor="X", where="vnpus.toml: X")
