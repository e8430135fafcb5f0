"""Bind races and stale locks (issue #12 items 7-9): a retried or concurrent bind never
leaves a pod bound without its allocation, and no stale lock holds a node for minutes."""

import datetime as dt
import threading
import time

import pytest
from click.testing import CliRunner

from hami_core.cli import cli
from hami_core.errors import ConflictError, HamiError
from hami_core.facts.nodelock import LONGEST_BIND_S
from hami_core.protocol import encode_lock
from hami_core.scheduling.scheduler import Scheduler
from hami_core.servers.scheduler_main import SchedulerOptions
from tests.builders import cluster, container, gpu, manager, node, pod

T0 = dt.datetime(2026, 11, 29, 9, 0, 0, tzinfo=dt.UTC)
ALLOC = "hami.io/vgpu-devices-allocated"
TO_ALLOCATE = "hami.io/vgpu-devices-to-allocate"


@pytest.fixture
def env():
    c = cluster(node("n1", [gpu("GPU-1")]), node("n2", [gpu("GPU-2")]))
    clock = {"now": T0}
    sched = Scheduler(c, manager(), clock=lambda: clock["now"])
    return c, sched, clock


def add(c, name, node_name=None, **res):
    p = pod(name, container(**(res or {"gpu": 1, "gpumem": 1000})), scheduler_name="hami-scheduler")
    if node_name:
        p["spec"]["nodeName"] = node_name
        uuid = "GPU-1" if node_name == "n1" else "GPU-2"
        p["metadata"]["annotations"] = {ALLOC: f"{uuid},NVIDIA,100,0:;"}
    return c.add_pod(p)


def lock_of(c, n="n1"):
    return (c.get_node(n)["metadata"].get("annotations") or {}).get("hami.io/mutex.lock")


def ann(c, name):
    return c.get_pod("default", name)["metadata"].get("annotations") or {}


# -- item 7: concurrent binds of one pod -----------------------------------------------


def test_a_retried_bind_while_the_first_runs_keeps_the_allocation(env, monkeypatch):
    c, sched, _ = env
    p = add(c, "p")
    real_bind = c.bind_pod

    def slow_bind(*a, **k):
        time.sleep(0.3)  # the first bind outlives kube-scheduler's timeout
        return real_bind(*a, **k)

    monkeypatch.setattr(c, "bind_pod", slow_bind)
    results, errors = [], []

    def run():
        try:
            results.append(sched.bind("default", "p", uid=p["metadata"]["uid"], node="n1"))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
        time.sleep(0.05)
    for t in threads:
        t.join(5)
    assert errors == []
    assert c.get_pod("default", "p")["spec"]["nodeName"] == "n1"
    assert ALLOC in ann(c, "p") and TO_ALLOCATE in ann(c, "p")
    assert lock_of(c).endswith(",default,p")  # for the device plugin
    assert sorted(r is None for r in results) == [False, True]


def test_binding_conflict_with_a_pod_bound_here_meanwhile_is_success(env, monkeypatch):
    c, sched, _ = env
    p = add(c, "p")
    real_bind = c.bind_pod

    def raced(ns, name, *, uid, node, annotations=None):
        real_bind(ns, name, uid=uid, node=node, annotations=annotations)  # another replica won
        raise ConflictError("pod is already bound")

    monkeypatch.setattr(c, "bind_pod", raced)
    allocation = sched.bind("default", "p", uid=p["metadata"]["uid"], node="n1")
    assert allocation is not None and ALLOC in ann(c, "p")
    assert lock_of(c).endswith(",default,p")


def test_a_pod_bound_elsewhere_by_someone_else_is_left_alone(env, monkeypatch):
    c, sched, _ = env
    p = add(c, "p")
    real_bind = c.bind_pod

    def raced(ns, name, *, uid, node, annotations=None):
        real_bind(ns, name, uid=uid, node="n2", annotations=annotations)
        raise ConflictError("pod is already bound")

    monkeypatch.setattr(c, "bind_pod", raced)
    with pytest.raises(ConflictError, match="bound to n2 by someone else"):
        sched.bind("default", "p", uid=p["metadata"]["uid"], node="n1")
    assert c.get_pod("default", "p")["spec"]["nodeName"] == "n2"
    assert ALLOC in ann(c, "p")  # not ours to erase any more
    assert lock_of(c) is None  # our lock on n1 is released


def test_rollback_never_erases_another_writers_keys(env, monkeypatch):
    c, sched, _ = env
    p = add(c, "p")
    winner = {ALLOC: "GPU-1,NVIDIA,500,0:;", TO_ALLOCATE: "GPU-1,NVIDIA,500,0:;"}

    def lost(ns, name, *, uid, node, annotations=None):
        c.patch_pod_metadata(ns, name, annotations=winner)  # the winning bind's write
        raise ConflictError("transient")

    monkeypatch.setattr(c, "bind_pod", lost)
    with pytest.raises(ConflictError, match="transient"):
        sched.bind("default", "p", uid=p["metadata"]["uid"], node="n1")
    assert ann(c, "p")[ALLOC] == winner[ALLOC] and ann(c, "p")[TO_ALLOCATE] == winner[TO_ALLOCATE]


def test_rollback_retries_when_only_unrelated_fields_changed(env, monkeypatch):
    c, sched, _ = env
    p = add(c, "p")

    def lost(ns, name, *, uid, node, annotations=None):
        c.patch_pod_metadata(ns, name, annotations={"team": "x"})  # bumps resourceVersion
        raise ConflictError("transient")

    monkeypatch.setattr(c, "bind_pod", lost)
    with pytest.raises(ConflictError):
        sched.bind("default", "p", uid=p["metadata"]["uid"], node="n1")
    a = ann(c, "p")
    assert ALLOC not in a and TO_ALLOCATE not in a and a["team"] == "x"
    assert lock_of(c) is None


def test_a_bind_that_lost_its_lock_writes_nothing(env, monkeypatch):
    c, sched, _ = env
    p = add(c, "p")
    real_cached_node = c.cached_node
    calls = {"n": 0}

    def taken_over(name):  # bind reads the node from the cache: to lock, then to check
        calls["n"] += 1
        obj = real_cached_node(name)
        if calls["n"] >= 2:  # after the lock was taken: someone took it over
            c.patch_node_annotations(name, {"hami.io/mutex.lock": encode_lock(T0, "default", "x")})
            obj = real_cached_node(name)
        return obj

    monkeypatch.setattr(c, "cached_node", taken_over)
    with pytest.raises(ConflictError, match="taken over mid-bind"):
        sched.bind("default", "p", uid=p["metadata"]["uid"], node="n1")
    assert ALLOC not in ann(c, "p") and not c.get_pod("default", "p")["spec"].get("nodeName")


# -- item 8: stale locks ---------------------------------------------------------------


def _locked_by(c, owner, at=T0):
    c.patch_node_annotations("n1", {"hami.io/mutex.lock": encode_lock(at, "default", owner)})


def test_a_pending_owner_holds_the_lock_only_for_the_longest_bind(env):
    c, sched, clock = env
    add(c, "dead-bind")  # its scheduler died mid-bind: never bound
    _locked_by(c, "dead-bind")
    p = add(c, "p")
    clock["now"] = T0 + dt.timedelta(seconds=LONGEST_BIND_S - 1)
    with pytest.raises(ConflictError, match="locked by default/dead-bind"):
        sched.bind("default", "p", uid=p["metadata"]["uid"], node="n1")
    clock["now"] = T0 + dt.timedelta(seconds=LONGEST_BIND_S + 1)
    sched.bind("default", "p", uid=p["metadata"]["uid"], node="n1")
    assert lock_of(c).endswith(",default,p")


def test_an_owner_bound_to_another_node_frees_the_lock_at_once(env):
    c, sched, _ = env
    add(c, "elsewhere", node_name="n2")
    _locked_by(c, "elsewhere")
    p = add(c, "p")
    sched.bind("default", "p", uid=p["metadata"]["uid"], node="n1")
    assert lock_of(c).endswith(",default,p")


def test_an_owner_bound_here_holds_the_lock_for_its_allocate(env):
    c, sched, clock = env
    add(c, "here", node_name="n1")
    _locked_by(c, "here")
    p = add(c, "p")
    clock["now"] = T0 + dt.timedelta(seconds=LONGEST_BIND_S + 60)
    with pytest.raises(ConflictError, match="locked by default/here"):
        sched.bind("default", "p", uid=p["metadata"]["uid"], node="n1")


def test_a_running_owner_bound_here_frees_the_lock_at_once(env):
    """kubelet allocates every container's devices at pod admission, before any starts:
    a Running owner is past Allocate. Nodes whose devices a vendor's own device plugin
    serves (Moore Threads, AWS Neuron, Cambricon dynamic sMLU) never release our lock, so
    without this the next bind there waited for the owner to finish or the 300 s expiry."""
    c, sched, _ = env
    add(c, "here", node_name="n1")
    _locked_by(c, "here")
    p = add(c, "p")
    c.set_pod_phase("default", "here", "Pending")  # admitted, containers not started
    with pytest.raises(ConflictError, match="locked by default/here"):
        sched.bind("default", "p", uid=p["metadata"]["uid"], node="n1")
    c.set_pod_phase("default", "here", "Running")
    sched.bind("default", "p", uid=p["metadata"]["uid"], node="n1")
    assert lock_of(c).endswith(",default,p")


def test_a_future_stamp_is_not_trusted(env):
    c, sched, _ = env
    add(c, "here", node_name="n1")
    _locked_by(c, "here", at=T0 + dt.timedelta(hours=1))
    p = add(c, "p")
    sched.bind("default", "p", uid=p["metadata"]["uid"], node="n1")
    assert lock_of(c).endswith(",default,p")


def test_a_stamp_within_clock_skew_is_honoured(env):
    c, sched, _ = env
    add(c, "here", node_name="n1")
    _locked_by(c, "here", at=T0 + dt.timedelta(seconds=2))
    p = add(c, "p")
    with pytest.raises(ConflictError, match="locked by default/here"):
        sched.bind("default", "p", uid=p["metadata"]["uid"], node="n1")


# -- item 9: the lock wait stays under kube-scheduler's extender timeout ---------------

KUBE_SCHEDULER_EXTENDER_TIMEOUT_S = 5.0  # k8s 1.20 pkg/scheduler/apis/config DefaultExtenderTimeout


def test_the_default_lock_wait_is_well_under_the_extender_timeout():
    assert SchedulerOptions().bind_lock_wait_s <= KUBE_SCHEDULER_EXTENDER_TIMEOUT_S / 2
    out = CliRunner().invoke(cli, ["scheduler", "--help"], terminal_width=200).output
    assert "--bind-lock-wait" in out and "default: 2.0" in out and "5 s" in out
    bad = CliRunner().invoke(cli, ["scheduler", "--bind-lock-wait", "-1"])
    assert bad.exit_code != 0 and "--bind-lock-wait" in bad.output
    assert SchedulerOptions().bind_lock_wait_s < LONGEST_BIND_S


# -- issue 24 item 13: a lock left behind after an API-server restart ------------------


class Unavailable(HamiError):
    """What the store raises when the API server does not answer (``ApiUnavailableError``)."""

    grpc_code = "UNAVAILABLE"


def _bound_here(c, name, *, phase, bind_time):
    add(c, name, node_name="n1")
    c.patch_pod_metadata(
        "default",
        name,
        annotations={"hami.io/bind-phase": phase, "hami.io/bind-time": str(bind_time)},
    )


@pytest.mark.parametrize("phase", ["success", "failed"])
def test_an_allocated_owner_frees_the_lock_at_once(env, phase):
    """The fault run: the lock names a pod bound here with ``bind-phase: success`` that
    no kubelet runs (a fake node; it stays Pending). Before: held 300 s."""
    c, sched, _ = env
    _bound_here(c, "done", phase=phase, bind_time=int(T0.timestamp()))
    _locked_by(c, "done")
    p = add(c, "p")
    sched.bind("default", "p", uid=p["metadata"]["uid"], node="n1")
    assert lock_of(c).endswith(",default,p")


def test_a_lock_stamped_long_after_its_owners_bind_is_free(env):
    """A retried bind re-took the lock of a pod bound 10 minutes earlier and still
    ``allocating``: no device plugin serves the pod under that lock (its bind-time is not
    the lock's era), so it protects nothing."""
    c, sched, _ = env
    _bound_here(c, "old", phase="allocating", bind_time=int(T0.timestamp()) - 600)
    _locked_by(c, "old")
    p = add(c, "p")
    sched.bind("default", "p", uid=p["metadata"]["uid"], node="n1")
    assert lock_of(c).endswith(",default,p")


def _stale_cache(c, monkeypatch, name):
    """The scheduler's cache keeps ``name`` as it is now (unbound), as after an API-server
    restart before the watch catches up; live reads see the truth."""
    before = c.get_pod("default", name)
    real_get = c.get_pod
    stale = {"on": True}

    def cached(ns, n):
        return before if n == name and stale["on"] else real_get(ns, n)

    monkeypatch.setattr(c, "get_pod", cached)
    monkeypatch.setattr(c, "read_pod_live", real_get, raising=False)
    return lambda: stale.update(on=False)  # the watch caught up


def test_a_retried_bind_with_a_stale_cache_leaves_the_first_binds_lock(env, monkeypatch):
    """The first bind landed and holds the lock for the device plugin; the retry (its
    cache still shows the pod unbound) answers None and leaves that lock alone. Before:
    it answered ConflictError and released the lock, so Allocate found no lock."""
    c, sched, clock = env
    p = add(c, "p")
    caught_up = _stale_cache(c, monkeypatch, "p")
    assert sched.bind("default", "p", uid=p["metadata"]["uid"], node="n1") is not None
    held = lock_of(c)
    assert held.endswith(",default,p")

    clock["now"] = T0 + dt.timedelta(seconds=6)  # kube-scheduler's retry, after its timeout
    assert sched.bind("default", "p", uid=p["metadata"]["uid"], node="n1") is None
    assert lock_of(c) == held
    caught_up()
    assert ann(c, "p")["hami.io/bind-phase"] == "allocating"
    assert ann(c, "p")["hami.io/bind-time"] == str(int(T0.timestamp()))  # the first bind's


@pytest.mark.parametrize("release_fails", [False, True])
def test_a_retried_bind_of_an_allocated_pod_leaves_no_lock_in_the_way(
    env, monkeypatch, release_fails
):
    """The fault run's sequence: the pod was bound and allocated (lock released by the
    device plugin); kube-scheduler's retry, after the API server restarted, takes the lock
    from a stale cache. It gives back what it wrote; and when even that write fails, the
    lock (its owner allocated) stops no other bind."""
    c, sched, clock = env
    p = add(c, "p")
    caught_up = _stale_cache(c, monkeypatch, "p")
    sched.bind("default", "p", uid=p["metadata"]["uid"], node="n1")
    c.patch_pod_metadata("default", "p", annotations={"hami.io/bind-phase": "success"})
    c.patch_node_annotations("n1", {"hami.io/mutex.lock": None})  # the device plugin's
    clock["now"] = T0 + dt.timedelta(seconds=20)
    if release_fails:
        monkeypatch.setattr(
            c, "remove_node_annotation", lambda *a, **k: (_ for _ in ()).throw(Unavailable("down"))
        )

    assert sched.bind("default", "p", uid=p["metadata"]["uid"], node="n1") is None
    assert (lock_of(c) is not None) is release_fails

    caught_up()
    q = add(c, "q")
    assert sched.bind("default", "q", uid=q["metadata"]["uid"], node="n1") is not None
    assert lock_of(c).endswith(",default,q")


def test_a_binding_whose_answer_was_lost_keeps_its_lock(env, monkeypatch):
    """The Binding landed but its answer did not (the API server was killed): the pod is
    bound here and waits for Allocate, which needs the lock. Before: the rollback freed
    it and answered an error."""
    c, sched, _ = env
    p = add(c, "p")
    real_bind = c.bind_pod

    def lost(*a, **k):
        real_bind(*a, **k)
        raise Unavailable("connection reset")

    monkeypatch.setattr(c, "bind_pod", lost)
    assert sched.bind("default", "p", uid=p["metadata"]["uid"], node="n1") is not None
    assert lock_of(c).endswith(",default,p")
    assert c.get_pod("default", "p")["spec"]["nodeName"] == "n1"


def test_an_unknown_binding_outcome_keeps_the_lock_only_for_the_longest_bind(env, monkeypatch):
    """Neither the Binding nor the pod can be read: the lock stays (the device plugin
    would need it if the Binding landed), and with the pod unbound it is taken over once
    older than the longest bind."""
    c, sched, clock = env
    p = add(c, "p")

    def down(*a, **k):
        raise Unavailable("connection refused")

    monkeypatch.setattr(c, "bind_pod", down)
    monkeypatch.setattr(c, "read_pod_live", down, raising=False)
    with pytest.raises(Unavailable):
        sched.bind("default", "p", uid=p["metadata"]["uid"], node="n1")
    assert lock_of(c).endswith(",default,p")
    monkeypatch.undo()
    q = add(c, "q")
    clock["now"] = T0 + dt.timedelta(seconds=LONGEST_BIND_S + 1)
    sched.bind("default", "q", uid=q["metadata"]["uid"], node="n1")
    assert lock_of(c).endswith(",default,q")


def test_a_retried_bind_after_a_restart_takes_no_lock(env, monkeypatch):
    """While the pod cache is not settled (its watch broke: the API server restarted),
    a bind whose cached pod is unbound reads it live first: a pod already bound takes no
    lock at all, not even for the span of the bind."""
    c, sched, clock = env
    p = add(c, "p")
    caught_up = _stale_cache(c, monkeypatch, "p")
    sched.bind("default", "p", uid=p["metadata"]["uid"], node="n1")
    c.patch_pod_metadata("default", "p", annotations={"hami.io/bind-phase": "success"})
    c.patch_node_annotations("n1", {"hami.io/mutex.lock": None})
    writes = []
    real_patch = c.patch_node_annotations
    monkeypatch.setattr(
        c, "patch_node_annotations", lambda *a, **k: writes.append(a) or real_patch(*a, **k)
    )
    monkeypatch.setattr(c, "pods_settled", lambda: False, raising=False)
    clock["now"] = T0 + dt.timedelta(seconds=20)

    assert sched.bind("default", "p", uid=p["metadata"]["uid"], node="n1") is None
    assert writes == [] and lock_of(c) is None
    caught_up()
    monkeypatch.setattr(c, "pods_settled", lambda: True, raising=False)
    q = add(c, "q")  # a settled cache: no read, as before
    assert sched.bind("default", "q", uid=q["metadata"]["uid"], node="n1") is not None


def test_a_lock_whose_give_back_fails_while_the_api_server_is_down_is_given_back_later(
    env, monkeypatch
):
    """A retried bind of a pod an earlier bind placed (its answer lost at an API-server
    restart, the pod since allocated) gives back the lock it wrote; when that write fails
    too (the API server still restarting), it is retried until it lands, instead of the
    lock naming an allocated pod until it expires (the e2e restart test's stale lock)."""
    c, sched, _ = env
    p = add(c, "p")
    real_bind = c.bind_pod

    def landed_earlier(ns, name, *, uid, node, annotations=None):
        done = {**(annotations or {}), "hami.io/bind-phase": "success"}
        real_bind(ns, name, uid=uid, node=node, annotations=done)
        raise ConflictError("pod is already bound")

    real_remove = c.remove_node_annotation
    calls = {"n": 0}

    def restarting(name, key, *, value):
        calls["n"] += 1
        if calls["n"] <= 2:
            raise HamiError("the API server is unreachable")
        return real_remove(name, key, value=value)

    monkeypatch.setattr(c, "bind_pod", landed_earlier)
    monkeypatch.setattr(c, "remove_node_annotation", restarting)
    assert sched.bind("default", "p", uid=p["metadata"]["uid"], node="n1") is None
    deadline = time.monotonic() + 20
    while lock_of(c) is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert lock_of(c) is None
    assert calls["n"] == 3
