"""``/filter`` answering the chosen node only (``hami scheduler --filter-answer best``,
the default): kube-scheduler 1.20 then has one feasible node, skips scoring and calls no
``/prioritize`` — one round trip per pod instead of two (docs/performance.md, #26)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from hami_core.cli import cli
from hami_core.deviceplugin.allocate import finish_allocation
from hami_core.scheduling.scheduler import Scheduler
from hami_core.servers.extender import create_extender_app
from hami_core.servers.options import SchedulerOptions
from tests.builders import cluster, container, gpu, manager, node, pod

NAMES = ["n3", "n2", "n1", "n4"]  # kube-scheduler's order


def _env(answer: str):
    """n1 has a 4000 MiB pod bound (binpack's first), n2 and n3 are empty, n4 is too
    small for the 10000 MiB pods asked below."""
    c = cluster(
        node("n1", [gpu("GPU-1")]),
        node("n2", [gpu("GPU-2")]),
        node("n3", [gpu("GPU-3")]),
        node("n4", [gpu("GPU-4", memory_mib=8192)]),
    )
    sched = Scheduler(c, manager())
    used = _gpu_pod(c, "used", gpumem=4000)
    assert sched.filter(used, ["n1"]).feasible == ("n1",)
    sched.bind("default", "used", uid="uid-used", node="n1")
    finish_allocation(c, c.get_pod("default", "used"), node="n1", success=True)  # lock released
    return c, create_extender_app(sched, filter_answer=answer).test_client()


def _gpu_pod(c, name: str, *, gpumem: int = 10000, **annotations: str):
    p = pod(
        name,
        container(gpu=1, gpumem=gpumem),
        annotations=annotations or None,
        scheduler_name="hami-scheduler",
    )
    p["metadata"]["uid"] = f"uid-{name}"
    return c.add_pod(p)


def _filter(client, p, names=NAMES):
    return client.post("/filter", json={"Pod": p, "NodeNames": names}).get_json()


def _top(client, p, names):
    scores = client.post("/prioritize", json={"Pod": p, "NodeNames": names}).get_json()
    top = max(s["Score"] for s in scores)
    return [s["Host"] for s in scores if s["Score"] == top]


@pytest.mark.parametrize("policy", ["binpack", "spread"])
def test_best_answers_the_one_node_prioritize_puts_alone_at_the_top(policy):
    c, best = _env("best")
    answer = _filter(best, _gpu_pod(c, "p", **{"hami.io/node-scheduler-policy": policy}))
    c2, every = _env("all")
    p2 = _gpu_pod(c2, "p", **{"hami.io/node-scheduler-policy": policy})
    answer_all = _filter(every, p2)
    assert answer_all["NodeNames"] == ["n3", "n2", "n1"]  # every node that fits
    assert answer["NodeNames"] == _top(every, p2, answer_all["NodeNames"])
    assert answer["NodeNames"] == (["n1"] if policy == "binpack" else ["n2"])  # ties: name
    # a node that does not fit is reported as failed whatever the answer
    assert (
        answer["FailedNodes"] == answer_all["FailedNodes"] == {"n4": "1/1 CardInsufficientMemory"}
    )
    assert answer["Error"] == ""


def test_best_sets_aside_the_node_the_previous_pod_is_being_bound_to():
    c, best = _env("best")
    first = _filter(best, _gpu_pod(c, "a"))["NodeNames"]
    second = _filter(best, _gpu_pod(c, "b"))["NodeNames"]
    assert first == ["n1"] and second == ["n2"]  # n1 is reserved for a's bind


def test_a_pod_asking_no_device_is_not_narrowed():
    c, best = _env("best")
    plain = c.add_pod(pod("plain", {"name": "c", "image": "x"}))
    assert _filter(best, plain)["NodeNames"] == NAMES


def test_a_tenant_cannot_steer_the_answer_outside_the_nodes_that_fit():
    """The pod's author writes its policy annotations and the pod kube-scheduler sends:
    the answer is one node that fits, among those kube-scheduler named, whatever they say."""
    c, best = _env("best")
    for i, written in enumerate(
        [
            {"hami.io/node-scheduler-policy": "spread"},
            {"hami.io/node-scheduler-policy": "binpack,n4"},
            {"hami.io/node-scheduler-policy": "n4"},
            {"hami.io/gpu-scheduler-policy": "topology-aware"},
        ]
    ):
        p = _gpu_pod(c, f"t{i}", **written)
        answer = _filter(best, p, ["n4", "n3", "n3", "n2"])
        assert len(answer["NodeNames"]) <= 1, answer
        assert set(answer["NodeNames"]) <= {"n3", "n2"}, answer
        assert answer["NodeNames"] or answer["Error"], answer  # refused with its reason


def test_best_is_hami_schedulers_default_and_a_bad_value_is_refused():
    assert SchedulerOptions().filter_answer == "best"
    with pytest.raises(ValueError, match="filter_answer 'one'"):
        create_extender_app(Scheduler(cluster(), manager()), filter_answer="one")
    result = CliRunner().invoke(cli, ["scheduler", "--filter-answer", "one"])
    assert result.exit_code == 2 and "Invalid value for '--filter-answer'" in result.output
