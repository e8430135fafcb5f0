"""Preemption's cost per decision: a whole-card preemptor on a half-full cluster.

A pod asking one GPU with ``gpucores: 100`` takes the device alone (HAMi's exclusivity),
but the pre-filter's rule (a free sharer slot and the memory) sees every half-used GPU
as open, so every node's bound is 0 and a search by subsets fits every small set of
every node (tens of seconds under ``state.lock`` at 100 nodes). The decision must stay
within a bounded number of fits (``Choice.fits_tried``, not wall time) and still return
the fewest victims: the holders of the emptiest device.
"""

from __future__ import annotations

from hami_core.model import ContainerDevice
from hami_core.protocol.devicelist import encode_pod_devices
from hami_core.scheduling.preemption import MAX_FITS_PER_DECISION, choose_victims
from hami_core.scheduling.scheduler import Scheduler
from tests.builders import cluster, container, gpu, manager, node

from .preemption_builders import SCHEDULER, holder, wanting

MANAGER = manager()
NODES, GPUS = 12, 8


def _whole_card(priority: int = 1000):
    p = wanting("whole", mib=1, priority=priority)
    p["spec"]["containers"] = [container(gpu=1, gpucores=100)]
    p["spec"]["schedulerName"] = SCHEDULER
    return p


def _half_full(*, spare: str = "n7", spare_gpu: int = 5, spare_prio: int = 5):
    """Every GPU of every node holds three small low-priority sharers, but one GPU of
    ``spare`` holds two (priorities ``spare_prio`` and 0)."""
    nodes = [
        node(f"n{i}", [gpu(f"GPU-n{i}-{g}", index=g) for g in range(GPUS)]) for i in range(NODES)
    ]
    store = cluster(*nodes)
    for i in range(NODES):
        for g in range(GPUS):
            uuid = f"GPU-n{i}-{g}"
            two = f"n{i}" == spare and g == spare_gpu
            prios = (spare_prio, 0) if two else (0, 10, 20)
            for k, prio in enumerate(prios):
                store.add_pod(holder(f"h-{i}-{g}-{k}", f"n{i}", [(uuid, 2000)], priority=prio))
    return store, Scheduler(store, MANAGER)


def _choose(sched, p):
    return choose_victims(sched.state, sched.engine, sched.cycle(p), sched.state.node_names())


def test_a_whole_card_preemptor_costs_few_fits_and_gets_the_fewest_victims():
    _, sched = _half_full()
    p = _whole_card()
    assert not sched.filter(p).feasible
    choice = _choose(sched, p)
    assert choice.candidate is not None and choice.exact
    assert choice.candidate.node == "n7"
    assert sorted(v.ref for v in choice.candidate.victims) == ["low/h-7-5-0", "low/h-7-5-1"]
    # a fit per node at most, not every small set of every node
    assert choice.fits_tried <= NODES + 8, choice.fits_tried


def test_the_lowest_priorities_win_among_devices_of_equal_victims():
    _, sched = _half_full(spare_prio=0)
    choice = _choose(sched, _whole_card())
    assert choice.candidate is not None and choice.exact
    assert [v.priority for v in choice.candidate.victims] == [0, 0]
    assert choice.fits_tried <= NODES + 8, choice.fits_tried


def test_a_holder_of_equal_priority_keeps_its_device():
    """A tenant cannot make its own pod's device the victim pool: a GPU with a holder of
    the preemptor's priority is never emptied, even when it holds the fewest pods."""
    store, sched = _half_full()
    store.add_pod(holder("peer", "n7", [("GPU-n7-5", 1000)], priority=1000, namespace="high"))
    choice = _choose(sched, _whole_card())
    assert choice.candidate is not None
    assert all(v.priority < 1000 for v in choice.candidate.victims)
    assert len(choice.candidate.victims) == 3
    assert "GPU-n7-5" not in {u for v in choice.candidate.victims for u in v.held.charges}


def test_the_decision_budget_bounds_the_fits_and_still_answers():
    """Past the budget the search returns the best it found, marked not exact: two
    whole cards on a node of 24 sharers, where the pre-filter's rule sees every GPU open
    (each node's bound is 0) and subsets explode."""
    _, sched = _half_full()
    p = _whole_card()
    p["spec"]["containers"] = [container(gpu=2, gpucores=100)]
    choice = choose_victims(
        sched.state, sched.engine, sched.cycle(p), sched.state.node_names(), max_fits=40
    )
    assert choice.candidate is not None and not choice.exact
    # the node under way finishes its reprieve (a fit per victim and one more)
    assert choice.fits_tried <= 40 + GPUS * 3 + 2, choice.fits_tried
    assert MAX_FITS_PER_DECISION >= 1000


def _with_cores(obj, uuid: str, mib: int, cores: int):
    devices = ((ContainerDevice(uuid=uuid, vendor="NVIDIA", memory_mib=mib, cores_pct=cores),),)
    obj["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"] = encode_pod_devices(devices)
    return obj


def test_a_device_not_taken_alone_is_searched_for_the_fewest():
    """``gpucores: 100`` takes a device alone only where it has 100 cores: on a GPU of
    200 (``devcore``) it asks 100 free, so emptying a device is not always the fewest:
    one 60-core sharer of GPU-a1 beats both sharers of GPU-a0 (the device alone)."""
    store = cluster(node("a", [gpu("GPU-a0", index=0), gpu("GPU-a1", index=1, cores=200)]))
    for name in ("a0-1", "a0-2"):
        store.add_pod(_with_cores(holder(name, "a", [("GPU-a0", 1000)]), "GPU-a0", 1000, 10))
    for name, cores in (("c60", 60), ("d60", 60), ("tiny", 0)):
        store.add_pod(_with_cores(holder(name, "a", [("GPU-a1", 1000)]), "GPU-a1", 1000, cores))
    sched = Scheduler(store, MANAGER)
    p = _whole_card()
    p["spec"]["containers"] = [container(gpu=1, gpucores=100, gpumem=4000)]
    assert not sched.filter(p).feasible
    choice = _choose(sched, p)
    assert choice.candidate is not None and choice.exact
    assert [v.ref for v in choice.candidate.victims] == ["low/c60"]
