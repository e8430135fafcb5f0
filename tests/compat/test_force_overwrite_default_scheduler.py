"""HAMi's ``--force-overwrite-default-scheduler`` (``cmd/scheduler/main.go``, default true):
when false, the webhook leaves a pod whose ``schedulerName`` is ``default-scheduler``
alone (HAMi ``pkg/scheduler/webhook.go`` ``Handle``; ``webhook_test.go``
``TestSchedulerNameEmptyNoOverwrite``, ``TestNonGPUPodAllowedAdmission``). Ours is
``forceOverwriteDefaultScheduler`` in the configuration, overridden by the flag on
``hami webhook`` and ``hami simulate`` (also in Go's spelling ``=false``), and the two
commands decide alike (``takes_scheduler_name``). kube-apiserver names
``default-scheduler`` on every pod that names none before the webhook sees it (the
recorded AdmissionReview of tests/fixtures/admission/ shows it), so with false only pods
naming our scheduler get devices."""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path

import jsonpatch
import pytest
import yaml
from click.testing import CliRunner

from hami_core.cli import cli, main
from hami_core.cluster import kube
from hami_core.errors import HamiError
from hami_core.servers import webhook_main
from hami_core.servers.webhook import create_webhook_app
from hami_core.webhook import Admission
from tests.builders import container, gpu, manager, node, pipeline, pod

FIXTURE = Path(__file__).parent.parent / "fixtures" / "admission" / "v1-pod-create.json"
NODE = node("n1", [gpu(f"GPU-{i}", index=i) for i in range(4)])


def review(scheduler_name: str | None) -> dict:
    """The AdmissionReview kube-apiserver v1.20.2 sent, asking one GPU, with
    ``schedulerName`` replaced (None: removed)."""
    body = json.loads(FIXTURE.read_text())
    spec = body["request"]["object"]["spec"]
    spec["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    if scheduler_name is None:
        spec.pop("schedulerName", None)
    else:
        spec["schedulerName"] = scheduler_name
    return body


#: schedulerName -> whether the webhook takes the pod, per forceOverwriteDefaultScheduler
#: (HAMi's condition in ``Handle``).
TAKES = {
    None: (True, True),
    "": (True, True),
    "hami-scheduler": (True, True),
    "default-scheduler": (True, False),
    "volcano": (False, False),
}


@pytest.mark.parametrize("force", [True, False])
@pytest.mark.parametrize("name", list(TAKES), ids=repr)
def test_the_webhook_takes_a_pod_by_its_scheduler_name(force, name):
    app = create_webhook_app(Admission(manager({"forceOverwriteDefaultScheduler": force})))
    body = review(name)
    resp = app.test_client().post("/webhook", json=body).get_json()["response"]
    assert resp["allowed"] is True
    taken = TAKES[name][0 if force else 1]
    assert ("patch" in resp) is taken, resp
    if taken:  # our scheduler and the backend's defaults
        patched = jsonpatch.apply_patch(
            body["request"]["object"], json.loads(base64.b64decode(resp["patch"]))
        )
        assert patched["spec"]["schedulerName"] == "hami-scheduler"
        assert patched["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpucores"]


def test_the_recorded_pod_names_default_scheduler():
    """Why the flag matters: the API server defaulted the fixture's pod, which names no
    scheduler in its manifest, to ``default-scheduler``."""
    body = json.loads(FIXTURE.read_text())
    assert body["request"]["object"]["spec"]["schedulerName"] == "default-scheduler"


def test_left_alone_is_no_way_around_the_trust_checks():
    """A tenant naming ``default-scheduler`` under false is still refused what no pod
    may carry: scheduler-owned annotations (the trust checks come before the
    schedulerName decision, PROTOCOL.md §6)."""
    body = review("default-scheduler")
    meta = body["request"]["object"]["metadata"]
    meta["annotations"] = {"hami.io/vgpu-devices-allocated": "GPU-a,NVIDIA,16384,100:;"}
    app = create_webhook_app(Admission(manager({"forceOverwriteDefaultScheduler": False})))
    resp = app.test_client().post("/webhook", json=body).get_json()["response"]
    assert resp["allowed"] is False
    assert "hami.io/vgpu-devices-allocated" in resp["status"]["message"]


@pytest.mark.parametrize("force", [True, False])
def test_simulate_places_by_the_same_rule(force):
    p = pipeline(NODE, config={"forceOverwriteDefaultScheduler": force})
    unnamed = p.submit(pod("unnamed", container(gpu=1, gpumem=1000)))
    default = p.submit(pod("default", container(gpu=1), scheduler_name="default-scheduler"))
    ours = p.submit(pod("ours", container(gpu=1), scheduler_name="hami-scheduler"))
    other = p.submit(pod("other", container(gpu=1), scheduler_name="volcano"))
    assert (ours.left_to, ours.node) == ("", "n1")
    assert (other.left_to, other.node) == ("volcano", None)
    for outcome in (unnamed, default):
        # kube-apiserver names default-scheduler on the pod that names none
        expected = ("", "n1") if force else ("default-scheduler", None)
        assert (outcome.left_to, outcome.node) == expected, outcome


# -- the flags of hami simulate and hami webhook ---------------------------------------


def simulate(*args: str, config: dict | None = None, tmp_path: Path | None = None):
    argv = ["simulate", "-o", "json", *args]
    if config is not None:
        assert tmp_path is not None
        path = tmp_path / "hami.yaml"
        path.write_text(yaml.safe_dump({"version": "v1", **config}))
        argv += ["--config", str(path)]
    return CliRunner().invoke(cli, argv)


def left(result) -> int:
    assert result.exit_code == 0, result.output
    return json.loads(result.output)["summary"]["otherScheduler"]


@pytest.mark.parametrize(
    ("args", "config", "left_out"),
    [
        ((), None, 0),
        (("--force-overwrite-default-scheduler=false",), None, 20),  # HAMi's spelling
        (("--force-overwrite-default-scheduler=0",), None, 20),
        (("--no-force-overwrite-default-scheduler",), None, 20),
        (("--force-overwrite-default-scheduler",), None, 0),
        (("--force-overwrite-default-scheduler=true",), None, 0),
        ((), {"forceOverwriteDefaultScheduler": False}, 20),
        # the flag overrides the file
        (
            ("--force-overwrite-default-scheduler=True",),
            {"forceOverwriteDefaultScheduler": False},
            0,
        ),
        (("--no-force-overwrite-default-scheduler",), {"forceOverwriteDefaultScheduler": True}, 20),
    ],
)
def test_hami_simulate_flag_and_config(tmp_path, args, config, left_out):
    """The bundled workloads name no scheduler: all 20 are default-scheduler's under
    false."""
    assert left(simulate(*args, config=config, tmp_path=tmp_path)) == left_out


def test_a_bad_value_is_a_usage_error_naming_the_flag(tmp_path):
    bad = simulate("--force-overwrite-default-scheduler=maybe")
    assert bad.exit_code == 2
    assert "--force-overwrite-default-scheduler" in bad.output and "'maybe'" in bad.output
    typed = simulate(config={"forceOverwriteDefaultScheduler": "no"}, tmp_path=tmp_path)
    assert typed.exit_code == 2
    assert "forceOverwriteDefaultScheduler: expected bool, got 'no'" in typed.output


class Reached(HamiError):
    """Raised where the webhook would first contact the API server."""


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ((), True),
        (("--force-overwrite-default-scheduler=false",), False),
        (("--no-force-overwrite-default-scheduler",), False),
        (("--force-overwrite-default-scheduler",), True),
    ],
)
def test_hami_webhook_reads_the_flag(monkeypatch, capsys, flags, expected):
    """``hami webhook`` through ``cli.main``: the configuration its Admission serves
    under, up to the API server."""
    seen = []
    real = webhook_main.with_overrides

    def spy(config, **overrides):
        out = real(config, **overrides)
        seen.append(out.force_overwrite_default_scheduler)
        return out

    def reached(*_, **__):
        raise Reached("reached the API server")

    monkeypatch.setattr(webhook_main, "with_overrides", spy)
    for module in (kube, webhook_main):
        monkeypatch.setattr(module, "make_api_client", reached)
    argv = ["hami", "webhook", "--cert-mode", "files", "--tls-cert-file", "c"]
    monkeypatch.setattr(sys, "argv", [*argv, "--tls-private-key-file", "k", *flags])
    with pytest.raises(SystemExit):
        main()
    assert "reached the API server" in capsys.readouterr().err
    assert seen == [expected]
