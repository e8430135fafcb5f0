"""The backend conformance kit on the AWS Neuron backend (devices with 2 NeuronCores,
mask 3, no memory, as HAMi registers them)."""

from hami_core.model import DeviceInfo
from hami_core.testing import BackendConformance


class TestAWSNeuronBackend(BackendConformance):
    backend_name = "awsneuron"

    def sample_devices(self, dtype):
        return tuple(
            DeviceInfo(
                uuid=f"n-AWSNeuron-{i}",
                vendor=dtype.vendor,
                model="AWSNeuron",
                index=i,
                split_count=2,
                memory_mib=0,
                cores_pct=3,
            )
            for i in range(2)
        )
