"""The backend conformance kit on the Hygon DCU backend."""

from hami_core.testing import BackendConformance


class TestHygonBackend(BackendConformance):
    backend_name = "hygon"
    device_memory_mib = 65520
