"""Ascend requests and admission: template rounding at its edges, defaults, pairing."""

import pytest
from hami_ascend import plugin
from hami_ascend.admission import mutate_container
from hami_ascend.models import settings
from hami_ascend.requests import parse_request, resolve

from hami_core.errors import ConfigError, InvalidInputError
from hami_core.model import DeviceRequest
from hami_core.testing import mutated as written
from hami_core.testing import section
from tests.backends.support import only

DEFAULT = section(plugin)


def ctr(model="Ascend910B3", count=None, memory=None, cores=None, name="main"):
    limits = {}
    if count is not None:
        limits[f"huawei.com/{model}"] = str(count)
    if memory is not None:
        limits[f"huawei.com/{model}-memory"] = str(memory)
    if cores is not None:
        limits[f"huawei.com/{model}-core"] = str(cores)
    return {"name": name, "image": "busybox", "resources": {"limits": limits}}


def pod(*containers, annotations=None):
    meta = {"name": "p", "namespace": "default", "uid": "uid-p"}
    if annotations:
        meta["annotations"] = annotations
    return {"metadata": meta, "spec": {"containers": list(containers)}}


def req(container, config=DEFAULT, annotations=None):
    return parse_request(pod(container, annotations=annotations), container, config)


def slice_(model, mib, cores=0, count=1):
    return DeviceRequest(vendor=model, count=count, memory_mib=mib, cores_pct=cores)


def whole(model, count=1, cores=100):
    return DeviceRequest(vendor=model, count=count, memory_pct=100, cores_pct=cores)


@pytest.mark.parametrize(
    ("memory", "expected"),
    [
        (1, slice_("Ascend910B3", 16384)),
        (16384, slice_("Ascend910B3", 16384)),  # exactly at vir05_1c_16g
        (16385, slice_("Ascend910B3", 32768)),  # one MiB over: the next template
        (32768, slice_("Ascend910B3", 32768)),  # exactly at vir10_3c_32g
        (32769, whole("Ascend910B3")),  # one MiB over the largest template: whole chip
        (65536, whole("Ascend910B3")),  # exactly memoryCapacity
    ],
)
def test_910b3_memory_rounds_up_to_the_template(memory, expected):
    assert req(ctr(count=1, memory=memory)) == expected


def test_910b3_memory_one_mib_over_the_chip_is_refused():
    with pytest.raises(InvalidInputError, match=r"65537 MiB is more than one Ascend910B3"):
        req(ctr(count=1, memory=65537))


@pytest.mark.parametrize(
    ("memory", "expected"),
    [
        (12288, slice_("Ascend310P", 12288)),  # vir04
        (12289, whole("Ascend310P")),  # above vir04, within memoryCapacity 24576
        (24576, whole("Ascend310P")),
    ],
)
def test_310p_edges(memory, expected):
    assert req(ctr("Ascend310P", count=1, memory=memory)) == expected


def test_310p_whole_chip_charges_memory_allocatable():
    cfg = settings(DEFAULT)
    r = resolve(pod(), ctr("Ascend310P", count=1, memory=12289), cfg)
    assert r is not None and r.whole and r.memory_mib == 21527
    with pytest.raises(InvalidInputError, match="24577 MiB"):
        req(ctr("Ascend310P", count=1, memory=24577))


def test_910a_odd_template_sizes():
    assert req(ctr("Ascend910A", count=1, memory=2184)) == slice_("Ascend910A", 2184)
    assert req(ctr("Ascend910A", count=1, memory=2185)) == slice_("Ascend910A", 4369)


def test_count_only_is_a_whole_exclusive_chip_and_memory_only_gets_a_count():
    assert req(ctr(count=2)) == whole("Ascend910B3", count=2)
    assert req(ctr(memory=4000)) == slice_("Ascend910B3", 16384)
    soft = {"huawei.com/vnpu-mode": "hami-core"}
    assert req(ctr(memory=4000, cores=30), annotations=soft) == slice_(
        "Ascend910B3", 4000, cores=30
    )
    assert req(ctr(count=1, cores=40), annotations=soft) == whole("Ascend910B3", cores=40)


@pytest.mark.parametrize(
    ("core", "refused"), [("10", True), ("25", True), ("0", False), (None, False)]
)
def test_hard_split_refuses_a_stated_core(core, refused):
    """HAMi ``pkg/device/ascend/device_test.go::Test_MutateAdmission_HardSplitCoreRejected``
    (1 x 8738 MiB, template mode): "hard split with core is rejected" (10), "... core over
    physical is rejected" (25), "... core=0 is allowed", "... without core is allowed";
    the message names hami-core."""
    c = ctr(count=1, memory=8738, cores=core)
    if refused:
        with pytest.raises(
            InvalidInputError, match=r"Ascend910B3-core: \d+ is only supported in hami-core"
        ):
            req(c)
    else:
        assert req(c) == slice_("Ascend910B3", 16384)
    # "hami-core soft split with core is allowed"
    soft = req(
        ctr(count=1, memory=8738, cores=10), annotations={"huawei.com/vnpu-mode": "hami-core"}
    )
    assert soft == slice_("Ascend910B3", 8738, cores=10)


def test_hard_split_accepts_the_cores_this_webhook_writes():
    assert req(ctr(count=1, cores=100)) == whole("Ascend910B3")
    config = section(plugin, default_cores_pct=10)
    assert req(ctr(count=1, memory=8738, cores=10), config) == slice_(
        "Ascend910B3", 16384, cores=10
    )
    with pytest.raises(InvalidInputError, match="only supported in hami-core"):
        req(ctr(count=1, memory=8738, cores=20), config)


def test_defaults_from_the_config():
    config = section(plugin, default_memory_mib=20000, default_cores_pct=10, default_count=1)
    assert req(ctr(count=1), config) == slice_("Ascend910B3", 32768, cores=10)


def test_foreign_and_empty_containers_ask_nothing():
    assert req({"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}) is None
    assert req({"name": "c"}) is None
    assert req(ctr(count=0)) is None


@pytest.mark.parametrize(
    ("container", "message"),
    [
        (ctr(count=0, memory=1000), "is 0 but memory"),
        (ctr(count=1, memory="16Gi"), "largest accepted value"),
        (ctr(count=1, cores=101), "huawei.com/Ascend910B3-core"),
        (ctr(count="1.5"), "huawei.com/Ascend910B3"),
        (ctr(count=2, memory=16384), "takes one chip"),
    ],
)
def test_invalid_requests_name_the_container_and_resource(container, message):
    with pytest.raises(InvalidInputError, match=message) as err:
        req(container)
    assert "'main'" in str(err.value)


def test_two_models_in_one_container_are_refused():
    c = ctr(count=1)
    c["resources"]["limits"]["huawei.com/Ascend310P"] = "1"
    with pytest.raises(InvalidInputError, match="several Ascend models"):
        req(c)


def test_910c_takes_whole_modules():
    assert req(ctr("Ascend910C", count=1)) == whole("Ascend910C", count=2)
    assert req(ctr("Ascend910C", count=4)) == whole("Ascend910C", count=4)
    with pytest.raises(InvalidInputError, match="multiple of 2, not 3"):
        req(ctr("Ascend910C", count=3))
    with pytest.raises(InvalidInputError, match="whole modules of 2"):
        req(ctr("Ascend910C", count=1, memory=16384))


def test_hami_core_mode_keeps_the_memory_as_stated():
    ann = {"huawei.com/vnpu-mode": "hami-core"}
    assert req(ctr(count=1, memory=5000, cores=30), annotations=ann) == slice_(
        "Ascend910B3", 5000, cores=30
    )
    config = section(plugin, options={"vnpuMode": "hami-core"})
    assert req(ctr(count=1, memory=5000), config) == slice_("Ascend910B3", 5000)
    ann_template = {"huawei.com/vnpu-mode": "template"}
    assert req(ctr(count=1, memory=5000), config, ann_template) == slice_("Ascend910B3", 16384)


def test_unknown_vnpu_mode_is_refused():
    with pytest.raises(InvalidInputError, match="vnpu-mode"):
        req(ctr(count=1), annotations={"huawei.com/vnpu-mode": "soft"})


def test_templates_are_overridable_per_model():
    config = section(
        plugin,
        options={
            "vnpus": {
                "Ascend910B3": {
                    "templates": [
                        {"name": "vir10_3c_32g", "memory": 32768, "aiCore": 10},
                        {"name": "vir02_8g", "memory": 8192, "aiCore": 2},
                    ]
                }
            }
        },
    )
    assert req(ctr(count=1, memory=8000), config) == slice_("Ascend910B3", 8192)
    assert req(ctr(count=1, memory=8193), config) == slice_("Ascend910B3", 32768)
    # other models keep their defaults
    assert req(ctr("Ascend910B4", count=1, memory=8000), config) == slice_("Ascend910B4", 8192)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"vnpus": {"Ascend999": {}}}, "unknown model"),
        ({"vnpus": {"Ascend910B3": {"aiCores": 3}}}, r"Ascend910B3\.aiCores: unknown key"),
        ({"vnpus": {"Ascend910B3": {"templates": [{"name": "x"}]}}}, "memory"),
        ({"vnpus": {"Ascend910B3": {"memoryAllocatable": "64G"}}}, "expected int"),
        ({"vnpuMode": "soft"}, "ascend.vnpuMode"),
    ],
)
def test_bad_options_are_config_errors(options, message):
    with pytest.raises(ConfigError, match=message):
        settings(section(plugin, options=options))


def test_options_through_the_config_file_parser():
    m = only(
        "ascend",
        config={"ascend": {"vnpus": {"Ascend310P": {"memoryCapacity": 30000}}}},
    )
    c = ctr("Ascend310P", count=1, memory=29000)
    assert m.parse_requests(pod(c), c, init=False) == [whole("Ascend310P")]


# -- admission -------------------------------------------------------------------


def mutated(p, index=0, config=DEFAULT):
    c = p["spec"]["containers"][index]
    res = mutate_container(p, c, f"/spec/containers/{index}", config)
    assert res is not None and res.denial is None, res
    return written(p, f"/spec/containers/{index}", res)


def test_admission_writes_the_template_memory_into_limits_and_requests():
    p = mutated(pod(ctr(count=1, memory="10k")))
    res = p["spec"]["containers"][0]["resources"]
    expected = {
        "huawei.com/Ascend910B3": "1",
        "huawei.com/Ascend910B3-memory": "16384",
        "huawei.com/Ascend910B3-core": "0",
    }
    assert res["limits"] == expected and res["requests"] == expected


def test_admission_of_a_whole_chip_and_a_910c_pair():
    p = mutated(pod(ctr(count=1)))
    assert p["spec"]["containers"][0]["resources"]["limits"] == {
        "huawei.com/Ascend910B3": "1",
        "huawei.com/Ascend910B3-memory": "65536",
        "huawei.com/Ascend910B3-core": "100",
    }
    q = mutated(pod(ctr("Ascend910C", count=1)))
    assert q["spec"]["containers"][0]["resources"]["requests"]["huawei.com/Ascend910C"] == "2"


def test_admission_keeps_quantities_that_already_mean_the_value():
    p = mutated(pod(ctr(count="1", memory="16384", cores="0")))
    assert p["spec"]["containers"][0]["resources"]["limits"]["huawei.com/Ascend910B3-memory"] == (
        "16384"
    )


def test_admission_is_idempotent_and_sets_the_runtime_class():
    config = section(plugin, options={"runtimeClassName": "ascend"})
    p = mutated(pod(ctr(count=1, memory=5000)), config=config)
    assert p["spec"]["runtimeClassName"] == "ascend"
    again = mutate_container(p, p["spec"]["containers"][0], "/spec/containers/0", config)
    assert again is not None and again.patch == ()


def test_admission_in_hami_core_mode_keeps_the_memory_and_adds_no_hook():
    """HAMi ``pkg/device/ascend/device_test.go::Test_MutateAdmission_VNPUCoreMode``
    "vNPU-mode hami-core: keep raw memory without postStart" (15360 MiB, core 20 kept;
    no postStart since v2.10.0, Project-HAMi/HAMi#2062) and "no vnpu-mode annotation: no
    postStart, memory trimmed"."""
    soft = {"huawei.com/vnpu-mode": "hami-core"}
    p = mutated(pod(ctr(count=1, memory=15360, cores=20), annotations=soft))
    c = p["spec"]["containers"][0]
    assert "lifecycle" not in c
    limits = c["resources"]["limits"]
    assert limits["huawei.com/Ascend910B3-memory"] == "15360"
    assert limits["huawei.com/Ascend910B3-core"] == "20"
    hard = mutated(pod(ctr(count=1, memory=15360)))["spec"]["containers"][0]
    assert "lifecycle" not in hard
    assert hard["resources"]["limits"]["huawei.com/Ascend910B3-memory"] == "16384"


def test_admission_denies_with_the_cause():
    res = mutate_container(
        pod(ctr(count=3, memory=100)), ctr(count=3, memory=100), "/spec/containers/0", DEFAULT
    )
    assert res is not None and res.denial is not None and "takes one chip" in res.denial
    foreign = {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
    assert mutate_container(pod(foreign), foreign, "/spec/containers/0", DEFAULT) is None
