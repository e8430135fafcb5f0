import pytest

from hami_core.errors import ConfigError
from hami_core.model import BackendInfo, DevicePolicy, DeviceTypeInfo, NodePolicy, ResourceNames
from hami_core.protocol import load_config, parse_config

INFO = BackendInfo(
    name="nvidia",
    device_types=(
        DeviceTypeInfo(
            vendor="NVIDIA",
            resources=ResourceNames(count="nvidia.com/gpu"),
            register_annotation="hami.io/a",
            handshake_annotation="hami.io/b",
            to_allocate_annotation="hami.io/c",
            allocated_annotation="hami.io/d",
        ),
    ),
    option_defaults={"hookPath": "/usr/local/vgpu"},
)
BACKENDS = {"nvidia": INFO}


def test_defaults():
    cfg = load_config(None, backends=BACKENDS)
    assert cfg.scheduler_name == "hami-scheduler"
    assert cfg.node_policy is NodePolicy.BINPACK and cfg.device_policy is DevicePolicy.SPREAD
    v = cfg.vendor("nvidia")
    assert (v.split_count, v.memory_scaling, v.core_scaling) == (10, 1.0, 1.0)
    assert (v.default_memory_mib, v.default_cores_pct, v.default_count) == (0, 0, 1)


def test_full_file(tmp_path):
    path = tmp_path / "hami.yaml"
    path.write_text(
        "version: v1\nschedulerName: my-sched\n"
        "defaultSchedulerPolicy: {nodeSchedulerPolicy: spread, gpuSchedulerPolicy: topology-aware}\n"
        "nvidia:\n  deviceSplitCount: 4\n  deviceMemoryScaling: 1.5\n  defaultMemory: 2000\n"
        "  resourceCountName: example.com/gpu\n  hookPath: /opt/vgpu\n"
    )
    cfg = load_config(path, backends=BACKENDS)
    assert cfg.scheduler_name == "my-sched"
    assert cfg.node_policy is NodePolicy.SPREAD and cfg.device_policy is DevicePolicy.TOPOLOGY_AWARE
    v = cfg.vendor("nvidia")
    assert (v.split_count, v.memory_scaling, v.default_memory_mib) == (4, 1.5, 2000)
    assert v.resource_count_name == "example.com/gpu"
    assert v.options == {"hookPath": "/opt/vgpu"}


@pytest.mark.parametrize(
    ("doc", "names"),
    [
        ({"version": "v2"}, "version"),
        ({}, "version"),
        ({"version": "v1", "schedulerNmae": "x"}, "schedulerNmae"),
        ({"version": "v1", "nvidia": {"deviceSplitCont": 3}}, "nvidia.deviceSplitCont"),
        ({"version": "v1", "nvidia": {"deviceSplitCount": 0}}, "nvidia.deviceSplitCount"),
        ({"version": "v1", "nvidia": {"deviceSplitCount": "ten"}}, "nvidia.deviceSplitCount"),
        ({"version": "v1", "nvidia": {"deviceSplitCount": True}}, "nvidia.deviceSplitCount"),
        ({"version": "v1", "nvidia": {"defaultCores": 101}}, "nvidia.defaultCores"),
        ({"version": "v1", "nvidia": {"deviceMemoryScaling": -1}}, "nvidia.deviceMemoryScaling"),
        ({"version": "v1", "nvidia": {"hookPath": 3}}, "nvidia.hookPath"),
        ({"version": "v1", "nvidia": []}, "nvidia"),
        (
            {"version": "v1", "defaultSchedulerPolicy": {"gpuSchedulerPolicy": "pack"}},
            "gpuSchedulerPolicy",
        ),
        (
            {"version": "v1", "defaultSchedulerPolicy": {"nodePolicy": "spread"}},
            "defaultSchedulerPolicy.nodePolicy",
        ),
        ({"version": "v1", "nodeLockExpirySeconds": 0}, "nodeLockExpirySeconds"),
        ({"version": "v1", "ascend": {}}, "ascend"),
        ("just text", "mapping"),
    ],
)
def test_errors_name_the_key(doc, names):
    with pytest.raises(ConfigError, match=names.replace(".", r"\.")):
        parse_config(doc, backends=BACKENDS)


def test_unreadable_file_names_the_path(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: [v1\n")
    with pytest.raises(ConfigError, match="bad.yaml"):
        load_config(bad, backends=BACKENDS)
    with pytest.raises(ConfigError, match="missing.yaml"):
        load_config(tmp_path / "missing.yaml", backends=BACKENDS)


def test_yaml_syntax_errors_are_one_line_with_the_position(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: v1\nnvidia:\n  deviceSplitCount: [1, 2\n")
    with pytest.raises(ConfigError) as exc:
        load_config(bad, backends=BACKENDS)
    assert "\n" not in str(exc.value)
    assert "bad.yaml: invalid YAML at line 4, column 1:" in str(exc.value)


def test_unknown_vendor_key_lists_the_allowed_ones():
    with pytest.raises(
        ConfigError,
        match=r"nvidia.deviceSplitCont: unknown key \(allowed: resourceCountName, .*deviceSplitCount.*hookPath\)",
    ):
        parse_config({"version": "v1", "nvidia": {"deviceSplitCont": 3}}, backends=BACKENDS)
