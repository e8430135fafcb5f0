"""A pod's device requests in wire order, read through the backends' ``hami_parse_request``
(the pod's shape, its containers and ``pod_ref`` are ``hami_core.protocol.pods``)."""

from __future__ import annotations

from hami_core.errors import InvalidInputError
from hami_core.model import ContainerRequest, PodRequest
from hami_core.plugin import BackendManager
from hami_core.protocol.pods import Pod, check_pod_shape, containers, pod_ref

__all__ = ["read_pod_request"]


def read_pod_request(pod: Pod, manager: BackendManager) -> PodRequest:
    """The pod's device requests, one entry per container, init containers first.

    Raises:
        InvalidInputError: a container's quantities are malformed; the message names
            the pod, the container, the resource and the value.
    """
    check_pod_shape(pod)
    meta = pod.get("metadata") or {}
    entries = []
    for container, init, _ in containers(pod):
        try:
            reqs = manager.parse_requests(pod, container, init=init)
        except InvalidInputError as exc:
            raise InvalidInputError(f"pod {pod_ref(pod)}: {exc}") from None
        entries.append(
            ContainerRequest(name=str(container.get("name", "")), init=init, devices=tuple(reqs))
        )
    return PodRequest(
        namespace=str(meta.get("namespace", "default")),
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        containers=tuple(entries),
    )
