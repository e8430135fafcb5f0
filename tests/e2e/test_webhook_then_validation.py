"""kube-apiserver runs the mutating webhook before it validates: what ``hami simulate``
models (``Pipeline.submit``, issue 24 item 11), held against the real 1.20 server with
``hami webhook`` registered. A pod asking ``nvidia.com/gpu`` in ``requests`` only is
given its limit by the webhook and created; one asking another vendor's extended
resource that way is refused by the API server, with the message the simulation gives."""

from __future__ import annotations

import json
import uuid

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from hami_core.simulate.report import build_report
from tests.e2e import test_webhook as wh
from tests.simulate.helpers import run as simulate_run

CLUSTER = {"nodes": [{"name": "n1", "gpus": [{"model": "NVIDIA A10", "memoryMiB": 24000}]}]}


@pytest.fixture()
def hooks(control_plane):
    suffix = uuid.uuid4().hex[:6]
    h = wh._Webhooks(control_plane, suffix)
    try:
        yield h
    finally:
        h.stop()
        core = client.CoreV1Api(control_plane.api_client())
        labelled = core.list_namespace(label_selector=wh.SELECT).items
        control_plane.delete_pods(ns.metadata.name for ns in labelled)


def requests_only(name: str, resource: str) -> dict:
    pod = wh._gpu_pod(name)
    pod["spec"]["containers"][0]["resources"] = {"requests": {resource: "1"}}
    return pod


def test_the_webhook_mutates_before_the_api_server_validates(hooks, control_plane):
    port = hooks.start("a")
    url = f"https://127.0.0.1:{port}/webhook"
    hooks.adm.create_mutating_webhook_configuration(
        wh._config(hooks.config_name, [wh._webhook("pods.hami.io", url, hooks.suffix, ["v1"])])
    )
    hooks.wait_ready("a")
    ns = wh._namespace(hooks.core, f"wv-{hooks.suffix}", hooks.suffix)

    gpu, fpga = requests_only("gpu", "nvidia.com/gpu"), requests_only("fpga", "example.com/fpga")
    report = build_report(simulate_run(CLUSTER, [gpu, fpga]))
    simulated = {p["status"]: p for p in report["pods"]}

    created = wh._create(hooks.core, ns, gpu)
    assert created.spec.containers[0].resources.limits["nvidia.com/gpu"] == "1"
    assert simulated["placed"]["name"] == "gpu"

    with pytest.raises(ApiException) as exc:
        wh._create(hooks.core, ns, fpga)
    message = json.loads(exc.value.body)["message"]
    assert simulated["denied"]["name"] == "fpga"
    assert simulated["denied"]["deniedBy"] == "kube-apiserver"
    assert message == simulated["denied"]["message"]
