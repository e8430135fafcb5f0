"""Leader election on a real coordination.k8s.io/v1 Lease."""

import time
import uuid

from hami_core.cluster.lease import LeaderElector


def elector(cp, name, identity):
    return LeaderElector(
        cp.api_client(new=True),
        name=name,
        namespace="default",
        identity=identity,
        lease_duration_s=3,
        renew_deadline_s=2,
        retry_period_s=0.3,
    )


def wait_for(predicate, timeout):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_one_leader_release_hands_over_at_once_and_a_crash_within_a_lease(control_plane):
    name = f"lease-{uuid.uuid4().hex[:6]}"
    a, b, c = (elector(control_plane, name, i) for i in ("a", "b", "c"))
    a.start()
    assert wait_for(a.is_leader, 10)
    b.start()
    time.sleep(1)
    assert a.is_leader() and not b.is_leader() and b.leader_identity() == "a"

    t0 = time.monotonic()
    a.stop()  # a clean shutdown gives the lease up
    assert wait_for(b.is_leader, 5)
    assert time.monotonic() - t0 < 2

    c.start()
    time.sleep(1)
    assert not c.is_leader()
    t0 = time.monotonic()
    b.stop(release=False)  # a crash: nothing is released
    assert wait_for(c.is_leader, 10)
    took = time.monotonic() - t0
    assert 1.0 < took < 3 + 1.0, took  # not before, and within, one lease duration (+ a round)
    c.stop()
