"""Values a configuration's types admit but no process can use: NaN and infinity (YAML's
``.nan`` / ``.inf``), list items of the wrong type, resource names Kubernetes rejects.
Each must stop the process at start with the key named, never pass to fail later (a
``.inf`` ``deviceMemoryScaling`` made ``hami simulate`` end in an OverflowError
traceback; ``ignoredXids: [a]`` would have failed in the device plugin's health thread)."""

import re

import attrs
import pytest
import yaml

from hami_core.errors import ConfigError
from hami_core.protocol import parse_config
from hami_core.protocol.nodeconfig import parse_node_overrides
from tests.unit import test_config

# The NVIDIA-like backend of test_config, with options of each type checked here.
INFO = attrs.evolve(
    test_config.INFO,
    option_defaults={"ignoredXids": [13, 31], "healthRecoverySeconds": 30.0, "paths": []},
)
BACKENDS = {"nvidia": INFO}


def doc(text: str) -> object:
    return yaml.safe_load(text)


@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf"])
@pytest.mark.parametrize(
    ("template", "key"),
    [
        ("nodeLockExpirySeconds: {}", "nodeLockExpirySeconds"),
        ("nvidia: {{deviceMemoryScaling: {}}}", "nvidia.deviceMemoryScaling"),
        ("nvidia: {{deviceCoreScaling: {}}}", "nvidia.deviceCoreScaling"),
        ("nvidia: {{healthRecoverySeconds: {}}}", "nvidia.healthRecoverySeconds"),
    ],
)
def test_non_finite_numbers_are_refused(template, key, value):
    with pytest.raises(ConfigError, match=re.escape(key) + ": .*finite"):
        parse_config(doc("version: v1\n" + template.format(value)), backends=BACKENDS)


@pytest.mark.parametrize("value", ["[a]", "[1, x]", "[1.5]", "[true]", "[[13]]"])
def test_list_items_take_the_defaults_item_type(value):
    with pytest.raises(ConfigError, match=r"nvidia\.ignoredXids\[\d\]: expected int"):
        parse_config(doc(f"version: v1\nnvidia: {{ignoredXids: {value}}}\n"), backends=BACKENDS)


def test_good_lists_and_numbers_still_load():
    cfg = parse_config(
        doc(
            "version: v1\nnodeLockExpirySeconds: 1.5\n"
            "nvidia: {ignoredXids: [43], deviceMemoryScaling: 2, paths: [x, 1]}\n"
        ),
        backends=BACKENDS,
    )
    assert cfg.node_lock_expiry_s == 1.5
    v = cfg.vendor("nvidia")
    # an empty default list says nothing of its items: any is kept
    assert (v.options["ignoredXids"], v.memory_scaling, v.options["paths"]) == ([43], 2.0, ["x", 1])


@pytest.mark.parametrize(
    "name",
    [
        "bad name!",  # not a qualified name
        "gpu",  # no domain: kube-apiserver refuses it as an extended resource
        "kubernetes.io/gpu",  # the kubernetes.io domain is Kubernetes' own
        "requests.k8s.io/gpu",
        "Example.com/gpu",  # the prefix is a DNS subdomain: lower case
        "example.com/" + "g" * 64,  # the name part is at most 63 characters
        "example.com/-gpu",
        "",  # only for the keys the backend's own default cannot be told from: see below
    ],
)
def test_resource_names_must_be_extended_resource_names(name):
    if name == "":
        # "" is the documented "backend's own default" (VendorConfig): accepted
        parse_config({"version": "v1", "nvidia": {"resourceCountName": ""}}, backends=BACKENDS)
        return
    with pytest.raises(ConfigError, match=r"nvidia\.resourceMemoryName: .*extended resource"):
        parse_config({"version": "v1", "nvidia": {"resourceMemoryName": name}}, backends=BACKENDS)


def test_good_resource_names_load():
    cfg = parse_config(
        {"version": "v1", "nvidia": {"resourceCountName": "example.com/vgpu_2-x.y"}},
        backends=BACKENDS,
    )
    assert cfg.vendor("nvidia").resource_count_name == "example.com/vgpu_2-x.y"


@pytest.mark.parametrize("key", ["devicememoryscaling", "devicecorescaling"])
@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_node_overrides_refuse_non_finite_scaling(key, value):
    with pytest.raises(ConfigError, match=rf"nodeconfig\[n1\]\.{key}: .*finite"):
        parse_node_overrides({"nodeconfig": [{"name": "n1", key: value}]}, node="n1")


@pytest.mark.parametrize(
    ("key", "value", "allowed"),
    [
        ("deviceSplitCount", 5000, "1..1000"),
        ("defaultMemory", 2**31, "0..2147483647 MiB"),
        ("defaultGPUNum", 2**31, "1..2147483647"),
    ],
)
def test_counts_past_what_a_node_can_list_are_refused_with_the_range(key, value, allowed):
    with pytest.raises(
        ConfigError, match=rf"nvidia\.{key}: value {value} is out of range \({allowed}\)"
    ):
        parse_config({"version": "v1", "nvidia": {key: value}}, backends=BACKENDS)


def test_node_overrides_refuse_a_split_count_past_the_limit():
    with pytest.raises(
        ConfigError, match=r"nodeconfig\[n1\]\.devicesplitcount: must be between 1 and 1000"
    ):
        parse_node_overrides({"nodeconfig": [{"name": "n1", "devicesplitcount": 1001}]}, node="n1")


def test_node_overrides_file_errors_are_one_line_naming_the_file(tmp_path):
    from hami_core.protocol.nodeconfig import load_node_overrides

    bad = tmp_path / "node.yaml"
    bad.write_text("{bad")
    with pytest.raises(ConfigError) as exc:
        load_node_overrides(bad, node="n1")
    assert "\n" not in str(exc.value)
    # libyaml marks the end of the stream: the line after the last one
    assert str(exc.value).startswith(f"{bad}: invalid YAML at line 2, column 1:")
    with pytest.raises(
        ConfigError, match=r"missing\.yaml: cannot read: No such file or directory$"
    ):
        load_node_overrides(tmp_path / "missing.yaml", node="n1")
