"""A gRPC client of kubelet's PodResources API (``PodResourcesSource``).

Kubelet serves it on ``/var/lib/kubelet/pod-resources/kubelet.sock`` (the chart mounts
that directory into the device plugin). 1.20 serves ``v1`` and ``v1alpha1``; the client
asks ``v1`` and falls back to ``v1alpha1`` when kubelet answers ``UNIMPLEMENTED`` (the
``v1`` messages decode either answer: the same field numbers). Stubs:
``hami_core.servers.kubelet.podresources_pb2`` (scripts/gen-proto.sh).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import grpc

from hami_core.deviceplugin.podresources import (
    KubeletContainer,
    KubeletPod,
    PodResourcesUnavailableError,
)

from .kubelet import podresources_pb2 as pb

#: Where kubelet serves the PodResources API.
DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
#: Kubelet's own limit on the answer (``podresources.DefaultMaxMsgSize``, 16 MiB).
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
#: The API versions asked, newest first: ``/<version>.PodResourcesLister/List``.
VERSIONS = ("v1", "v1alpha1")


class KubeletPodResources:
    """``PodResourcesSource`` over kubelet's socket; one channel, reused, thread-safe."""

    def __init__(self, socket_path: str = DEFAULT_SOCKET, *, timeout_s: float = 2.0) -> None:
        """Args:
        socket_path: kubelet's pod-resources socket.
        timeout_s: the deadline of one ``List`` (the device plugin asks during
            ``Allocate``, whose own deadline kubelet sets).
        """
        self.socket_path = socket_path
        self.timeout_s = timeout_s
        self._guard = threading.Lock()
        self._channel: grpc.Channel | None = None
        #: The version kubelet answered last (None: not asked yet).
        self.version: str | None = None

    def list(self) -> Sequence[KubeletPod]:
        """Kubelet's pods and their containers' devices.

        Raises:
            PodResourcesUnavailableError: no socket, no answer within ``timeout_s``,
                or kubelet serves neither version.
        """
        versions = (self.version,) if self.version else VERSIONS
        last: grpc.RpcError | None = None
        for version in versions:
            call = self._chan().unary_unary(
                f"/{version}.PodResourcesLister/List",
                request_serializer=pb.ListPodResourcesRequest.SerializeToString,
                response_deserializer=pb.ListPodResourcesResponse.FromString,
            )
            try:
                answer = call(pb.ListPodResourcesRequest(), timeout=self.timeout_s)
            except grpc.RpcError as exc:
                last = exc
                if exc.code() is grpc.StatusCode.UNIMPLEMENTED and not self.version:
                    continue
                break
            self.version = version
            return [_pod(p) for p in answer.pod_resources]
        code = last.code().name if last is not None else "UNKNOWN"
        details = last.details() if last is not None else ""
        raise PodResourcesUnavailableError(
            f"kubelet PodResources List on {self.socket_path}: {code} {details}".rstrip()
        )

    def close(self) -> None:
        """Close the channel (a later ``list`` opens another)."""
        with self._guard:
            if self._channel is not None:
                self._channel.close()
                self._channel = None

    def _chan(self) -> grpc.Channel:
        with self._guard:
            if self._channel is None:
                self._channel = grpc.insecure_channel(
                    f"unix://{self.socket_path}",
                    options=[("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)],
                )
            return self._channel


def _pod(p: pb.PodResources) -> KubeletPod:
    containers = []
    for c in p.containers:
        devices: dict[str, tuple[str, ...]] = {}
        for d in c.devices:
            devices[d.resource_name] = devices.get(d.resource_name, ()) + tuple(d.device_ids)
        containers.append(KubeletContainer(name=c.name, devices=devices))
    return KubeletPod(namespace=p.namespace, name=p.name, containers=tuple(containers))


__all__ = ["DEFAULT_SOCKET", "KubeletPodResources", "VERSIONS"]
