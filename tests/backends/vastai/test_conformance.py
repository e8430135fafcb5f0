"""The backend conformance kit on the Vastai backend. Vastai devices are shared by count only
(HAMi writes slices without memory or cores), so the kit's devices carry no memory."""

from hami_core.model import DeviceInfo
from hami_core.testing import BackendConformance


class TestVastaiBackend(BackendConformance):
    backend_name = "vastai"

    def sample_devices(self, dtype):
        return tuple(
            DeviceInfo(
                uuid=f"VA-{i}",
                vendor=dtype.vendor,
                model="Vastai",
                index=i,
                split_count=4,
                cores_pct=100,
            )
            for i in range(2)
        )
