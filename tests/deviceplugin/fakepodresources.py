"""A stand-in kubelet PodResources server on a unix socket, serving what a
``PodResourcesSource`` (or a plain callable) lists, over real gRPC: the device plugin's
client (``hami_core.servers.podresources``) talks to it as to kubelet."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from concurrent import futures

import grpc

from hami_core.deviceplugin.podresources import KubeletPod
from hami_core.servers.kubelet import podresources_pb2 as pb


def to_message(pods: Sequence[KubeletPod]) -> pb.ListPodResourcesResponse:
    """Kubelet's answer for ``pods``."""
    out = pb.ListPodResourcesResponse()
    for p in pods:
        msg = out.pod_resources.add(name=p.name, namespace=p.namespace)
        for c in p.containers:
            cm = msg.containers.add(name=c.name)
            for resource, ids in c.devices.items():
                cm.devices.add(resource_name=resource, device_ids=list(ids))
    return out


@contextlib.contextmanager
def serve(
    pods: Callable[[], Sequence[KubeletPod]],
    socket_path: str,
    *,
    versions: Sequence[str] = ("v1", "v1alpha1"),
) -> Iterator[grpc.Server]:
    """Serve ``List`` of the given API versions on ``socket_path`` while in the block."""

    def listing(request: pb.ListPodResourcesRequest, context: object) -> object:
        return to_message(pods())

    handlers = [
        grpc.method_handlers_generic_handler(
            f"{v}.PodResourcesLister",
            {
                "List": grpc.unary_unary_rpc_method_handler(
                    listing,
                    request_deserializer=pb.ListPodResourcesRequest.FromString,
                    response_serializer=pb.ListPodResourcesResponse.SerializeToString,
                )
            },
        )
        for v in versions
    ]
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2), handlers=handlers)
    server.add_insecure_port(f"unix://{socket_path}")
    server.start()
    try:
        yield server
    finally:
        server.stop(None)
