"""The backend conformance kit on the MetaX backend, for both vendor keys."""

from hami_core.testing import BackendConformance


class TestMetaxGPU(BackendConformance):
    backend_name = "metax"


class TestMetaxSGPU(BackendConformance):
    backend_name = "metax"

    def device_type(self, manager):
        return manager.infos["metax"].device_types[1]
