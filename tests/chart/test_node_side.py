"""The chart deploys hami's device plugin only for a vendor it can serve, and says for
every other enabled vendor what runs its nodes instead (issue 24 item 7).

What hami's device plugin can serve is derived from the backends, not listed by hand:
a backend that implements ``hami_discover`` can run it; one that names
``BackendInfo.vendor_device_plugin`` is run, as in HAMi, by that vendor's device plugin
by default. ``charts/hami/backends.yaml`` carries both facts into Helm (which cannot ask
Python) and must equal what the installed backends say (``scripts/chart-backends.py``).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import helm_python
import pytest
import yaml

from hami_core.plugin import BackendManager
from tests.chart.helm import CHART, example_values, render
from tests.unit import test_config_start
from tests.unit.test_config_start import CONFIG_ERROR, REACHED, commands

start = test_config_start.start  # the fixture: run ``hami <argv>`` in this process

REPO = Path(__file__).resolve().parents[2]
ALL_VENDORS = example_values(CHART / "examples" / "all-vendors.yaml")


def _script() -> Any:
    spec = importlib.util.spec_from_file_location(
        "chart_backends", REPO / "scripts" / "chart-backends.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def records():
    return {r.name: r for r in BackendManager.from_entry_points(disabled=[]).backends}


def _serves(record: Any) -> bool:
    return "hami_discover" in record.hooks  # the capability, not the property under test


def _hami_by_default(record: Any) -> bool:
    return _serves(record) and not record.info.vendor_device_plugin


def test_the_charts_backend_facts_are_those_of_the_installed_backends(records):
    on_disk = yaml.safe_load((CHART / "backends.yaml").read_text())
    assert on_disk == _script().chart_backends(BackendManager.from_entry_points(disabled=[]))
    assert set(on_disk) == set(records)


def test_a_vendor_whose_nodes_hamis_plugin_cannot_serve_names_what_does(records):
    # the seven vendors whose DaemonSet exited 2 ("is the driver installed?")
    for name in ("biren", "enflame", "iluvatar", "metax", "mthreads", "vastai", "awsneuron"):
        assert records[name].info.vendor_device_plugin, name
        assert not _hami_by_default(records[name]), name
    for name, record in records.items():
        assert _serves(record) or record.info.vendor_device_plugin, name


def _daemonsets(values: dict[str, Any]) -> set[str]:
    return {
        o["metadata"]["name"].removeprefix("hami-device-plugin-")
        for o in render(values)
        if o["kind"] == "DaemonSet" and o["metadata"]["name"].startswith("hami-device-plugin-")
    }


def _notes(values: dict[str, Any]) -> str:
    out = helm_python.Chart.load(CHART).render(values, name="hami", namespace="hami-system")
    return next(t for p, t in out.items() if p.endswith("NOTES.txt"))


def test_all_vendors_deploys_only_the_device_plugins_that_run(records):
    enabled = {k for k, v in ALL_VENDORS["devices"].items() if v["enabled"]}
    assert enabled == set(records)
    assert _daemonsets(ALL_VENDORS) == {n for n in enabled if _hami_by_default(records[n])}
    assert "biren" not in _daemonsets(ALL_VENDORS)


def test_the_notes_say_per_vendor_what_the_user_installs_instead(records):
    notes = " ".join(_notes(ALL_VENDORS).split())
    for name, record in records.items():
        if not _hami_by_default(record):
            text = " ".join(record.info.vendor_device_plugin.split())
            assert f"{name}: no hami device plugin; install {text}" in notes, name
    assert "no hami device plugin" not in _notes({})  # NVIDIA only: nothing to install


def test_asking_hamis_plugin_for_a_vendor_it_cannot_serve_fails_naming_what_to_install():
    values = {"devices": {"biren": {"enabled": True, "devicePlugin": "hami"}}}
    with pytest.raises(
        Exception, match=r"devices\.biren\.devicePlugin: hami.*cannot serve.*biren-device-plugin"
    ):
        render(values)


def test_hamis_plugin_can_be_chosen_where_it_can_serve_and_any_can_be_left_to_the_vendor():
    aws = {"devices": {"awsneuron": {"enabled": True, "devicePlugin": "hami"}}}
    assert _daemonsets(aws) == {"nvidia", "awsneuron"}
    off = {"devices": {"nvidia": {"enabled": True, "devicePlugin": "vendor"}}}
    assert _daemonsets(off) == set()
    assert "nvidia: no hami device plugin" in _notes(off)


def test_a_misspelt_node_side_is_refused_by_the_schema():
    with pytest.raises(Exception, match="devicePlugin"):
        render({"devices": {"nvidia": {"enabled": True, "devicePlugin": "hamii"}}})


@pytest.mark.parametrize("backend", ["biren", "enflame", "iluvatar", "metax", "mthreads", "vastai"])
def test_hamis_device_plugin_for_such_a_vendor_stops_at_start_naming_what_runs_it(
    start, records, backend
):
    code, err = start(commands(backend)["device-plugin"])
    assert code == CONFIG_ERROR, err
    assert "hami's device plugin cannot serve these nodes" in err
    assert " ".join(records[backend].info.vendor_device_plugin.split()) in " ".join(err.split())
    assert REACHED not in err  # refused before the API server is contacted


def test_a_backend_of_your_own_image_gets_hamis_device_plugin_as_before():
    """A backend backends.yaml does not know (installed into your own image, e.g.
    docs/writing-a-backend.md's example) is deployed as asked: its capability is unknown
    here, and refusing it would break that image."""
    values = {"devices": {"example": {"enabled": True, "customresources": ["example.com/dev"]}}}
    assert _daemonsets(values) == {"nvidia", "example"}
