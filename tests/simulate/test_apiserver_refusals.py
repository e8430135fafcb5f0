"""An object the API server refuses is refused alone (issue 24 item 11): requests
without limits for an extended resource aborted the whole ``hami simulate`` run; the
API server rejects that one object with its own message, and the others go on. The
same for every per-object check the simulation makes, and for a malformed object
anywhere in a snapshot."""

import copy
import json

from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hami_core.cli import cli
from hami_core.simulate import loader
from hami_core.simulate.apiserver import without_nulls
from hami_core.simulate.loader import (
    WorkloadPod,
    Workloads,
    load_workloads,
    parse_cluster,
    read_documents,
)
from hami_core.simulate.report import build_report, render_text
from hami_core.simulate.runner import simulate

from .helpers import EXAMPLES, gpu_pod, manager, run, write

MGR = manager()
CLUSTER = {"nodes": [{"name": "n1", "gpus": [{"model": "NVIDIA A10", "memoryMiB": 24000}]}]}
NO_LIMIT = (
    'Pod "bad" is invalid: spec.containers[0].resources.limits: Required value: '
    "Limit must be set for non overcommitable resources"
)


def with_resources(name, resources):
    pod = gpu_pod(name)
    pod["spec"]["containers"][0]["resources"] = resources
    return pod


def by_name(report):
    return {p["name"]: p for p in report["pods"]}


def test_requests_without_limits_deny_that_pod_and_the_run_goes_on(tmp_path):
    bad = with_resources("bad", {"requests": {"nvidia.com/gpu": 1}})
    bad["spec"]["schedulerName"] = "volcano"  # HAMi's webhook leaves it as it is
    path = write(
        tmp_path / "w.yaml",
        gpu_pod("before", gpu=1, gpumem=1000),
        bad,
        gpu_pod("after", gpu=1, gpumem=1000),
    )
    sim = simulate(parse_cluster([CLUSTER], source="c", manager=MGR), load_workloads([path]), MGR)
    report = build_report(sim)
    pods = by_name(report)
    assert pods["before"]["status"] == pods["after"]["status"] == "placed"
    assert pods["bad"]["status"] == "denied"
    assert pods["bad"]["deniedBy"] == "kube-apiserver"
    # kube-apiserver's text (pkg/apis/core/validation ValidateResourceRequirements)
    assert pods["bad"]["message"] == NO_LIMIT
    text = render_text(report)
    assert "Refused by kube-apiserver (1)\n  default/bad: " + NO_LIMIT[:40] in text


def test_the_webhook_mutates_before_the_api_server_validates():
    """kube-apiserver validates after the mutating webhooks: HAMi's webhook reads a
    request when there is no limit and writes both (PROTOCOL.md §4), so this pod is
    created and placed in a real cluster, and here."""
    sim = run(CLUSTER, [with_resources("fixed", {"requests": {"nvidia.com/gpu": 1}})], mgr=MGR)
    (pod,) = build_report(sim)["pods"]
    assert pod["status"] == "placed", pod
    assert {
        "op": "add",
        "path": "/spec/containers/0/resources/limits/nvidia.com~1gpu",
        "value": 1,
    } in pod["admission"]


def test_the_cli_reports_the_refusal_and_exits_zero(tmp_path):
    cluster = write(tmp_path / "c.yaml", CLUSTER)
    path = write(
        tmp_path / "w.yaml",
        with_resources("bad", {"requests": {"example.com/fpga": 1}}),
        gpu_pod("good", gpu=1),
    )
    result = CliRunner().invoke(cli, ["simulate", "--cluster", str(cluster), str(path)])
    assert result.exit_code == 0, result.output
    assert NO_LIMIT in result.output.replace("\n", " ")
    assert "Placed (1)" in result.output


def test_every_resource_rule_of_the_api_server_is_a_denial_with_its_message():
    cases = {
        "unequal": (
            {"limits": {"example.com/fpga": 1}, "requests": {"example.com/fpga": 2}},
            'spec.containers[0].resources.requests: Invalid value: "2": '
            "must be equal to example.com/fpga limit",
        ),
        # kube-apiserver 1.20 prints the Quantity struct here (%#v), and its defaulting
        # made the limit the request too: both are refused (tests/e2e/
        # test_apiserver_messages.py holds these texts against the real server)
        "fraction": (
            {"limits": {"example.com/fpga": "500m"}},
            "[spec.containers[0].resources.limits[example.com/fpga]: Invalid value: "
            "resource.Quantity{i:resource.int64Amount{value:500, scale:-3}, "
            'd:resource.infDecAmount{Dec:(*inf.Dec)(nil)}, s:"500m", Format:"DecimalSI"}: '
            "must be an integer, spec.containers[0].resources.requests[example.com/fpga]: "
            "Invalid value: resource.Quantity{i:resource.int64Amount{value:500, scale:-3}, "
            'd:resource.infDecAmount{Dec:(*inf.Dec)(nil)}, s:"500m", Format:"DecimalSI"}: '
            "must be an integer]",
        ),
        "negative": (
            {"limits": {"example.com/fpga": "-1"}},
            '[spec.containers[0].resources.limits[example.com/fpga]: Invalid value: "-1": '
            "must be greater than or equal to 0, "
            'spec.containers[0].resources.requests[example.com/fpga]: Invalid value: "-1": '
            "must be greater than or equal to 0]",
        ),
        "hugepages": (
            {
                "limits": {"hugepages-2Mi": "2Mi", "memory": "1Gi"},
                "requests": {"hugepages-2Mi": "4Mi"},
            },
            'spec.containers[0].resources.requests: Invalid value: "4Mi": '
            "must be equal to hugepages-2Mi limit",
        ),
        "cpu-over": (
            {"limits": {"cpu": "1"}, "requests": {"cpu": "2"}},
            'spec.containers[0].resources.requests: Invalid value: "2": '
            "must be less than or equal to cpu limit",
        ),
        "badname": (
            {"limits": {"gpus": 1}, "requests": {"gpus": 1}},
            '[spec.containers[0].resources.limits[gpus]: Invalid value: "gpus": '
            "must be a standard resource type or fully qualified, "
            'spec.containers[0].resources.limits[gpus]: Invalid value: "gpus": '
            "must be a standard resource for containers, "
            'spec.containers[0].resources.requests[gpus]: Invalid value: "gpus": '
            "must be a standard resource type or fully qualified, "
            'spec.containers[0].resources.requests[gpus]: Invalid value: "gpus": '
            "must be a standard resource for containers]",
        ),
    }
    pods = [with_resources(name, res) for name, (res, _) in cases.items()]
    pods.append(gpu_pod("fine", gpu=1))
    report = build_report(run(CLUSTER, pods, mgr=MGR))
    got = by_name(report)
    for name, (_, error) in cases.items():
        assert got[name]["status"] == "denied", got[name]
        assert got[name]["message"] == f'Pod "{name}" is invalid: {error}', got[name]
    assert got["fine"]["status"] == "placed"


def test_a_workload_with_a_bad_template_is_refused_once_with_its_kind(tmp_path):
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 3,
            "template": {
                "spec": with_resources("t", {"requests": {"example.com/fpga": 1}})["spec"]
            },
        },
    }
    path = write(tmp_path / "w.yaml", deployment, gpu_pod("good", gpu=1))
    report = build_report(
        simulate(parse_cluster([CLUSTER], source="c", manager=MGR), load_workloads([path]), MGR)
    )
    web, good = report["pods"]
    assert web["status"] == "denied" and web["source"].endswith("Deployment web")
    assert web["message"] == (
        'Deployment.apps "web" is invalid: spec.template.spec.containers[0].resources.limits: '
        "Required value: Limit must be set for non overcommitable resources"
    )
    assert good["status"] == "placed"


def test_malformed_workload_objects_are_refused_alone(tmp_path):
    path = tmp_path / "w.yaml"
    path.write_text(
        "- a\n- b\n---\n"  # not an object: skipped with a warning
        "kind: Pod\nspec: {containers: [{name: c}]}\n---\n"
        "kind: Pod\nmetadata: {name: p1}\nspec: {}\n---\n"
        "kind: Pod\nmetadata: {name: p2}\nspec: {containers: [{image: x}]}\n---\n"
        "kind: Pod\nmetadata: {name: p3, annotations: {nvidia.com/numa-bind: true}}\n"
        "spec: {containers: [{name: c}]}\n---\n"
        "kind: Deployment\nmetadata: {name: d}\n"
        "spec: {replicas: two, template: {spec: {containers: [{name: c}]}}}\n---\n"
        "kind: Deployment\nmetadata: {name: e}\nspec: {replicas: 1}\n---\n"
        "kind: Pod\nmetadata: {name: p4}\n"
        "spec: {containers: [{name: c, resources: {limits: {nvidia.com/gpu: [1]}}}]}\n---\n"
        "kind: Pod\nmetadata: {name: p5}\n"
        "spec: {containers: [{name: c, resources: {limits: {nvidia.com/gpu: lots}}}]}\n---\n"
        "kind: Pod\nmetadata: {name: Bad_Name}\nspec: {containers: [{name: c}]}\n---\n"
        "kind: Pod\nmetadata: {generateName: gen-}\nspec: {containers: [{name: c}]}\n---\n"
        "kind: Pod\nmetadata: {name: ok}\nspec: {containers: [{name: c}]}\n"
    )
    workloads = load_workloads([path])
    assert any("document 1: expected a Kubernetes object" in w for w in workloads.warnings)
    report = build_report(
        simulate(parse_cluster([CLUSTER], source="c", manager=MGR), workloads, MGR)
    )
    messages = [(p["name"], p["status"], p["message"]) for p in report["pods"]]
    expected = [
        ("", 'Pod "" is invalid: metadata.name: Required value: name or generateName is required'),
        ("p1", "spec.containers"),  # the webhook sees it first and denies it
        ("p2", 'Pod "p2" is invalid: spec.containers[0].name: Required value'),
        ("p3", "cannot be handled as a Pod: metadata.annotations values must be strings"),
        ("d", "cannot be handled as a Deployment: spec.replicas must be an integer"),
        ("e", "cannot be handled as a Deployment: spec.template must be a mapping"),
        ("p4", "spec.containers[0].resources.limits[nvidia.com/gpu] must be a quantity"),
        ("p5", "quantities must match the regular expression"),
        ("Bad_Name", 'metadata.name: Invalid value: "Bad_Name": a lowercase RFC 1123 subdomain'),
    ]
    for (name, status, message), (want_name, want) in zip(messages, expected, strict=False):
        assert (name, status) == (want_name, "denied"), messages
        assert want in message, (name, message)
    generated, ok = report["pods"][-2:]
    assert generated["name"].startswith("gen-") and len(generated["name"]) == 9
    assert generated["status"] == ok["status"] == "placed"


def test_a_tenant_cannot_blow_up_the_message():
    """Untrusted input (PROTOCOL.md §6-7): thousands of bad labels and a megabyte value
    give a bounded message, never the whole value."""
    pod = gpu_pod("loud", gpu=1)
    pod["metadata"]["labels"] = {f"bad key {i}": "x" * 100_000 for i in range(3000)}
    report = build_report(run(CLUSTER, [pod, gpu_pod("fine", gpu=1)], mgr=MGR))
    loud, fine = report["pods"]
    assert loud["status"] == "denied" and fine["status"] == "placed"
    assert len(loud["message"]) < 20_000
    assert "more errors" in loud["message"]


def test_malformed_snapshot_objects_are_left_out_with_a_warning():
    docs = read_documents(EXAMPLES / "snapshot.yaml")
    broken = [
        {"kind": "Pod", "metadata": {"name": "nameless-spec"}, "spec": "oops"},
        {"kind": "Pod", "metadata": "oops"},
        {"kind": "Pod", "metadata": {"name": "st"}, "spec": {"containers": []}, "status": "x"},
        {"kind": "Node", "metadata": {"labels": {"a": "b"}}},
        {"kind": "Node", "metadata": {"name": "bad-taints"}, "spec": {"taints": "all"}},
        {"kind": "Node", "metadata": {"name": "bad-cap"}, "status": {"allocatable": {"cpu": []}}},
        {"kind": "ResourceQuota", "metadata": {"name": "q"}, "spec": {"hard": {"cpu": "lots"}}},
        {"kind": "Namespace", "metadata": {"name": "ns", "labels": {"a": 1}}},
        "not an object",
        ["nor", "this"],
    ]
    cluster = parse_cluster([*docs, *broken], source="s", manager=MGR)
    skipped = [w for w in cluster.warnings if "skipped" in w]
    assert len(skipped) == len(broken), cluster.warnings
    assert [n["metadata"]["name"] for n in cluster.nodes] == [
        "gpu-a100-01",
        "gpu-a100-02",
        "gpu-t4-01",
    ]
    sim = simulate(
        cluster, Workloads(pods=(WorkloadPod(pod=gpu_pod("p", gpu=1), source="t"),)), MGR
    )
    assert build_report(sim)["pods"][0]["status"] == "placed"


# -- property: random malformed pods never abort the run, and each is reported --------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)


def base_pod(i):
    """A pod using every field the simulation reads (the fuzz corrupts any of them)."""
    pod = gpu_pod(f"pod-{i}", gpu=1, gpumem=1000)
    pod["metadata"]["labels"] = {"app": "web"}
    spec = pod["spec"]
    spec["affinity"] = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "x"}
            ],
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 5,
                    "podAffinityTerm": {
                        "labelSelector": {"matchExpressions": [{"key": "a", "operator": "Exists"}]},
                        "topologyKey": "k",
                    },
                }
            ],
        },
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [{"key": "gpu", "operator": "In", "values": ["on"]}],
                        "matchFields": [
                            {"key": "metadata.name", "operator": "NotIn", "values": ["x"]}
                        ],
                    }
                ]
            }
        },
    }
    spec["topologySpreadConstraints"] = [
        {
            "maxSkew": 1,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "web"}},
            "matchLabelKeys": ["app"],
        }
    ]
    spec["tolerations"] = [{"key": "a", "operator": "Equal", "value": "b", "effect": "NoSchedule"}]
    spec["nodeSelector"] = {"gpu": "on"}
    spec["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 8080}]
    spec["initContainers"] = [
        {"name": "init", "restartPolicy": "Always", "resources": {"limits": {"cpu": "1"}}}
    ]
    spec["volumes"] = [{"name": "v", "persistentVolumeClaim": {"claimName": "c"}}]
    return pod


def _paths(obj, prefix=()):
    if prefix:
        yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, (*prefix, i))


PATHS = [*_paths(base_pod(0)), ("status",)]


def corrupt(pod, path, value):
    target = pod
    for depth, key in enumerate(path, start=1):
        fits = (isinstance(target, list) and isinstance(key, int) and key < len(target)) or (
            isinstance(target, dict) and isinstance(key, str)
        )
        if not fits:
            return pod
        if depth == len(path):
            target[key] = value
            return pod
        target = target[key] if isinstance(target, list) else target.get(key)
    return pod


@st.composite
def malformed(draw, i):
    pod = base_pod(i)
    for _ in range(draw(st.integers(1, 3))):
        corrupt(pod, draw(st.sampled_from(PATHS)), draw(json_values))
    return pod


def workloads_of(pods):
    """The pods as ``load_workloads`` reads them from a file (one document each)."""
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "w.json"
        path.write_text(json.dumps({"kind": "List", "items": list(pods)}))
        return load_workloads([path])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    workload=st.lists(st.integers(0, 1), min_size=1, max_size=6).flatmap(
        lambda flags: st.tuples(
            *[malformed(i) if f else st.just(base_pod(i)) for i, f in enumerate(flags)]
        )
    ),
    existing=st.lists(st.integers(0, 100), max_size=4).flatmap(
        lambda ids: st.tuples(*[malformed(1000 + i) for i in ids])
    ),
)
def test_random_malformed_pods_never_abort_the_run_and_each_is_reported(workload, existing):
    docs = read_documents(EXAMPLES / "snapshot.yaml")
    snapshot_pods = []
    for pod in existing:
        pod = copy.deepcopy(pod)
        if isinstance(pod.get("spec"), dict):
            pod["spec"]["nodeName"] = "gpu-a100-01"
        snapshot_pods.append({**pod, "kind": "Pod"})
    base = parse_cluster(docs, source="s", manager=MGR)
    cluster = parse_cluster([*docs, *snapshot_pods], source="s", manager=MGR)
    # every snapshot pod is kept, or counted as left out; a malformed one with a warning
    pods_in = len(base.pods) + len(base.bound_pods) + base.ignored_pods + len(snapshot_pods)
    assert len(cluster.pods) + len(cluster.bound_pods) + cluster.ignored_pods == pods_in
    malformed_pods = sum(
        1 for p in snapshot_pods if loader.snapshot_problem(without_nulls(p), "Pod")
    )
    assert sum("Pod skipped" in w for w in cluster.warnings) == malformed_pods
    workloads = workloads_of(workload)
    sim = simulate(cluster, workloads, MGR)
    report = build_report(sim)
    json.dumps(report)
    render_text(report)
    # each pod is in the report, or (its kind broken) named in a warning
    not_pods = sum("(not a workload)" in w for w in workloads.warnings)
    assert len(report["pods"]) + not_pods == len(workload)
    for p in report["pods"]:
        assert p["status"] != "error", p


def test_names_that_would_rewrite_the_terminal_are_escaped_in_the_refusal():
    pod = gpu_pod("evil", gpu=1)
    pod["metadata"]["labels"] = {"app": "\u202eliated\x1b[2J"}
    (entry,) = build_report(run(CLUSTER, [pod], mgr=MGR))["pods"]
    assert entry["status"] == "denied"
    assert "\u202e" not in entry["message"] and "\x1b" not in entry["message"]
    assert "\\u202e" in entry["message"]


def test_the_text_report_escapes_what_would_rewrite_the_terminal():
    """A pod name (refused, so listed as written) carrying an escape sequence and a bidi
    override prints escaped in the text report."""
    evil = gpu_pod("evil\x1b[2J\u202e", gpu=1)
    text = render_text(build_report(run(CLUSTER, [evil], mgr=MGR)))
    assert "\x1b" not in text and "\u202e" not in text
    assert "default/evil\\x1b[2J\\u202e: " in text
