"""The kit, proven on a backend defined in the tests, and shown to catch a broken one."""

import pytest

from hami_core.plugin import hookimpl
from hami_core.testing import BackendConformance
from tests.toy_backend import ToyBackend


class TestToyBackend(BackendConformance):
    backend_name = "toy"
    plugin = ToyBackend()
    device_memory_mib = 1000


class GreedyBackend(ToyBackend):
    """Answers requests of every vendor: the kit must catch it."""

    @hookimpl
    def hami_parse_request(self, container):
        from hami_core.model import DeviceRequest

        return DeviceRequest(vendor="TOY", count=1, memory_mib=1)


def test_kit_catches_a_backend_that_claims_other_vendors(request):
    kit = type(
        "TestGreedy", (BackendConformance,), {"backend_name": "toy", "plugin": GreedyBackend()}
    )()
    manager = BackendConformance.manager.__wrapped__(kit)
    with pytest.raises(AssertionError):
        kit.test_ignores_other_vendors(manager)


class HostWritingBackend(ToyBackend):
    """Keeps its node-local records in a host file of its own: the kit must catch it."""

    def __init__(self, path):
        self.path = path

    @hookimpl
    def hami_allocate(self, pod, container, devices):
        from hami_core.model import ContainerAllocation

        self.path.write_text("held")
        return ContainerAllocation(envs={"TOY": "1"})


def test_kit_catches_a_backend_that_writes_host_files_in_allocate(tmp_path):
    kit = type(
        "TestHostWriter",
        (BackendConformance,),
        {
            "backend_name": "toy",
            "plugin": HostWritingBackend(tmp_path / "state.json"),
            "device_memory_mib": 1000,
        },
    )()
    manager = BackendConformance.manager.__wrapped__(kit)
    with pytest.raises(AssertionError, match="hami_allocate wrote on the host"):
        kit.test_allocate(manager)
    assert (tmp_path / "state.json").read_text() == "held"
