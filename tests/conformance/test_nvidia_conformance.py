from hami_core.testing import BackendConformance


class TestNvidiaBackend(BackendConformance):
    backend_name = "nvidia"
