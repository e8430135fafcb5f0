"""``/prioritize`` steers away from nodes whose lock another pod holds, read from the
state's index of locked nodes (kept by the node events, so a lock written, released or
a node deleted is seen at once, and prioritize looks only at the locked nodes)."""

import datetime as dt

from hami_core.protocol.annotations import NODE_LOCK
from hami_core.protocol.lock import encode_lock
from hami_core.scheduling.scheduler import Scheduler
from tests.builders import cluster, container, gpu, manager, node, pod

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def test_a_node_locked_by_another_pod_scores_zero_until_its_lock_is_gone():
    c = cluster(*(node(f"n{i}", [gpu(f"GPU-{i}")]) for i in range(3)))
    sched = Scheduler(c, manager(), clock=lambda: NOW)
    p = c.add_pod(pod("a", container(gpu=1, gpumem=1000), scheduler_name="hami-scheduler"))
    names = ["n0", "n1", "n2"]
    free = dict(sched.prioritize(p, names))
    # equal nodes: the tie goes to the smallest name, as FilterResult.best() picks
    assert max(free, key=free.__getitem__) == "n0"
    assert free["n0"] > free["n2"]  # and no other node shares n0's score
    c.patch_node_annotations("n0", {NODE_LOCK: encode_lock(NOW, "default", "other")})
    c.patch_node_annotations("n1", {NODE_LOCK: encode_lock(NOW, "default", "a")})  # its own
    scores = dict(sched.prioritize(p, names))
    assert scores["n0"] == 0 and max(scores, key=scores.__getitem__) == "n1"
    assert sched.state.locked_by_others(
        set(names), namespace="default", pod="a", now=NOW, expiry_s=300
    ) == {"n0"}
    # expired, and then released: n0 is free again
    later = NOW + dt.timedelta(seconds=301)
    assert not sched.state.locked_by_others(
        set(names), namespace="default", pod="a", now=later, expiry_s=300
    )
    c.remove_node_annotation("n0", NODE_LOCK, value=encode_lock(NOW, "default", "other"))
    assert not sched.state.locked_by_others(
        set(names), namespace="default", pod="a", now=NOW, expiry_s=300
    )
    # a garbage lock is no lock (as the node-lock reader treats it)
    c.patch_node_annotations("n2", {NODE_LOCK: "garbage"})
    assert not sched.state.locked_by_others(
        {"n2"}, namespace="default", pod="a", now=NOW, expiry_s=300
    )
