"""The backend conformance kit on the Biren backend. Biren GPUs are shared by count only
(HAMi writes slices without memory or cores), so the kit's devices carry no memory."""

from hami_core.model import DeviceInfo
from hami_core.testing import BackendConformance


class TestBirenBackend(BackendConformance):
    backend_name = "biren"

    def sample_devices(self, dtype):
        return tuple(
            DeviceInfo(
                uuid=f"BR-{i}",
                vendor=dtype.vendor,
                model="Biren",
                index=i,
                split_count=4,
                cores_pct=100,
            )
            for i in range(2)
        )
