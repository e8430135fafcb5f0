"""``hami simulate`` answers as the webhook does for a container that asks for no GPU
(PROTOCOL.md §6): NVIDIA's container toolkit would hand it every GPU its
``NVIDIA_VISIBLE_DEVICES`` names (CUDA images: ``all``), so in a GPU pod it gets ``none``
and is denied ``all``; a plain pod is HAMi's default (left alone) unless
``nvidia.overwriteEnv`` is on."""

import json

from click.testing import CliRunner

from hami_core.cli import cli

from .helpers import EXAMPLES, write

VAR = "NVIDIA_VISIBLE_DEVICES"


def _pod(name, *containers):
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": list(containers)},
    }


GPU = {
    "name": "gpu",
    "image": "busybox",
    "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "2000"}},
}
CUDA = {"name": "side", "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"}
ALL = [{"name": VAR, "value": "all"}]


def simulate(tmp_path, *extra):
    workloads = write(
        tmp_path / "pods.yaml",
        _pod("sidecar-all", GPU, CUDA | {"env": ALL}),
        _pod("sidecar", GPU, CUDA | {"envFrom": [{"configMapRef": {"name": "all-gpus"}}]}),
        _pod("plain-all", CUDA | {"env": ALL}),
        _pod("plain", CUDA),
    )
    result = CliRunner().invoke(
        cli,
        [
            "simulate",
            "--cluster",
            str(EXAMPLES / "cluster.yaml"),
            str(workloads),
            "-o",
            "json",
            *extra,
        ],
    )
    assert result.exit_code in (0, 1), result.output
    return {p["name"]: p for p in json.loads(result.output)["pods"]}


def test_a_gpu_pods_sidecar_gets_none_and_one_stating_all_is_denied(tmp_path):
    pods = simulate(tmp_path)
    assert pods["sidecar-all"]["status"] == "denied"
    assert "'side'" in pods["sidecar-all"]["message"] and VAR in pods["sidecar-all"]["message"]
    assert pods["sidecar"]["status"] == "placed"
    none = {"name": VAR, "value": "none"}
    ops = pods["sidecar"]["admission"]
    assert {"op": "add", "path": "/spec/containers/1/env/-", "value": none} in ops
    # HAMi's default: a pod asking for no device is not touched
    assert pods["plain-all"]["status"] != "denied" and pods["plain"]["admission"] == []


def test_overwrite_env_reaches_the_plain_pods(tmp_path):
    config = write(tmp_path / "hami.yaml", {"version": "v1", "nvidia": {"overwriteEnv": True}})
    pods = simulate(tmp_path, "--config", str(config))
    assert pods["plain-all"]["status"] == "denied" and VAR in pods["plain-all"]["message"]
    ops = pods["plain"]["admission"]
    assert ops and all(op["path"].startswith("/spec/containers/0/env") for op in ops)
    assert {"name": VAR, "value": "none"} in [
        v for op in ops for v in (op["value"] if isinstance(op["value"], list) else [op["value"]])
    ]
    assert pods["plain"]["status"] != "denied"
