"""The chart's MIG values (issue #17 item 6): ``devices.nvidia.migProfileAllowlist``
reaches the hami configuration as HAMi's allowlist, a malformed one is refused by the
schema, and a per-node ``operatingmode: mig`` in ``nodeConfiguration`` is a valid node
config for the device plugin."""

from __future__ import annotations

import json

import pytest
import yaml

from hami_core.plugin import BackendManager
from hami_core.protocol.config import parse_config
from hami_core.protocol.nodeconfig import parse_node_overrides
from tests.chart.helm import find, render

pytest.importorskip("helm_python", reason="pip install -e '.[dev]' (helm-python-sdk)")

ALLOW = [{"models": ["A100-SXM4-80GB"], "profiles": ["1g.10gb", "3g.40gb"]}]


def test_the_allowlist_and_a_mig_node_reach_the_device_plugin():
    node_config = json.dumps(
        {
            "nodeconfig": [
                {"name": "gpu-2", "operatingmode": "mig"},
                {"name": "gpu-4", "migstrategy": "single"},
            ]
        }
    )
    objs = render(
        {
            "devices": {"nvidia": {"migProfileAllowlist": ALLOW}},
            "devicePlugin": {"nodeConfiguration": {"config": node_config}},
        }
    )
    data = yaml.safe_load(find(objs, "ConfigMap", "hami-config")["data"]["hami.yaml"])
    config = parse_config(data, backends=BackendManager.from_entry_points().infos)
    assert config.vendor("nvidia").options["migProfileAllowlist"] == ALLOW
    cm = next(
        o for o in objs if o["kind"] == "ConfigMap" and "config.json" in (o.get("data") or {})
    )
    overrides = parse_node_overrides(json.loads(cm["data"]["config.json"]), node="gpu-2")
    assert overrides.mode == "mig"
    # the single MIG strategy reaches the backend's configuration of that node
    single = parse_node_overrides(json.loads(cm["data"]["config.json"]), node="gpu-4")
    assert single.apply(config.vendor("nvidia")).mig_strategy == "single"


def test_no_allowlist_by_default():
    data = yaml.safe_load(find(render(), "ConfigMap", "hami-config")["data"]["hami.yaml"])
    assert "migProfileAllowlist" not in data["nvidia"]


def test_a_malformed_allowlist_is_refused_by_the_schema():
    with pytest.raises(Exception, match="migProfileAllowlist"):
        render(
            {
                "devices": {
                    "nvidia": {"migProfileAllowlist": [{"models": ["A100"], "profiles": ["big"]}]}
                }
            }
        )
