"""The backend conformance kit on the Iluvatar backend, once per chip family."""

from hami_core.testing import BackendConformance


class TestIluvatarMRV100(BackendConformance):
    backend_name = "iluvatar"


class TestIluvatarBIV150(BackendConformance):
    backend_name = "iluvatar"

    def device_type(self, manager):
        return next(t for t in manager.infos["iluvatar"].device_types if t.vendor == "BI-V150")
