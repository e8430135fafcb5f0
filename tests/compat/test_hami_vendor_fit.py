"""The ``TestDevices_Fit`` table every HAMi vendor carries, through each backend's fit.

HAMi 2.10 repeats one table of cases in ``pkg/device/<vendor>/device_test.go``
(``TestDevices_Fit``; Iluvatar's ``Test_Fit``): the same devices (``Count`` 100,
``Totalmem`` 1280 MiB unless the case says otherwise, ``Totalcore`` 100) and request
(1 x 512 MiB, 50 % cores) and the same reason strings. Each case runs here for every
vendor whose file has it, through ``BackendManager.fit`` (the backend's own fit rules).

Not taken, with why (docs/hami-go-tests.md): "fit success" (HAMi's reverse scan takes
the last of two equal devices, we take the lowest index); "type mismatch" (a request of
another vendor never reaches a backend's fit here); "core limit can't exceed 100" (HAMi
clamps 120 to 100, we deny the pod at admission); "AllocatedCardsInsufficientRequest"
cases (HAMi's scheduler checks the device count first, ``pkg/scheduler/score.go``, so
the pod gets ``NodeInsufficientDevice`` there as here).
"""

from __future__ import annotations

import pytest

from hami_core.model import DeviceInfo, DevicePolicy, DeviceRequest, DeviceUsage, NodeInfo
from hami_core.plugin import BackendManager

#: vendor file -> our vendor key.
VENDORS = {
    "ascend": "Ascend910B3",
    "cambricon": "MLU",
    "hygon": "DCU",
    "mthreads": "Mthreads",
    "metax": "Metax-SGPU",
    "iluvatar": "MR-V100",
    "biren": "Biren",
    "vastai": "Vastai",
    "awsneuron": "AWSNeuron",
}


def _dev(vendor, uuid="dev-0", *, totalmem=1280, totalcore=100, count=100, health=True):
    return DeviceInfo(
        uuid=uuid,
        vendor=vendor,
        model=vendor,
        index=0,
        split_count=count,
        memory_mib=totalmem,
        cores_pct=totalcore,
        healthy=health,
    )


#: case -> (device fields, usage fields, request fields, HAMi's reason or None for a fit,
#: the vendor files whose TestDevices_Fit has the case).
CASES = {
    "fit fail: memory not enough": (
        {"totalmem": 128},
        {},
        {"memory_mib": 512, "cores_pct": 50},
        "1/1 CardInsufficientMemory",
        ("ascend", "cambricon", "hygon", "mthreads", "metax"),
    ),
    "fit fail: core not enough": (
        {"totalmem": 1024},
        {"used_cores_pct": 100},
        {"memory_mib": 512, "cores_pct": 50},
        "1/1 CardInsufficientCore",
        ("ascend", "cambricon", "hygon", "mthreads", "metax"),
    ),
    "fit fail: card overused": (
        {},
        {"used_count": 100},
        {"memory_mib": 512, "cores_pct": 50},
        "1/1 CardTimeSlicingExhausted",
        ("ascend", "cambricon", "hygon", "mthreads", "metax"),
    ),
    "fit fail: card exclusively": (
        {},
        {"used_count": 20},
        {"memory_mib": 512, "cores_pct": 100},
        "1/1 ExclusiveDeviceAllocateConflict",
        ("ascend", "cambricon", "hygon", "mthreads", "metax"),
    ),
    "fit fail: CardComputeUnitsExhausted": (
        {},
        {"used_count": 20, "used_cores_pct": 100},
        {"memory_mib": 512, "cores_pct": 0},
        "1/1 CardComputeUnitsExhausted",
        ("ascend", "cambricon", "hygon", "mthreads", "metax"),
    ),
    "fit success: memory percentage": (
        {},
        {"used_count": 20, "used_cores_pct": 10},
        {"memory_pct": 10, "cores_pct": 20},
        None,
        ("ascend", "cambricon", "hygon", "mthreads", "metax"),
    ),
    "fit fail: CardNotHealth": (
        {"health": False},
        {"used_count": 20, "used_cores_pct": 10},
        {"memory_pct": 10, "cores_pct": 20},
        "1/1 CardNotHealth",
        ("ascend", "cambricon", "hygon", "mthreads", "metax", "iluvatar", "biren", "vastai"),
    ),
}

#: vendor file -> HAMi's (use, no-use) UUID annotation keys (``pkg/device/<vendor>/device.go``).
UUID_KEYS = {
    "ascend": ("hami.io/use-Ascend910B3-uuid", "hami.io/no-use-Ascend910B3-uuid"),
    "cambricon": ("cambricon.com/use-gpuuuid", "cambricon.com/nouse-gpuuuid"),
    "hygon": ("hygon.com/use-gpuuuid", "hygon.com/nouse-gpuuuid"),
    "mthreads": ("mthreads.ai/use-gpuuuid", "mthreads.ai/nouse-gpuuuid"),
    "biren": ("birentech.com/use-gpuuuid", "birentech.com/nouse-gpuuuid"),
    "vastai": ("vastaitech.com/use-gpuuuid", "vastaitech.com/nouse-gpuuuid"),
    "awsneuron": ("aws.amazon.com/use-neuron-uuid", "aws.amazon.com/nouse-neuron-uuid"),
}

CASES["fit fail: card overused"] = (
    *CASES["fit fail: card overused"][:4],
    ("ascend", "cambricon", "hygon", "mthreads", "metax", "biren", "vastai", "awsneuron"),
)

PARAMS = [
    pytest.param(case, vendor_file, id=f"{vendor_file}: {case}")
    for case, (*_, files) in CASES.items()
    for vendor_file in files
]


@pytest.mark.parametrize(("case", "vendor_file"), PARAMS)
def test_shared_fit_table(case, vendor_file):
    """``pkg/device/<vendor_file>/device_test.go::TestDevices_Fit`` (Iluvatar:
    ``Test_Fit``), the case named, with HAMi's reason string."""
    device, used, request, reason, _ = CASES[case]
    vendor = VENDORS[vendor_file]
    m = BackendManager.from_entry_points(disabled=[])
    dev = _dev(vendor, **device)
    usage = (DeviceUsage(device=dev, **used),)
    req = DeviceRequest(vendor=vendor, count=1, **request)
    result = m.fit(
        req,
        NodeInfo(name="n", devices=(dev,)),
        usage,
        pod={"metadata": {}},
        policy=DevicePolicy.SPREAD,
    )
    if reason is None:
        assert result.fits, (case, result)
        assert [(d.uuid, d.memory_mib, d.cores_pct) for d in result.devices] == [("dev-0", 128, 20)]
    else:
        assert not result.fits and result.summary(1) == reason, (case, result)


@pytest.mark.parametrize(
    ("case", "uuid", "which"),
    [
        ("fit fail: user assign use uuid mismatch", "dev-1", 0),
        ("fit fail: user assign no use uuid match", "dev-0", 1),
    ],
)
@pytest.mark.parametrize("vendor_file", sorted(UUID_KEYS))
def test_shared_fit_table_uuid_filters(case, uuid, which, vendor_file):
    """``pkg/device/<vendor_file>/device_test.go::TestDevices_Fit``, the case named: the
    device ``uuid`` under HAMi's use (``dev-0`` only) or no-use (``dev-0``) annotation of
    that vendor is ``1/1 CardUuidMismatch``; without the annotation it fits. (HAMi's
    case asks 2 devices of one; one is asked here, the count has its own check.)"""
    vendor = VENDORS[vendor_file]
    m = BackendManager.from_entry_points(disabled=[])
    dev = _dev(vendor, uuid)
    usage = (DeviceUsage(device=dev),)
    if vendor_file == "awsneuron":  # one NeuronCore of a device without memory
        req = DeviceRequest(vendor=vendor, count=1, memory_pct=100, cores_pct=1)
    else:
        req = DeviceRequest(vendor=vendor, count=1, memory_mib=512, cores_pct=50)
    node = NodeInfo(name="n", devices=(dev,))
    pod = {"metadata": {"annotations": {UUID_KEYS[vendor_file][which]: "dev-0"}}}
    refused = m.fit(req, node, usage, pod=pod, policy=DevicePolicy.SPREAD)
    assert not refused.fits and refused.summary(1) == "1/1 CardUuidMismatch", (case, refused)
    assert m.fit(req, node, usage, pod={"metadata": {}}, policy=DevicePolicy.SPREAD).fits
