"""The filter's cold path: one batch fit per container request over every node whose
fit is not memoised (issue #13 item 2), and a failing batch isolated to its node."""

from hami_core.errors import BackendError
from hami_core.scheduling.scheduler import Scheduler
from tests.builders import cluster, container, gpu, manager, node, pod


def three_nodes():
    return cluster(*(node(f"n{i}", [gpu(f"GPU-{i}")]) for i in (1, 2, 3)))


# The three nodes are identical but for their names: with share_fits (the default) only
# one of them would be fitted (tests/integration/test_node_classes.py); these tests are
# about the batch itself.


def test_a_new_shape_is_fitted_in_one_batch_then_memoised(monkeypatch):
    c, m = three_nodes(), manager()
    sched = Scheduler(c, m, share_fits=False)
    real = m.fit_nodes
    batches = []

    def counted(request, nodes, **kw):
        batches.append(sorted(n.name for n, _, _ in nodes))
        return real(request, nodes, **kw)

    monkeypatch.setattr(m, "fit_nodes", counted)
    first = c.add_pod(pod("a", container(gpu=1, gpumem=1000), scheduler_name="hami-scheduler"))
    assert sched.filter(first).feasible == ("n1", "n2", "n3")
    assert batches == [["n1", "n2", "n3"]]  # one dispatch for the three nodes
    second = c.add_pod(pod("b", container(gpu=1, gpumem=1000), scheduler_name="hami-scheduler"))
    assert sched.filter(second).feasible == ("n1", "n2", "n3")
    assert len(batches) == 1  # same shape, no usage change: every node from the memo


def test_a_failing_batch_marks_only_the_node_at_fault(monkeypatch):
    c, m = three_nodes(), manager()
    sched = Scheduler(c, m, share_fits=False)
    real_fit = m.fit

    def fit(request, node, usage, **kw):
        if node.name == "n2":
            raise BackendError("nvidia", "garbage for n2")
        return real_fit(request, node, usage, **kw)

    def batch(*a, **k):
        raise BackendError("nvidia", "garbage in the batch")

    monkeypatch.setattr(m, "fit_nodes", batch)
    monkeypatch.setattr(m, "fit", fit)
    p = c.add_pod(pod("p", container(gpu=1, gpumem=1000), scheduler_name="hami-scheduler"))
    result = sched.filter(p)
    assert result.feasible == ("n1", "n3")
    assert result.failed["n2"].startswith("NodeUnregistered (cannot read node: BackendError")
