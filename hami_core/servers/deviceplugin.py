"""The gRPC edge of the device plugin: kubelet's v1beta1 device plugin API.

``DevicePluginServicer`` serves ``GetDevicePluginOptions``, ``ListAndWatch``,
``GetPreferredAllocation``, ``Allocate`` and ``PreStartContainer`` over the domain
objects of ``hami_core.deviceplugin`` (it only translates messages and maps
``HamiError.grpc_code`` to a gRPC status). ``PluginServer`` is the lifecycle of the
NVIDIA k8s-device-plugin: serve on a unix socket in kubelet's device-plugin directory,
dial that socket to be sure it answers, register with kubelet through
``kubelet.sock``, and start over (new socket, new registration) whenever
``kubelet.sock`` is re-created (a kubelet restart, which also deletes every plugin
socket) or our socket disappears.

Source of the API and its constants: k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1
(``api.proto``, ``constants.go``: version ``v1beta1``, socket dir
``/var/lib/kubelet/device-plugins/``, ``kubelet.sock``).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

from hami_core.deviceplugin.allocator import Allocator, PreferredRequest
from hami_core.deviceplugin.devices import KubeletDevice, kubelet_devices
from hami_core.deviceplugin.state import DeviceState
from hami_core.errors import HamiError
from hami_core.model import ContainerAllocation

from .kubelet import api_pb2 as pb
from .kubelet import api_pb2_grpc as rpc

log = logging.getLogger(__name__)

API_VERSION = "v1beta1"
KUBELET_SOCKET = "kubelet.sock"
#: Longest a ListAndWatch stream sleeps before checking that kubelet is still there.
STREAM_POLL_S = 1.0
#: Longest an Allocate answer may take (seconds); each API call it makes is bounded
#: by the process's request timeout too (``--api-timeout``).
ALLOCATE_TIMEOUT_S = 10.0


def status_code(exc: HamiError) -> grpc.StatusCode:
    """The ``grpc.StatusCode`` named by ``exc.grpc_code`` (``UNKNOWN`` if misspelt)."""
    code: grpc.StatusCode = getattr(grpc.StatusCode, exc.grpc_code, grpc.StatusCode.UNKNOWN)
    return code


def list_response(devices: Sequence[KubeletDevice]) -> pb.ListAndWatchResponse:
    """A ``ListAndWatchResponse`` with every device (ID, health, NUMA topology)."""
    out = []
    for d in devices:
        topology = pb.TopologyInfo(nodes=[pb.NUMANode(ID=d.numa)]) if d.numa is not None else None
        out.append(pb.Device(ID=d.id, health=d.health, topology=topology))
    return pb.ListAndWatchResponse(devices=out)


def container_response(alloc: ContainerAllocation) -> pb.ContainerAllocateResponse:
    """The wire form of one container's answer (env, mounts, devices, annotations, CDI)."""
    return pb.ContainerAllocateResponse(
        envs=dict(alloc.envs),
        mounts=[
            pb.Mount(container_path=m.container_path, host_path=m.host_path, read_only=m.read_only)
            for m in alloc.mounts
        ],
        devices=[
            pb.DeviceSpec(
                container_path=d.container_path, host_path=d.host_path, permissions=d.permissions
            )
            for d in alloc.device_nodes
        ],
        annotations=dict(alloc.annotations),
        cdi_devices=[pb.CDIDevice(name=n) for n in alloc.cdi_devices],
    )


class DevicePluginServicer(rpc.DevicePluginServicer):
    """kubelet's ``DevicePlugin`` service over a ``DeviceState`` and an ``Allocator``."""

    def __init__(
        self,
        state: DeviceState,
        allocator: Allocator,
        *,
        allocate_timeout_s: float = ALLOCATE_TIMEOUT_S,
        on_allocate: Callable[[float, str], None] | None = None,
    ) -> None:
        """Args:
        allocate_timeout_s: longest an ``Allocate`` answer takes; past it kubelet gets
            ``UNAVAILABLE`` (the work goes on, and kubelet's retry with the same device
            IDs gets its answer: ``Allocator`` keeps recent answers).
        on_allocate: called with (seconds, ``success`` | ``error`` | ``timeout``) after
            each answer (the metrics).
        """
        self.state = state
        self.allocator = allocator
        self.allocate_timeout_s = allocate_timeout_s
        self.on_allocate = on_allocate
        self._pool = futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="allocate")

    @staticmethod
    def options() -> pb.DevicePluginOptions:
        """``GetPreferredAllocation`` is offered; ``PreStartContainer`` is not needed."""
        return pb.DevicePluginOptions(
            pre_start_required=False, get_preferred_allocation_available=True
        )

    def GetDevicePluginOptions(self, request: pb.Empty, context: Any) -> pb.DevicePluginOptions:
        return self.options()

    def ListAndWatch(self, request: pb.Empty, context: Any) -> Iterator[pb.ListAndWatchResponse]:
        """The whole list at once, then the whole list again after every change, until
        kubelet hangs up or the plugin stops."""
        version = self.state.version
        yield list_response(kubelet_devices(self.state.devices))
        while context.is_active() and not self.state.closed:
            newer = self.state.wait_newer(version, STREAM_POLL_S)
            if newer is None:
                continue
            version, devices = newer
            unhealthy = sum(1 for d in devices if not d.healthy)
            log.info("ListAndWatch: sending %d devices (%d unhealthy)", len(devices), unhealthy)
            yield list_response(devices)

    def GetPreferredAllocation(
        self, request: pb.PreferredAllocationRequest, context: Any
    ) -> pb.PreferredAllocationResponse:
        chosen = self.allocator.preferred(
            [
                PreferredRequest(
                    available=tuple(r.available_deviceIDs),
                    must_include=tuple(r.must_include_deviceIDs),
                    size=r.allocation_size,
                )
                for r in request.container_requests
            ]
        )
        return pb.PreferredAllocationResponse(
            container_responses=[
                pb.ContainerPreferredAllocationResponse(deviceIDs=c) for c in chosen
            ]
        )

    def Allocate(self, request: pb.AllocateRequest, context: Any) -> pb.AllocateResponse:
        started = time.monotonic()
        outcome = ["error"]  # context.abort raises: the branch taken says which
        try:
            response = self._allocate(request, context, outcome)
            outcome[0] = "success"
            return response
        finally:
            if self.on_allocate is not None:
                self.on_allocate(time.monotonic() - started, outcome[0])

    def _allocate(
        self, request: pb.AllocateRequest, context: Any, outcome: list[str]
    ) -> pb.AllocateResponse:
        ids = [list(r.devices_ids) for r in request.container_requests]
        log.info("Allocate %s", ids)
        try:
            answers = self._pool.submit(self.allocator.allocate, ids).result(
                timeout=self.allocate_timeout_s
            )
        except futures.TimeoutError:
            outcome[0] = "timeout"
            message = (
                f"no answer within {self.allocate_timeout_s:g} s (is the API server "
                "reachable?); retry"
            )
            log.error("Allocate %s: %s", ids, message)
            context.abort(grpc.StatusCode.UNAVAILABLE, message)
            raise
        except HamiError as exc:
            log.error("Allocate %s failed: %s", ids, exc)
            context.abort(status_code(exc), str(exc))
            raise  # unreachable: abort raises
        except Exception as exc:  # a bug must still answer kubelet with the reason
            log.exception("Allocate %s failed", ids)
            context.abort(grpc.StatusCode.INTERNAL, f"{type(exc).__name__}: {exc}")
            raise
        return pb.AllocateResponse(container_responses=[container_response(a) for a in answers])

    def PreStartContainer(
        self, request: pb.PreStartContainerRequest, context: Any
    ) -> pb.PreStartContainerResponse:
        return pb.PreStartContainerResponse()


def _identity(path: Path) -> tuple[int, int, int] | None:
    """What tells one socket file from its successor: inode numbers are reused at once
    (ext4 hands a re-created kubelet.sock the same one), the change time is not."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino, st.st_ctime_ns


class PluginServer:
    """Serves one ``DevicePluginServicer`` on ``<plugin_dir>/<socket_name>`` and keeps it
    registered with kubelet.

    Attributes:
        registrations: successful ``Register`` calls so far (tests, logs); wait for a
            count with ``wait_registrations``.
    """

    def __init__(
        self,
        servicer: DevicePluginServicer,
        *,
        plugin_dir: str | os.PathLike[str],
        socket_name: str,
        resource_name: str,
        workers: int = 8,
        poll_s: float = 1.0,
        register_timeout_s: float = 5.0,
    ) -> None:
        """Args:
        plugin_dir: kubelet's device-plugin directory (kubelet 1.20:
            ``/var/lib/kubelet/device-plugins``, whatever ``--root-dir`` says).
        socket_name: our socket's file name, e.g. ``nvidia-gpu.sock``.
        resource_name: the extended resource registered, e.g. ``nvidia.com/gpu``.
        workers: gRPC worker threads (one is held by each ListAndWatch stream).
        poll_s: how often ``kubelet.sock`` and our socket are checked.
        register_timeout_s: deadline of one ``Register`` call.
        """
        self.servicer = servicer
        self.plugin_dir = Path(plugin_dir)
        self.socket_name = socket_name
        self.resource_name = resource_name
        self.workers = workers
        self.poll_s = poll_s
        self.register_timeout_s = register_timeout_s
        self.registrations = 0
        self._counted = threading.Condition()
        self._server: grpc.Server | None = None
        self._kubelet_id: tuple[int, int, int] | None = None
        self._registered = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def socket_path(self) -> Path:
        return self.plugin_dir / self.socket_name

    @property
    def kubelet_socket(self) -> Path:
        return self.plugin_dir / KUBELET_SOCKET

    @property
    def registered(self) -> bool:
        return self._registered

    def wait_registrations(self, n: int, timeout_s: float) -> int:
        """Block until ``n`` ``Register`` calls have succeeded or ``timeout_s`` seconds
        passed; return the count then (kubelet sees a ``Register`` before we count it:
        the count follows the answer's round trip)."""
        with self._counted:
            self._counted.wait_for(lambda: self.registrations >= n, timeout_s)
            return self.registrations

    def start(self) -> None:
        """Serve, try to register once, and start the thread that keeps us registered.

        Raises:
            OSError: the socket cannot be served (directory missing, path too long).
        """
        self.plugin_dir.mkdir(parents=True, exist_ok=True)
        self._serve()
        self._try_register()
        self._thread = threading.Thread(target=self._watch, name="kubelet-watch", daemon=True)
        self._thread.start()

    def stop(self, grace_s: float = 1.0) -> None:
        """Stop serving and remove our socket."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.poll_s + self.register_timeout_s + 1)
        with self._lock:
            self._stop_server(grace_s)

    # -- internals ----------------------------------------------------------------------

    def _serve(self) -> None:
        with self._lock:
            self._stop_server(0)
            path = self.socket_path
            path.unlink(missing_ok=True)
            if len(str(path)) > 107:
                raise OSError(f"socket path {path} is longer than the 107 bytes unix sockets allow")
            server = grpc.server(
                futures.ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="dp-grpc")
            )
            rpc.add_DevicePluginServicer_to_server(self.servicer, server)
            try:
                bound = server.add_insecure_port(f"unix://{path}")
            except RuntimeError as exc:
                raise OSError(f"cannot serve on {path}: {exc}") from exc
            if not bound:
                raise OSError(f"cannot serve on {path}")
            server.start()
            self._server = server
            self._registered = False
        # Dial ourselves: a plugin kubelet cannot reach must not register.
        with grpc.insecure_channel(f"unix://{path}") as channel:
            try:
                grpc.channel_ready_future(channel).result(timeout=10)
            except grpc.FutureTimeoutError as exc:
                raise OSError(f"our own socket {path} does not answer") from exc
        log.info("serving %s on %s", self.resource_name, path)

    def _stop_server(self, grace_s: float) -> None:
        if self._server is not None:
            self._server.stop(grace_s).wait(grace_s + 1)
            self._server = None
            self.socket_path.unlink(missing_ok=True)

    def _try_register(self) -> bool:
        kubelet_id = _identity(self.kubelet_socket)
        if kubelet_id is None:
            log.info("waiting for kubelet: %s does not exist", self.kubelet_socket)
            return False
        request = pb.RegisterRequest(
            version=API_VERSION,
            endpoint=self.socket_name,
            resource_name=self.resource_name,
            options=DevicePluginServicer.options(),
        )
        try:
            with grpc.insecure_channel(f"unix://{self.kubelet_socket}") as channel:
                rpc.RegistrationStub(channel).Register(request, timeout=self.register_timeout_s)
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else "?"
            details = exc.details() if hasattr(exc, "details") else str(exc)
            log.warning("registration with kubelet failed (%s: %s); will retry", code, details)
            return False
        self._kubelet_id = kubelet_id
        self._registered = True
        with self._counted:
            self.registrations += 1
            self._counted.notify_all()
        log.info(
            "registered %s (endpoint %s) with kubelet (registration #%d)",
            self.resource_name,
            self.socket_name,
            self.registrations,
        )
        return True

    def _watch(self) -> None:
        backoff_s = self.poll_s
        next_try = 0.0
        while not self._stop.wait(self.poll_s):
            kubelet_id = _identity(self.kubelet_socket)
            ours_gone = not self.socket_path.exists()
            kubelet_new = kubelet_id is not None and kubelet_id != self._kubelet_id
            try:
                if ours_gone or (kubelet_new and self._registered):
                    log.info(
                        "%s; serving again and re-registering",
                        "our socket was removed" if ours_gone else "kubelet.sock was re-created",
                    )
                    self._serve()
                    next_try = 0.0
                if not self._registered and time.monotonic() >= next_try:
                    if self._try_register():
                        backoff_s = self.poll_s
                    else:
                        backoff_s = min(backoff_s * 2, 10.0)
                        next_try = time.monotonic() + backoff_s
            except OSError as exc:
                log.error("cannot serve the device plugin socket: %s", exc)
