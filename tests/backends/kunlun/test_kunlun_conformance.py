"""The backend conformance kit against the installed ``kunlun`` backend."""

from __future__ import annotations

from typing import ClassVar

from hami_core.model import DeviceInfo, DeviceTypeInfo
from hami_core.testing import BackendConformance


class TestKunlunBackend(BackendConformance):
    backend_name = "kunlun"
    #: A P800: 98304 MiB. The kit asks an eighth (12288 MiB), trimmed up to 24576.
    device_memory_mib: ClassVar[int] = 98304

    def sample_devices(self, dtype: DeviceTypeInfo) -> tuple[DeviceInfo, ...]:
        return tuple(
            DeviceInfo(
                uuid=f"XPU-conformance-{i}",
                vendor=dtype.vendor,
                model="P800",
                index=i,
                split_count=4,
                memory_mib=self.device_memory_mib,
                cores_pct=100,
            )
            for i in range(2)
        )
