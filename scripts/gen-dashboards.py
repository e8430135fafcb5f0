#!/usr/bin/env python3
"""Write the Grafana dashboards of the chart (charts/hami/dashboards/*.json).

The panels are listed here once, as (title, kind, unit, [(PromQL, legend), ...]); the
JSON files are generated from them (Grafana's dashboard JSON model, schemaVersion 38)
and committed. tests/observability/test_dashboards.py checks the files match this
script and the e2e tier queries every expression against a real Prometheus.

Usage: scripts/gen-dashboards.py [--check]   (--check: exit 1 when a file differs)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "charts" / "hami" / "dashboards"
N = '{node=~"$node"}'
NS = '{namespace=~"$namespace"}'

# The core gauges carry each vendor's unit (percent, AMD compute units, Moore Threads sGPU
# cores, AWS Neuron's NeuronCore bit masks, which PromQL cannot count: PROTOCOL.md section
# 9), so compute panels read the share gauges (hami_gpu_core_allocated_share,
# hami_vgpu_core_allocated_share: allocated / the device's compute in its own unit, masks
# counted), a percentage for every vendor, never the raw gauge.
# name -> (title, variables, panels); panel = (title, kind, unit, [(expr, legend)])
DASHBOARDS: dict[str, tuple[str, list[str], list[tuple[str, str, str, list[tuple[str, str]]]]]] = {
    "hami-cluster-overview": (
        "hami / Cluster overview",
        ["node", "namespace"],
        [
            ("GPUs", "stat", "none", [(f"count(hami_gpu_memory_limit_bytes{N})", "GPUs")]),
            (
                "GPU memory",
                "stat",
                "bytes",
                [(f"sum(hami_gpu_memory_limit_bytes{N})", "schedulable")],
            ),
            (
                "GPU memory allocated",
                "stat",
                "bytes",
                [(f"sum(hami_gpu_memory_allocated_bytes{N})", "allocated")],
            ),
            (
                "GPU memory allocated %",
                "gauge",
                "percent",
                [
                    (
                        f"100 * sum(hami_gpu_memory_allocated_bytes{N}) / sum(hami_gpu_memory_limit_bytes{N})",
                        "allocated",
                    )
                ],
            ),
            (
                "GPU memory in use",
                "stat",
                "bytes",
                [(f"sum(hami_host_gpu_memory_used_bytes{N})", "used")],
            ),
            (
                "GPU compute allocated %",
                "gauge",
                "percent",
                [
                    (
                        f"100 * avg(hami_gpu_core_allocated_share{N})",
                        "allocated",
                    )
                ],
            ),
            (
                "NeuronCores allocated (AWS Neuron)",
                "stat",
                "none",
                [
                    (
                        f'sum(hami_gpu_core_allocated_units{{unit="NeuronCores",{N[1:-1]}}}) or vector(0)',
                        "allocated",
                    ),
                    (
                        f'sum(hami_gpu_core_limit_units{{unit="NeuronCores",{N[1:-1]}}}) or vector(0)',
                        "schedulable",
                    ),
                ],
            ),
            (
                "Containers sharing GPUs",
                "stat",
                "none",
                [(f"sum(hami_gpu_shared_count{N})", "containers")],
            ),
            (
                "Free GPU memory per node (schedulable - allocated)",
                "bargauge",
                "bytes",
                [
                    (
                        f"sum by (node) (hami_gpu_memory_limit_bytes{N}) - sum by (node) (hami_gpu_memory_allocated_bytes{N})",
                        "{{node}}",
                    )
                ],
            ),
            (
                "Device quota per namespace",
                "table",
                "none",
                [
                    (f"hami_resource_quota_used{NS}", "{{namespace}} {{quota_name}} used"),
                    (f"hami_resource_quota_limit{NS}", "{{namespace}} {{quota_name}} limit"),
                ],
            ),
        ],
    ),
    "hami-node-gpus": (
        "hami / GPUs per node",
        ["node"],
        [
            (
                "Memory allocated vs schedulable per GPU",
                "timeseries",
                "bytes",
                [
                    (f"hami_gpu_memory_allocated_bytes{N}", "{{node}} {{device_index}} allocated"),
                    (f"hami_gpu_memory_limit_bytes{N}", "{{node}} {{device_index}} schedulable"),
                ],
            ),
            (
                "Memory in use per GPU (NVML)",
                "timeseries",
                "bytes",
                [(f"hami_host_gpu_memory_used_bytes{N}", "{{node}} {{device_index}}")],
            ),
            (
                "Memory in use % of schedulable",
                "timeseries",
                "percent",
                [
                    (
                        f"100 * hami_host_gpu_memory_used_bytes{N} / on (device_uuid) group_left () hami_gpu_memory_limit_bytes{N}",
                        "{{node}} {{device_index}}",
                    )
                ],
            ),
            (
                "Utilization per GPU (NVML)",
                "timeseries",
                "percent",
                [(f"hami_host_gpu_utilization_ratio{N}", "{{node}} {{device_index}}")],
            ),
            (
                "Compute allocated per GPU",
                "timeseries",
                "percent",
                [
                    (
                        f"100 * hami_gpu_core_allocated_share{N}",
                        "{{node}} {{device_index}}",
                    )
                ],
            ),
            (
                "Sharers per GPU",
                "timeseries",
                "none",
                [(f"hami_gpu_shared_count{N}", "{{node}} {{device_index}}")],
            ),
        ],
    ),
    "hami-pod-usage": (
        "hami / Pods: usage vs limit",
        ["namespace"],
        [
            (
                "GPU memory used vs limit per container",
                "timeseries",
                "bytes",
                [
                    (
                        f"hami_vgpu_memory_used_bytes{NS}",
                        "{{namespace}}/{{pod}} {{container}} used",
                    ),
                    (
                        f"hami_vgpu_memory_limit_bytes{NS}",
                        "{{namespace}}/{{pod}} {{container}} limit",
                    ),
                ],
            ),
            (
                "GPU memory used % of limit",
                "timeseries",
                "percent",
                [
                    (
                        f"100 * hami_vgpu_memory_used_bytes{NS} / (hami_vgpu_memory_limit_bytes{NS} > 0)",
                        "{{namespace}}/{{pod}} {{container}}",
                    )
                ],
            ),
            (
                "GPU utilization per container",
                "timeseries",
                "percent",
                [
                    (
                        f"hami_container_device_utilization_ratio{NS}",
                        "{{namespace}}/{{pod}} {{container}}",
                    )
                ],
            ),
            (
                "Allocated vs used per pod",
                "table",
                "bytes",
                [
                    (
                        f"sum by (namespace, pod) (hami_vgpu_memory_allocated_bytes{NS})",
                        "{{namespace}}/{{pod}} allocated",
                    ),
                    (
                        f"sum by (namespace, pod) (hami_vgpu_memory_used_bytes{NS})",
                        "{{namespace}}/{{pod}} used",
                    ),
                ],
            ),
            (
                "Compute allocated per container",
                "timeseries",
                "percent",
                [
                    (
                        f"100 * hami_vgpu_core_allocated_share{NS}",
                        "{{namespace}}/{{pod}} #{{container_index}}",
                    )
                ],
            ),
        ],
    ),
    "hami-scheduler": (
        "hami / Scheduler",
        [],
        [
            (
                "Filter and bind latency (p99)",
                "timeseries",
                "s",
                [
                    (
                        "histogram_quantile(0.99, sum by (le) (rate(hami_scheduler_filter_duration_seconds_bucket[5m])))",
                        "filter p99",
                    ),
                    (
                        "histogram_quantile(0.99, sum by (le) (rate(hami_scheduler_bind_duration_seconds_bucket[5m])))",
                        "bind p99",
                    ),
                ],
            ),
            (
                "Bind outcomes",
                "timeseries",
                "ops",
                [
                    ("sum(rate(hami_scheduler_bind_success_total[5m]))", "success"),
                    ("sum(rate(hami_scheduler_bind_failure_total[5m]))", "failure"),
                ],
            ),
            (
                "Filter outcomes",
                "timeseries",
                "ops",
                [("sum by (outcome) (rate(hami_scheduler_filter_total[5m]))", "{{outcome}}")],
            ),
            (
                "Node lock waits (p99)",
                "timeseries",
                "s",
                [
                    (
                        # only outcomes that happened in the window (no NaN for the others)
                        "histogram_quantile(0.99, sum by (le, outcome) (rate(hami_scheduler_node_lock_wait_seconds_bucket[5m])))"
                        " and on (outcome) (sum by (outcome) (rate(hami_scheduler_node_lock_wait_seconds_count[5m])) > 0)",
                        "{{outcome}}",
                    )
                ],
            ),
            (
                "Cache freshness",
                "timeseries",
                "s",
                [
                    (
                        "max by (resource) (hami_scheduler_informer_last_update_age_seconds)",
                        "{{resource}}",
                    )
                ],
            ),
        ],
    ),
    "hami-device-health": (
        "hami / Device health",
        ["node"],
        [
            (
                "Unhealthy GPUs",
                "table",
                "none",
                [(f"hami_gpu_healthy{N} == 0", "{{node}} {{device_uuid}}")],
            ),
            ("Cordoned GPUs", "stat", "none", [(f"sum(hami_gpu_cordoned{N})", "cordoned")]),
            (
                "Nodes with an unusable inventory",
                "table",
                "none",
                [(f"hami_node_unregistered{N}", "{{node}} {{vendor}}")],
            ),
            (
                "Handshake age",
                "timeseries",
                "s",
                [(f"hami_node_handshake_age_seconds{N}", "{{node}} {{vendor}} {{state}}")],
            ),
            (
                "Usage files skipped by the monitor",
                "timeseries",
                "ops",
                [
                    (
                        "sum by (reason) (rate(hami_monitor_usage_files_skipped_total[5m]))",
                        "{{reason}}",
                    )
                ],
            ),
            (
                "Directories of gone pods removed",
                "stat",
                "none",
                [("sum(hami_monitor_directories_removed_total)", "removed")],
            ),
        ],
    ),
}


def _variable(name: str) -> dict:
    source = {
        "node": "label_values(hami_gpu_memory_limit_bytes, node)",
        "namespace": "label_values(hami_vgpu_memory_allocated_bytes, namespace)",
    }[name]
    return {
        "name": name,
        "label": name,
        "type": "query",
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "query": {"query": source, "refId": f"{name}-values"},
        "definition": source,
        "includeAll": True,
        "multi": True,
        "allValue": ".*",
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "refresh": 2,
        "sort": 1,
    }


def dashboard(uid: str) -> dict:
    title, variables, panels = DASHBOARDS[uid]
    out_panels = []
    for i, (ptitle, kind, unit, targets) in enumerate(panels):
        width = 8 if kind in ("stat", "gauge") else 12
        per_row = 24 // width
        out_panels.append(
            {
                "id": i + 1,
                "type": kind,
                "title": ptitle,
                "datasource": {"type": "prometheus", "uid": "${datasource}"},
                "gridPos": {
                    "h": 8,
                    "w": width,
                    "x": (i % per_row) * width,
                    "y": (i // per_row) * 8,
                },
                "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
                "options": {},
                "targets": [
                    {
                        "refId": chr(ord("A") + k),
                        "datasource": {"type": "prometheus", "uid": "${datasource}"},
                        "expr": expr,
                        "legendFormat": legend,
                        "instant": kind in ("table", "stat", "gauge", "bargauge"),
                    }
                    for k, (expr, legend) in enumerate(targets)
                ],
            }
        )
    return {
        "uid": uid,
        "title": title,
        "tags": ["hami", "gpu"],
        "schemaVersion": 38,
        "version": 1,
        "editable": True,
        "timezone": "browser",
        "refresh": "30s",
        "time": {"from": "now-1h", "to": "now"},
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Prometheus",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {},
                },
                *(_variable(v) for v in variables),
            ]
        },
        "annotations": {"list": []},
        "panels": out_panels,
    }


def render(uid: str) -> str:
    return json.dumps(dashboard(uid), indent=2) + "\n"


def main(argv: list[str]) -> int:
    check = "--check" in argv
    differ = []
    OUT.mkdir(parents=True, exist_ok=True)
    for uid in DASHBOARDS:
        path = OUT / f"{uid}.json"
        text = render(uid)
        if check:
            if not path.exists() or path.read_text() != text:
                differ.append(str(path))
        else:
            path.write_text(text)
    if differ:
        print("out of date (run scripts/gen-dashboards.py):", *differ, sep="\n  ", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
