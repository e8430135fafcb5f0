"""``hami simulate``'s refusals (``hami_core/simulate/apiserver.py``) say what the real
kube-apiserver 1.20 says: each invalid pod is sent to it (server-side dry run) and its
``Status.message`` compared with the simulation's, word for word (issue 24 item 11)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from hami_core.simulate.apiserver import invalid_message, validate_pod

NS = "default"


def pod(name: str, **spec: Any) -> dict[str, Any]:
    container = {"name": "c", "image": "busybox"}
    container.update(spec.pop("container", {}))
    out = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"containers": [container], **spec},
    }
    return out


def res(limits=None, requests=None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if limits is not None:
        out["limits"] = limits
    if requests is not None:
        out["requests"] = requests
    return {"container": {"resources": out}}


CASES = [
    pod("no-limit", **res(requests={"example.com/fpga": "1"})),
    pod("unequal", **res(limits={"example.com/fpga": "1"}, requests={"example.com/fpga": "2"})),
    pod("negative", **res(limits={"example.com/fpga": "-1"})),
    pod("fraction", **res(limits={"example.com/fpga": "500m"})),
    pod("fraction-2", **res(limits={"example.com/fpga": "1.5"})),
    pod("fraction-3", **res(limits={"example.com/fpga": "1e-1"})),
    pod(
        "fraction-4",
        **res(limits={"example.com/fpga": "2500m"}, requests={"example.com/fpga": "2500m"}),
    ),
    pod("pods-resource", **res(limits={"pods": "1"})),
    pod(
        "spread-selector",
        topologySpreadConstraints=[
            {
                "maxSkew": 1,
                "topologyKey": "zone",
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchExpressions": [{"key": "a", "operator": "Nope"}]},
            }
        ],
    ),
    pod("dup", initContainers=[{"name": "c", "image": "busybox"}]),
    pod(
        "node-affinity",
        affinity={
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "zone", "operator": "In"},
                                {"key": "gen", "operator": "Gt", "values": ["1", "2"]},
                                {"key": "x", "operator": "Exists", "values": ["a"]},
                                {"key": "bad key", "operator": "Near", "values": ["a"]},
                            ],
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": ["A_b"]},
                                {"key": "spec.x", "operator": "Exists"},
                            ],
                        }
                    ]
                },
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 0,
                        "preference": {"matchExpressions": [{"key": "k", "operator": "In"}]},
                    }
                ],
            }
        },
    ),
    pod(
        "node-affinity-empty",
        affinity={
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}
            }
        },
    ),
    pod(
        "preferred-pod",
        affinity={
            "podAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 101,
                        "podAffinityTerm": {
                            "labelSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]},
                            "topologyKey": "",
                        },
                    }
                ]
            }
        },
    ),
    pod("tol-empty-key", tolerations=[{"operator": "Equal", "value": "v"}]),
    pod("cpu-over", **res(limits={"cpu": "1"}, requests={"cpu": "2"})),
    pod("bad-resource", **res(limits={"gpus": "1"})),
    pod(
        "hugepages",
        **res(
            limits={"hugepages-2Mi": "2Mi", "memory": "1Gi"},
            requests={"hugepages-2Mi": "4Mi", "memory": "1Gi"},
        ),
    ),
    pod("Bad_Name"),
    pod("labels", nodeSelector={"bad key": "v"}),
    pod(
        "anti",
        affinity={
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": {
                            "matchExpressions": [{"key": "app", "operator": "Sideways"}]
                        },
                        "topologyKey": "kubernetes.io/hostname",
                    }
                ]
            }
        },
    ),
    pod(
        "anti-nokey",
        affinity={
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": ""}
                ]
            }
        },
    ),
    pod(
        "spread",
        topologySpreadConstraints=[
            {"maxSkew": 0, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}
        ],
    ),
    pod(
        "spread-when",
        topologySpreadConstraints=[
            {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "Sometimes"}
        ],
    ),
    pod("toleration", tolerations=[{"key": "k", "operator": "Maybe"}]),
]


VALID = [
    pod("gpu", **res(limits={"nvidia.com/gpu": "2", "nvidia.com/gpumem": "4000"})),
    pod("cpu", **res(limits={"cpu": "2"}, requests={"cpu": "500m", "memory": "1Gi"})),
    pod(
        "hugepages-ok",
        **res(limits={"hugepages-2Mi": "2Mi", "memory": "1Gi"}, requests={"hugepages-2Mi": "2Mi"}),
    ),
    pod(
        "anti-ok",
        affinity={
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": {"matchLabels": {"app": "x"}},
                        "topologyKey": "kubernetes.io/hostname",
                    }
                ]
            }
        },
    ),
]


@pytest.mark.parametrize("case", CASES + VALID, ids=[c["metadata"]["name"] for c in CASES + VALID])
def test_the_simulations_answer_is_the_api_servers(control_plane, case):
    """Refused by both with the same message, or accepted by both."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    errors = validate_pod(case)
    api = client.CoreV1Api(control_plane.api_client())
    if not errors:
        api.create_namespaced_pod(NS, copy.deepcopy(case), dry_run="All")
        return
    with pytest.raises(ApiException) as exc:
        api.create_namespaced_pod(NS, copy.deepcopy(case), dry_run="All")
    status = json.loads(exc.value.body)
    assert status["reason"] == "Invalid", status
    assert invalid_message("Pod", case["metadata"]["name"], errors) == status["message"]
