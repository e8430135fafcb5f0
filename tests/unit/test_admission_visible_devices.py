"""A container that asks for no GPU gets none (PROTOCOL.md §6-7): NVIDIA's container
toolkit reads ``NVIDIA_VISIBLE_DEVICES`` from any unprivileged container's env by default
(``accept-nvidia-visible-devices-envvar-when-unprivileged = true``), and NVIDIA's CUDA
images set it to ``all``, so without ``none`` a sidecar, an init container or a plain pod
would see every GPU of the node, unlimited and uncounted.

In a pod the webhook mutates, every container asking for no NVIDIA GPU gets ``none`` and
is denied another value; in any other pod only with HAMi's ``nvidia.overwriteEnv``."""

import copy

import jsonpatch
import pytest

from hami_core.plugin import BackendManager
from hami_core.protocol.config import parse_config
from hami_core.protocol.hamiconfig import translate
from hami_core.webhook import Admission
from tests.builders import container, manager, pod

VAR = "NVIDIA_VISIBLE_DEVICES"
OVERWRITE = {"nvidia": {"overwriteEnv": True}}


def admission(config=None):
    return Admission(manager(config))


def sidecar(*env, name="side", envfrom=None):
    c = container(name)
    c["image"] = "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"  # image env: =all
    if env:
        c["env"] = [dict(e) for e in env]
    if envfrom is not None:
        c["envFrom"] = envfrom
    return c


def gpu():
    return container("gpu", gpu=1, gpumem=3000)


def env_after(p, result, where, index):
    """The env of ``spec.<where>[index]`` after the webhook's patch, as a dict."""
    out = jsonpatch.apply_patch(copy.deepcopy(p), list(result.patch))
    return {e["name"]: e.get("value") for e in out["spec"][where][index].get("env") or []}


def test_a_sidecar_of_a_gpu_pod_gets_none_and_the_gpu_container_keeps_its_own():
    p = pod("p", gpu(), sidecar())
    out = admission().review(p)
    assert out.allowed and out.mutated
    assert env_after(p, out, "containers", 1)[VAR] == "none"
    # the device container's variable is the device plugin's (Allocate sets it)
    assert VAR not in env_after(p, out, "containers", 0)


@pytest.mark.parametrize(
    "entry",
    [
        {"name": VAR, "value": "all"},
        {"name": VAR, "value": "0,1"},
        {"name": VAR, "value": "GPU-8a7c1b2e-0000-0000-0000-000000000000"},
        {"name": VAR, "value": ""},  # "" is runc's behaviour, not none: still not ours
        {"name": VAR, "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}},
    ],
)
def test_a_sidecar_that_states_another_value_is_denied(entry):
    out = admission().review(pod("p", gpu(), sidecar(entry)))
    assert not out.allowed and out.reason == "ProtectedEnv"
    assert "'side'" in out.message and VAR in out.message and "none" in out.message


def test_the_last_entry_of_a_name_wins_in_kubelet_so_every_entry_is_checked():
    entries = ({"name": VAR, "value": "none"}, {"name": VAR, "value": "all"})
    out = admission().review(pod("p", gpu(), sidecar(*entries)))
    assert not out.allowed and out.reason == "ProtectedEnv"


def test_a_sidecar_that_states_none_itself_is_admitted_unchanged():
    p = pod("p", gpu(), sidecar({"name": VAR, "value": "none"}))
    out = admission().review(p)
    assert out.allowed
    assert not [op for op in out.patch if op["path"].startswith("/spec/containers/1")]


def test_a_lowercase_name_is_another_variable_and_is_left_alone():
    p = pod("p", gpu(), sidecar({"name": VAR.lower(), "value": "all"}))
    out = admission().review(p)
    assert out.allowed
    env = env_after(p, out, "containers", 1)
    assert env == {VAR.lower(): "all", VAR: "none"}


def test_envfrom_carrying_it_is_outranked_by_the_env_entry_the_webhook_adds():
    # kubelet: an env entry wins over every envFrom source (core/v1 EnvFromSource)
    p = pod("p", gpu(), sidecar(envfrom=[{"configMapRef": {"name": "all-gpus"}}]))
    out = admission().review(p)
    assert out.allowed
    assert env_after(p, out, "containers", 1)[VAR] == "none"


def test_an_init_container_that_asks_for_no_gpu_gets_none_or_is_denied():
    p = pod("p", gpu(), init=[sidecar(name="setup")])
    out = admission().review(p)
    assert out.allowed
    assert env_after(p, out, "initContainers", 0)[VAR] == "none"
    bad = pod("p", gpu(), init=[sidecar({"name": VAR, "value": "all"}, name="setup")])
    out = admission().review(bad)
    assert not out.allowed and "'setup'" in out.message


def test_a_container_asking_for_another_vendor_gets_nvidia_none():
    ascend = {"name": "npu", "image": "x", "resources": {"limits": {"huawei.com/Ascend910B3": "1"}}}
    p = pod("p", ascend)
    out = admission().review(p)
    assert out.allowed and out.mutated
    assert env_after(p, out, "containers", 0)[VAR] == "none"


def test_by_default_a_pod_asking_for_no_device_is_left_as_hami_leaves_it():
    p = pod("p", sidecar({"name": VAR, "value": "all"}))
    out = admission().review(p)
    assert out.allowed and out.patch == ()


def test_overwrite_env_gives_none_to_every_container_of_a_plain_pod():
    p = pod("p", sidecar(), sidecar(name="two"), init=[sidecar(name="setup")])
    out = admission(OVERWRITE).review(p)
    assert out.allowed and not out.mutated
    assert env_after(p, out, "containers", 0)[VAR] == "none"
    assert env_after(p, out, "containers", 1)[VAR] == "none"
    assert env_after(p, out, "initContainers", 0)[VAR] == "none"
    # nothing else: the pod stays kube's scheduler's
    assert all(op["path"].endswith(("/env", "/env/-")) for op in out.patch)


@pytest.mark.parametrize(
    "how",
    ["own value", "other scheduler", "ignore label"],
)
def test_overwrite_env_holds_whatever_the_pods_author_writes(how):
    env = [{"name": VAR, "value": "all"}] if how == "own value" else []
    p = pod("p", sidecar(*env), scheduler_name="other" if how == "other scheduler" else None)
    if how == "ignore label":
        p["metadata"]["labels"] = {"hami.io/webhook": "ignore"}
    out = admission(OVERWRITE).review(p)
    if how == "own value":
        assert not out.allowed and out.reason == "ProtectedEnv"
    else:
        assert out.allowed and env_after(p, out, "containers", 0)[VAR] == "none"


def test_overwrite_env_leaves_a_gpu_container_of_another_scheduler_alone():
    p = pod("p", gpu(), sidecar(), scheduler_name="other")
    out = admission(OVERWRITE).review(p)
    assert out.allowed
    assert VAR not in env_after(p, out, "containers", 0)
    assert env_after(p, out, "containers", 1)[VAR] == "none"


def test_an_administrators_ignored_namespace_is_left_alone():
    p = pod("p", sidecar({"name": VAR, "value": "all"}))
    out = admission(OVERWRITE).review(p, namespace_labels={"hami.io/webhook": "ignore"})
    assert out.allowed and out.patch == ()


def test_hamis_device_config_overwrite_env_is_read():
    base = BackendManager.from_entry_points(disabled=[])
    translated, warnings = translate({"nvidia": {"overwriteEnv": True}}, base.infos)
    assert not [w for w in warnings if "overwriteEnv" in w]
    m = base.with_config(parse_config(translated, backends=base.infos))
    assert m.vendor_config("nvidia").options["overwriteEnv"] is True
    p = pod("p", sidecar())
    assert env_after(p, Admission(m).review(p), "containers", 0)[VAR] == "none"


def test_overwrite_env_must_be_a_boolean():
    from hami_core.errors import ConfigError

    with pytest.raises(ConfigError, match="nvidia.overwriteEnv"):
        manager({"nvidia": {"overwriteEnv": "yes"}})


# Runtimes that read a device-choosing variable from any container's env but document no
# value for none (Ascend Docker Runtime's prestart hook, Moore Threads' container toolkit):
# unset hands none, so the webhook sets nothing and denies any value.
@pytest.mark.parametrize(
    "variable, value",
    [("ASCEND_VISIBLE_DEVICES", "0-7"), ("MTHREADS_VISIBLE_DEVICES", "all")],
)
def test_a_sidecar_naming_another_vendors_devices_is_denied(variable, value):
    out = admission().review(pod("p", gpu(), sidecar({"name": variable, "value": value})))
    assert not out.allowed and out.reason == "ProtectedEnv"
    assert variable in out.message and "may not set it" in out.message
    # a pod the webhook does not mutate keeps HAMi's behaviour (its runtime's own config)
    assert admission().review(pod("q", sidecar({"name": variable, "value": value}))).allowed


def test_no_value_is_invented_for_a_runtime_without_one():
    npu = {"name": "npu", "image": "x", "resources": {"limits": {"huawei.com/Ascend910B3": "1"}}}
    p = pod("p", npu, sidecar())
    out = admission().review(p)
    assert out.allowed
    for i in (0, 1):
        env = env_after(p, out, "containers", i)
        assert "ASCEND_VISIBLE_DEVICES" not in env and "MTHREADS_VISIBLE_DEVICES" not in env
    assert env_after(p, out, "containers", 1)[VAR] == "none"


def _debugged(p, *ephemeral, legacy=False):
    """``(old, new)`` of the ``pods/ephemeralcontainers`` UPDATE that adds ``ephemeral``
    (the Pod from Kubernetes 1.22, an ``EphemeralContainers`` object on 1.16-1.21)."""
    old = copy.deepcopy(p)
    if legacy:
        meta = p["metadata"]
        old = {"kind": "EphemeralContainers", "metadata": meta, "ephemeralContainers": []}
        return old, {**old, "ephemeralContainers": list(ephemeral)}
    new = copy.deepcopy(p)
    new["spec"]["ephemeralContainers"] = list(ephemeral)
    return old, new


def _ours(p):
    """``p`` as stored after the webhook mutated it."""
    out = admission().review(p)
    assert out.allowed
    return jsonpatch.apply_patch(copy.deepcopy(p), list(out.patch))


def test_kubectl_debug_with_a_cuda_image_gets_none_in_a_pod_of_ours():
    old, new = _debugged(_ours(pod("p", gpu())), sidecar(name="debugger"))
    out = admission().review_update(old, new)
    assert out.allowed
    stored = jsonpatch.apply_patch(copy.deepcopy(new), list(out.patch))
    env = stored["spec"]["ephemeralContainers"][0]["env"]
    assert env == [{"name": VAR, "value": "none"}]
    bad = sidecar({"name": VAR, "value": "all"}, name="debugger")
    out = admission().review_update(*_debugged(_ours(pod("p", gpu())), bad))
    assert not out.allowed and "'debugger'" in out.message


def test_an_ephemeral_container_added_earlier_is_not_patched_again():
    first = sidecar({"name": VAR, "value": "none"}, name="one")
    old, new = _debugged(_ours(pod("p", gpu())), first)
    old = copy.deepcopy(new)
    new["spec"]["ephemeralContainers"].append(sidecar(name="two"))
    out = admission().review_update(old, new)
    assert [op["path"] for op in out.patch] == [
        "/spec/ephemeralContainers/1/env",
        "/spec/ephemeralContainers/1/env/-",
    ]


@pytest.mark.parametrize("legacy", [False, True])
def test_an_ephemeral_container_elsewhere_follows_overwrite_env(legacy):
    plain = pod("p", sidecar())
    old, new = _debugged(plain, sidecar(name="debugger"), legacy=legacy)
    assert admission().review_update(old, new).patch == ()  # HAMi's default
    out = admission(OVERWRITE).review_update(old, new)
    stored = jsonpatch.apply_patch(copy.deepcopy(new), list(out.patch))
    listing = stored["ephemeralContainers"] if legacy else stored["spec"]["ephemeralContainers"]
    assert listing[0]["env"] == [{"name": VAR, "value": "none"}]


@pytest.mark.parametrize("env", [True, "x", [1], [{"name": ["NVIDIA_VISIBLE_DEVICES"]}]])
def test_a_malformed_ephemeral_container_is_denied_naming_it(env):
    old, new = _debugged(_ours(pod("p", gpu())), {"name": "debugger", "image": "x", "env": env})
    out = admission().review_update(old, new)
    assert not out.allowed and out.reason == "InvalidRequest"
    assert "spec/ephemeralContainers/0" in out.message
