"""The chart's MPS parts (issue #17 item 3): the node's MPS control daemon as a
DaemonSet on MPS nodes (off by default), and the pipe and shm directories wired to the
device plugin's configuration, through real Helm (helm-python-sdk)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from hami_core.plugin import BackendManager
from hami_core.protocol.config import parse_config
from tests.chart.helm import CHART, example_values, find, render

helm_python = pytest.importorskip("helm_python", reason="pip install -e '.[dev]' (helm-python-sdk)")

DAEMON = "hami-device-plugin-mps-control"


def _daemon(objs: list[dict[str, Any]]) -> dict[str, Any] | None:
    hits = [o for o in objs if o["kind"] == "DaemonSet" and o["metadata"]["name"] == DAEMON]
    return hits[0] if hits else None


def _nvidia_options(objs: list[dict[str, Any]]) -> dict[str, Any]:
    data = yaml.safe_load(find(objs, "ConfigMap", "hami-config")["data"]["hami.yaml"])
    manager = BackendManager.from_entry_points()
    config = parse_config(data, backends=manager.infos)  # accepted by hami itself
    return dict(config.vendor("nvidia").options)


def test_off_by_default_with_nvidias_default_directories():
    objs = render({})
    assert _daemon(objs) is None
    opts = _nvidia_options(objs)
    assert (opts["mpsPipeDirectory"], opts["mpsShmDirectory"]) == ("/tmp/nvidia-mps", "")


def test_on_it_runs_the_control_daemon_on_mps_nodes_with_the_plugins_directories():
    values = example_values(CHART / "examples" / "mps.yaml")
    objs = render(values)
    ds = _daemon(objs)
    assert ds is not None
    spec = ds["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"hami.io/mps": "on"}
    assert spec["hostPID"] is True and spec["runtimeClassName"] == "nvidia"
    (c,) = spec["containers"]
    script = c["command"][-1]
    assert "nvidia-smi -c EXCLUSIVE_PROCESS" in script
    assert script.strip().endswith("exec nvidia-cuda-mps-control -f")
    assert "echo quit | nvidia-cuda-mps-control" in c["lifecycle"]["preStop"]["exec"]["command"][-1]
    env = {e["name"]: e["value"] for e in c["env"]}
    assert env["CUDA_MPS_PIPE_DIRECTORY"] == "/run/nvidia-mps"
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    volumes = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"]}
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    assert volumes["mps-pipe"] == mounts["mps-pipe"] == "/run/nvidia-mps"
    assert (volumes["mps-shm"], mounts["mps-shm"]) == ("/run/nvidia-mps-shm", "/dev/shm")
    # the device plugin mounts the same host directories into the MPS clients
    opts = _nvidia_options(objs)
    assert (opts["mpsPipeDirectory"], opts["mpsShmDirectory"]) == (
        "/run/nvidia-mps",
        "/run/nvidia-mps-shm",
    )


def test_exclusive_process_and_shm_are_optional():
    objs = render({"devicePlugin": {"mpsDaemon": {"enabled": True, "exclusiveProcess": False}}})
    ds = _daemon(objs)
    assert ds is not None
    spec = ds["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    assert "nvidia-smi" not in c["command"][-1]
    assert "mps-shm" not in {v["name"] for v in spec["volumes"]}
    assert "runtimeClassName" not in spec


@pytest.mark.parametrize(
    "values",
    [
        {"devicePlugin": {"enabled": False, "mpsDaemon": {"enabled": True}}},
        {
            "devicePlugin": {"mpsDaemon": {"enabled": True}},
            "devices": {"nvidia": {"enabled": False, "customresources": ["nvidia.com/gpu"]}},
        },
    ],
)
def test_no_daemon_without_the_nvidia_device_plugin(values):
    assert _daemon(render(values)) is None


@pytest.mark.parametrize(
    ("bad", "names"),
    [
        ("devicePlugin:\n  mpsPipeDirectory: tmp/mps\n", "/devicePlugin/mpsPipeDirectory"),
        ("devicePlugin:\n  mpsShmDirectory: shm\n", "/devicePlugin/mpsShmDirectory"),
        ("devicePlugin:\n  mpsDaemon:\n    enabeld: true\n", "enabeld"),
        (
            "devicePlugin:\n  mpsDaemon:\n    logDirectory: logs\n",
            "/devicePlugin/mpsDaemon/logDirectory",
        ),
    ],
)
def test_the_schema_names_a_bad_mps_value(bad: str, names: str):
    chart = helm_python.Chart.load(CHART)
    with pytest.raises(helm_python.HelmValuesError) as info:
        chart.validate_schema(yaml.safe_load(bad))
    assert names in str(info.value)


def _plugin(objs: list[dict[str, Any]]) -> dict[str, Any]:
    (ds,) = [
        o
        for o in objs
        if o["kind"] == "DaemonSet" and o["metadata"]["name"] == "hami-device-plugin-nvidia"
    ]
    return ds


def test_per_container_isolation_wires_the_device_plugin_and_refuses_the_node_daemon():
    """mpsIsolation: per-container (issue 24 item 15): the device plugin runs the daemons,
    so it gets the pipe root, the host PID namespace and the driver's compute binaries;
    the node daemon (compute mode EXCLUSIVE_PROCESS, one server per GPU) cannot run too."""
    objs = render({"devicePlugin": {"mpsIsolation": "per-container"}})
    assert _nvidia_options(objs)["mpsIsolation"] == "per-container"
    spec = _plugin(objs)["spec"]["template"]["spec"]
    assert spec["hostPID"] is True
    (c,) = [c for c in spec["containers"] if any(e["name"] == "NODE_NAME" for e in c["env"])]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["NVIDIA_DRIVER_CAPABILITIES"] == "compute,utility"
    volumes = {v["name"]: v.get("hostPath", {}).get("path") for v in spec["volumes"]}
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    assert volumes["mps-pipe"] == mounts["mps-pipe"] == "/tmp/nvidia-mps"
    with pytest.raises(Exception, match="mpsDaemon.enabled needs devicePlugin.mpsIsolation"):
        render({"devicePlugin": {"mpsIsolation": "per-container", "mpsDaemon": {"enabled": True}}})


def test_shared_isolation_leaves_the_device_plugin_as_it_was():
    objs = render({})
    assert _nvidia_options(objs)["mpsIsolation"] == "shared"
    spec = _plugin(objs)["spec"]["template"]["spec"]
    assert "hostPID" not in spec and "mps-pipe" not in {v["name"] for v in spec["volumes"]}


def test_the_schema_names_a_bad_isolation():
    chart = helm_python.Chart.load(CHART)
    with pytest.raises(helm_python.HelmValuesError) as info:
        chart.validate_schema({"devicePlugin": {"mpsIsolation": "per-pod"}})
    assert "/devicePlugin/mpsIsolation" in str(info.value)
