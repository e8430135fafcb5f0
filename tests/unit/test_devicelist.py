import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami_core.errors import AnnotationError
from hami_core.model import ContainerDevice, PodDevices
from hami_core.protocol import decode_pod_devices, encode_pod_devices
from hami_core.protocol.devicelist import DECODED_LISTS

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


def _fresh(value: str) -> PodDevices | str:
    """The list decoded without the kept answers, or its error's message."""
    try:
        return decode_pod_devices.__wrapped__(value)
    except AnnotationError as exc:
        return str(exc)


def _kept(value: str) -> PodDevices | str:
    try:
        return decode_pod_devices(value)
    except AnnotationError as exc:
        return str(exc)


@given(
    st.lists(
        st.one_of(
            st.lists(st.lists(slices, max_size=3).map(tuple), max_size=3)
            .map(tuple)
            .map(encode_pod_devices),
            st.text(alphabet="GPU-a,NVIDIA1:;x ", max_size=30),  # malformed ones too
        ),
        max_size=8,
    )
)
def test_a_kept_decoding_is_the_fresh_one(values):
    """Kept per string (the scheduler's state reads each pod's list twice): every answer,
    and every error, is the one a fresh decode gives, however often asked."""
    for value in values + values:
        assert _kept(value) == _fresh(value)


def test_kept_decodings_are_bounded():
    """A tenant writing a new list per pod does not grow the kept answers past the bound."""
    for i in range(DECODED_LISTS + 100):
        assert decode_pod_devices(f"GPU-{i},NVIDIA,{i},1:;") == (
            (ContainerDevice(uuid=f"GPU-{i}", vendor="NVIDIA", memory_mib=i, cores_pct=1),),
        )
    assert decode_pod_devices.cache_info().currsize <= DECODED_LISTS
