"""Every branch of bind, including each rollback path."""

import datetime as dt

import pytest

from hami_core.errors import ConflictError, NotFoundError
from hami_core.protocol import encode_lock
from hami_core.protocol.devicelist import decode_pod_devices
from hami_core.scheduling.scheduler import Scheduler
from tests.builders import cluster, container, gpu, manager, node, pod

T0 = dt.datetime(2026, 11, 29, 9, 0, 0, tzinfo=dt.UTC)
ALLOC_KEYS = (
    "hami.io/vgpu-node",
    "hami.io/vgpu-devices-to-allocate",
    "hami.io/vgpu-devices-allocated",
    "hami.io/bind-phase",
)


@pytest.fixture
def env():
    c = cluster(node("n1", [gpu("GPU-1")]))
    clock = {"now": T0}
    sched = Scheduler(c, manager(), clock=lambda: clock["now"])
    return c, sched, clock


def add(c, name, **res):
    return c.add_pod(pod(name, container(**res), scheduler_name="hami-scheduler"))


def lock_of(c):
    return (c.get_node("n1")["metadata"].get("annotations") or {}).get("hami.io/mutex.lock")


def clean(c, name):
    ann = c.get_pod("default", name)["metadata"].get("annotations") or {}
    return not any(k in ann for k in ALLOC_KEYS)


def test_success_holds_the_lock_for_the_device_plugin(env):
    c, sched, _ = env
    p = add(c, "p", gpu=1, gpumem=1000)
    allocation = sched.bind("default", "p", uid=p["metadata"]["uid"], node="n1")
    assert allocation.devices["NVIDIA"][0][0].uuid == "GPU-1"
    assert lock_of(c) == "2026-11-29T09:00:00Z,default,p"
    assert c.get_pod("default", "p")["metadata"]["annotations"]["hami.io/vgpu-time"] == str(
        int(T0.timestamp())
    )


def test_lock_held_by_another_live_pod(env):
    c, sched, _ = env
    add(c, "holder", gpu=1, gpumem=1)
    c.patch_node_annotations("n1", {"hami.io/mutex.lock": encode_lock(T0, "default", "holder")})
    p = add(c, "p", gpu=1, gpumem=1000)
    with pytest.raises(ConflictError, match="node n1 is locked by default/holder"):
        sched.bind("default", "p", uid=p["metadata"]["uid"], node="n1")
    assert clean(c, "p") and lock_of(c).endswith("default,holder")
    assert c.events[-1].reason == "BindingFailed"


@pytest.mark.parametrize("how", ["deleted", "finished", "expired", "malformed"])
def test_stale_locks_are_taken_over(env, how):
    c, sched, clock = env
    add(c, "holder", gpu=1, gpumem=1)
    c.patch_node_annotations(
        "n1",
        {
            "hami.io/mutex.lock": "garbage"
            if how == "malformed"
            else encode_lock(T0, "default", "holder")
        },
    )
    if how == "deleted":
        c.delete_pod("default", "holder")
    elif how == "finished":
        c.set_pod_phase("default", "holder", "Succeeded")
    elif how == "expired":
        clock["now"] = T0 + dt.timedelta(seconds=301)
    p = add(c, "p", gpu=1, gpumem=1000)
    sched.bind("default", "p", uid=p["metadata"]["uid"], node="n1")
    assert lock_of(c).endswith(",default,p")


def test_old_time_only_lock_is_respected_until_it_expires(env):
    c, sched, clock = env
    c.patch_node_annotations("n1", {"hami.io/mutex.lock": "2026-11-29T09:00:00Z"})
    p = add(c, "p", gpu=1, gpumem=1000)
    with pytest.raises(ConflictError, match="unnamed owner"):
        sched.bind("default", "p", uid=p["metadata"]["uid"], node="n1")
    clock["now"] = T0 + dt.timedelta(minutes=6)
    sched.bind("default", "p", uid=p["metadata"]["uid"], node="n1")


def test_no_longer_fits_releases_the_lock(env):
    c, sched, _ = env
    p = add(c, "p", gpu=1, gpumem=10000)
    other = add(c, "other", gpu=1, gpumem=10000)
    sched.bind("default", "other", uid=other["metadata"]["uid"], node="n1")
    c.patch_node_annotations("n1", {"hami.io/mutex.lock": None})  # the device plugin released it
    with pytest.raises(ConflictError, match="no longer fits node n1: 1/1 CardInsufficientMemory"):
        sched.bind("default", "p", uid=p["metadata"]["uid"], node="n1")
    assert lock_of(c) is None and clean(c, "p")
    assert c.events[-1].reason == "BindingFailed"


def test_binding_failure_rolls_back_annotations_and_lock(env, monkeypatch):
    c, sched, _ = env
    p = add(c, "p", gpu=1, gpumem=1000)

    def refuse(*a, **k):
        raise ConflictError("apiserver said no")

    monkeypatch.setattr(c, "bind_pod", refuse)
    with pytest.raises(ConflictError, match="apiserver said no"):
        sched.bind("default", "p", uid=p["metadata"]["uid"], node="n1")
    assert clean(c, "p") and lock_of(c) is None
    assert "hami.io/vgpu-node" not in (c.get_pod("default", "p")["metadata"].get("labels") or {})
    assert "apiserver said no" in c.events[-1].message


def test_the_allocation_rides_on_the_binding_and_a_label_failure_only_logs(env, monkeypatch):
    """One write puts the pod on the node with its allocation (no pod PATCH first: an
    update of an assumed, unbound pod sends it back to kube-scheduler's queue); the
    label comes after, and its failure leaves a good placement alone."""
    c, sched, _ = env
    p = add(c, "p", gpu=1, gpumem=1000)
    seen = []
    c.subscribe(lambda kind, old, new: seen.append(new) if kind == "Pod" and new else None)

    def refuse(*a, **k):
        raise ConflictError("pod changed")

    monkeypatch.setattr(c, "patch_pod_metadata", refuse)
    allocation = sched.bind("default", "p", uid=p["metadata"]["uid"], node="n1")
    assert allocation is not None
    bound = c.get_pod("default", "p")
    assert bound["spec"]["nodeName"] == "n1" and not clean(c, "p")
    assert bound["metadata"]["annotations"]["hami.io/bind-phase"] == "allocating"
    # The pod was never seen annotated but unbound.
    assert seen
    assert all(
        e["spec"].get("nodeName")
        or "hami.io/bind-phase" not in (e["metadata"].get("annotations") or {})
        for e in seen
    )
    assert lock_of(c) == "2026-11-29T09:00:00Z,default,p"  # held for the device plugin


def test_rollback_survives_failing_cleanup(env, monkeypatch):
    c, sched, _ = env
    p = add(c, "p", gpu=1, gpumem=1000)
    monkeypatch.setattr(
        c, "bind_pod", lambda *a, **k: (_ for _ in ()).throw(ConflictError("no bind"))
    )
    real_patch = c.patch_pod_metadata
    calls = {"n": 0}

    def patch_once(*a, **k):
        calls["n"] += 1
        if calls["n"] > 1:
            raise ConflictError("cleanup refused")
        return real_patch(*a, **k)

    monkeypatch.setattr(c, "patch_pod_metadata", patch_once)
    with pytest.raises(ConflictError, match="no bind"):
        sched.bind("default", "p", uid=p["metadata"]["uid"], node="n1")
    assert lock_of(c) is None  # the lock is released even when clearing annotations failed


def test_retried_bind_of_a_bound_pod_is_a_no_op(env):
    c, sched, _ = env
    p = add(c, "p", gpu=1, gpumem=1000)
    sched.bind("default", "p", uid=p["metadata"]["uid"], node="n1")
    before = c.get_pod("default", "p")
    assert sched.bind("default", "p", uid=p["metadata"]["uid"], node="n1") is None
    assert c.get_pod("default", "p")["metadata"]["annotations"] == before["metadata"]["annotations"]
    with pytest.raises(ConflictError, match="already bound to n1"):
        sched.bind("default", "p", uid=p["metadata"]["uid"], node="n2")


def test_pod_without_devices_is_just_bound(env):
    c, sched, _ = env
    p = c.add_pod(pod("plain", {"name": "c", "image": "x"}, scheduler_name="hami-scheduler"))
    assert sched.bind("default", "plain", uid=p["metadata"]["uid"], node="n1") is None
    assert c.get_pod("default", "plain")["spec"]["nodeName"] == "n1" and lock_of(c) is None


def test_pod_of_another_scheduler_is_never_bound(env):
    c, sched, _ = env
    p = c.add_pod(pod("theirs", container(gpu=1), scheduler_name="default-scheduler"))
    with pytest.raises(ConflictError, match="schedulerName 'default-scheduler'"):
        sched.bind("default", "theirs", uid=p["metadata"]["uid"], node="n1")
    assert not c.get_pod("default", "theirs")["spec"].get("nodeName") and lock_of(c) is None


def test_missing_pod_or_node(env):
    c, sched, _ = env
    with pytest.raises(NotFoundError):
        sched.bind("default", "ghost", uid="u", node="n1")
    p = add(c, "p", gpu=1, gpumem=1000)
    with pytest.raises(NotFoundError):
        sched.bind("default", "p", uid=p["metadata"]["uid"], node="nowhere")
    assert clean(c, "p")


def test_lock_conflicts_are_retried(env, monkeypatch):
    c, sched, _ = env
    p = add(c, "p", gpu=1, gpumem=1000)
    real = c.patch_node_annotations
    calls = {"n": 0}

    def racy(name, annotations, *, resource_version=None):
        calls["n"] += 1
        if calls["n"] == 1:
            real(name, {"unrelated": "x"})  # someone else wrote the node in between
        return real(name, annotations, resource_version=resource_version)

    monkeypatch.setattr(c, "patch_node_annotations", racy)
    sched.bind("default", "p", uid=p["metadata"]["uid"], node="n1")
    assert calls["n"] == 2 and lock_of(c).endswith(",default,p")


def test_bind_waits_briefly_for_a_lock_being_released(env):
    import threading

    c, _, _ = env
    sched = Scheduler(c, manager(), clock=lambda: T0, lock_wait_s=5.0)
    add(c, "holder", gpu=1, gpumem=1)
    c.patch_node_annotations("n1", {"hami.io/mutex.lock": encode_lock(T0, "default", "holder")})
    timer = threading.Timer(
        0.3, lambda: c.patch_node_annotations("n1", {"hami.io/mutex.lock": None})
    )
    timer.start()
    p = add(c, "p", gpu=1, gpumem=1000)
    sched.bind("default", "p", uid=p["metadata"]["uid"], node="n1")
    assert lock_of(c).endswith(",default,p")


def test_bind_gives_up_after_the_wait(env):
    c, _, _ = env
    sched = Scheduler(c, manager(), clock=lambda: T0, lock_wait_s=0.3)
    add(c, "holder", gpu=1, gpumem=1)
    c.patch_node_annotations("n1", {"hami.io/mutex.lock": encode_lock(T0, "default", "holder")})
    p = add(c, "p", gpu=1, gpumem=1000)
    with pytest.raises(ConflictError, match="locked by default/holder"):
        sched.bind("default", "p", uid=p["metadata"]["uid"], node="n1")


def test_a_failing_event_write_never_fails_a_bind(env, monkeypatch):
    c, _, _ = env
    # BindingSucceed is written only with --success-events
    sched = Scheduler(c, manager(), clock=lambda: T0, success_events=True)
    p = add(c, "p", gpu=1, gpumem=1000)

    tried = []

    def broken(obj, **event):
        tried.append(event["reason"])
        raise RuntimeError("events API down")

    monkeypatch.setattr(c, "record_event", broken)
    allocation = sched.bind("default", "p", uid=p["metadata"]["uid"], node="n1")
    assert allocation is not None
    assert tried, "the bind recorded no event: the failing write was never exercised"
    bound = c.get_pod("default", "p")
    # the Binding was made and the allocation written, as without the event failure
    assert bound["spec"]["nodeName"] == "n1"
    ann = bound["metadata"]["annotations"]
    assert ann["hami.io/vgpu-node"] == "n1"
    [[device]] = decode_pod_devices(ann["hami.io/vgpu-devices-to-allocate"])
    assert (device.vendor, device.memory_mib) == ("NVIDIA", 1000)
    assert ann["hami.io/bind-phase"] == "allocating"


def test_release_retries_conflicts_and_never_releases_another_owner(env, monkeypatch):
    from hami_core.facts.nodelock import release_node_lock

    c, _, _ = env
    c.patch_node_annotations("n1", {"hami.io/mutex.lock": encode_lock(T0, "default", "owner")})
    assert release_node_lock(c, "n1", namespace="default", pod="own") is False  # not a prefix match
    assert release_node_lock(c, "ghost-node", namespace="default", pod="owner") is False
    real = c.patch_node_annotations
    calls = {"n": 0}

    def racy(name, annotations, *, resource_version=None):
        calls["n"] += 1
        if calls["n"] == 1:
            real(name, {"other": "write"})
        return real(name, annotations, resource_version=resource_version)

    monkeypatch.setattr(c, "patch_node_annotations", racy)
    assert release_node_lock(c, "n1", namespace="default", pod="owner") is True
    assert lock_of(c) is None and calls["n"] == 2


def test_vendor_bind_annotations_are_written_and_rolled_back(monkeypatch):
    from hami_nvidia import plugin as nvidia_plugin

    from hami_core.plugin import BackendManager, hookimpl

    class Extra:
        @hookimpl
        def hami_bind_annotations(self, vendor, devices):
            return {"example.com/chips": ",".join(d.uuid for c in devices for d in c)}

    class Merged:  # NVIDIA's hooks plus one more (pluggy needs a hashable plugin)
        pass

    merged = Merged()
    for n in dir(nvidia_plugin):
        if n.startswith("hami_"):
            setattr(merged, n, getattr(nvidia_plugin, n))
    merged.hami_bind_annotations = Extra().hami_bind_annotations
    mgr = BackendManager.from_plugins({"nvidia": merged})
    c = cluster(node("n1", [gpu("GPU-1")]))
    sched = Scheduler(c, mgr, clock=lambda: T0)
    p = add(c, "p", gpu=1, gpumem=1000)
    sched.bind("default", "p", uid=p["metadata"]["uid"], node="n1")
    assert c.get_pod("default", "p")["metadata"]["annotations"]["example.com/chips"] == "GPU-1"
    q = add(c, "q", gpu=1, gpumem=1000)
    c.patch_node_annotations("n1", {"hami.io/mutex.lock": None})
    monkeypatch.setattr(c, "bind_pod", lambda *a, **k: (_ for _ in ()).throw(ConflictError("no")))
    with pytest.raises(ConflictError):
        sched.bind("default", "q", uid=q["metadata"]["uid"], node="n1")
    assert "example.com/chips" not in (
        c.get_pod("default", "q")["metadata"].get("annotations") or {}
    )
