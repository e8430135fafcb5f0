"""A stand-in for HAMi 2.10's NVIDIA device plugin on a real kubelet: what a node that
HAMi runs looks like on the wire, for the migration test (``test_migrate_from_hami``).

No HAMi binary can be built here (Go, no registry), so this plays the parts of HAMi's
device plugin that a takeover meets, written from HAMi's source
(``pkg/device-plugin/nvidiadevice/nvinternal/plugin``: ``apiDevices``, ``Allocate``;
``pkg/device/nvidia/device.go``: the register annotation):

- it registers ``nvidia.com/gpu`` with kubelet (``v1beta1``, socket ``nvidia-gpu.sock``)
  and lists ``<UUID>-<i>`` for ``i < deviceSplitCount`` per GPU;
- it writes the node's inventory ``hami.io/node-nvidia-register`` (JSON, HAMi 2.10) and
  its handshake ``hami.io/node-handshake: Reported_<time>``;
- ``Allocate`` answers a container with HAMi's environment (``NVIDIA_VISIBLE_DEVICES``,
  ``CUDA_DEVICE_MEMORY_LIMIT_0``, ``CUDA_DEVICE_SM_LIMIT``) for the allocation the test
  queued for it: HAMi finds that pod under its node lock, which the test plays by
  creating each pod already in HAMi's final state (``bind-phase: success``).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import queue
import threading
from collections.abc import Iterator, Mapping
from concurrent import futures
from pathlib import Path
from typing import Any

import attrs
import grpc

from hami_core.servers.kubelet import api_pb2 as pb
from hami_core.servers.kubelet import api_pb2_grpc as rpc

SOCKET = "nvidia-gpu.sock"
RESOURCE = "nvidia.com/gpu"


@attrs.frozen
class Gpu:
    uuid: str
    index: int
    memory_mib: int
    model: str = "NVIDIA A100-PCIE-16GB"


@attrs.frozen
class Answer:
    """One container's allocation, as HAMi's device plugin answers it."""

    uuid: str
    memory_mib: int
    cores: int

    def envs(self) -> dict[str, str]:
        return {
            "NVIDIA_VISIBLE_DEVICES": self.uuid,
            "CUDA_DEVICE_MEMORY_LIMIT_0": f"{self.memory_mib}m",
            "CUDA_DEVICE_SM_LIMIT": str(self.cores),
            "CUDA_DEVICE_MEMORY_SHARED_CACHE": f"/usr/local/vgpu/{self.uuid}.cache",
        }


def register_annotation(gpus: list[Gpu], split: int) -> str:
    """``hami.io/node-nvidia-register`` as HAMi 2.10 writes it (``DeviceInfo`` JSON, zero
    values omitted: ``index: 0``, ``numa: 0``)."""
    out = []
    for g in gpus:
        entry: dict[str, Any] = {
            "id": g.uuid,
            "count": split,
            "devmem": g.memory_mib,
            "devcore": 100,
            "type": g.model,
            "mode": "hami-core",
            "health": True,
        }
        if g.index:
            entry["index"] = g.index
        out.append(entry)
    return json.dumps(out, separators=(",", ":"))


def handshake_value(now: dt.datetime | None = None) -> str:
    """HAMi's handshake after a report (``Reported_<local time>``; HAMi's own clock)."""
    return "Reported_" + (now or dt.datetime.now()).strftime("%Y-%m-%d %H:%M:%S")


class HamiStandIn(rpc.DevicePluginServicer):
    """Serve kubelet as HAMi's NVIDIA device plugin does; ``answers`` is the queue of
    allocations to hand out, one per container, in kubelet's order."""

    def __init__(self, plugin_dir: Path, gpus: list[Gpu], *, split: int = 10) -> None:
        self.plugin_dir = plugin_dir
        self.gpus = gpus
        self.split = split
        self.answers: queue.Queue[Answer] = queue.Queue()
        self.served: list[tuple[tuple[str, ...], Answer]] = []
        self._server: grpc.Server | None = None
        self._stop = threading.Event()

    # -- kubelet's DevicePlugin service ------------------------------------------------

    def GetDevicePluginOptions(self, request: Any, context: Any) -> pb.DevicePluginOptions:
        return pb.DevicePluginOptions()

    def ListAndWatch(self, request: Any, context: Any) -> Iterator[pb.ListAndWatchResponse]:
        devices = [
            pb.Device(ID=f"{g.uuid}-{i}", health="Healthy")
            for g in self.gpus
            for i in range(self.split)
        ]
        yield pb.ListAndWatchResponse(devices=devices)
        while not self._stop.wait(0.5) and context.is_active():
            pass

    def GetPreferredAllocation(self, request: Any, context: Any) -> Any:
        return pb.PreferredAllocationResponse()

    def Allocate(self, request: Any, context: Any) -> pb.AllocateResponse:
        responses = []
        for creq in request.container_requests:
            try:
                answer = self.answers.get_nowait()
            except queue.Empty:
                context.abort(grpc.StatusCode.UNKNOWN, "no pending pod (HAMi: no node lock)")
            self.served.append((tuple(creq.devices_ids), answer))
            responses.append(pb.ContainerAllocateResponse(envs=answer.envs()))
        return pb.AllocateResponse(container_responses=responses)

    def PreStartContainer(self, request: Any, context: Any) -> pb.PreStartContainerResponse:
        return pb.PreStartContainerResponse()

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> HamiStandIn:
        sock = self.plugin_dir / SOCKET
        sock.unlink(missing_ok=True)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        rpc.add_DevicePluginServicer_to_server(self, server)
        server.add_insecure_port(f"unix://{sock}")
        server.start()
        self._server = server
        with grpc.insecure_channel(f"unix://{self.plugin_dir / 'kubelet.sock'}") as ch:
            rpc.RegistrationStub(ch).Register(
                pb.RegisterRequest(version="v1beta1", endpoint=SOCKET, resource_name=RESOURCE),
                timeout=10,
            )
        return self

    def stop(self) -> None:
        """What deleting HAMi's DaemonSet pod does: the plugin's socket goes away."""
        self._stop.set()
        if self._server is not None:
            self._server.stop(0).wait(5)
            self._server = None
        with contextlib.suppress(FileNotFoundError):
            (self.plugin_dir / SOCKET).unlink()

    def node_annotations(self) -> Mapping[str, str]:
        return {
            "hami.io/node-nvidia-register": register_annotation(self.gpus, self.split),
            "hami.io/node-handshake": handshake_value(),
        }


__all__ = ["Answer", "Gpu", "HamiStandIn", "handshake_value", "register_annotation"]
