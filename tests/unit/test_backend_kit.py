"""The backend kit (``hami_core.backend``): the helpers every vendor shares."""

from __future__ import annotations

import sys

import pytest

from hami_core.backend import (
    ContainerDevice,
    DeviceInfo,
    DeviceUsage,
    InvalidInputError,
    NodeInfo,
    NodePolicy,
    ResourceNames,
    SubprocessRunner,
    VendorConfig,
    configured_tool_output,
    inventory_device,
    read_quantity,
    resource_names,
    run_tool,
    scaled,
)
from hami_core.plugin import BackendManager
from hami_core.scheduling.scoring import vendor_score
from tests.toy_backend import ToyBackend


def ctr(**limits: object) -> dict[str, object]:
    return {"name": "main", "resources": {"limits": limits}}


def test_read_quantity_takes_limits_then_requests_and_names_what_is_wrong():
    both = {"name": "main", "resources": {"limits": {"a/x": "2"}, "requests": {"a/x": "1"}}}
    assert read_quantity(both, "a/x") == 2
    assert read_quantity({"name": "m", "resources": {"requests": {"a/x": "3"}}}, "a/x") == 3
    assert read_quantity(ctr(), "a/x") is None
    with pytest.raises(InvalidInputError) as exc:
        read_quantity(ctr(**{"a/mem": "16Gi"}), "a/mem", unit="MiB")
    assert "container 'main'" in str(exc.value) and "a/mem" in str(exc.value)
    assert "16Gi" in str(exc.value)
    with pytest.raises(InvalidInputError, match="'1500m'"):
        read_quantity(ctr(**{"a/x": "1500m"}), "a/x")
    with pytest.raises(InvalidInputError, match="'101'"):
        read_quantity(ctr(**{"a/cores": "101"}), "a/cores", maximum=100, unit="%")


def test_resource_names_apply_the_sections_overrides_only_where_the_vendor_has_one():
    defaults = ResourceNames(count="v/dev", memory="v/mem", cores="v/cores", memory_unit_mib=256)
    plain = resource_names(defaults, VendorConfig())
    assert plain == defaults
    renamed = resource_names(
        defaults,
        VendorConfig(
            resource_count_name="x/dev",
            resource_memory_name="x/mem",
            resource_memory_pct_name="x/pct",
        ),
    )
    assert (renamed.count, renamed.memory, renamed.cores) == ("x/dev", "x/mem", "v/cores")
    assert renamed.memory_pct == ""  # the vendor has no percentage resource
    assert renamed.memory_unit_mib == 256


def test_one_scaling_with_one_rounding_down():
    # NVIDIA floored while Ascend and Hygon rounded: 1.257 gave 125 on one node, 126 on
    # another. Now every backend states 125 (HAMi truncates the scaled float).
    assert scaled(100, 1.257) == 125
    assert scaled(100, 0.29) == 29  # not 28: the factor's decimal form is used
    assert scaled(100, 1.1) == 110
    assert scaled(16384, 1.5) == 24576
    assert scaled(81920, 0.333) == 27279


def test_inventory_device_scales_and_takes_the_split_count():
    config = VendorConfig(split_count=7, memory_scaling=2.0, core_scaling=1.257)
    dev = inventory_device(config, uuid="X-0", vendor="X", memory_mib=1000, node_local={"phy": "3"})
    assert (dev.memory_mib, dev.cores_pct, dev.split_count) == (2000, 125, 7)
    assert dev.node_local == {"phy": "3"}
    # Node-local facts never take part in equality (the inventory does not carry them).
    assert dev == DeviceInfo(uuid="X-0", vendor="X", split_count=7, memory_mib=2000, cores_pct=125)


def test_run_tool_answers_stdout_or_none_with_a_timeout(tmp_path):
    assert run_tool([sys.executable, "-c", "print('ok')"]) == "ok\n"
    assert run_tool([sys.executable, "-c", "import sys; sys.exit(3)"]) is None
    assert run_tool([str(tmp_path / "no-such-tool")]) is None
    assert run_tool([]) is None
    slow = [sys.executable, "-c", "import time; time.sleep(30)"]
    assert SubprocessRunner(timeout_s=0.5)(slow) is None


@pytest.mark.parametrize("policy", list(NodePolicy))
def test_a_backend_without_hami_score_gets_the_real_node_policy(policy):
    manager = BackendManager.from_plugins({"toy": ToyBackend()})
    dev = DeviceInfo(uuid="TOY-0", vendor="TOY", split_count=4, memory_mib=1000, cores_pct=100)
    node = NodeInfo(name="n", devices=(dev,))
    slice_ = (ContainerDevice(uuid="TOY-0", vendor="TOY", memory_mib=100, cores_pct=0),)
    empty = vendor_score(manager, "TOY", node, (DeviceUsage(device=dev),), slice_, policy=policy)
    full = DeviceUsage(device=dev, used_count=3, used_memory_mib=800, used_cores_pct=0)
    fuller = vendor_score(manager, "TOY", node, (full,), slice_, policy=policy)
    assert empty != 50.0 and fuller != 50.0  # no longer a constant
    if policy is NodePolicy.BINPACK:
        assert fuller > empty
    else:
        assert empty > fuller


def test_configured_tool_output_splits_the_command_and_takes_its_timeout():
    seen = []
    config = VendorConfig(options={"cmd": "tool info -x 'a b'", "timeout": 7})
    out = configured_tool_output(
        config, command_key="cmd", timeout_key="timeout", runner=lambda argv: seen.append(argv)
    )
    assert out is None and seen == [["tool", "info", "-x", "a b"]]
    slow = VendorConfig(
        options={"cmd": f"{sys.executable} -c 'import time; time.sleep(30)'", "timeout": 0.5}
    )
    assert configured_tool_output(slow, command_key="cmd", timeout_key="timeout") is None


def test_read_stated_reads_every_quantity_under_its_name_and_the_cores_alias():
    from hami_core.backend import ResourceNames, StatedRequest, read_stated

    names = ResourceNames(
        count="v.com/n",
        memory="v.com/mem",
        memory_pct="v.com/mem-pct",
        cores="v.com/cores",
        cores_alias="v.com/c",
    )

    def ctr(limits=None, requests=None):
        return {"name": "main", "resources": {"limits": limits or {}, "requests": requests or {}}}

    assert read_stated(ctr(), names) == StatedRequest(count=None)
    assert read_stated(ctr(), names).empty
    got = read_stated(ctr({"v.com/n": "2", "v.com/mem": "300"}, {"v.com/c": "40"}), names)
    assert got == StatedRequest(count=2, memory_mib=300, cores_pct=40)
    both = read_stated(ctr({"v.com/cores": "10", "v.com/c": "90"}), names)
    assert both.cores_pct == 10  # the main name wins over the alias
    assert read_stated(ctr({"v.com/mem-pct": "50"}), names).memory_pct == 50
    with pytest.raises(InvalidInputError, match=r"container 'main'.*v\.com/mem-pct"):
        read_stated(ctr({"v.com/mem-pct": "101"}), names)
    # A vendor without a name for a quantity never reads it.
    only_count = ResourceNames(count="v.com/n")
    assert read_stated(ctr({"v.com/n": "1", "v.com/mem": "5"}), only_count) == StatedRequest(
        count=1
    )


def test_hami_annotation_keys_follow_hamis_naming_pattern_byte_for_byte():
    from hami_core.backend import DeviceTypeInfo, hami_annotation_keys

    assert hami_annotation_keys("mlu", "cambricon-mlu") == {
        "register_annotation": "hami.io/node-mlu-register",
        "handshake_annotation": "hami.io/node-handshake-mlu",
        "to_allocate_annotation": "hami.io/cambricon-mlu-devices-to-allocate",
        "allocated_annotation": "hami.io/cambricon-mlu-devices-allocated",
    }
    xpu = hami_annotation_keys("xpu", register_word_last=True)
    assert xpu["register_annotation"] == "hami.io/node-register-xpu"
    assert xpu["to_allocate_annotation"] == "hami.io/xpu-devices-to-allocate"
    dcu = DeviceTypeInfo(
        vendor="DCU", resources=ResourceNames(count="h/n"), **hami_annotation_keys("dcu")
    )
    assert dcu.handshake_annotation == "hami.io/node-handshake-dcu"
    assert dcu.allocated_annotation == "hami.io/dcu-devices-allocated"


def test_filter_keys_and_the_count_shared_device_type():
    from hami_core.backend import NOT_ACCOUNTED, countshared, type_filter_keys, uuid_filter_keys

    assert uuid_filter_keys("hygon.com") == ("hygon.com/use-gpuuuid", "hygon.com/nouse-gpuuuid")
    assert type_filter_keys("amd.com", "gpu") == ("amd.com/use-gputype", "amd.com/nouse-gputype")
    va = countshared.device_type("Vastai", ResourceNames(count="vastaitech.com/va"), "va")
    assert (va.register_annotation, va.handshake_annotation) == (
        "hami.io/node-va-register",
        "hami.io/node-handshake-va",
    )
    assert va.to_allocate_annotation == "hami.io/Vastai-devices-to-allocate"
    assert va.cores_unit is NOT_ACCOUNTED


def test_package_version_reads_the_installed_metadata_else_says_unknown():
    from hami_core import __version__
    from hami_core.backend import UNKNOWN_VERSION, package_version

    assert package_version("hami-core") == __version__ != UNKNOWN_VERSION
    assert package_version("hami-no-such-distribution") == "0.0.0+unknown" == UNKNOWN_VERSION


def test_capacity_quantities_read_whole_numbers_and_blame_the_node():
    from hami_core.backend import AnnotationError, capacity_quantities

    def node(**capacity: object) -> dict[str, object]:
        return {"metadata": {"name": "n1"}, "status": {"capacity": capacity}}

    maxima = {"aws.amazon.com/neuron": 2**16, "aws.amazon.com/neuroncore": 2**20}
    neuron = node(**{"aws.amazon.com/neuron": "2", "aws.amazon.com/neuroncore": "4"})
    assert capacity_quantities(neuron, maxima) == [2, 4]
    assert capacity_quantities(node(**{"aws.amazon.com/neuron": "3"}), maxima) == [3, 0]
    assert capacity_quantities(node(cpu="8"), maxima) is None
    assert capacity_quantities({"metadata": {"name": "bare"}}, maxima) is None
    with pytest.raises(AnnotationError) as exc:
        capacity_quantities(node(**{"aws.amazon.com/neuron": "1.5"}), maxima)
    assert "node n1" in str(exc.value) and "aws.amazon.com/neuron" in str(exc.value)
    with pytest.raises(AnnotationError, match="aws.amazon.com/neuron"):
        capacity_quantities(node(**{"aws.amazon.com/neuron": str(2**16 + 1)}), maxima)


def test_numbered_devices_are_named_as_hami_names_capacity_devices():
    from hami_core.backend import numbered_devices

    n = {"metadata": {"name": "test"}}
    mlu = numbered_devices(
        n, "MLU", 2, word="cambricon-mlu", split_count=100, memory_mib=25600, cores_pct=100
    )
    assert [d.uuid for d in mlu] == ["test-cambricon-mlu-0", "test-cambricon-mlu-1"]
    assert [(d.vendor, d.model, d.index, d.split_count) for d in mlu] == [
        ("MLU", "MLU", 0, 100),
        ("MLU", "MLU", 1, 100),
    ]
    assert all(d.memory_mib == 25600 and d.cores_pct == 100 and d.healthy for d in mlu)
    (gcu,) = numbered_devices(
        n, "GCU", 1, split_count=1, memory_mib=100, cores_pct=100, custom=(("k", "v"),)
    )
    assert (gcu.uuid, gcu.custom) == ("test-GCU-0", (("k", "v"),))
    assert numbered_devices(n, "GCU", 0, split_count=1, memory_mib=1, cores_pct=1) == []
