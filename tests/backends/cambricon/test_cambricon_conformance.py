"""The backend conformance kit against the installed ``cambricon`` backend."""

from __future__ import annotations

from typing import ClassVar

from hami_core.model import DeviceInfo, DeviceTypeInfo
from hami_core.testing import BackendConformance


class TestCambriconBackend(BackendConformance):
    backend_name = "cambricon"
    #: One MLU370-X8 chip: 24576 MiB, i.e. 96 units of 256 MiB.
    device_memory_mib: ClassVar[int] = 24576

    def sample_devices(self, dtype: DeviceTypeInfo) -> tuple[DeviceInfo, ...]:
        return tuple(
            DeviceInfo(
                uuid=f"MLU-conformance-{i}",
                vendor=dtype.vendor,
                model="MLU370-X8",
                index=i,
                split_count=10,
                memory_mib=self.device_memory_mib,
                cores_pct=100,
            )
            for i in range(2)
        )
