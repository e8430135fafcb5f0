"""A ``device-config.yaml`` that HAMi's chart rendered for an earlier release (2.4-2.9)
still starts every process, and a typo in it still stops the start.

``fa8e794`` made an unknown key an error but listed only HAMi 2.10's keys, so the chart
defaults of every release from 2.4 to 2.9 stopped every process: ``knownMigGeometries``
(nvidia, 2.5-2.9), the single ``iluvatar`` mapping (2.4.1-2.7.0), the ``vnpus`` list
(2.4-2.8, ``[]VNPUConfig``), enflame's ``resourceCountName``/``resourcePercentageName``
(2.6). The shapes below are those of HAMi's ``charts/hami/templates/scheduler/
device-configmap.yaml`` at each release tag, cut to the keys that changed.
"""

from __future__ import annotations

import pytest
import yaml

from hami_core.plugin import BackendManager
from hami_core.protocol.config import load_config
from tests.unit import test_config_start
from tests.unit.test_config_start import COMMANDS, OFFLINE, REACHED, commands

start = test_config_start.start  # the fixture: run ``hami <argv>`` in this process

NVIDIA_2_9 = {
    "nvidia": {
        "resourceCountName": "nvidia.com/gpu",
        "deviceSplitCount": 10,
        "knownMigGeometries": [
            {
                "models": ["A30"],
                "allowedGeometries": [
                    [{"name": "1g.6gb", "memory": 6144, "count": 4}],
                    [{"name": "2g.12gb", "memory": 12288, "count": 2}],
                ],
            }
        ],
    }
}
ILUVATAR_2_7_0 = {
    "iluvatar": {
        "resourceCountName": "iluvatar.ai/vgpu",
        "resourceMemoryName": "iluvatar.ai/vcuda-memory",
        "resourceCoreName": "iluvatar.ai/vcuda-core",
    }
}
VNPUS_2_8 = {
    "vnpus": [
        {
            "chipName": "910B3",
            "commonWord": "Ascend910B3",
            "resourceName": "huawei.com/Ascend910B3",
            "resourceMemoryName": "huawei.com/Ascend910B3-memory",
            "memoryAllocatable": 65536,
            "memoryCapacity": 65536,
            "aiCore": 20,
            "aiCPU": 7,
            "templates": [
                {"name": "vir05_1c_16g", "memory": 16384, "aiCore": 5, "aiCPU": 1},
                {"name": "vir10_3c_32g", "memory": 32768, "aiCore": 10, "aiCPU": 3},
            ],
        }
    ]
}
ENFLAME_2_6 = {
    "enflame": {
        "resourceCountName": "enflame.com/vgcu",
        "resourcePercentageName": "enflame.com/vgcu-percentage",
    }
}
#: HAMi's docs/develop/dynamic-mig.md: the device plugin's ``nodeconfig`` list inside
#: the scheduler's nvidia section (HAMi's scheduler ignores it there).
NVIDIA_DOCS = {
    "nvidia": {
        "resourceCountName": "nvidia.com/gpu",
        "nodeconfig": [
            {"name": "nodeA", "operatingmode": "hami-core"},
            {"name": "nodeB", "operatingmode": "mig"},
        ],
    }
}
RELEASES = {
    "docs nvidia.nodeconfig": NVIDIA_DOCS,
    "2.9 nvidia.knownMigGeometries": NVIDIA_2_9,
    "2.7.0 iluvatar": ILUVATAR_2_7_0,
    "2.8 vnpus list": VNPUS_2_8,
    "2.6 enflame": ENFLAME_2_6,
    "2.8 all": {**NVIDIA_2_9, **VNPUS_2_8, **ILUVATAR_2_7_0},
}


@pytest.fixture(scope="module")
def infos():
    return BackendManager.from_entry_points(disabled=[]).infos


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("release", sorted(RELEASES))
def test_an_earlier_hami_releases_file_starts_every_process(start, tmp_path, command, release):
    path = tmp_path / "device-config.yaml"
    path.write_text(yaml.safe_dump(RELEASES[release]), encoding="utf-8")
    code, err = start([*commands("nvidia")[command], "--config", str(path)])
    assert "unknown key" not in err and "not a HAMi device-config section" not in err, err
    if command in OFFLINE:
        assert code == 0, err
    else:
        assert code != 0 and REACHED in err, err


def test_the_vnpus_list_of_hami_2_8_is_applied_as_configs(infos, tmp_path):
    doc = yaml.safe_load(yaml.safe_dump(VNPUS_2_8))
    doc["vnpus"][0]["memoryAllocatable"] = 60000
    path = tmp_path / "device-config.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    vnpus = load_config(path, backends=infos).vendor("ascend").options["vnpus"]
    assert vnpus["Ascend910B3"]["memoryAllocatable"] == 60000


TYPOS = {
    "iluvatar.resourceCountNam": {"iluvatar": {"resourceCountNam": "iluvatar.ai/vgpu"}},
    "vnpus[0].memoryAlocatable": {"vnpus": [{"commonWord": "Ascend910B3", "memoryAlocatable": 1}]},
    "vnpus[0].templates[0].memory": {
        "vnpus": [{"commonWord": "Ascend910B3", "templates": [{"name": "v", "memory": -1}]}]
    },
    "nvidia.knownMigGeometry": {"nvidia": {"knownMigGeometry": []}},
    "enflame.resourcePercentName": {"enflame": {"resourcePercentName": "x.com/y"}},
}


@pytest.mark.parametrize("key", sorted(TYPOS))
def test_a_typo_in_an_earlier_releases_shape_stops_the_start_naming_it(start, tmp_path, key):
    path = tmp_path / "device-config.yaml"
    path.write_text(yaml.safe_dump(TYPOS[key]), encoding="utf-8")
    code, err = start(["simulate", "--config", str(path)])
    assert code == 2 and f"error: {path}: {key}" in err, err
