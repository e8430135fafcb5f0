"""Each tool-driven backend's ``hami_discover`` through the hook, as the device plugin
calls it (``BackendManager.discover``): the vendor's tool is a script printing a
recorded sample, named by the backend's own tool option, so the hook's whole path (the
option read, the subprocess run, the parse) answers the devices of the sample. The
parsers are tested below the hook in ``tests/backends/<vendor>/``; these prove the
hook reaches them (``tests/unit/test_hookspecs.py`` reads the names of these tests).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hami_core.plugin import BackendManager
from hami_core.protocol.config import parse_config

BACKENDS = Path(__file__).resolve().parents[1] / "backends"


def tool(tmp_path: Path, name: str, sample: Path) -> str:
    """An executable that prints ``sample`` whatever its arguments."""
    path = tmp_path / name
    path.write_text(f"#!/bin/sh\ncat '{sample}'\n", encoding="utf-8")
    path.chmod(0o755)
    return str(path)


def discovered(backend: str, section: dict[str, object]):
    manager = BackendManager.from_entry_points(disabled=[])
    if backend not in manager.infos:
        pytest.skip(f"hami-{backend} not installed")
    config = parse_config({"version": "v1", backend: section}, backends=manager.infos)
    return manager.with_config(config).discover(backend)


def test_amd_discovers_through_rocm_smi_and_rocminfo(tmp_path):
    samples = BACKENDS / "amd" / "samples"
    devices = discovered(
        "amd",
        {
            "rocmSmiPath": tool(tmp_path, "rocm-smi", samples / "rocm-smi.json"),
            "rocminfoPath": tool(tmp_path, "rocminfo", samples / "rocminfo.txt"),
            "deviceSplitCount": 4,
        },
    )
    assert [(d.uuid, d.model, d.memory_mib, d.cores_pct, d.split_count) for d in devices] == [
        ("GPU-18f68e602b8a790f", "AMD Instinct MI300X", 196592, 304, 4),
        ("GPU-5ef3d46e0e2e0fd2", "AMD Instinct MI300X", 196592, 304, 4),
    ]


def test_awsneuron_discovers_through_neuron_ls(tmp_path, monkeypatch):
    monkeypatch.setenv("NODE_NAME", "inf-7")
    sample = BACKENDS / "awsneuron" / "samples" / "neuron-ls.json"
    devices = discovered("awsneuron", {"neuronLsPath": tool(tmp_path, "neuron-ls", sample)})
    assert [(d.uuid, d.split_count, d.cores_pct) for d in devices] == [
        (f"inf-7-AWSNeuron-{i}", 2, 3) for i in range(4)
    ]


def test_cambricon_discovers_through_cnmon(tmp_path):
    sample = BACKENDS / "cambricon" / "samples" / "cnmon-info-mlu370-x8.txt"
    devices = discovered("cambricon", {"cnmonCommand": f"{tool(tmp_path, 'cnmon', sample)} info"})
    assert len(devices) == 4
    assert {(d.vendor, d.memory_mib) for d in devices} == {("MLU", 24576)}


def test_kunlun_discovers_through_xpu_smi(tmp_path):
    sample = BACKENDS / "kunlun" / "samples" / "xpu-smi-p800-oam.txt"
    devices = discovered("kunlun", {"xpuSmiCommand": tool(tmp_path, "xpu-smi", sample)})
    assert [d.index for d in devices] == list(range(8))
    assert devices[0].uuid == "XPU-0000-1a-00.0" and devices[0].model == "P800"


def test_a_missing_tool_is_no_discovery_not_an_error(tmp_path):
    for backend, section in (
        ("amd", {"rocmSmiPath": str(tmp_path / "absent")}),
        ("awsneuron", {"neuronLsPath": str(tmp_path / "absent")}),
        ("cambricon", {"cnmonCommand": str(tmp_path / "absent")}),
        ("kunlun", {"xpuSmiCommand": str(tmp_path / "absent")}),
    ):
        assert discovered(backend, section) is None, backend


def test_ascend_discovers_through_npu_smi(tmp_path):
    """``npu-smi info -m``, ``info`` and ``info -t board -i N -c M`` answered from the
    recorded 910B3 node (``tests/backends/ascend/samples``)."""
    samples = BACKENDS / "ascend" / "samples"
    script = tmp_path / "npu-smi"
    script.write_text(
        "#!/bin/sh\n"
        f"s='{samples}'\n"
        'case "$*" in\n'
        '  "info") cat "$s/npu-smi-info-910b3.txt" ;;\n'
        '  "info -m") cat "$s/npu-smi-info-m-910b3.txt" ;;\n'
        '  "info -t board -i "*) cat "$s/npu-smi-board-910b3-npu$5-chip$7.txt" ;;\n'
        "  *) exit 1 ;;\n"
        "esac\n",
        encoding="utf-8",
    )
    script.chmod(0o755)
    devices = discovered("ascend", {"npuSmiPath": str(script)})
    assert [d.index for d in devices] == list(range(8))
    assert {(d.vendor, d.memory_mib, d.split_count) for d in devices} == {("Ascend910B3", 65536, 4)}
    assert [d.healthy for d in devices] == [True] * 7 + [False]
    assert all(not d.uuid.startswith("Ascend910B3-") for d in devices)  # VDie IDs read


def test_hygon_discovers_through_hy_smi(tmp_path):
    """``hy-smi`` JSON query and ``virtual -show-device-info`` answered from the
    recorded K100 node; an empty sysfs root (no DRM nodes, NUMA 0)."""
    samples = BACKENDS / "hygon" / "samples"
    script = tmp_path / "hy-smi"
    script.write_text(
        "#!/bin/sh\n"
        f"s='{samples}'\n"
        'case "$*" in\n'
        '  "virtual -show-device-info"*) cat "$s/hy-smi-virtual-k100.txt" ;;\n'
        '  *--json*) cat "$s/hy-smi-query-k100.json" ;;\n'
        "  *) exit 1 ;;\n"
        "esac\n",
        encoding="utf-8",
    )
    script.chmod(0o755)
    sysfs = tmp_path / "sys"
    sysfs.mkdir()
    devices = discovered("hygon", {"hySmiPath": str(script), "sysfsPath": str(sysfs)})
    d0 = devices[0]
    assert (d0.uuid, d0.vendor, d0.model, d0.index) == ("DCU-3E3D2A0D0A1B", "DCU", "DCU-K100_AI", 0)
    assert (d0.memory_mib, d0.cores_pct, d0.split_count, d0.healthy) == (65520, 100, 10, True)
    assert [d.numa for d in devices] == [0] * len(devices)
