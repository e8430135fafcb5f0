"""The dashboards' compute panels are a share of each device for every vendor.

The core gauges carry the device list's value, which is percent only for vendors that
count compute in percent (PROTOCOL.md §9: AMD's are compute units, ``devcore`` = the
GPU's CU count; AWS Neuron's are NeuronCore bit masks, 3 = cores 0 and 1; Biren and
Vastai account none). A panel that plotted the raw gauge showed 76 % for an AMD container
holding a quarter of a 304-CU MI300X, and allocated ÷ limit showed 33 % for one of an
Inferentia2 device's two NeuronCores (mask 1 of mask 3). The panels read the share gauges
(``hami_gpu_core_allocated_share``, ``hami_vgpu_core_allocated_share``) and the NeuronCore
counts (``hami_gpu_core_{allocated,limit}_units``).

Each panel's own expression, as the chart ships it, is evaluated by Prometheus's engine
(``promtool test rules``) on the series the scheduler's /metrics writes for the
all-vendors example cluster (examples/cluster-all-vendors.yaml) after its workloads are
placed: one pod on every vendor, NVIDIA, AMD, AWS Neuron, Biren and the others together.
"""

from __future__ import annotations

import math
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from hami_core.servers.metrics import SchedulerMetrics
from hami_core.simulate.runner import run_files
from tests.prometheus import PrometheusUnavailable, dashboard_queries, prometheus_bin, substitute

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

PANELS = {
    "overview": "hami-cluster-overview: GPU compute allocated %",
    "per_gpu": "hami-node-gpus: Compute allocated per GPU",
    "per_container": "hami-pod-usage: Compute allocated per container",
    "neuroncores": "hami-cluster-overview: NeuronCores allocated (AWS Neuron)",
}

NEURON = "AWSNeuron"
NO_COMPUTE = {"Biren", "Vastai"}  # count-only vendors (DeviceTypeInfo.cores_unit "none")

Sample = tuple[str, dict[str, str], float]


@pytest.fixture(scope="module")
def scraped() -> dict[str, Any]:
    """The scheduler's /metrics text for the placed all-vendors cluster, parsed, and each
    device's vendor (``device_uuid -> vendor``) from the scheduler's own inventory."""
    sim = run_files(
        cluster_path=EXAMPLES / "cluster-all-vendors.yaml",
        workload_paths=[EXAMPLES / "workloads-all-vendors"],
    )
    scheduler = sim.pipeline.scheduler
    text = generate_latest(SchedulerMetrics(scheduler).registry).decode()
    samples: list[Sample] = [
        (s.name, dict(s.labels), s.value)
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    ]
    vendors = {
        d.uuid: d.vendor
        for node in scheduler.store.list_nodes()
        for d in scheduler.node_info(node).devices
    }
    return {"samples": samples, "vendors": vendors}


def raw(scraped: dict[str, Any], name: str) -> dict[str, tuple[dict[str, str], float]]:
    """``device_uuid -> (labels, value)`` of one raw gauge family as scraped."""
    return {lab["device_uuid"]: (lab, v) for n, lab, v in scraped["samples"] if n == name}


def _bits(mask: float) -> int:
    return bin(int(mask)).count("1")


def share(vendor: str, allocated: float, limit: float) -> float | None:
    """What a person reads as the device's share, from the raw gauges: NeuronCores
    counted from the masks, the others allocated ÷ limit; None without compute."""
    if vendor in NO_COMPUTE or limit <= 0:
        return None
    if vendor == NEURON:
        return _bits(allocated) / _bits(limit)
    return allocated / limit


def _series(name: str, labels: dict[str, str], value: float) -> dict[str, str]:
    body = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{name}{{{body}}}", "values": f"{value}x5"}


def _expr(panel: str, ref: str = "A") -> str:
    wanted = f"{PANELS[panel]} [{ref}]"
    exprs = [e for where, e in dashboard_queries() if where == wanted]
    assert len(exprs) == 1, f"{wanted}: {len(exprs)} targets"
    return substitute(exprs[0], {"node": ".*", "namespace": ".*"})


@pytest.fixture(scope="module")
def promtool() -> str:
    try:
        return str(prometheus_bin() / "promtool")
    except PrometheusUnavailable as exc:
        pytest.fail(str(exc), pytrace=False)


def _check(
    promtool: str,
    tmp_path: Path,
    scraped: dict[str, Any],
    expr: str,
    samples: list[dict[str, object]],
) -> None:
    series = [
        _series(n, lab, v)
        for n, lab, v in scraped["samples"]
        if n.startswith(("hami_gpu_core_", "hami_vgpu_core_"))
    ]
    spec = {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "promql_expr_test": [{"expr": expr, "eval_time": "2m", "exp_samples": samples}],
            }
        ],
    }
    path = tmp_path / "dashboard-units.test.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    proc = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, f"{expr}\n{proc.stdout}{proc.stderr}"


def _device_shares(scraped: dict[str, Any]) -> dict[str, tuple[dict[str, str], float]]:
    limits = raw(scraped, "hami_gpu_core_limit_ratio")
    allocs = raw(scraped, "hami_gpu_core_allocated_ratio")
    out = {}
    for uuid, (labels, limit) in limits.items():
        s = share(scraped["vendors"][uuid], allocs[uuid][1], limit)
        if s is not None:
            out[uuid] = (labels, s)
    return out


def _labels(labels: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


def test_the_example_cluster_has_the_vendors_whose_units_differ(scraped):
    vendors = set(scraped["vendors"].values())
    assert {"NVIDIA", "AMD", NEURON, "Biren"} <= vendors, vendors


def test_compute_per_gpu_is_a_percentage_in_every_vendors_unit(promtool, tmp_path, scraped):
    shares = _device_shares(scraped)
    by_vendor = {scraped["vendors"][u]: 100 * s for u, (_, s) in shares.items() if s}
    # the example's pods: AMD 76 of 304 CUs; AWS Neuron one of two NeuronCores (mask 1 of 3)
    assert by_vendor["AMD"] == 25.0 and by_vendor[NEURON] == 50.0, by_vendor
    samples = [{"labels": _labels(lab), "value": 100 * s} for lab, s in shares.values()]
    _check(promtool, tmp_path, scraped, _expr("per_gpu"), samples)


def test_cluster_compute_is_the_mean_share_of_the_devices_that_account_compute(
    promtool, tmp_path, scraped
):
    shares = [s for _, s in _device_shares(scraped).values()]
    assert len(shares) < len(scraped["vendors"])  # Biren's and Vastai's left out
    mean = 100 * (sum(shares) / len(shares))
    # avg() adds in its own order, so the last bits differ: compare in millionths of a
    # percent (round() gives an integer, exact in a float)
    expr = f"round(1e6 * ({_expr('overview')}))"
    want = math.floor(1e6 * mean + 0.5)
    _check(promtool, tmp_path, scraped, expr, [{"labels": "{}", "value": want}])


def test_compute_per_container_is_its_share_of_the_device(promtool, tmp_path, scraped):
    limits = raw(scraped, "hami_gpu_core_limit_ratio")
    samples, per_vendor = [], {}
    for n, lab, v in scraped["samples"]:
        if n != "hami_vgpu_core_allocated_ratio":
            continue
        vendor = scraped["vendors"][lab["device_uuid"]]
        s = share(vendor, v, limits[lab["device_uuid"]][1])
        if s is not None:
            samples.append({"labels": _labels(lab), "value": 100 * s})
            per_vendor[vendor] = 100 * s
    assert per_vendor["AMD"] == 25.0 and per_vendor[NEURON] == 50.0, per_vendor
    _check(promtool, tmp_path, scraped, _expr("per_container"), samples)


def test_neuroncores_are_counted_from_the_masks(promtool, tmp_path, scraped):
    """inf2-01: 4 devices of 2 NeuronCores (the node's aws.amazon.com/neuroncore 8), one
    held by the example's pod."""
    limits = raw(scraped, "hami_gpu_core_limit_ratio")
    allocs = raw(scraped, "hami_gpu_core_allocated_ratio")
    neuron = [u for u, v in scraped["vendors"].items() if v == NEURON]
    total = sum(_bits(limits[u][1]) for u in neuron)
    held = sum(_bits(allocs[u][1]) for u in neuron)
    assert (held, total) == (1, 8)
    _check(promtool, tmp_path, scraped, _expr("neuroncores", "A"), [{"labels": "{}", "value": 1}])
    _check(promtool, tmp_path, scraped, _expr("neuroncores", "B"), [{"labels": "{}", "value": 8}])


def test_the_check_fails_on_the_raw_mask(promtool, tmp_path, scraped):
    """The check can fail: allocated ÷ limit of the Neuron device is 1/3, not 50 %."""
    allocs = raw(scraped, "hami_gpu_core_allocated_ratio")
    uuid, (labels, _) = next(
        (u, x) for u, x in allocs.items() if scraped["vendors"][u] == NEURON and x[1]
    )
    expr = (
        f'100 * hami_gpu_core_allocated_ratio{{device_uuid="{uuid}"}}'
        f' / hami_gpu_core_limit_ratio{{device_uuid="{uuid}"}}'
    )
    with pytest.raises(AssertionError):
        _check(promtool, tmp_path, scraped, expr, [{"labels": _labels(labels), "value": 50}])
