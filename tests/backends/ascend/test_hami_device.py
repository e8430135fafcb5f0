"""HAMi 2.10 ``pkg/device/ascend/device_test.go`` and ``device_910c_pairing_test.go`` cases
with HAMi's expected values (issue #15 item 11): 910C module pairing, the hami-core mode
check (``ModeNotFit``), the annotation keys per model, the ``huawei.com/<model>``
annotation written at bind and the usage a slice adds."""

from __future__ import annotations

import json
import time

import pytest
from hami_ascend import plugin, runtime_info
from hami_ascend.models import DEFAULT_MODELS
from hami_ascend.names import device_type, nouse_uuid_annotation, use_uuid_annotation

from hami_core.model import (
    ContainerDevice,
    DevicePolicy,
    DeviceRequest,
    DeviceUsage,
    NodeInfo,
    ReasonCode,
)
from hami_core.testing import section
from tests.backends.support import only, usage_of

from .test_fit import C, chip, run, usage
from .test_pipeline import HAMI_910B3, ascend_node, ascend_pod, pipeline

PAIRING = "pkg/device/ascend/device_910c_pairing_test.go"
MODELS = {m.vendor: m for m in DEFAULT_MODELS}


def _chips(*indexes):
    return [usage(chip(i, "Ascend910C", memory=32000, split=1)) for i in indexes]


def _whole(count):
    return DeviceRequest(vendor="Ascend910C", count=count, memory_pct=100, cores_pct=100)


@pytest.mark.parametrize(
    ("test", "indexes", "count"),
    [
        # only 0-1 is a whole module: 2 of the 4 chips asked for
        ("TestAscend910C_FitPartialAllocationBug", (0, 1, 2, 4, 6), 4),
        # 0 and 2 are halves of two modules
        ("TestAscend910C_FitExactCountBypassBug", (0, 2), 2),
        # no NetworkID: the module is still index // 2
        ("TestAscend910C_FitWithoutNetworkID_ValidatesPairing", (0, 2), 2),
        # computeBestCombination910C finds no full pair among 0, 2, 4, 6
        ("TestComputeBestCombination910C_NoFullPairsReturnsEmpty", (0, 2, 4, 6), 4),
    ],
)
def test_910c_halves_of_modules_do_not_fit(test, indexes, count):
    """``device_910c_pairing_test.go``, the test named: 910C chips go in whole modules
    (chips ``2k`` and ``2k+1``); free chips that do not make enough whole modules are
    ``AllocatedCardsInsufficientRequest``."""
    result = run(_whole(count), _chips(*indexes), model=C)
    assert not result.fits, test
    assert result.node_reason is ReasonCode.ALLOCATED_CARDS_INSUFFICIENT_REQUEST


@pytest.mark.parametrize(
    "test",
    ["TestAscend910C_FitFullPairSucceeds", "TestAscend910C_FitWithoutNetworkID_ValidatesPairing"],
)
def test_910c_a_whole_module_fits(test):
    """``device_910c_pairing_test.go``, the test named: chips 0 and 1 (one module, with
    or without NetworkID) take a request of 2."""
    result = run(_whole(2), _chips(0, 1), model=C)
    assert sorted(d.uuid for d in result.devices) == ["Ascend910C-0", "Ascend910C-1"], test


def test_fit_910c_full_modules_only():
    """``device_test.go::TestDevices_Fit_910C``: of chips 0, 1, 2 a request of 2 takes the
    whole module 0-1 (HAMi lists dev-1, dev-0: its reverse scan; index order here)."""
    result = run(_whole(2), _chips(0, 1, 2), model=C)
    assert sorted(d.uuid for d in result.devices) == ["Ascend910C-0", "Ascend910C-1"]


def test_init_devices_annotation_keys():
    """``device_test.go::Test_InitDevices`` "test with valid configuration": the
    Ascend910A model's keys are ``hami.io/node-register-Ascend910A``,
    ``hami.io/node-handshake-Ascend910A``, ``hami.io/use-Ascend910A-uuid`` /
    ``hami.io/no-use-Ascend910A-uuid`` and the device lists
    ``hami.io/Ascend910A-devices-to-allocate`` / ``-allocated``; "enableAscend is false":
    without the backend no Ascend model is known."""
    t = device_type(MODELS["Ascend910A"])
    assert (t.register_annotation, t.handshake_annotation) == (
        "hami.io/node-register-Ascend910A",
        "hami.io/node-handshake-Ascend910A",
    )
    assert (t.to_allocate_annotation, t.allocated_annotation) == (
        "hami.io/Ascend910A-devices-to-allocate",
        "hami.io/Ascend910A-devices-allocated",
    )
    assert (use_uuid_annotation("Ascend910A"), nouse_uuid_annotation("Ascend910A")) == (
        "hami.io/use-Ascend910A-uuid",
        "hami.io/no-use-Ascend910A-uuid",
    )
    m = MODELS["Ascend910A"]
    assert [(t.name, t.memory_mib) for t in m.templates] == [
        ("vir02", 2184),
        ("vir04", 4369),
        ("vir08", 8738),
        ("vir16", 17476),
    ]
    assert (m.memory_allocatable_mib, m.memory_capacity_mib, m.ai_core) == (32768, 32768, 30)
    assert not any(t.vendor.startswith("Ascend") for t in only("nvidia").device_types())


def test_add_resource_usage():
    """``device_test.go::TestDevices_AddResourceUsage``: a chip using 2000 MiB and 15 %
    that takes a container of 1024 MiB and 50 % holds one more sharer, 3024 MiB, 65 %."""
    assert usage_of("Ascend910B3", chip(0), (2000, 15), (1024, 50)) == (2, 3024, 65)


def _slice(uuid, memory, cores):
    return ((ContainerDevice(uuid=uuid, vendor="Ascend910A", memory_mib=memory, cores_pct=cores),),)


@pytest.mark.parametrize(
    ("test", "model", "hami_core", "devices", "want"),
    [
        (
            "Test_PatchAnnotations",
            "Ascend910A",
            False,
            _slice("device-0", 8738, 1),
            '[{"UUID":"device-0","temp":"vir08","memory":8738,"core":1}]',
        ),
        (
            "Test_PatchAnnotations_VNPUCoreMode",
            "Ascend910B3",
            True,
            _slice("ascend-uuid-1", 8192, 5),
            '[{"UUID":"ascend-uuid-1","memory":8192,"core":5}]',
        ),
        (
            "Test_PatchAnnotations_ZeroCore",
            "Ascend910A",
            False,
            _slice("device-zero-core", 8738, 0),
            '[{"UUID":"device-zero-core","temp":"vir08","memory":8738}]',
        ),
    ],
)
def test_patch_annotations(test, model, hami_core, devices, want):
    """``device_test.go``, the test named: ``huawei.com/<model>`` lists each chip with its
    template (template mode only), memory and cores (Go ``omitempty``: a zero core is
    left out), in Go's field order."""
    assert runtime_info.runtime_info(devices, MODELS[model], hami_core=hami_core) == want, test


def test_patch_annotations_at_bind():
    """``device_test.go::Test_PatchAnnotations`` "exist device": besides the device
    lists, the bind writes ``huawei.com/Ascend910A`` and ``predicate-time`` (unix seconds);
    "no device": a pod without chips gets none of them."""
    cfg = only("ascend").vendor_config("ascend")
    pod = {"metadata": {"name": "p", "annotations": {}}}
    out = plugin.hami_bind_annotations(pod, "Ascend910A", _slice("device-0", 8738, 1), cfg)
    assert json.loads(out["huawei.com/Ascend910A"]) == [
        {"UUID": "device-0", "temp": "vir08", "memory": 8738, "core": 1}
    ]
    assert abs(int(out["predicate-time"]) - time.time()) < 60
    p = pipeline(ascend_node("npu-1", "Ascend910B3", HAMI_910B3))
    other = p.submit({**ascend_pod("none"), "spec": {"containers": [{"name": "c", "image": "x"}]}})
    stored = p.cluster.get_pod("default", "none")
    assert other.allocation is None
    assert not {"huawei.com/Ascend910B3", "predicate-time"} & set(
        stored["metadata"].get("annotations") or {}
    )


# ---- the hami-core mode check (TestDevices_Fit, ModeNotFit) --------------------------

HAMI_CORE_POD = {"huawei.com/vnpu-mode": "hami-core"}


def _fit_on(node_annotations, request, pod_annotations, options=None):
    """HAMi's one-chip node (32768 MiB) as the scheduler reads it, the request fitted
    through the backend's hooks."""
    cfg = section(plugin, options=options or {})
    register = json.dumps(
        [
            {
                "id": "dev-0",
                "count": 100,
                "devmem": 32768,
                "devcore": 100,
                "type": "Ascend910B3",
                "health": True,
            }
        ]
    )
    node = ascend_node("n", "Ascend910B3", register)
    node["metadata"]["annotations"].update(node_annotations)
    devices = plugin.hami_node_devices(node, "Ascend910B3", cfg)
    usage_ = tuple(DeviceUsage(device=d) for d in devices)
    pod = {"metadata": {"name": "p", "annotations": dict(pod_annotations)}}
    return plugin.hami_fit(
        request, NodeInfo(name="n", devices=tuple(devices)), usage_, pod, DevicePolicy.SPREAD, cfg
    )


SLICE = DeviceRequest(vendor="Ascend910B3", count=1, memory_mib=15360, cores_pct=20)
WHOLE = DeviceRequest(vendor="Ascend910B3", count=1, memory_mib=32768, cores_pct=0)
NO_MEMORY = DeviceRequest(vendor="Ascend910B3", count=1, memory_pct=100, cores_pct=0)
LEGACY_SLICE = DeviceRequest(vendor="Ascend910B3", count=1, memory_mib=8738, cores_pct=0)
ON = {"hami-vnpu-core": "true"}


@pytest.mark.parametrize(
    ("case", "node_annotations", "request_", "pod_annotations", "fits"),
    [
        ("fit fail: hami-core pod on legacy node (ModeNotFit)", {}, SLICE, HAMI_CORE_POD, False),
        ("fit ok: annotation-less pod on hami-core node follows node", ON, LEGACY_SLICE, {}, True),
        (
            "fit fail: whole-card hami-core pod on legacy node (ModeNotFit)",
            {},
            WHOLE,
            HAMI_CORE_POD,
            False,
        ),
        (
            "fit fail: memory-less hami-core pod on legacy node (ModeNotFit)",
            {},
            NO_MEMORY,
            HAMI_CORE_POD,
            False,
        ),
        ("fit success: whole-card hami-core pod on hami-core node", ON, WHOLE, HAMI_CORE_POD, True),
        ("fit success: whole-card legacy pod on hami-core node", ON, WHOLE, {}, True),
    ],
)
def test_mode_not_fit(case, node_annotations, request_, pod_annotations, fits):
    """``device_test.go::TestDevices_Fit``, the hami-core cases named: a
    ``huawei.com/vnpu-mode: hami-core`` pod fits only a node with ``hami-vnpu-core:
    "true"`` (``hamiVnpuCore`` false, HAMi's default), else ``1/1 ModeNotFit``; a pod
    without the annotation fits either kind."""
    result = _fit_on(node_annotations, request_, pod_annotations)
    assert result.fits is fits, case
    if not fits:
        assert result.summary(1) == "1/1 ModeNotFit"


@pytest.mark.parametrize(
    ("node_annotations", "options", "fits"),
    [
        ({}, {"hamiVnpuCore": True}, True),  # HAMi's vnpus.hamiVnpuCore: true
        ({}, {"vnpuMode": "hami-core"}, True),  # every pod soft-sliced: nodes are too
        ({"hami-vnpu-core": "false"}, {"hamiVnpuCore": True}, False),  # the node says no
        ({"hami-vnpu-core": "TRUE"}, {}, False),  # only "true" is yes, as HAMi
    ],
)
def test_mode_default_and_node_annotation(node_annotations, options, fits):
    """``device.go`` ``Fit``: the configuration's default (``hamiVnpuCore``) holds for
    nodes without ``hami-vnpu-core``; the node's annotation wins over it."""
    assert _fit_on(node_annotations, SLICE, HAMI_CORE_POD, options).fits is fits


def test_a_hami_core_pod_is_kept_off_template_nodes_end_to_end():
    """Through the webhook, filter and bind: a tenant's ``huawei.com/vnpu-mode:
    hami-core`` pod (soft slicing, which needs HAMi's limiter on the node) is never placed
    on a template-mode node, even when that node is the only one with free chips; it goes
    to the node that runs hami-core. A template pod still uses the template node."""
    legacy = ascend_node("legacy", "Ascend910B3", HAMI_910B3)
    core = ascend_node("core", "Ascend910B3", HAMI_910B3.replace("HAMI-B3", "CORE-B3"))
    core["metadata"]["annotations"]["hami-vnpu-core"] = "true"
    p = pipeline(legacy)
    out = p.submit(ascend_pod("soft", count=1, memory=8192, annotations=HAMI_CORE_POD))
    assert out.node is None
    assert out.filter.failed["legacy"] == "2/2 ModeNotFit"
    p = pipeline(legacy, core)
    assert (
        p.submit(ascend_pod("soft", count=1, memory=8192, annotations=HAMI_CORE_POD)).node == "core"
    )
    assert p.submit(ascend_pod("tmpl", count=1, memory=16384)).node in ("legacy", "core")


def test_the_inventory_cannot_claim_the_mode():
    """The mode is the node's ``hami-vnpu-core`` annotation (or the configuration), not a
    fact the register annotation can state: chips registered with ``"mode": "hami-core"``
    and a ``hamiVnpuCore`` custom fact on a node without the annotation still refuse a
    hami-core pod."""
    forged = json.loads(HAMI_910B3)
    for d in forged:
        d["mode"] = "hami-core"
        d["customInfo"] = {"hamiVnpuCore": "true"}
    node = ascend_node("n", "Ascend910B3", json.dumps(forged))
    cfg = section(plugin)
    devices = plugin.hami_node_devices(node, "Ascend910B3", cfg)
    assert [d.info("hamiVnpuCore") for d in devices] == ["false", "false"]
    p = pipeline(node)
    out = p.submit(ascend_pod("soft", count=1, memory=8192, annotations=HAMI_CORE_POD))
    assert out.node is None and out.filter.failed["n"] == "2/2 ModeNotFit"
