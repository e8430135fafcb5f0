"""A fake kubelet: the ``Registration`` server on ``<dir>/kubelet.sock`` and a
``DevicePlugin`` client, over real gRPC on unix sockets.

It behaves as kubelet 1.20's device manager does where the plugin can tell: it refuses
a ``Register`` with another API version; after a registration it dials the plugin's
endpoint in the same directory and keeps a ``ListAndWatch`` stream open, remembering
every list sent; ``restart()`` deletes every socket in the directory (kubelet empties
it at start) and serves a new ``kubelet.sock``.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from concurrent import futures
from pathlib import Path
from typing import Any

import attrs
import grpc

from hami_core.servers.kubelet import api_pb2 as pb
from hami_core.servers.kubelet import api_pb2_grpc as rpc


@attrs.frozen
class Seen:
    """A device as kubelet saw it in one ListAndWatch message."""

    id: str
    health: str
    numa: tuple[int, ...]


class FakeKubelet:
    def __init__(self, plugin_dir: Path) -> None:
        self.plugin_dir = Path(plugin_dir)
        self.registrations: list[pb.RegisterRequest] = []
        self.lists: list[list[Seen]] = []
        self._cond = threading.Condition()
        self._server: grpc.Server | None = None
        self._channel: grpc.Channel | None = None
        self._stream: Any = None
        self._last_ctime_ns = 0

    # -- lifecycle ---------------------------------------------------------------------

    @property
    def socket(self) -> Path:
        return self.plugin_dir / "kubelet.sock"

    def start(self) -> FakeKubelet:
        self.plugin_dir.mkdir(parents=True, exist_ok=True)
        self._past_last_socket()
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        rpc.add_RegistrationServicer_to_server(_Registration(self), server)
        server.add_insecure_port(f"unix://{self.socket}")
        server.start()
        self._server = server
        return self

    def stop(self) -> None:
        self._hang_up()
        if self._server is not None:
            self._server.stop(0).wait(5)
            self._server = None
        with contextlib.suppress(FileNotFoundError):
            self._last_ctime_ns = self.socket.stat().st_ctime_ns
        self.socket.unlink(missing_ok=True)

    def _past_last_socket(self, timeout: float = 2.0) -> None:
        """Return once the file system stamps a new file later than the last
        kubelet.sock: a socket re-created at once may get the same inode number, and on
        a kernel with coarse timestamps (one tick, up to 10 ms) the same change time, so
        the plugin could not tell it from its predecessor, which no real kubelet
        restart (seconds) produces. Waits on the file system's clock, not a fixed time."""
        if not self._last_ctime_ns:
            return
        probe = self.plugin_dir / ".clock-probe"
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                probe.touch()
                if probe.stat().st_ctime_ns > self._last_ctime_ns:
                    return
        finally:
            probe.unlink(missing_ok=True)
        raise AssertionError(f"the file system clock did not pass {self._last_ctime_ns} ns")

    def restart(self) -> None:
        """Stop, empty the directory as kubelet does at start, and serve again."""
        self.stop()
        for path in self.plugin_dir.iterdir():
            if path.is_socket():
                path.unlink()
        self.start()  # after the file system clock passed the old kubelet.sock's stamp

    # -- what the plugin did -----------------------------------------------------------

    def wait_registrations(self, n: int, timeout: float = 15.0) -> pb.RegisterRequest:
        self._wait(lambda: len(self.registrations) >= n, timeout, f"{n} registration(s)")
        return self.registrations[n - 1]

    def wait_list(
        self, predicate: Callable[[list[Seen]], bool], timeout: float = 15.0, what: str = "list"
    ) -> list[Seen]:
        def ok() -> bool:
            return bool(self.lists) and predicate(self.lists[-1])

        self._wait(ok, timeout, what)
        return self.lists[-1]

    def _wait(self, ok: Callable[[], bool], timeout: float, what: str) -> None:
        with self._cond:
            if not self._cond.wait_for(ok, timeout):
                raise AssertionError(
                    f"fake kubelet: no {what} within {timeout} s "
                    f"(registrations {len(self.registrations)}, lists {len(self.lists)}, "
                    f"last list {self.lists[-1] if self.lists else None})"
                )

    # -- calls into the plugin ---------------------------------------------------------

    def stub(self) -> rpc.DevicePluginStub:
        assert self._channel is not None, "no plugin registered yet"
        return rpc.DevicePluginStub(self._channel)

    def allocate(self, *containers: list[str]) -> pb.AllocateResponse:
        request = pb.AllocateRequest(
            container_requests=[pb.ContainerAllocateRequest(devices_ids=ids) for ids in containers]
        )
        return self.stub().Allocate(request, timeout=10)

    def preferred(
        self, available: list[str], size: int, must_include: list[str] | None = None
    ) -> list[str]:
        request = pb.PreferredAllocationRequest(
            container_requests=[
                pb.ContainerPreferredAllocationRequest(
                    available_deviceIDs=available,
                    must_include_deviceIDs=must_include or [],
                    allocation_size=size,
                )
            ]
        )
        answer = self.stub().GetPreferredAllocation(request, timeout=10)
        return list(answer.container_responses[0].deviceIDs)

    # -- internals ---------------------------------------------------------------------

    def _registered(self, request: pb.RegisterRequest) -> None:
        self._hang_up()
        channel = grpc.insecure_channel(f"unix://{self.plugin_dir / request.endpoint}")
        grpc.channel_ready_future(channel).result(timeout=10)
        self._channel = channel
        stream = rpc.DevicePluginStub(channel).ListAndWatch(pb.Empty())
        self._stream = stream
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()
        with self._cond:
            self.registrations.append(request)
            self._cond.notify_all()

    def _read(self, stream: Any) -> None:
        with contextlib.suppress(grpc.RpcError):
            for message in stream:
                seen = [
                    Seen(d.ID, d.health, tuple(n.ID for n in d.topology.nodes))
                    for d in message.devices
                ]
                with self._cond:
                    self.lists.append(seen)
                    self._cond.notify_all()

    def _hang_up(self) -> None:
        if self._stream is not None:
            self._stream.cancel()
            self._stream = None
        if self._channel is not None:
            self._channel.close()
            self._channel = None


class _Registration(rpc.RegistrationServicer):
    def __init__(self, kubelet: FakeKubelet) -> None:
        self.kubelet = kubelet

    def Register(self, request: pb.RegisterRequest, context: Any) -> pb.Empty:
        if request.version != "v1beta1":
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, f"unsupported version {request.version}"
            )
        # kubelet answers first and dials the plugin afterwards (devicemanager.addEndpoint
        # runs in its own goroutine).
        threading.Thread(target=self.kubelet._registered, args=(request,), daemon=True).start()
        return pb.Empty()
