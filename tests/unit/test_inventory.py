import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami_core.errors import AnnotationError
from hami_core.model import DEVICE_MODES, DeviceInfo
from hami_core.protocol import decode_inventory, encode_inventory, encode_inventory_legacy


def dev(**kw):
    base = dict(
        uuid="GPU-a",
        vendor="NVIDIA",
        model="NVIDIA A100-SXM4-80GB",
        index=0,
        split_count=10,
        memory_mib=81920,
        cores_pct=100,
        numa=0,
        mode="hami-core",
        healthy=True,
    )
    base.update(kw)
    return DeviceInfo(**base)


def test_json_omits_zero_values_like_hami():
    value = encode_inventory([dev()])
    assert json.loads(value) == [
        {
            "id": "GPU-a",
            "count": 10,
            "devmem": 81920,
            "devcore": 100,
            "type": "NVIDIA A100-SXM4-80GB",
            "mode": "hami-core",
            "health": True,
        }
    ]


def test_missing_keys_are_zero_values():
    (d,) = decode_inventory(
        '[{"id":"GPU-a","count":10,"devmem":16384}]', node="n1", vendor="NVIDIA"
    )
    assert d == DeviceInfo(
        uuid="GPU-a",
        vendor="NVIDIA",
        model="",
        index=0,
        split_count=10,
        memory_mib=16384,
        cores_pct=0,
        numa=0,
        mode="hami-core",
        healthy=False,
    )


def test_hami_json_with_unknown_keys():
    value = (
        '[{"id":"GPU-0fc3","index":1,"count":10,"devmem":32768,"devcore":100,'
        '"type":"NVIDIA-Tesla V100-PCIE-32GB","numa":1,"mode":"hami-core","health":true,'
        '"customInfo":{"x":1},"devicepairscore":{}}]'
    )
    (d,) = decode_inventory(value, node="n1", vendor="NVIDIA")
    assert (d.uuid, d.index, d.numa, d.model, d.healthy) == (
        "GPU-0fc3",
        1,
        1,
        "NVIDIA-Tesla V100-PCIE-32GB",
        True,
    )


def test_legacy_seven_and_nine_fields():
    seven = "GPU-a,10,32768,100,NVIDIA-Tesla V100-PCIE-32GB,0,true:GPU-b,10,32768,100,NVIDIA-Tesla V100-PCIE-32GB,1,false:"
    a, b = decode_inventory(seven, node="n1", vendor="NVIDIA")
    assert (a.uuid, a.index, a.healthy, b.index, b.numa, b.healthy) == (
        "GPU-a",
        0,
        True,
        1,
        1,
        False,
    )
    nine = "GPU-a,10,32768,100,NVIDIA A10,0,true,3,mig:"
    (c,) = decode_inventory(nine, node="n1", vendor="NVIDIA")
    assert (c.index, c.mode, c.model) == (3, "mig", "NVIDIA A10")


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("[{", "not valid JSON"),
        ('{"id":"x"}', "must be a JSON array"),
        ('[{"id":"GPU-a","devmem":"lots"}]', "devmem must be int"),
        ('[{"id":"GPU-a","count":true}]', "count must be int"),
        ('[{"count":1}]', "missing device id"),
        ('[{"id":"GPU-a","devmem":-5}]', "memory_mib must be >= 0"),
        ('[{"id":"GPU-a","mode":"vf io"}]', "nor a plain token"),
        ('[{"id":"GPU-a","mode":"a;b"}]', "nor a plain token"),
        ("[1]", "expected an object"),
        ("GPU-a,10,32768:", "has 3 fields"),
        ("GPU-a,ten,32768,100,T,0,true:", "count must be an integer"),
        ("GPU-a,10,32768,100,T,0,yes:", "health must be true or false"),
    ],
)
def test_malformed_names_node_and_problem(value, problem):
    with pytest.raises(AnnotationError) as exc:
        decode_inventory(value, node="gpu-node-7", vendor="NVIDIA")
    assert "node gpu-node-7" in str(exc.value)
    assert problem in str(exc.value)


def test_empty_values():
    """An empty array, or only separators, is no device; an empty value is refused as
    HAMi's ``DecodeNodeDevices`` refuses it (``devices_test.go`` ``Test_DecodeNodeDevices``
    "args is empty"), marking only that node's vendor unregistered."""
    assert decode_inventory("[]", node="n", vendor="NVIDIA") == ()
    assert decode_inventory("::", node="n", vendor="NVIDIA") == ()
    with pytest.raises(AnnotationError, match="node n: inventory misses the device separator"):
        decode_inventory("", node="n", vendor="NVIDIA")


safe_text = st.text(
    alphabet=st.characters(blacklist_characters=",:;", blacklist_categories=("Cs", "Cc")),
    min_size=1,
    max_size=20,
).filter(lambda s: s.strip() == s)
devices = st.builds(
    DeviceInfo,
    uuid=st.from_regex(
        r"[A-Za-z0-9][A-Za-z0-9-]{0,40}", fullmatch=True
    ),  # device ids never start with [ or {
    vendor=st.just("NVIDIA"),
    model=safe_text,
    index=st.integers(0, 64),
    split_count=st.integers(0, 100),
    memory_mib=st.integers(0, 2**31 - 1),
    cores_pct=st.integers(0, 400),
    numa=st.integers(0, 8),
    mode=st.sampled_from(DEVICE_MODES),
    healthy=st.booleans(),
)


@given(st.lists(devices, max_size=8))
def test_json_round_trip(devs):
    assert decode_inventory(encode_inventory(devs), node="n", vendor="NVIDIA") == tuple(devs)


@given(st.lists(devices, min_size=1, max_size=8))
def test_legacy_round_trip(devs):
    """No device encodes as "", which HAMi's decoder (and ours) refuses: the legacy form
    has no empty inventory."""
    assert decode_inventory(encode_inventory_legacy(devs), node="n", vendor="NVIDIA") == tuple(devs)


def test_a_device_id_that_a_device_list_cannot_carry_is_refused():
    with pytest.raises(
        AnnotationError, match=r"node n1: inventory device #0: device id '0000:53:00.0' contains"
    ):
        decode_inventory('[{"id":"0000:53:00.0","count":1,"devmem":1}]', node="n1", vendor="XPU")


def test_json_keys_match_case_insensitively_like_go():
    """Go's ``encoding/json`` (HAMi's reader) takes ``"ID"`` / ``"Devmem"`` for ``id`` /
    ``devmem``; an exact key wins over another spelling of it."""
    (d,) = decode_inventory(
        '[{"ID":"GPU-a","Devmem":100,"devmem":200,"Health":true}]', node="n", vendor="X"
    )
    assert (d.uuid, d.memory_mib, d.healthy) == ("GPU-a", 200, True)
