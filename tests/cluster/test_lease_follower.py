"""``LeaseFollower``: leadership read from kube-scheduler's Lease (the chart's extender,
``--follow-lease``): yes only while the partner beside it (``<hostname>_...``) holds the
Lease and renewed it within its duration, judged when asked."""

from __future__ import annotations

import datetime as dt

import pytest

from hami_core.cluster.kube import ApiUnavailableError
from hami_core.cluster.lease import LeaseFollower, held_by
from hami_core.errors import ConfigError
from hami_core.servers.options import SchedulerOptions
from hami_core.servers.scheduler_main import check_follow_lease

NOW = 1_800_000_000.0


def lease(holder: str, renewed: float, duration: object = 15) -> dict:
    micro = dt.datetime.fromtimestamp(renewed, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {
        "kind": "Lease",
        "spec": {"holderIdentity": holder, "renewTime": micro, "leaseDurationSeconds": duration},
    }


@pytest.mark.parametrize(
    ("obj", "held"),
    [
        (lease("sched-0_4f1c", NOW - 2), True),
        (lease("sched-0_4f1c", NOW - 14.9), True),
        (lease("sched-0_4f1c", NOW - 15), False),  # expired: another may take it now
        (lease("sched-1_77aa", NOW - 1), False),  # the other replica's kube-scheduler
        (lease("sched-0", NOW - 1), False),  # not kube-scheduler's <hostname>_<uuid>
        (lease("sched-00_4f1c", NOW - 1), False),  # a host whose name starts with ours
        (lease("", NOW - 1), False),  # released
        (None, False),  # no Lease yet
        ({"spec": {"holderIdentity": "sched-0_1", "leaseDurationSeconds": 15}}, False),
        ({"spec": {"holderIdentity": "sched-0_1", "renewTime": "soon"}}, False),
        (lease("sched-0_4f1c", NOW - 1, duration=True), False),  # not a duration
    ],
)
def test_held_only_by_the_partner_within_the_lease_duration(obj, held):
    assert held_by(obj, "sched-0_", NOW) is held


def test_the_answer_ages_with_the_clock_and_an_unreadable_lease_keeps_it_aging():
    now = {"t": NOW}
    reading: dict = {"lease": lease("sched-0_4f1c", NOW)}

    def read():
        if isinstance(reading["lease"], Exception):
            raise reading["lease"]
        return reading["lease"]

    f = LeaseFollower(read, holder_prefix="sched-0_", clock=lambda: now["t"])
    assert not f.is_leader()  # nothing read yet
    f.poll()
    assert f.is_leader() and f.leader_identity() == "sched-0_4f1c"
    reading["lease"] = ApiUnavailableError("the API server is unreachable")
    now["t"] += 10
    with pytest.raises(ApiUnavailableError):
        f.poll()
    assert f.is_leader()  # renewed 10 s ago, within 15
    now["t"] += 5
    assert not f.is_leader()  # no word for the lease's duration: maybe another leads
    reading["lease"] = lease("sched-1_9b0e", now["t"] - 1)  # it did
    f.poll()
    assert not f.is_leader() and f.leader_identity() == "sched-1_9b0e"


def test_an_empty_partner_is_refused():
    with pytest.raises(ValueError, match="holder_prefix"):
        LeaseFollower(lambda: None, holder_prefix="")


def test_follow_lease_goes_with_no_leader_election_only():
    with pytest.raises(ConfigError, match="--follow-lease hami-system/hami-scheduler: give --no"):
        check_follow_lease(SchedulerOptions(follow_lease="hami-system/hami-scheduler"))
    check_follow_lease(
        SchedulerOptions(follow_lease="hami-system/hami-scheduler", leader_elect=False)
    )
    with pytest.raises(ConfigError, match="--follow-lease: 'no-slash'"):
        SchedulerOptions(follow_lease="no-slash", leader_elect=False)
