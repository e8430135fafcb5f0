"""``BackendManager.parse_requests`` keeps a backend's answer for a container it has
already read when the backend's hook does not read the pod: the replicas of one
Deployment (every pod of a cluster, when the scheduler, ``hami explain`` or ``hami top``
read it from scratch) cost one parse per backend, not one per pod. A hook that names
``pod`` is asked every time; errors are never kept; the memo is bounded."""

from __future__ import annotations

from typing import Any

import pytest

from hami_core.errors import InvalidInputError
from hami_core.plugin import BackendManager, hookimpl
from hami_core.plugin import manager as manager_mod
from tests.toy_backend import RESOURCES, ToyBackend


class PodReading(ToyBackend):
    """The toy backend, but its hook reads the pod (an annotation halves the memory)."""

    def __init__(self) -> None:
        self.calls = 0

    @hookimpl
    def hami_parse_request(self, pod, container):  # type: ignore[override]
        self.calls += 1
        req = ToyBackend.hami_parse_request(self, container)
        ann = (pod.get("metadata") or {}).get("annotations") or {}
        if req is not None and ann.get("toy/half"):
            return type(req)(vendor="TOY", count=req.count, memory_mib=req.memory_mib // 2)
        return req


class Counting(ToyBackend):
    def __init__(self) -> None:
        self.calls = 0

    @hookimpl
    def hami_parse_request(self, container):  # type: ignore[override]
        self.calls += 1
        return ToyBackend.hami_parse_request(self, container)


def pod(
    name: str, memory: str = "100", annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default", "annotations": annotations or {}},
        "spec": {
            "containers": [{"name": "main", "resources": {"limits": {RESOURCES.memory: memory}}}]
        },
    }


def container(p: dict[str, Any]) -> dict[str, Any]:
    return p["spec"]["containers"][0]


def test_replicas_are_parsed_once_by_a_backend_that_reads_only_the_container():
    backend = Counting()
    manager = BackendManager.from_plugins({"toy": backend})
    answers = [
        manager.parse_requests(p, container(p), init=False)
        for p in (pod(f"r-{i}") for i in range(50))
    ]
    assert backend.calls == 1
    assert all(a == answers[0] for a in answers) and answers[0][0].memory_mib == 100
    # another content is another answer, read once too
    other = pod("big", memory="300")
    assert manager.parse_requests(other, container(other), init=False)[0].memory_mib == 300
    assert manager.parse_requests(other, container(other), init=False)[0].memory_mib == 300
    assert backend.calls == 2
    # an init container of the same content is asked apart
    manager.parse_requests(other, container(other), init=True)
    assert backend.calls == 3


def test_a_hook_that_reads_the_pod_is_asked_for_every_pod():
    backend = PodReading()
    manager = BackendManager.from_plugins({"toy": backend})
    plain, half = pod("a"), pod("b", annotations={"toy/half": "1"})
    assert manager.parse_requests(plain, container(plain), init=False)[0].memory_mib == 100
    assert manager.parse_requests(half, container(half), init=False)[0].memory_mib == 50
    assert backend.calls == 2


def test_a_container_changed_in_place_is_read_again():
    """The memo keys on content, not identity: the webhook's mutation of a container
    object is seen."""
    backend = Counting()
    manager = BackendManager.from_plugins({"toy": backend})
    p = pod("a")
    assert manager.parse_requests(p, container(p), init=False)[0].memory_mib == 100
    container(p)["resources"]["limits"][RESOURCES.memory] = "200"
    assert manager.parse_requests(p, container(p), init=False)[0].memory_mib == 200


def test_errors_are_not_kept_and_name_their_own_container():
    def bad(container):
        raise InvalidInputError(f"container {container.get('name')!r}: bad quantity")

    backend = Counting()
    backend.hami_parse_request = hookimpl(bad)  # type: ignore[method-assign]
    manager = BackendManager.from_plugins({"toy": backend})
    for name in ("one", "two", "one"):
        p = pod("p")
        container(p)["name"] = name
        with pytest.raises(InvalidInputError, match=repr(name)):
            manager.parse_requests(p, container(p), init=False)


def test_a_tenant_cannot_grow_the_memo_without_bound(monkeypatch):
    """Every pod's container a distinct content (a tenant varying an env value): the
    memo stays within its bound and answers stay right."""
    monkeypatch.setattr(manager_mod, "REQUEST_MEMO_SIZE", 64)
    backend = Counting()
    manager = BackendManager.from_plugins({"toy": backend})
    for i in range(500):
        p = pod(f"p-{i}")
        container(p)["env"] = [{"name": "X", "value": str(i)}]
        assert manager.parse_requests(p, container(p), init=False)[0].memory_mib == 100
    assert backend.calls == 500
    assert manager.request_memo_size() <= 64


def test_a_container_that_is_not_json_is_read_without_the_memo():
    backend = Counting()
    manager = BackendManager.from_plugins({"toy": backend})
    p = pod("odd")
    container(p)["weird"] = {1, 2}  # not JSON: no key, asked every time
    for _ in range(2):
        assert manager.parse_requests(p, container(p), init=False)[0].memory_mib == 100
    assert backend.calls == 2
