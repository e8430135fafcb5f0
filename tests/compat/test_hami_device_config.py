"""HAMi's scheduler ``device-config.yaml`` is accepted as it is (issue item 8)."""

import logging
import re
from pathlib import Path

import pytest
import yaml

from hami_core.errors import ConfigError, InvalidInputError
from hami_core.plugin import BackendManager
from hami_core.protocol.config import load_config
from hami_core.protocol.hamiconfig import SECTIONS, is_hami_device_config, translate

FIXTURE = Path(__file__).parent.parent / "fixtures" / "hami" / "device-config.yaml"


@pytest.fixture(scope="module")
def infos():
    return BackendManager.from_entry_points(disabled=[]).infos


def test_hami_chart_default_file_loads_with_one_warning_per_unimplemented_key(infos, caplog):
    """The chart's default ConfigMap content (HAMi 2.10
    ``charts/hami/templates/scheduler/device-configmap.yaml``) was rejected for
    ``version`` missing; now it loads and its values are ours."""
    with caplog.at_level(logging.WARNING, logger="hami_core.protocol.config"):
        cfg = load_config(FIXTURE, backends=infos)
    nv = cfg.vendor("nvidia")
    assert (nv.resource_count_name, nv.split_count, nv.memory_scaling) == (
        "nvidia.com/gpu",
        10,
        1.0,
    )
    assert nv.options["corePolicy"] == "default"  # HAMi's gpuCorePolicy
    if "kunlun" in infos:
        k = cfg.vendor("kunlun")
        assert k.resource_count_name == "kunlunxin.com/vxpu"  # HAMi's resourceVCountName
        assert k.options["resourceWholeCardName"] == "kunlunxin.com/xpu"
    warned = [r.getMessage() for r in caplog.records]
    keys = [m.split("HAMi device-config ", 1)[1].split(":", 1)[0] for m in warned]
    assert len(keys) == len(set(keys))  # once per key
    for key in (
        "nvidia.preConfiguredDeviceMemory",
        "nvidia.libCudaLogLevel",
    ):
        assert key in keys, key
    if "ascend" in infos:
        # read: nodes without a hami-vnpu-core annotation do not run hami-core (ModeNotFit)
        assert "vnpus.hamiVnpuCore" not in keys
        assert cfg.vendor("ascend").options["hamiVnpuCore"] is False
    # HAMi's overwriteEnv is read (NVIDIA_VISIBLE_DEVICES=none on GPU-less containers)
    assert "nvidia.overwriteEnv" not in keys
    assert isinstance(cfg.vendor("nvidia").options["overwriteEnv"], bool)
    # HAMi's MIG allowlist is read (dynamic MIG, docs/sharing-modes.md), not ignored
    assert "nvidia.migProfileAllowlist" not in keys
    assert cfg.vendor("nvidia").options["migProfileAllowlist"] == [
        {"models": ["A30"], "profiles": ["1g.6gb", "2g.12gb", "4g.24gb"]}
    ]
    # names HAMi writes that are ours already are read, not warned about
    assert not any(
        k.startswith(("nvidia.resource", "hygon.resource", "metax.resource")) for k in keys
    )
    bodies = [m.split("HAMi device-config ", 1)[1] for m in warned]
    for section, backend in SECTIONS.items():
        if backend not in infos:
            assert f"{section}: backend {backend!r} is not installed" in " ".join(bodies)


def test_a_section_for_a_backend_not_installed_is_a_warning(infos):
    only_nvidia = {"nvidia": infos["nvidia"]}
    out, notes = translate({"nvidia": {"deviceSplitCount": 4}, "cambricon": {}}, only_nvidia)
    assert out == {"version": "v1", "nvidia": {"deviceSplitCount": 4}}
    assert notes == [
        "cambricon: backend 'cambricon' is not installed (pip install hami-cambricon); section ignored"
    ]


def test_the_configmap_manifest_itself_is_read(infos, tmp_path):
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "hami-scheduler-device"},
        "data": {"device-config.yaml": yaml.safe_dump({"nvidia": {"deviceSplitCount": 3}})},
    }
    path = tmp_path / "cm.yaml"
    path.write_text(yaml.safe_dump(cm))
    assert is_hami_device_config(cm)
    assert load_config(path, backends=infos).vendor("nvidia").split_count == 3


def test_values_hami_users_change_are_honoured(infos, tmp_path):
    path = tmp_path / "device-config.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "nvidia": {
                    "resourceCountName": "example.com/vgpu",
                    "gpuCorePolicy": "force",
                    "runtimeClassName": "nvidia",
                    "defaultMemory": 2000,
                }
            }
        )
    )
    nv = load_config(path, backends=infos).vendor("nvidia")
    assert nv.resource_count_name == "example.com/vgpu" and nv.default_memory_mib == 2000
    assert nv.options["corePolicy"] == "force" and nv.options["runtimeClassName"] == "nvidia"


def test_a_bad_value_in_a_hami_file_still_stops_start_naming_the_key(infos, tmp_path):
    path = tmp_path / "device-config.yaml"
    path.write_text("nvidia:\n  deviceSplitCount: ten\n")
    with pytest.raises(ConfigError, match=r"device-config.yaml: nvidia.deviceSplitCount"):
        load_config(path, backends=infos)


def test_our_versioned_format_is_unchanged(infos, tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("version: v1\nnvidia:\n  resourcePriorityName: x\n")
    with pytest.raises(ConfigError, match="nvidia.resourcePriorityName: unknown key"):
        load_config(path, backends=infos)


@pytest.mark.parametrize(("super_pod", "modules"), [(True, 2), (False, 1), (None, 1)])
def test_ascend_910c_super_pod_decides_module_pairing(infos, tmp_path, super_pod, modules):
    """HAMi pairs 910C chips only with ``superPod: true`` (the chart's default file sets
    it): ``pkg/device/ascend/device_test.go::Test_MutateAdmission910C`` (SuperPod: 1 -> 2,
    3 refused, 4 kept) and ``Test_MutateAdmission910C_VNPUSplit`` (no SuperPod: 1 with a
    16384 MiB slice stays 1 on the vir05_1c_16g template, 3 stays 3)."""
    if "ascend" not in infos:
        pytest.skip("hami-ascend not installed")
    from hami_ascend.requests import parse_request

    entry = {"chipName": "Ascend910", "commonWord": "Ascend910C"}
    if super_pod is not None:
        entry["superPod"] = super_pod
    path = tmp_path / "device-config.yaml"
    path.write_text(yaml.safe_dump({"vnpus": {"configs": [entry]}}))
    m = BackendManager.from_entry_points(disabled=[])
    cfg = m.with_config(load_config(path, backends=m.infos)).vendor_config("ascend")

    def req(limits):
        c = {"name": "c", "resources": {"limits": limits, "requests": dict(limits)}}
        return parse_request({"metadata": {}}, c, cfg)

    if modules == 2:
        assert req({"huawei.com/Ascend910C": "1"}).count == 2
        assert req({"huawei.com/Ascend910C": "4"}).count == 4
        with pytest.raises(InvalidInputError, match="modules of 2"):
            req({"huawei.com/Ascend910C": "3"})
    else:
        assert req({"huawei.com/Ascend910C": "3"}).count == 3
        sliced = req({"huawei.com/Ascend910C": "1", "huawei.com/Ascend910C-memory": "16384"})
        assert (sliced.count, sliced.memory_mib) == (1, 16384)


@pytest.mark.parametrize(("value", "nodes"), [(True, True), (False, False)])
def test_ascend_hami_vnpu_core_is_read(infos, tmp_path, value, nodes):
    """HAMi's ``vnpus.hamiVnpuCore`` (``pkg/device/ascend/device.go`` ``Fit``): whether a
    node without a ``hami-vnpu-core`` annotation runs hami-core (else ``ModeNotFit`` for
    hami-core pods); a value that is not a boolean stops the start naming the key."""
    if "ascend" not in infos:
        pytest.skip("hami-ascend not installed")
    from hami_ascend.models import settings

    m = BackendManager.from_entry_points(disabled=[])
    path = tmp_path / "device-config.yaml"
    path.write_text(yaml.safe_dump({"vnpus": {"hamiVnpuCore": value}}))
    cfg = m.with_config(load_config(path, backends=m.infos)).vendor_config("ascend")
    assert settings(cfg).hami_core_nodes is nodes
    path.write_text("vnpus:\n  hamiVnpuCore: maybe\n")
    with pytest.raises(ConfigError, match="hamiVnpuCore"):
        m.with_config(load_config(path, backends=m.infos))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("nvidia: [1]\n", "nvidia: expected a mapping, got [1]"),
        ("iluvatars: {chipName: MR-V100}\n", "iluvatars: expected a list"),
        ("iluvatars: [MR-V100]\n", "iluvatars[0]: expected a mapping, got 'MR-V100'"),
        ("vnpus: {configs: {commonWord: Ascend910A}}\n", "vnpus.configs: expected a list"),
        ("vnpus: {configs: [Ascend910A]}\n", "vnpus.configs[0]: expected a mapping"),
    ],
)
def test_a_hami_section_of_the_wrong_shape_stops_the_start(infos, tmp_path, text, message):
    """HAMi's loader (``yaml.v2`` into ``pkg/scheduler/config`` ``Config``) fails on
    these too; they used to be a warning and the section's settings silently lost."""
    path = tmp_path / "device-config.yaml"
    path.write_text(text)
    needed = {"nvidia": "nvidia", "iluvatars": "iluvatar", "vnpus": "ascend"}[text.split(":")[0]]
    if needed not in infos:
        pytest.skip(f"hami-{needed} not installed")
    with pytest.raises(ConfigError, match=re.escape(f"{path}: {message}")):
        load_config(path, backends=infos)


def test_an_empty_hami_section_is_no_keys(infos, tmp_path):
    path = tmp_path / "device-config.yaml"
    path.write_text("nvidia:\n")
    assert load_config(path, backends=infos).vendor("nvidia").split_count == 10
