"""``--gpu-policy`` / ``--node-policy`` read as HAMi 2.10's annotations are (issue #15).

HAMi's scheduler takes the default device policy as a plain string
(``cmd/scheduler/main.go`` ``--gpu-scheduler-policy``) and reads it with the same
``PolicyContains`` / sort-key chain as the pod annotation (``pkg/util/util_test.go``
``TestPolicyContains``; ``pkg/scheduler/policy/gpu_policy_test.go``
``TestDeviceUsageList_Less`` "Chain mutex,spread" and "Chain spread,numa"): a default
written as a list means what the annotation means. The node policy is one name in HAMi
(``pkg/scheduler/policy/node_policy.go``), so ``--node-policy`` takes one.
"""

from __future__ import annotations

import json

import pytest
import yaml
from click.testing import CliRunner

from hami_core.cli import cli
from hami_core.errors import ConfigError, InvalidInputError
from hami_core.facts.policy import device_policy_option, node_policy_option
from hami_core.model import DevicePolicy, DevicePolicyChain, NodePolicy
from hami_core.servers.scheduler_main import SchedulerOptions
from tests.builders import container, gpu, node, pipeline, pod
from tests.unit.test_admission import review

POLICY = "hami.io/gpu-scheduler-policy"


def _gpus_of(out):
    return [d.uuid for c in out.allocation.devices["NVIDIA"] for d in c]


def _two_gpus(numa=(0, 0)):
    return node(
        "node-1",
        [gpu("GPU-0", index=0, numa=numa[0]), gpu("GPU-1", index=1, numa=numa[1])],
    )


@pytest.mark.parametrize(
    ("value", "want"),
    [
        ("spread,numa", DevicePolicyChain(DevicePolicy.SPREAD, (DevicePolicy.NUMA,))),
        ("mutex,spread", DevicePolicyChain(DevicePolicy.SPREAD, mutex=True)),
        (
            " binpack , topology-aware ",
            DevicePolicyChain(DevicePolicy.BINPACK, (DevicePolicy.TOPOLOGY_AWARE,)),
        ),
        ("mutex", DevicePolicyChain(DevicePolicy.SPREAD, mutex=True)),
    ],
)
def test_gpu_policy_option_reads_lists_as_the_annotation(value, want):
    assert device_policy_option(value, "--gpu-policy") == want == DevicePolicyChain.parse(value)


@pytest.mark.parametrize("value", ["spread,fastest", "fastest", ",", "spread;numa"])
def test_gpu_policy_option_refuses_what_the_annotation_refuses_with_its_message(value):
    """Same tokens refused, same explanation: only the prefix (where it was written)
    differs."""
    with pytest.raises(InvalidInputError) as opt:
        device_policy_option(value, "--gpu-policy")
    denied = review(pod("p", container(gpu=1), annotations={POLICY: value}))
    assert not denied.allowed
    option_msg = str(opt.value)
    assert option_msg.startswith("--gpu-policy: ")
    explanation = option_msg.removeprefix("--gpu-policy: ")
    assert explanation in denied.message
    assert f"annotation {POLICY}: {explanation}" in denied.message


def test_node_policy_option_is_one_name_stripped_like_the_annotation():
    assert node_policy_option(" spread ", "--node-policy") is NodePolicy.SPREAD
    with pytest.raises(
        InvalidInputError, match=r"^--node-policy: 'spread,binpack' is not one of binpack, spread$"
    ):
        node_policy_option("spread,binpack", "--node-policy")


def test_mutex_list_as_the_default_reaches_the_fit():
    """A ``mutex,binpack`` default (as a flag would give it) keeps binpack's order among
    idle GPUs and refuses used ones, as the annotation does."""
    chain = device_policy_option("mutex,binpack", "--gpu-policy")
    p = pipeline(_two_gpus(), device_policy=chain)
    assert _gpus_of(p.submit(pod("a", container(gpu=1, gpumem=100)))) == ["GPU-0"]
    assert _gpus_of(p.submit(pod("b", container(gpu=1, gpumem=100)))) == ["GPU-1"]
    third = p.submit(pod("c", container(gpu=1, gpumem=100)))
    assert third.filter.failed == {"node-1": "2/2 ExclusiveDeviceAllocateConflict"}
    # a GPU a pod placed under the default mutex holds takes no other pod, whatever
    # its policy (HAMi#3038)
    own = p.submit(pod("d", container(gpu=1, gpumem=100), annotations={POLICY: "binpack"}))
    assert own.filter.failed == {"node-1": "2/2 ExclusiveDeviceAllocateConflict"}
    # a pod's own annotation still wins over the flag: placed under binpack, it shares
    p.cluster.delete_pod("default", "a")
    first = p.submit(pod("e", container(gpu=1, gpumem=100), annotations={POLICY: "binpack"}))
    assert _gpus_of(first) == ["GPU-0"]
    shared = p.submit(pod("f", container(gpu=1, gpumem=100), annotations={POLICY: "binpack"}))
    assert _gpus_of(shared) == ["GPU-0"]


def test_spread_numa_default_breaks_ties_by_numa():
    """``gpu_policy_test.go`` "Chain spread,numa: ... numa tiebreak": GPU-1 on NUMA 0."""
    chain = device_policy_option("spread,numa", "--gpu-policy")
    p = pipeline(_two_gpus(numa=(1, 0)), device_policy=chain)
    assert _gpus_of(p.submit(pod("a", container(gpu=1, gpumem=100)))) == ["GPU-1"]


def test_scheduler_options_refuse_a_bad_policy_at_start():
    assert SchedulerOptions(gpu_policy="mutex,spread").gpu_policy == "mutex,spread"
    with pytest.raises(ConfigError, match=r"--gpu-policy: 'fast' is not one of .*mutex"):
        SchedulerOptions(gpu_policy="spread,fast")
    with pytest.raises(ConfigError, match=r"--node-policy: 'fill'"):
        SchedulerOptions(node_policy="fill")


# -- through the command line -----------------------------------------------------------


def _write(path, *docs):
    path.write_text(yaml.safe_dump_all(docs))
    return path


def _simulate(tmp_path, *opts):
    cluster = _write(
        tmp_path / "c.yaml",
        {
            "nodes": [
                {"name": "n", "gpus": [{"model": "NVIDIA A10", "memoryMiB": 23028, "count": 2}]}
            ]
        },
    )
    pods = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"p{i}", "namespace": "default"},
            "spec": {
                "containers": [
                    {
                        "name": "c",
                        "resources": {"limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000}},
                    }
                ]
            },
        }
        for i in range(3)
    ]
    wl = _write(tmp_path / "w.yaml", *pods)
    return CliRunner().invoke(
        cli, ["simulate", "--cluster", str(cluster), str(wl), "-o", "json", *opts]
    )


def test_simulate_gpu_policy_takes_an_ordered_list(tmp_path):
    plain = json.loads(_simulate(tmp_path, "--gpu-policy", "binpack").output)
    assert [p["devices"][0]["uuid"] for p in plain["pods"]] == ["GPU-n-0"] * 3
    result = _simulate(tmp_path, "--gpu-policy", "mutex,binpack")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["policies"]["gpu"] == "mutex,binpack"
    statuses = [(p["status"], [d["uuid"] for d in p["devices"]]) for p in data["pods"]]
    assert statuses == [("placed", ["GPU-n-0"]), ("placed", ["GPU-n-1"]), ("unschedulable", [])]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (
            ["--gpu-policy", "spread,nearest"],
            "'nearest' is not one of binpack, spread, topology-aware, numa, mutex",
        ),
        (["--gpu-policy", " , "], "names no policy"),
        (["--node-policy", "spread,binpack"], "'spread,binpack' is not one of binpack, spread"),
    ],
)
def test_bad_policy_options_are_usage_errors_naming_the_token(tmp_path, args, needle):
    for command in (["simulate"], ["scheduler"]):
        result = CliRunner().invoke(cli, [*command, *args])
        assert result.exit_code == 2, (command, result.output)
        assert needle in result.output and args[0] in result.output


def _scheduler_options(monkeypatch, *args):
    """``hami scheduler ARGS`` up to the point it would start: the options it would run."""
    from hami_core.servers import scheduler_main

    seen = []
    monkeypatch.setattr(scheduler_main, "run_scheduler", seen.append)
    result = CliRunner().invoke(cli, ["scheduler", *args])
    return result, seen


def test_scheduler_takes_hamis_policy_flag_names(monkeypatch):
    """HAMi's ``cmd/scheduler/main.go`` names the defaults ``--node-scheduler-policy``
    (default binpack) and ``--gpu-scheduler-policy`` (default spread), each a plain
    string, ``--flag=value`` or ``--flag value``: both spellings set the same options as
    ``--node-policy`` / ``--gpu-policy``, and the list reaches the fit as the flag's."""
    result, seen = _scheduler_options(
        monkeypatch, "--node-scheduler-policy", "spread", "--gpu-scheduler-policy=mutex,binpack"
    )
    assert result.exit_code == 0, result.output
    (opts,) = seen
    assert (opts.node_policy, opts.gpu_policy) == ("spread", "mutex,binpack")
    ours, seen_ours = _scheduler_options(
        monkeypatch, "--node-policy=spread", "--gpu-policy", "mutex,binpack"
    )
    assert ours.exit_code == 0 and seen_ours == seen
    chain = device_policy_option(opts.gpu_policy, "--gpu-policy")
    p = pipeline(_two_gpus(), device_policy=chain)
    assert _gpus_of(p.submit(pod("a", container(gpu=1, gpumem=100)))) == ["GPU-0"]
    # a tenant's annotation still chooses for its own pod only, never the default: it
    # shares no GPU a default-mutex pod holds (HAMi#3038), and leaves the default as it was
    mine = p.submit(pod("c", container(gpu=1, gpumem=100), annotations={POLICY: "binpack"}))
    assert _gpus_of(mine) == ["GPU-1"]
    after = p.submit(pod("d", container(gpu=1, gpumem=100)))
    assert after.filter.failed == {"node-1": "2/2 ExclusiveDeviceAllocateConflict"}


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--gpu-scheduler-policy=spread,nearest"], "'nearest' is not one of"),
        (["--node-scheduler-policy", "fill"], "'fill' is not one of binpack, spread"),
    ],
)
def test_hamis_policy_flag_names_refuse_bad_values_at_start(monkeypatch, args, needle):
    """A bad value under HAMi's flag name stops ``hami scheduler`` as under ours (usage
    error, exit status 2, the token named); HAMi itself ranks an unknown node policy as
    binpack (``pkg/scheduler/policy/node_policy.go``), we refuse it."""
    result, seen = _scheduler_options(monkeypatch, *args)
    assert result.exit_code == 2, result.output
    assert needle in result.output and not seen
