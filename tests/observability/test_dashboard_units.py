"""The dashboards' compute panels are a share of each device for every vendor.

The core gauges carry the device list's value, which is percent only for vendors that
count compute in percent (PROTOCOL.md §9: AMD's are compute units, ``devcore`` = the
GPU's CU count; Biren and Vastai account none). A panel that plotted the raw gauge with
Grafana's percent unit showed 76 % for an AMD container holding a quarter of a 304-CU
MI300X. Each compute panel's own expression, as the chart ships it, is evaluated by
Prometheus's engine (``promtool test rules``) on series of an NVIDIA GPU, an AMD GPU and a
Biren GPU together.
"""

from __future__ import annotations

import subprocess

import pytest
import yaml

from tests.prometheus import PrometheusUnavailable, dashboard_queries, prometheus_bin, substitute

PANELS = {
    "overview": "hami-cluster-overview: GPU compute allocated %",
    "per_gpu": "hami-node-gpus: Compute allocated per GPU",
    "per_container": "hami-pod-usage: Compute allocated per container",
}

# (device_uuid, device_type, limit, allocated): NVIDIA in percent, AMD in CUs (76 of 304
# is 25 %), Biren with no compute accounted (limit 0: no share to show).
DEVICES = [
    ("GPU-nv", "NVIDIA", 100, 30),
    ("GPU-amd", "AMD", 304, 76),
    ("GPU-br", "Biren", 0, 0),
]


def _series(name: str, labels: dict[str, str], value: float) -> dict[str, str]:
    body = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{name}{{{body}}}", "values": f"{value}x5"}


def _expr(panel: str) -> str:
    wanted = PANELS[panel]
    exprs = [e for where, e in dashboard_queries() if where.startswith(wanted + " [")]
    assert len(exprs) == 1, f"{wanted}: {len(exprs)} targets"
    return substitute(exprs[0], {"node": ".*", "namespace": ".*"})


def _input_series() -> list[dict[str, str]]:
    out = []
    for i, (uuid, kind, limit, allocated) in enumerate(DEVICES):
        dev = {
            "node": "n1",
            "device_uuid": uuid,
            "device_index": str(i),
            "device_type": kind,
        }
        out.append(_series("hami_gpu_core_limit_ratio", dev, limit))
        out.append(_series("hami_gpu_core_allocated_ratio", dev, allocated))
        if allocated:
            pod = {
                "namespace": "team",
                "node": "n1",
                "pod": f"pod-{kind.lower()}",
                "container_index": "0",
                "device_uuid": uuid,
            }
            out.append(_series("hami_vgpu_core_allocated_ratio", pod, allocated))
    return out


@pytest.fixture(scope="module")
def promtool() -> str:
    try:
        return str(prometheus_bin() / "promtool")
    except PrometheusUnavailable as exc:
        pytest.fail(str(exc), pytrace=False)


def _check(promtool: str, tmp_path, expr: str, samples: list[dict[str, object]]) -> None:
    spec = {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": _input_series(),
                "promql_expr_test": [{"expr": expr, "eval_time": "2m", "exp_samples": samples}],
            }
        ],
    }
    path = tmp_path / "dashboard-units.test.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    proc = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, f"{expr}\n{proc.stdout}{proc.stderr}"


def test_cluster_compute_is_the_mean_share_of_the_devices_that_account_compute(promtool, tmp_path):
    # (30 % + 25 %) / 2, in Prometheus's float order; a sum of raw gauges gives 26.2
    mean = 100 * ((30 / 100 + 76 / 304) / 2)
    assert mean == pytest.approx(27.5)
    _check(promtool, tmp_path, _expr("overview"), [{"labels": "{}", "value": mean}])


def test_compute_per_gpu_is_a_percentage_in_every_vendors_unit(promtool, tmp_path):
    samples = [
        {
            "labels": f'{{node="n1",device_uuid="{uuid}",device_index="{i}",device_type="{kind}"}}',
            "value": 100 * allocated / limit,
        }
        for i, (uuid, kind, limit, allocated) in enumerate(DEVICES)
        if limit
    ]
    assert [s["value"] for s in samples] == [30.0, 25.0]
    _check(promtool, tmp_path, _expr("per_gpu"), samples)


def test_compute_per_container_is_its_share_of_the_device(promtool, tmp_path):
    samples = [
        {
            "labels": (
                f'{{namespace="team",node="n1",pod="pod-{kind.lower()}",'
                f'container_index="0",device_uuid="{uuid}"}}'
            ),
            "value": 100 * allocated / limit,
        }
        for uuid, kind, limit, allocated in DEVICES
        if allocated
    ]
    _check(promtool, tmp_path, _expr("per_container"), samples)


def test_the_check_fails_on_the_raw_gauge(promtool, tmp_path):
    """The check can fail: the AMD container's raw 76 CUs are not 25 %."""
    with pytest.raises(AssertionError):
        _check(
            promtool,
            tmp_path,
            'hami_vgpu_core_allocated_ratio{device_uuid="GPU-amd"}',
            [
                {
                    "labels": (
                        'hami_vgpu_core_allocated_ratio{namespace="team",node="n1",'
                        'pod="pod-amd",container_index="0",device_uuid="GPU-amd"}'
                    ),
                    "value": 25,
                }
            ],
        )
