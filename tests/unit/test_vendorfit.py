"""``VendorFit`` and ``FilterKeys``: a vendor's fit stated as data (``hami_core.backend``)."""

from __future__ import annotations

import attrs

from hami_core.backend import FilterKeys, FitRules, VendorFit
from hami_core.model import (
    ContainerDevice,
    DeviceInfo,
    DevicePolicy,
    DeviceRequest,
    DeviceUsage,
    FitResult,
    NodeInfo,
    ReasonCode,
)
from tests.builders import gpu

KEYS = FilterKeys(
    use_type=("acme.com/use-type", "hami.io/gpu-type"),
    nouse_uuid=("acme.com/nouse-uuid",),
    vendor_tokens=frozenset({"acme"}),
)


def dev(i: int, model: str = "Acme X1-80GB") -> DeviceInfo:
    acme = gpu(f"A-{i}", index=i, memory_mib=1000, model=model, split=2)
    return attrs.evolve(acme, vendor="ACME")


DEVICES = (dev(0), dev(1, "Acme X2"))
NODE = NodeInfo(name="n", devices=DEVICES)
FREE = [DeviceUsage(device=d) for d in DEVICES]
REQ = DeviceRequest(vendor="ACME", count=1, memory_mib=400, cores_pct=10)


def pod(**annotations: str) -> dict[str, object]:
    return {"metadata": {"annotations": annotations}}


def test_filter_keys_read_the_first_key_present_and_the_policy_annotation():
    f = KEYS.read(pod(**{"hami.io/gpu-type": "X2", "acme.com/nouse-uuid": "A-0, A-9"}))
    assert f.use_type == ("X2",) and f.nouse_uuid == frozenset({"A-0", "A-9"})
    assert not f.uuid_ok("A-0") and f.uuid_ok("A-1") and f.type_ok("Acme X2")
    # HAMi's name wins over the handbook's alias; no annotations: no filter at all
    both = KEYS.read(pod(**{"acme.com/use-type": "X1", "hami.io/gpu-type": "X2"}))
    assert both.use_type == ("X1",)
    assert KEYS.read({}) == KEYS.read({"metadata": None}) == KEYS.read(pod())
    assert KEYS.read(pod(**{"hami.io/gpu-scheduler-policy": "mutex"})).mutex
    assert KEYS.read(pod(), require_type=["x2"]).require_type == ("x2",)


def test_filter_keys_type_matches_whole_words_or_a_vendor_token():
    assert KEYS.type_matches("Acme X1-80GB", "x1") and KEYS.type_matches("Acme X2", "ACME")
    assert not KEYS.type_matches("Acme X10", "X1")


def test_a_vendor_fit_places_by_its_filters_and_says_why_not_per_device():
    fit: VendorFit[None] = VendorFit(filters=KEYS)
    got = fit(REQ, NODE, FREE, pod(**{"acme.com/use-type": "X2"}), DevicePolicy.SPREAD)
    assert got.devices == (
        ContainerDevice(uuid="A-1", vendor="ACME", memory_mib=400, cores_pct=10),
    )
    miss = fit(REQ, NODE, FREE, pod(**{"acme.com/use-type": "X3"}), DevicePolicy.SPREAD)
    assert not miss.fits
    assert miss.device_reasons == {
        "A-0": ReasonCode.CARD_TYPE_MISMATCH,
        "A-1": ReasonCode.CARD_TYPE_MISMATCH,
    }


def test_keys_per_vendor_key_rules_from_the_call_and_the_extra_argument():
    seen: list[object] = []

    def rules(call):  # the extra argument reaches the rules
        seen.append(call.extra)
        return (
            FitRules(extra_check=lambda u, r: ReasonCode.CARD_TYPE_MISMATCH)
            if call.extra
            else FitRules()
        )

    fit: VendorFit[bool] = VendorFit(
        filters=lambda vendor: FilterKeys(nouse_uuid=(f"hami.io/no-use-{vendor}-uuid",)),
        rules=rules,
    )
    ann = pod(**{"hami.io/no-use-ACME-uuid": "A-0"})
    assert fit(REQ, NODE, FREE, ann, DevicePolicy.SPREAD).devices[0].uuid == "A-1"
    refused = fit(REQ, NODE, FREE, ann, DevicePolicy.SPREAD, True)
    assert refused.device_reasons == {
        "A-0": ReasonCode.CARD_UUID_MISMATCH,
        "A-1": ReasonCode.CARD_TYPE_MISMATCH,
    }
    assert seen == [None, True]


def test_the_vendor_step_wraps_the_shared_fit_and_nodes_answers_as_each_call():
    def double_memory(call) -> FitResult:
        if call.request.memory_mib > 500:
            return FitResult(node_reason=ReasonCode.NODE_INSUFFICIENT_DEVICE)
        bigger = attrs.evolve(call.request, memory_mib=2 * call.request.memory_mib)
        return call.fit(request=bigger, usage=call.usage[:1])

    fit: VendorFit[None] = VendorFit(filters=KEYS, place=double_memory)
    one = fit(REQ, NODE, FREE, pod(), DevicePolicy.SPREAD)
    assert [(d.uuid, d.memory_mib) for d in one.devices] == [("A-0", 800)]
    big = attrs.evolve(REQ, memory_mib=600)
    assert fit(big, NODE, FREE, pod(), DevicePolicy.SPREAD).node_reason == (
        ReasonCode.NODE_INSUFFICIENT_DEVICE
    )
    busy = [DeviceUsage(device=DEVICES[0], used_count=1, used_memory_mib=500), FREE[1]]
    other = NodeInfo(name="m", devices=DEVICES)
    batch = fit.nodes(REQ, [(NODE, FREE, ()), (other, busy, ())], pod(), DevicePolicy.SPREAD)
    assert batch == [
        fit(REQ, NODE, FREE, pod(), DevicePolicy.SPREAD),
        fit(REQ, other, busy, pod(), DevicePolicy.SPREAD),
    ]
    assert not batch[1].fits
    assert batch[1].device_reasons == {"A-0": ReasonCode.CARD_INSUFFICIENT_MEMORY}
