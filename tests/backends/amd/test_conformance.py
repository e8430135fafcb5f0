"""The backend conformance kit on the AMD backend."""

from hami_core.testing import BackendConformance


class TestAMDBackend(BackendConformance):
    backend_name = "amd"
