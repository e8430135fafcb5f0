"""How malformed PodDisruptionBudgets read, for preemption (kube-scheduler 1.20's rules)
and for the defrag planner (fail closed): an object the API server would refuse never
lets a pod be disrupted more than a well-formed budget would."""

from __future__ import annotations

import pytest

from hami_core.cluster.eviction import covers, disruptions_allowed, pdb_violations, selects
from hami_core.defrag.movable import Budget

POD = {"metadata": {"namespace": "team", "name": "p", "labels": {"app": "train"}}}
BAD_SELECTORS = [
    {"matchExpressions": [{"key": "app", "operator": "Sideways", "values": ["train"]}]},
    {"matchExpressions": [{"key": "app", "operator": "In"}]},  # In without values
    "app=train",  # a string where an object belongs
]


def _pdb(selector, allowed, namespace="team"):
    return {
        "metadata": {"namespace": namespace, "name": "b"},
        "spec": {"selector": selector},
        "status": {"disruptionsAllowed": allowed},
    }


@pytest.mark.parametrize("allowed", [True, False, "1", 1.0, None, [1]])
def test_a_disruptions_allowed_that_is_not_an_integer_allows_none(allowed):
    assert disruptions_allowed(_pdb({}, allowed)) == 0
    assert Budget.from_object(_pdb({}, allowed)).allowed == 0


def test_a_negative_disruptions_allowed_reads_as_zero_for_the_planner():
    assert Budget.from_object(_pdb({}, -3)).allowed == 0


@pytest.mark.parametrize("selector", BAD_SELECTORS)
def test_preemption_reads_an_unreadable_selector_as_covering_nothing(selector):
    """kube-scheduler 1.20 skips a budget whose selector does not convert: the victim is
    then no violation (preemption may evict it, as kube-scheduler would)."""
    pdb = _pdb(selector, 0)
    assert not selects(pdb, POD)
    assert pdb_violations([POD], [pdb]) == 0


@pytest.mark.parametrize("selector", BAD_SELECTORS)
def test_the_planner_reads_an_unreadable_selector_as_covering_the_namespace(selector):
    """The planner must not guess: a budget it cannot read protects every pod of its
    namespace, and with 0 disruptions allowed nothing there moves."""
    budget = Budget.from_object(_pdb(selector, 0))
    assert budget.selects(POD)
    assert covers("team", selector, POD, fail_closed=True)
    assert not budget.selects({"metadata": {**POD["metadata"], "namespace": "other"}})


def test_an_empty_selector_covers_the_namespace_for_the_planner_only():
    """policy/v1: an empty selector selects every pod of the namespace; kube-scheduler
    1.20's preemption (policy/v1beta1) reads it as selecting nothing."""
    assert Budget.from_object(_pdb({}, 0)).selects(POD)
    assert not selects(_pdb({}, 0), POD)


def test_a_well_formed_budget_at_its_limit_counts_a_violation():
    pdb = _pdb({"matchLabels": {"app": "train"}}, 0)
    assert selects(pdb, POD) and pdb_violations([POD], [pdb]) == 1
    assert pdb_violations([POD], [_pdb({"matchLabels": {"app": "train"}}, 1)]) == 0
