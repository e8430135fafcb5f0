"""``BackendManager.parse_requests`` keeps a backend's answer for a container it has
already read when the backend's hook does not read the pod: the replicas of one
Deployment (every pod of a cluster, when the scheduler, ``hami explain`` or ``hami top``
read it from scratch) cost one parse per backend, not one per pod. A hook that names
``pod`` is asked every time unless it declares the annotations it reads
(``reads_pod_annotations``): then it is asked once per container content and their
values, and given only them; errors are never kept; the memo is bounded."""

from __future__ import annotations

from typing import Any

import pytest
from hami_ascend import plugin as ascend_plugin
from hami_ascend import requests as ascend_requests
from hami_metax import plugin as metax_plugin
from hami_metax import requests as metax_requests
from hypothesis import given, settings
from hypothesis import strategies as st

from hami_core.errors import InvalidInputError
from hami_core.plugin import BackendManager, hookimpl, reads_pod_annotations
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


class DeclaredReading(ToyBackend):
    """The toy backend, its hook declaring the one annotation it reads (``toy/half``)."""

    def __init__(self) -> None:
        self.calls = 0
        self.seen: list[dict[str, Any]] = []

    @hookimpl
    @reads_pod_annotations("toy/half")
    def hami_parse_request(self, pod, container):  # type: ignore[override]
        self.calls += 1
        self.seen.append(dict(pod))
        req = ToyBackend.hami_parse_request(self, container)
        ann = (pod.get("metadata") or {}).get("annotations") or {}
        if req is not None and ann.get("toy/half"):
            return type(req)(vendor="TOY", count=req.count, memory_mib=req.memory_mib // 2)
        if req is not None and ann.get("toy/undeclared"):  # never seen: not declared
            return type(req)(vendor="TOY", count=req.count, memory_mib=1)
        return req


def test_a_hook_declaring_its_annotations_is_asked_once_per_their_values():
    backend = DeclaredReading()
    manager = BackendManager.from_plugins({"toy": backend})
    replicas = [pod(f"r-{i}", annotations={"other/x": str(i)}) for i in range(20)]
    assert all(
        manager.parse_requests(p, container(p), init=False)[0].memory_mib == 100 for p in replicas
    )
    assert backend.calls == 1
    # a pod differing only in the annotation it reads is not answered from the memo
    half = pod("h", annotations={"toy/half": "1"})
    assert manager.parse_requests(half, container(half), init=False)[0].memory_mib == 50
    assert backend.calls == 2
    again = pod("h2", annotations={"toy/half": "1", "other/x": "y"})
    assert manager.parse_requests(again, container(again), init=False)[0].memory_mib == 50
    assert backend.calls == 2
    # a value that differs is another key, even when the hook's answer might not
    other = pod("h3", annotations={"toy/half": "yes"})
    assert manager.parse_requests(other, container(other), init=False)[0].memory_mib == 50
    assert backend.calls == 3


def test_a_declaring_hook_is_given_only_its_annotations():
    """What the memo's key does not hold, the hook cannot read: an undeclared annotation
    changes no answer, so no answer can be kept wrongly."""
    backend = DeclaredReading()
    manager = BackendManager.from_plugins({"toy": backend})
    p = pod("p", annotations={"toy/half": "1", "toy/undeclared": "1"})
    p["spec"]["nodeName"] = "n1"
    assert manager.parse_requests(p, container(p), init=False)[0].memory_mib == 50
    assert backend.seen == [{"metadata": {"annotations": {"toy/half": "1"}}}]
    q = pod("q", annotations={"toy/undeclared": "1"})
    assert manager.parse_requests(q, container(q), init=False)[0].memory_mib == 100


def test_a_declared_annotation_that_is_not_a_string_is_read_without_the_memo():
    backend = DeclaredReading()
    manager = BackendManager.from_plugins({"toy": backend})
    p = pod("odd")
    p["metadata"]["annotations"] = {"toy/half": ["1"]}  # no API server sends this
    for _ in range(2):
        assert manager.parse_requests(p, container(p), init=False)[0].memory_mib == 50
    assert backend.calls == 2 and manager.request_memo_size() == 0


def test_a_declaration_needs_keys():
    with pytest.raises(TypeError):
        reads_pod_annotations()
    with pytest.raises(TypeError):
        reads_pod_annotations("")


# -- the two in-repo hooks that read the pod: the memo answers as the hook itself ------

ASCEND_MODELS = ("Ascend910B3", "Ascend310P")
_quantity = st.sampled_from(
    ["1", "2", "0", "4096", "16384", "30000", "65536", "50", "100", "x", "1.5"]
)


@st.composite
def _containers(draw: st.DrawFn) -> dict[str, Any]:
    limits: dict[str, str] = {}
    if draw(st.booleans()):
        model = draw(st.sampled_from(ASCEND_MODELS))
        for suffix in draw(st.sets(st.sampled_from(["", "-memory", "-core"]))):
            limits[f"huawei.com/{model}{suffix}"] = draw(_quantity)
    if draw(st.booleans()):
        for name in draw(
            st.sets(
                st.sampled_from(
                    [
                        "metax-tech.com/sgpu",
                        "metax-tech.com/vmemory",
                        "metax-tech.com/vcore",
                        "metax-tech.com/gpu",
                    ]
                )
            )
        ):
            limits[name] = draw(st.sampled_from(["1", "2", "0", "8", "4Gi", "101", "x"]))
    return {"name": draw(st.sampled_from(["a", "b"])), "resources": {"limits": limits}}


_annotations = st.fixed_dictionaries(
    {},
    optional={
        "huawei.com/vnpu-mode": st.sampled_from(["template", "hami-core", "HAMI-CORE ", "bogus"]),
        "metax-tech.com/sgpu-app-class": st.sampled_from(["online", "offline", "bad"]),
        "metax-tech.com/sgpu-qos-policy": st.sampled_from(["best-effort", "fixed-share", "bad"]),
        "other/x": st.sampled_from(["1", "2"]),
    },
)

_VENDORS = BackendManager.from_plugins({"ascend": ascend_plugin, "metax": metax_plugin})


def _unmemoised(p: dict[str, Any], c: dict[str, Any]) -> list[Any] | str:
    """Each hook asked directly with the whole pod, in the manager's order (by name)."""
    try:
        out = [
            ascend_requests.parse_request(p, c, _VENDORS.vendor_config("ascend")),
            metax_requests.parse_request(p, c),
        ]
    except InvalidInputError as exc:
        return str(exc)
    return [r for r in out if r is not None]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(_containers(), _annotations, st.booleans()), min_size=1, max_size=12))
def test_ascend_and_metax_answers_through_the_memo_are_the_hooks_own(pods):
    """One manager (its memo shared across every example and pod) against each hook asked
    with the whole pod: the same requests, or the same error."""
    for c, ann, init in pods:
        p = {
            "metadata": {"name": "p", "namespace": "default", "annotations": ann},
            "spec": {"containers": [c]},
        }
        try:
            got: list[Any] | str = _VENDORS.parse_requests(p, c, init=init)
        except InvalidInputError as exc:
            got = str(exc)
        assert got == _unmemoised(p, c)


def test_request_key_is_one_for_the_replicas_and_none_when_a_hook_reads_the_pod():
    """``request_key`` (what ``facts.holdings`` keeps a pod's requested vendors by):
    equal for pods that differ only in what no hook reads, other for another container
    content or a declared annotation's value, None when a hook reads the pod undeclared."""
    manager = BackendManager.from_plugins({"toy": Counting()})
    a, b = pod("r-1"), pod("r-2", annotations={"other": "x"})
    assert manager.request_key(a) is not None
    assert manager.request_key(a) == manager.request_key(b)
    assert manager.request_key(a) != manager.request_key(pod("big", memory="300"))
    undeclared = BackendManager.from_plugins({"toy": PodReading()})
    assert undeclared.request_key(a) is None

    class Declared(ToyBackend):
        @hookimpl
        @reads_pod_annotations("toy/half")
        def hami_parse_request(self, pod, container):  # type: ignore[override]
            return PodReading.hami_parse_request(self, pod, container)  # type: ignore[arg-type]

    declared = BackendManager.from_plugins({"toy": Declared()})
    half = pod("h", annotations={"toy/half": "1"})
    assert declared.request_key(a) != declared.request_key(half)
    assert declared.request_key(half) == declared.request_key(
        pod("h2", annotations={"toy/half": "1", "other": "y"})
    )


def test_the_holdings_reader_reads_the_replicas_requests_once(monkeypatch):
    """The scheduler's state reads each pod's requested vendors for the trust rule; the
    replicas of one Deployment (same containers, other names and UIDs) cost one reading
    of the pod (shape check and parse) between them."""
    import logging

    from hami_core.facts import holdings

    reads = []

    def counted(p, m):
        reads.append(p["metadata"]["name"])
        return requested(p, m)

    requested = holdings.requested_vendors
    monkeypatch.setattr(holdings, "requested_vendors", counted)
    manager = BackendManager.from_plugins({"toy": Counting()})
    reader = holdings.HoldingsReader(manager, holdings.ProblemLog(logging.getLogger("t")))
    for i in range(20):
        p = pod(f"r-{i}")
        p["metadata"]["uid"] = f"u-{i}"
        assert reader.requested_vendors(p) == frozenset({"TOY"})
    assert reads == ["r-0"]
    other = pod("big", memory="300")
    other["metadata"]["uid"] = "u-big"
    assert reader.requested_vendors(other) == frozenset({"TOY"})
    assert reads == ["r-0", "big"]
