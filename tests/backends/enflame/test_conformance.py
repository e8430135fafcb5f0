"""The backend conformance kit on the Enflame backend: whole GCUs, and DRS GCUs that
publish profiles as Enflame's DRS plugin does."""

import json

from hami_core.model import DeviceInfo
from hami_core.testing import BackendConformance

PROFILES = json.dumps({"1g.4gb": "0", "2g.8gb": "1", "4g.16gb": "2"})


class TestEnflameGCU(BackendConformance):
    backend_name = "enflame"


class TestEnflameDRS(BackendConformance):
    backend_name = "enflame"

    def device_type(self, manager):
        return manager.infos["enflame"].device_types[1]

    def sample_devices(self, dtype):
        return tuple(
            DeviceInfo(
                uuid=f"n-enflame-drs-{i}",
                vendor=dtype.vendor,
                model="Enflame",
                index=i,
                split_count=4,
                memory_mib=16384,
                cores_pct=100,
                custom=(("profiles", PROFILES), ("minor", str(i))),
            )
            for i in range(2)
        )
