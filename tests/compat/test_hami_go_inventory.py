"""HAMi's node inventory codec tests (``pkg/device/devices_test.go``) with HAMi's values:
the JSON form (``MarshalNodeDevices`` / ``UnMarshalNodeDevices``) and the legacy
colon/comma form (``EncodeNodeDevices`` / ``DecodeNodeDevices``). HAMi's field names:
``ID`` is our ``uuid``, ``Count`` ``split_count``, ``Devmem`` ``memory_mib``, ``Devcore``
``cores_pct``, ``Type`` ``model``, ``Health`` ``healthy``."""

from __future__ import annotations

import json

import pytest

from hami_core.errors import AnnotationError
from hami_core.model import DeviceInfo
from hami_core.protocol import decode_inventory, encode_inventory, encode_inventory_legacy
from hami_core.protocol.topology import decode_link_scores

DT = "pkg/device/devices_test.go"
P4 = "GPU-ebe7c3f7-303d-558d-435e-99a160631fe4"


def _dev(uuid, index, count, devmem, devcore, model, numa=0, healthy=True, mode="hami-core"):
    return DeviceInfo(
        uuid=uuid,
        vendor="NVIDIA",
        model=model,
        index=index,
        split_count=count,
        memory_mib=devmem,
        cores_pct=devcore,
        numa=numa,
        mode=mode,
        healthy=healthy,
    )


def _decode(value):
    return decode_inventory(value, node="n", vendor="NVIDIA")


ONE = _dev("id-1", 1, 1, 1024, 10, "type")
TWO = _dev("id-2", 2, 2, 2048, 20, "type2", numa=1, healthy=False)


@pytest.mark.parametrize(
    ("case", "devices", "want"),
    [
        (
            "test one",
            [ONE],
            '[{"index":1,"id":"id-1","count":1,"devmem":1024,"devcore":10,"type":"type",'
            '"numa":0,"health":true}]',
        ),
        (
            "test multiple",
            [ONE, TWO],
            '[{"index":1,"id":"id-1","count":1,"devmem":1024,"devcore":10,"type":"type",'
            '"numa":0,"health":true},{"index":2,"id":"id-2","count":2,"devmem":2048,'
            '"devcore":20,"type":"type2","numa":1,"health":false}]',
        ),
        ("test empty", [], "[]"),
    ],
)
def test_marshal_node_devices(case, devices, want):
    """``TestMarshalNodeDevices``: HAMi compares after decoding both sides, so a zero
    value omitted (``numa``, ``health: false``) reads the same; ``mode`` is ours too."""
    got = json.loads(encode_inventory(devices))
    expected = json.loads(want)
    for item in got:
        assert item.pop("mode") == "hami-core"
    # HAMi's Go decoder fills an absent field with its zero value
    zeros = {"numa": 0, "health": False}
    assert [{**zeros, **g} for g in got] == expected, case
    assert _decode(encode_inventory(devices)) == tuple(devices)


@pytest.mark.parametrize(
    ("case", "value", "want"),
    [
        (
            "test one",
            '[{"index":1,"id":"id-1","count":1,"devmem":1024,"devcore":10,"type":"type",'
            '"health":true}]\n',
            (ONE,),
        ),
        (
            "test two",
            '[{"index":1,"id":"id-1","count":1,"devmem":1024,"devcore":10,"type":"type",'
            '"health":true},{"index":2,"id":"id-2","count":2,"devmem":4096,"devcore":20,'
            '"type":"type2","health":false}]',
            (ONE, _dev("id-2", 2, 2, 4096, 20, "type2", healthy=False)),
        ),
    ],
)
def test_unmarshal_node_devices(case, value, want):
    """``TestUnMarshalNodeDevices``: a missing ``numa`` is 0 (a trailing newline too)."""
    assert _decode(value) == want, case


P4_DEV = _dev(P4, 0, 10, 7680, 100, "NVIDIA-Tesla P4")


@pytest.mark.parametrize(
    ("case", "value", "want"),
    [
        ("args is only delimiter", ":", ()),
        ("args is multiple delimiters", "::", ()),
        ("str is old format", f"{P4},10,7680,100,NVIDIA-Tesla P4,0,true:", (P4_DEV,)),
        (
            "str is new format",
            f"{P4},10,7680,100,NVIDIA-Tesla P4,0,true,1,hami-core:",
            (_dev(P4, 1, 10, 7680, 100, "NVIDIA-Tesla P4"),),
        ),
    ],
)
def test_decode_node_devices(case, value, want):
    """``Test_DecodeNodeDevices`` (and ``TestDecodeNodeDevicesLegacyFormat``: the 7-field
    form has index 0 and mode ``hami-core``)."""
    assert _decode(value) == want, case


@pytest.mark.parametrize(
    ("case", "value", "needle"),
    [
        ("args is empty", "", "misses the device separator ':'"),
        ("args missing delimiter with comma", ",", "misses the device separator ':'"),
        ("args is invalid format missing split symbol", "a", "misses the device separator"),
        ("args has comma and delimiter but empty fields", ",:", "has 2 fields"),
        ("malformed segment without comma", "garbage:", "'garbage' has 1 fields"),
        (
            "invalid count field",
            f"{P4},notanint,7680,100,NVIDIA-Tesla P4,0,true:",
            "count must be an integer, got 'notanint'",
        ),
        (
            "invalid memory field",
            f"{P4},10,notanint,100,NVIDIA-Tesla P4,0,true:",
            "devmem must be an integer",
        ),
        (
            "invalid core field",
            f"{P4},10,7680,notanint,NVIDIA-Tesla P4,0,true:",
            "devcore must be an integer",
        ),
        (
            "invalid numa field",
            f"{P4},10,7680,100,NVIDIA-Tesla P4,notanint,true:",
            "numa must be an integer",
        ),
        (
            "invalid health field",
            f"{P4},10,7680,100,NVIDIA-Tesla P4,0,notabool:",
            "health must be true or false, got 'notabool'",
        ),
        ("unexpected field count", f"{P4},10,7680,100,NVIDIA-Tesla P4:", "has 5 fields"),
        (
            "invalid index field in new format",
            f"{P4},10,7680,100,NVIDIA-Tesla P4,0,true,notanint,hami-core:",
            "index must be an integer",
        ),
        (
            "negative index field in new format",
            f"{P4},10,7680,100,NVIDIA-Tesla P4,0,true,-1,hami-core:",
            "index must be >= 0, got -1",
        ),
    ],
)
def test_decode_node_devices_refusals(case, value, needle):
    """``Test_DecodeNodeDevices``: every case HAMi answers with an error is refused, the
    message naming the node and the field (HAMi's words differ; the cases are its)."""
    with pytest.raises(AnnotationError, match="^node n: ") as err:
        _decode(value)
    assert needle in str(err.value), case


@pytest.mark.parametrize("token", ["1", "t", "T", "TRUE", "True", "0", "f", "F", "FALSE"])
def test_legacy_health_is_a_go_boolean(token):
    """HAMi reads the legacy ``health`` with Go's ``strconv.ParseBool``."""
    (dev,) = _decode(f"{P4},10,7680,100,NVIDIA-Tesla P4,0,{token}:")
    assert dev.healthy is (token in ("1", "t", "T", "TRUE", "True"))
    with pytest.raises(AnnotationError, match="health must be true or false"):
        _decode(f"{P4},10,7680,100,NVIDIA-Tesla P4,0,tRuE:")


@pytest.mark.parametrize(
    ("case", "device", "want"),
    [
        ("old format", P4_DEV, f"{P4},10,7680,100,NVIDIA-Tesla P4,0,true,0,hami-core:"),
        (
            "test two",
            _dev(P4, 1, 10, 7680, 100, "NVIDIA-Tesla P4"),
            f"{P4},10,7680,100,NVIDIA-Tesla P4,0,true,1,hami-core:",
        ),
    ],
)
def test_encode_node_devices(case, device, want):
    """``Test_EncodeNodeDevices``: byte for byte."""
    assert encode_inventory_legacy([device]) == want, case


V100 = "NVIDIA-Tesla V100-PCIE-32GB"


@pytest.mark.parametrize(
    "devices",
    [
        [P4_DEV],
        [_dev(P4, 1, 10, 7680, 100, "NVIDIA-Tesla P4")],
        [
            _dev("GPU-00552014-5c87-89ac-b1a6-7b53aa24b0ec", 0, 10, 32768, 100, V100),
            _dev("GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448", 1, 10, 32768, 100, V100),
        ],
    ],
)
def test_encode_decode_node_devices_roundtrip(devices):
    """``TestEncodeDecodeNodeDevicesRoundtrip``: the legacy form, and the JSON form too."""
    assert _decode(encode_inventory_legacy(devices)) == tuple(devices)
    assert _decode(encode_inventory(devices)) == tuple(devices)


def test_decode_pair_scores():
    """``TestDecodeNodeDevices`` (it decodes HAMi's pair scores, ``DecodePairScores``):
    the same JSON reads as our link scores, made symmetric."""
    value = '[{"uuid":"GPU-0","score":{"GPU-1":50,"GPU-2":20,"GPU-3":20}}]'
    scores = decode_link_scores(value, node="n")
    assert scores["GPU-0"] == {"GPU-1": 50, "GPU-2": 20, "GPU-3": 20}
    assert scores["GPU-1"]["GPU-0"] == 50
