"""Reading a pod's containers and device requests in wire order."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from hami_core.errors import InvalidInputError
from hami_core.model import ContainerRequest, PodRequest
from hami_core.plugin import BackendManager

Pod = Mapping[str, Any]


def containers(pod: Pod) -> Iterator[tuple[Mapping[str, Any], bool, str]]:
    """Yield ``(container, is_init, json_path)``: init containers first, then app
    containers, each in spec order (the order of PROTOCOL.md §3's device list)."""
    spec = pod.get("spec") or {}
    for key, init in (("initContainers", True), ("containers", False)):
        for i, c in enumerate(spec.get(key) or []):
            yield c, init, f"/spec/{key}/{i}"


def pod_ref(pod: Pod) -> str:
    """``namespace/name`` of a pod, for messages."""
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', 'default')}/{meta.get('name') or meta.get('generateName', '?')}"


def read_pod_request(pod: Pod, manager: BackendManager) -> PodRequest:
    """The pod's device requests, one entry per container, init containers first.

    Raises:
        InvalidInputError: a container's quantities are malformed; the message names
            the pod, the container, the resource and the value.
    """
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
