"""The backend conformance kit on the Moore Threads backend."""

from hami_core.testing import BackendConformance


class TestMthreadsBackend(BackendConformance):
    backend_name = "mthreads"
