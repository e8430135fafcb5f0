"""``Test_GenerateResourceRequests`` of HAMi 2.10's newer vendors (``pkg/device/<vendor>/
device_test.go``) with HAMi's expected values, read through the installed backends as the
scheduler reads a container (issue #15 item 11).

HAMi's ``GenerateResourceRequests`` runs after its ``MutateAdmission``; cases that only
hold when the webhook is bypassed (Moore Threads memory 1000 units, outside HAMi's
``legalMemoryslices``) are answered here by the admission rule HAMi's webhook applies
first. HAMi's "empty request" (``ContainerDeviceRequest{}``) for a malformed value is a
refusal naming the resource here (never a pod scheduled as something else).
"""

from __future__ import annotations

import pytest

from hami_core.errors import InvalidInputError
from hami_core.plugin import BackendManager

MANAGER = BackendManager.from_entry_points(disabled=[])


def _read(limits, requests=None):
    res = {"limits": dict(limits)}
    if requests is not None:
        res["requests"] = dict(requests)
    c = {"name": "c", "resources": res}
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [c]}}
    return [
        (r.vendor, r.count, r.memory_mib, r.memory_pct, r.cores_pct)
        for r in MANAGER.parse_requests(pod, c, init=False)
    ]


ILU = "iluvatar.ai/MR-V100"


@pytest.mark.parametrize(
    ("source", "limits", "requests", "want"),
    [
        (
            "iluvatar: all resources set to limits and requests",
            {f"{ILU}-vgpu": "1", f"{ILU}.vMem": "1000", f"{ILU}.vCore": "100"},
            {f"{ILU}-vgpu": "1", f"{ILU}.vMem": "1000", f"{ILU}.vCore": "100"},
            [("MR-V100", 1, 256000, 0, 100)],
        ),
        ("iluvatar: all resources don't set to limits and requests", {}, {}, []),
        (
            "iluvatar: resourcemem don't set to limits and requests",
            {f"{ILU}-vgpu": "1"},
            {f"{ILU}-vgpu": "1"},
            [("MR-V100", 1, 0, 100, 0)],
        ),
        (
            "metax: resource set to limit and request",
            {"metax-tech.com/gpu": "1"},
            {"metax-tech.com/gpu": "1"},
            [("Metax-GPU", 1, 0, 100, 100)],
        ),
        ("metax: resource don't set to limit and request", {}, {}, []),
        ("biren: don't set to limits and request", {}, {}, []),
        (
            "biren: set to limits and request",
            {"birentech.com/gpu": "1"},
            {"birentech.com/gpu": "1"},
            [("Biren", 1, 0, 100, 0)],
        ),
        ("biren: only set to limits", {"birentech.com/gpu": "1"}, None, [("Biren", 1, 0, 100, 0)]),
        ("biren: only set to request", {}, {"birentech.com/gpu": "1"}, [("Biren", 1, 0, 100, 0)]),
        ("vastai: don't set to limits and request", {}, {}, []),
        (
            "vastai: set to limits and request",
            {"vastaitech.com/va": "1"},
            {"vastaitech.com/va": "1"},
            [("Vastai", 1, 0, 100, 0)],
        ),
        (
            "vastai: only set to limits",
            {"vastaitech.com/va": "1"},
            None,
            [("Vastai", 1, 0, 100, 0)],
        ),
        ("vastai: only set to request", {}, {"vastaitech.com/va": "1"}, [("Vastai", 1, 0, 100, 0)]),
        (
            "awsneuron: allocate neuron core",
            {"aws.amazon.com/neuroncore": "1"},
            {"aws.amazon.com/neuroncore": "1"},
            [("AWSNeuron", 1, 0, 100, 1)],
        ),
        (
            "mthreads: all resources don't set to limit,count don't set to request",
            {"mthreads.com/sgpu-memory": "1000", "mthreads.com/sgpu-core": "1"},
            {"mthreads.com/sgpu-memory": "1000", "mthreads.com/sgpu-core": "1"},
            [],
        ),
    ],
)
def test_generate_resource_requests(source, limits, requests, want):
    """``pkg/device/<vendor>/device_test.go::Test_GenerateResourceRequests``, the case
    named: (vendor, count, memory MiB, memory %, cores). Neuron cores are a count of
    NeuronCores (1 of the device's 2), as in HAMi's ``Coresreq: 1``."""
    assert _read(limits, requests) == want, source


@pytest.mark.parametrize(
    ("source", "limits", "names"),
    [
        (
            "iluvatar: memory overflowing int32 is rejected",
            {f"{ILU}-vgpu": "1", f"{ILU}.vMem": "16Gi"},
            f"{ILU}.vMem",
        ),
        (
            "iluvatar: decimal-form memory request is rejected",
            {f"{ILU}-vgpu": "1", f"{ILU}.vMem": "16.0Gi"},
            f"{ILU}.vMem",
        ),
        (
            "mthreads: count set to zero with memory and cores",
            {
                "mthreads.com/vgpu": "0",
                "mthreads.com/sgpu-memory": "1000",
                "mthreads.com/sgpu-core": "1",
            },
            "mthreads.com/vgpu",
        ),
        (
            "mthreads: count set to negative with memory and cores",
            {
                "mthreads.com/vgpu": "-1",
                "mthreads.com/sgpu-memory": "1000",
                "mthreads.com/sgpu-core": "1",
            },
            "mthreads.com/vgpu",
        ),
        (
            "mthreads: count overflowing int32 with memory and cores",
            {
                "mthreads.com/vgpu": "4294967296",
                "mthreads.com/sgpu-memory": "1000",
                "mthreads.com/sgpu-core": "1",
            },
            "mthreads.com/",
        ),
        (
            "mthreads: memory overflowing int32 is rejected",
            {
                "mthreads.com/vgpu": "1",
                "mthreads.com/sgpu-memory": "16Gi",
                "mthreads.com/sgpu-core": "1",
            },
            "mthreads.com/sgpu-memory",
        ),
        (
            "mthreads: decimal-form memory request is rejected",
            {
                "mthreads.com/vgpu": "1",
                "mthreads.com/sgpu-memory": "16.0Gi",
                "mthreads.com/sgpu-core": "1",
            },
            "mthreads.com/sgpu-memory",
        ),
        (
            # HAMi's MutateAdmission: "sGPU memory request value is invalid, valid values
            # are [2, 4, 8, 16, 32, 64, 96]" before GenerateResourceRequests sees 1000.
            "mthreads: all resources set to limit and request (1000 units)",
            {
                "mthreads.com/vgpu": "1",
                "mthreads.com/sgpu-memory": "1000",
                "mthreads.com/sgpu-core": "1",
            },
            "mthreads.com/sgpu-memory",
        ),
        (
            "awsneuron: reject odd neuron core request",
            {"aws.amazon.com/neuroncore": "3"},
            "aws.amazon.com/neuroncore",
        ),
        (
            "awsneuron: reject zero neuron core request",
            {"aws.amazon.com/neuroncore": "0"},
            "aws.amazon.com/neuroncore",
        ),
        (
            "awsneuron: reject negative neuron core request",
            {"aws.amazon.com/neuroncore": "-2"},
            "aws.amazon.com/neuroncore",
        ),
        (
            "awsneuron: reject neuron number that overflows",
            {"aws.amazon.com/neuron": "4294967296"},
            "aws.amazon.com/neuron",
        ),
        (
            "awsneuron: reject neuron core request that overflows",
            {"aws.amazon.com/neuroncore": "4294967296"},
            "aws.amazon.com/neuroncore",
        ),
    ],
)
def test_generate_resource_requests_refusals(source, limits, names):
    """``Test_GenerateResourceRequests``, the case named: HAMi returns an empty request;
    we refuse the container naming the resource."""
    with pytest.raises(InvalidInputError, match=names.replace(".", r"\.")):
        _read(limits)


def _amd(limits, requests=None):
    from hami_amd import plugin
    from hami_amd.requests import parse_request

    from hami_core.testing import section

    cfg = section(
        plugin,
        resource_count_name="amd.com/gpu",
        resource_memory_name="amd.com/gpu-mem",
        resource_cores_name="amd.com/gpu-core-pct",
    )
    res = {"limits": limits, **({"requests": requests} if requests else {})}
    r = parse_request({"name": "c1", "resources": res}, cfg)
    return None if r is None else (r.count, r.memory_mib, r.memory_pct, r.cores_pct)


def test_amd_generate_resource_requests():
    """``pkg/device/amd/device_test.go::Test_GenerateResourceRequests`` (HAMi's test config
    names ``amd.com/gpu-mem`` / ``amd.com/gpu-core-pct``): "parses limits only" (the
    requests' 99s are not read), "defaults an omitted core limit to 100 percent"; "no gpu
    limits -> empty": HAMi reads no request, here the container is refused naming what is
    missing (docs/hami-go-tests.md "Decisions taken")."""
    limits = {"amd.com/gpu": "2", "amd.com/gpu-mem": "4096", "amd.com/gpu-core-pct": "33"}
    nines = dict.fromkeys(limits, "99")
    assert _amd(limits, nines) == (2, 4096, 0, 33)
    with pytest.raises(InvalidInputError, match="without amd.com/gpu"):
        _amd({"amd.com/gpu-mem": "4096", "amd.com/gpu-core-pct": "33"})
    assert _amd({"amd.com/gpu": "1", "amd.com/gpu-mem": "4096"})[3] == 100


@pytest.mark.parametrize(
    ("case", "resource", "value"),
    [
        ("rejects zero count", "amd.com/gpu", "0"),
        ("rejects overflowing count", "amd.com/gpu", str(2**31)),
        ("rejects negative memory", "amd.com/gpu-mem", "-1"),
        ("rejects overflowing memory", "amd.com/gpu-mem", str(2**31)),
        ("rejects zero core percentage", "amd.com/gpu-core-pct", "0"),
        ("rejects excessive core percentage", "amd.com/gpu-core-pct", "101"),
    ],
)
def test_amd_generate_resource_requests_refusals(case, resource, value):
    """``Test_GenerateResourceRequests``, the case named: HAMi returns an empty request;
    we refuse the container naming the resource."""
    limits = {"amd.com/gpu": "1", resource: value}
    with pytest.raises(InvalidInputError, match=resource.replace(".", r"\.")):
        _amd(limits)
