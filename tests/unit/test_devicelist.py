import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami_core.errors import AnnotationError
from hami_core.model import ContainerDevice
from hami_core.protocol import decode_pod_devices, encode_pod_devices

PROTOCOL_EXAMPLE = ";GPU-aaa,NVIDIA,8000,30:GPU-bbb,NVIDIA,8000,30:;;"


def test_protocol_example_keeps_empty_entries():
    decoded = decode_pod_devices(PROTOCOL_EXAMPLE)
    assert decoded == (
        (),
        (
            ContainerDevice(uuid="GPU-aaa", vendor="NVIDIA", memory_mib=8000, cores_pct=30),
            ContainerDevice(uuid="GPU-bbb", vendor="NVIDIA", memory_mib=8000, cores_pct=30),
        ),
        (),
    )
    assert encode_pod_devices(decoded) == PROTOCOL_EXAMPLE


def test_issue_case_three_containers():
    value = ";GPU-A,NVIDIA,2500,25:;GPU-B,NVIDIA,2500,25:;"
    decoded = decode_pod_devices(value)
    assert [len(c) for c in decoded] == [0, 1, 1]
    assert encode_pod_devices(decoded) == value


def test_all_empty_and_nothing():
    assert decode_pod_devices(";;;") == ((), (), ())
    assert decode_pod_devices("") == ()
    assert encode_pod_devices(((), ())) == ";;"


def test_missing_final_terminator_is_still_an_entry():
    assert decode_pod_devices("GPU-a,NVIDIA,1,2:") == (
        (ContainerDevice(uuid="GPU-a", vendor="NVIDIA", memory_mib=1, cores_pct=2),),
    )


@pytest.mark.parametrize(
    "value", ["GPU-a,NVIDIA,1:;", "GPU-a,NVIDIA,x,2:;", ";GPU-a,NVIDIA,-1,0:;", "a,b,c,d,e:;"]
)
def test_malformed(value):
    with pytest.raises(AnnotationError, match="device list entry #"):
        decode_pod_devices(value)


def test_separator_in_field_refused():
    with pytest.raises(AnnotationError):
        encode_pod_devices(
            ((ContainerDevice(uuid="GPU:a", vendor="NVIDIA", memory_mib=1, cores_pct=1),),)
        )


field = st.text(
    alphabet=st.characters(blacklist_characters=",:;", blacklist_categories=("Cs",)),
    min_size=1,
    max_size=12,
)
slices = st.builds(
    ContainerDevice,
    uuid=field,
    vendor=field,
    memory_mib=st.integers(0, 2**31 - 1),
    cores_pct=st.integers(0, 100),
)


@given(st.lists(st.lists(slices, max_size=4).map(tuple), max_size=6).map(tuple))
def test_round_trip_keeps_container_positions(pod):
    assert decode_pod_devices(encode_pod_devices(pod)) == pod
