"""``Test_MutateAdmission`` of HAMi 2.10's newer vendors through our webhook (issue #15
item 11). HAMi's ``(true, nil)`` is a pod the webhook takes (scheduler name set, defaults
written); ``(false, nil)`` one it leaves alone; an error is a denial, here naming the
resource, with HAMi's words where its test checks them."""

from __future__ import annotations

import pytest

from tests.unit.test_admission import patched, review


def _pod(limits=None, requests=None):
    res = {}
    if limits is not None:
        res["limits"] = dict(limits)
    if requests is not None:
        res["requests"] = dict(requests)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "x", "resources": res}]},
    }


@pytest.mark.parametrize(
    ("source", "limits", "requests", "taken"),
    [
        ("biren: set to resource limits", {"birentech.com/gpu": "1"}, None, True),
        ("vastai: set to resource limits", {"vastaitech.com/va": "1"}, None, True),
        ("metax: set to resources limits", {"metax-tech.com/gpu": "1"}, None, True),
        ("metax: don't set to resources limits", {}, None, False),
        ("amd: gpu count in limits", {"amd.com/gpu": "1"}, None, True),
        (
            "amd: accepts partial memory without a core percentage",
            {"amd.com/gpu": "1", "amd.com/gpumem": "4096"},
            None,
            True,
        ),
        ("amd: no resources", {}, None, False),
        ("awsneuron: set neuron number", {"aws.amazon.com/neuron": "1"}, None, True),
        ("awsneuron: set request-only neuron number", None, {"aws.amazon.com/neuron": "1"}, True),
        ("awsneuron: set neuron cores", {"aws.amazon.com/neuroncore": "2"}, None, True),
        (
            "mthreads: set to resources limit",
            {
                "mthreads.com/vgpu": "2",
                "mthreads.com/sgpu-memory": "2",
                "mthreads.com/sgpu-core": "1",
            },
            None,
            True,
        ),
        (
            "mthreads: count over one without pod annotations",
            {"mthreads.com/vgpu": "2"},
            None,
            True,
        ),
        (
            "mthreads: count over one requested without limits",
            None,
            {"mthreads.com/vgpu": "2"},
            True,
        ),
        ("mthreads: count one requested without limits", None, {"mthreads.com/vgpu": "1"}, True),
        (
            "mthreads: don't set to count limit",
            {"mthreads.com/sgpu-memory": "2", "mthreads.com/sgpu-core": "1"},
            None,
            False,
        ),
        (
            "mthreads: don't set to memory limit",
            {"mthreads.com/vgpu": "1", "mthreads.com/sgpu-core": "1"},
            None,
            True,
        ),
        (
            "mthreads: count less than one",
            {
                "mthreads.com/vgpu": "1",
                "mthreads.com/sgpu-memory": "2",
                "mthreads.com/sgpu-core": "1",
            },
            None,
            True,
        ),
        (
            "iluvatar: IluvatarResourceCount and IluvatarResourceCores set to limits",
            {"iluvatar.ai/MR-V100-vgpu": "1", "iluvatar.ai/MR-V100.vCore": "50"},
            None,
            True,
        ),
    ],
)
def test_mutate_admission_taken_or_left(source, limits, requests, taken):
    """``pkg/device/<vendor>/device_test.go::Test_MutateAdmission``, the case named."""
    p = _pod(limits, requests)
    out = review(p)
    assert out.allowed, (source, out.message)
    name = patched(p, out)["spec"].get("schedulerName")
    assert (name == "hami-scheduler") is taken, source


@pytest.mark.parametrize(
    ("source", "limits", "requests", "words"),
    [
        (
            "amd: rejects zero core percentage",
            {"amd.com/gpu": "1", "amd.com/gpucores": "0"},
            None,
            "amd.com/gpucores",
        ),
        (
            "amd: rejects core percentage above 100",
            {"amd.com/gpu": "1", "amd.com/gpucores": "101"},
            None,
            "amd.com/gpucores",
        ),
        (
            "awsneuron: reject request-only neuron number that overflows device count",
            None,
            {"aws.amazon.com/neuron": "2147483648"},
            "aws.amazon.com/neuron",
        ),
        (
            "awsneuron: reject odd neuron core count greater than one",
            {"aws.amazon.com/neuroncore": "3"},
            None,
            "aws.amazon.com/neuroncore must be 1 or a multiple of 2, got 3",
        ),
        (
            "awsneuron: reject request-only odd neuron core count greater than one",
            None,
            {"aws.amazon.com/neuroncore": "3"},
            "aws.amazon.com/neuroncore must be 1 or a multiple of 2, got 3",
        ),
        (
            "awsneuron: reject zero neuron core count",
            {"aws.amazon.com/neuroncore": "0"},
            None,
            "aws.amazon.com/neuroncore must be greater than 0",
        ),
        (
            "mthreads: memory no exist legalMemoryslices",
            {
                "mthreads.com/vgpu": "1",
                "mthreads.com/sgpu-memory": "3",
                "mthreads.com/sgpu-core": "1",
            },
            None,
            "mthreads.com/sgpu-memory",
        ),
        (
            "mthreads: count set to zero is rejected",
            {
                "mthreads.com/vgpu": "0",
                "mthreads.com/sgpu-memory": "2",
                "mthreads.com/sgpu-core": "1",
            },
            None,
            "mthreads.com/vgpu",
        ),
        (
            "mthreads: count set to negative is rejected",
            {
                "mthreads.com/vgpu": "-1",
                "mthreads.com/sgpu-memory": "2",
                "mthreads.com/sgpu-core": "1",
            },
            None,
            "mthreads.com/vgpu",
        ),
        (
            "mthreads: request-only count set to zero is rejected",
            None,
            {
                "mthreads.com/vgpu": "0",
                "mthreads.com/sgpu-memory": "2",
                "mthreads.com/sgpu-core": "1",
            },
            "mthreads.com/vgpu",
        ),
        (
            "awsneuron: reject negative neuron core count",
            {"aws.amazon.com/neuroncore": "-2"},
            None,
            "aws.amazon.com/neuroncore",
        ),
    ],
)
def test_mutate_admission_denials(source, limits, requests, words):
    """``Test_MutateAdmission``, the case named: HAMi's webhook returns an error."""
    out = review(_pod(limits, requests))
    assert not out.allowed and words in out.message, (source, out.message)


@pytest.mark.parametrize(
    ("source", "limits", "config"),
    [
        ("hygon: set to resource limits", {"hygon.com/dcunum": "1"}, None),
        # HAMi's test device uses its flag default count name cambricon.com/mlu
        (
            "cambricon: set to resources limits",
            {"cambricon.com/mlu": "1"},
            {"cambricon": {"resourceCountName": "cambricon.com/mlu"}},
        ),
    ],
)
def test_mutate_admission_of_the_older_vendors(source, limits, config):
    """``pkg/device/<vendor>/device_test.go::Test_MutateAdmission``, the case named: the
    pod is taken."""
    p = _pod(limits)
    out = review(p, config=config)
    assert out.allowed, out.message
    assert patched(p, out)["spec"]["schedulerName"] == "hami-scheduler", source
