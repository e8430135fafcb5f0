"""The health-and-inventory loop outlives any failing round (e.g. the API server
unreachable for a moment with an error the client does not wrap)."""

import time

import urllib3
from hami_nvidia.node import NvidiaNode
from hami_nvidia.nvml import NvmlGpu

from hami_core.cluster import MemoryCluster
from hami_core.servers.deviceplugin_main import DevicePluginOptions, DevicePluginProcess

from .conftest import gpu_uuid, nvidia_manager
from .pyfake import PyFakeNvml, installed


class Blip(MemoryCluster):
    down = False
    reads_while_down = 0

    def get_node(self, name):
        if self.down:
            self.reads_while_down += 1
            raise urllib3.exceptions.MaxRetryError(
                None, f"/api/v1/nodes/{name}", "Connection refused"
            )
        return super().get_node(name)


def test_the_loop_survives_a_blip_and_publishes_again(tmp_path):
    nvml = PyFakeNvml(
        [NvmlGpu(index=0, uuid=gpu_uuid(0), name="Tesla T4", memory_mib=15360, bus_id="")]
    )
    with installed(NvidiaNode(nvml, sysfs_root="/nonexistent", clock=lambda: 0.0)):
        c = Blip()
        c.add_node({"metadata": {"name": "n"}})
        p = DevicePluginProcess(
            DevicePluginOptions(
                node_name="n",
                plugin_dir=str(tmp_path / "dp"),
                health_interval_s=0.2,
                register_interval_s=0.2,
                # never the host's kubelet socket (a stale one would slow each Allocate)
                pod_resources_socket=str(tmp_path / "no-pod-resources.sock"),
            ),
            store=c,
            manager=nvidia_manager(tmp_path / "vgpu"),
        )
        p.start()
        try:
            c.down = True
            deadline = time.monotonic() + 5
            while c.reads_while_down == 0 and time.monotonic() < deadline:
                time.sleep(0.05)
            c.down = False
            c.patch_node_annotations(
                "n", {"hami.io/node-nvidia-register": None}
            )  # force a re-publish
            deadline = time.monotonic() + 10
            while "hami.io/node-nvidia-register" not in (
                c.get_node("n")["metadata"].get("annotations") or {}
            ):
                assert time.monotonic() < deadline, "the loop never published again"
                time.sleep(0.05)
            assert p.loop._thread is not None and p.loop._thread.is_alive()
        finally:
            p.stop()
