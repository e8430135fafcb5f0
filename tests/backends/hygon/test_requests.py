"""Hygon DCU requests and admission: units, defaults, validation."""

import pytest
from hami_hygon import plugin
from hami_hygon.admission import mutate_container
from hami_hygon.requests import parse_request

from hami_core.errors import InvalidInputError
from hami_core.model import DeviceRequest
from hami_core.testing import mutated as written
from hami_core.testing import section
from tests.backends.support import only

DEFAULT = section(plugin)


def ctr(count=None, mem=None, cores=None, name="main"):
    limits = {}
    for key, value in (("dcunum", count), ("dcumem", mem), ("dcucores", cores)):
        if value is not None:
            limits[f"hygon.com/{key}"] = str(value)
    return {"name": name, "image": "busybox", "resources": {"limits": limits}}


def sliced(mib, cores=100, count=1):
    return DeviceRequest(vendor="DCU", count=count, memory_mib=mib, cores_pct=cores)


def whole(count=1, cores=100):
    return DeviceRequest(vendor="DCU", count=count, memory_pct=100, cores_pct=cores)


def test_the_handbook_example():
    # hygon.com/dcunum: 1, hygon.com/dcucores: 60, hygon.com/dcumem: 2000
    assert parse_request(ctr(1, 2000, 60), DEFAULT) == sliced(2000, cores=60)


def test_cores_default_to_100_as_in_hami():
    assert parse_request(ctr(1, 2000), DEFAULT) == sliced(2000, cores=100)
    assert parse_request(ctr(1), DEFAULT) == whole()
    assert parse_request(ctr(1, cores=0), DEFAULT) == whole(cores=0)
    assert parse_request(ctr(1, 2000), section(plugin, default_cores_pct=25)) == sliced(2000, 25)


def test_memory_or_cores_without_a_count_get_one_dcu():
    assert parse_request(ctr(mem=4096), DEFAULT) == sliced(4096)
    assert parse_request(ctr(cores=30), DEFAULT) == whole(cores=30)


def test_memory_is_mib_times_the_memory_factor_at_its_edges():
    assert parse_request(ctr(1, 1, 10), DEFAULT) == sliced(1, cores=10)
    factor = section(plugin, options={"memoryFactor": 4})
    assert parse_request(ctr(1, 1000, 10), factor) == sliced(4000, cores=10)
    assert parse_request(ctr(1, 2**31 - 1, 10), DEFAULT) == sliced(2**31 - 1, cores=10)
    with pytest.raises(InvalidInputError, match="largest accepted value"):
        parse_request(ctr(1, 2**31, 10), DEFAULT)
    with pytest.raises(InvalidInputError, match="memoryFactor 4"):
        parse_request(ctr(1, 2**30, 10), factor)


def test_several_whole_dcus():
    assert parse_request(ctr(2), DEFAULT) == whole(count=2)
    assert parse_request(ctr(2, cores=100), DEFAULT) == whole(count=2)


@pytest.mark.parametrize(
    ("container", "message"),
    [
        (ctr(2, 2000), "a virtual DCU"),
        (ctr(2, cores=50), "a virtual DCU"),
        (ctr(0, 2000), "is 0 but memory"),
        (ctr(1, "16Gi"), "largest accepted value"),
        (ctr(1, cores=101), "hygon.com/dcucores"),
        (ctr("-1"), "hygon.com/dcunum"),
    ],
)
def test_invalid_requests_name_the_container_and_resource(container, message):
    with pytest.raises(InvalidInputError, match=message) as err:
        parse_request(container, DEFAULT)
    assert "'main'" in str(err.value)


def test_foreign_and_empty_containers_ask_nothing():
    assert (
        parse_request({"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}, DEFAULT)
        is None
    )
    assert parse_request({"name": "c"}, DEFAULT) is None
    assert parse_request(ctr(0), DEFAULT) is None


def test_renamed_resources():
    m = only("hygon", config={"hygon": {"resourceCountName": "hygon.com/dcu"}})
    c = {"name": "c", "resources": {"limits": {"hygon.com/dcu": "1", "hygon.com/dcumem": "1024"}}}
    assert m.parse_requests({"metadata": {}}, c, init=False) == [sliced(1024)]


def pod(*containers):
    return {
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {"containers": list(containers)},
    }


def test_admission_writes_count_and_cores_and_keeps_stated_values():
    p = pod({"name": "side"}, ctr(mem="2k"))
    side = p["spec"]["containers"][1]
    res = mutate_container(DEFAULT, parse_request(side, DEFAULT))
    assert res is not None and res.denial is None
    out = written(p, "/spec/containers/1", res)
    expected = {"hygon.com/dcunum": "1", "hygon.com/dcumem": "2k", "hygon.com/dcucores": "100"}
    resources = out["spec"]["containers"][1]["resources"]
    assert resources["limits"] == expected and resources["requests"] == expected
    assert out["spec"]["containers"][0] == {"name": "side"}
    stated = out["spec"]["containers"][1]
    again = mutate_container(DEFAULT, parse_request(stated, DEFAULT))
    assert again is not None and again.patch == ()


def test_admission_denies_with_the_cause():
    # the webhook parses each container once (hami_parse_request) and denies the pod
    # with the parse error; a foreign container is never handed to hami_mutate
    c = ctr(3, 1000)
    with pytest.raises(InvalidInputError, match="a virtual DCU"):
        parse_request(c, DEFAULT)
    foreign = {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
    assert parse_request(foreign, DEFAULT) is None


def test_memory_factor_overflow():
    """``pkg/device/hygon/device_test.go::Test_GenerateResourceRequests_MemoryFactorOverflow``:
    with ``memoryFactor`` 1024, ``hygon.com/dcumem: 3000000`` fits int32 but not once
    multiplied; HAMi drops the request, here it is refused naming the factor (a tenant
    cannot overflow the memory into a small or negative booking)."""
    factor = section(plugin, options={"memoryFactor": 1024})
    with pytest.raises(InvalidInputError, match="memoryFactor 1024"):
        parse_request(ctr(1, 3000000), factor)
