"""The scheduler in named stages (issue 25 item 1): one cycle per pod, one filter engine
over a node source, and ``scheduler.py`` a facade.

Given Node objects (kube-scheduler's ``nodeCacheCapable: false``, the autoscaler's
template nodes) go through the same engine as the cached ones: a known node is judged
from the cache (live usage, the namespace's quota), an unknown one from the object given
(zero usage, no quota), in one pass and one cycle.
"""

from pathlib import Path

from hami_core.scheduling import cycle as cycle_mod
from hami_core.scheduling import filtering, scheduler
from hami_core.scheduling.scheduler import Scheduler
from tests.builders import cluster, container, gpu, manager, node, pod

NS = "team"


def _quota_of(store, mib):
    store.add_quota(
        {
            "metadata": {"name": "q", "namespace": NS},
            "spec": {"hard": {"limits.nvidia.com/gpumem": str(mib)}},
        }
    )


def test_the_scheduler_module_is_a_facade():
    lines = Path(scheduler.__file__).read_text(encoding="utf-8").count("\n")
    assert lines <= 250, f"scheduler.py has {lines} lines"
    assert not hasattr(Scheduler, "_filter")  # the second filter engine is gone


def test_given_and_cached_nodes_are_judged_in_one_cycle_by_one_engine(monkeypatch):
    store = cluster(node("known", [gpu("GPU-K", memory_mib=16000)]))
    _quota_of(store, 4000)
    sched = Scheduler(store, manager())
    template = node("template", [gpu("GPU-T", memory_mib=16000)])
    cycles, runs = [], []
    begin, run = cycle_mod.begin_cycle, filtering.FilterEngine.run
    monkeypatch.setattr(
        scheduler, "begin_cycle", lambda *a, **k: cycles.append(1) or begin(*a, **k)
    )
    monkeypatch.setattr(
        filtering.FilterEngine,
        "run",
        lambda self, c, s: runs.append(list(s.names)) or run(self, c, s),
    )
    p = pod("p", container(gpu=1, gpumem=6000), namespace=NS, scheduler_name="hami-scheduler")
    p["metadata"]["uid"] = "uid-p"
    given = [template, store.get_node("known"), template]  # the template given twice
    result = sched.filter_objects(p, given)
    assert cycles == [1] and runs == [["template", "known"]]
    # the template: zero usage, no quota; the known node: over the namespace's quota
    assert result.feasible == ("template",)
    assert "ResourceQuotaNotFit" in result.failed["known"]
    assert result.fits["template"].allocation.devices["NVIDIA"][0][0].uuid == "GPU-T"


def test_a_template_never_sees_the_usage_of_a_cached_node_of_the_same_name():
    """A node the cache knows is judged from the cache, whatever object is given."""
    store = cluster(node("n1", [gpu("GPU-1", memory_mib=16000)]))
    sched = Scheduler(store, manager())
    forged = node("n1", [gpu("GPU-X", memory_mib=80000)])
    p = pod("p", container(gpu=1, gpumem=20000), scheduler_name="hami-scheduler")
    result = sched.filter_objects(p, [forged])
    assert result.feasible == () and "n1" in result.failed
