"""What the documents claim about the code is what the code does (issue 25 item 6).

Each test reads a claim from README.md, a docs/ page, the chart or a hook's docstring
and holds it against the code, so a change of behaviour fails here until the document
says what happens now.
"""

from __future__ import annotations

import ast
import re
import struct
from pathlib import Path

import pytest

from hami_core.plugin import hookspecs

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _served_metric_names() -> set[str]:
    """Every ``hami_*`` string literal of the modules that define served families."""
    files = [
        ROOT / "hami_core/servers/metrics.py",
        ROOT / "hami_core/servers/deviceplugin_metrics.py",
        ROOT / "hami_core/monitor/node.py",
    ]
    names: set[str] = set()
    for f in files:
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and re.fullmatch(r"hami_[a-z0-9_]+", node.value)
            ):
                names.add(node.value)
    return names


def test_the_series_monitoring_md_calls_unserved_are_not_served():
    doc = (ROOT / "docs/monitoring.md").read_text(encoding="utf-8")
    served = _served_metric_names()
    assert "hami_node_gpu_mig_instance_info" in served and "hami_mig_device_info" in served
    unserved = [
        name
        for line in re.findall(r"Not served[^.]*\.", doc)
        for name in re.findall(r"`(hami_[a-z0-9_]+)`", line)
    ]
    wrong = sorted(set(unserved) & served)
    assert not wrong, f"docs/monitoring.md says these are not served, but they are: {wrong}"


def test_the_mig_series_are_in_monitoring_md_tables():
    doc = (ROOT / "docs/monitoring.md").read_text(encoding="utf-8")
    for name in ("hami_node_gpu_mig_instance_info", "hami_mig_device_info"):
        rows = [line for line in doc.splitlines() if line.startswith("|") and name in line]
        assert rows, f"docs/monitoring.md has no table row for {name}"


@pytest.mark.parametrize(
    "path", ["README.md", "charts/hami/templates/scheduler/configmap.yaml", "docs/PROTOCOL.md"]
)
def test_no_document_says_full_node_objects_are_judged_as_free(path):
    # Since f2e0334 a node the cache knows is judged with its live usage and quotas when
    # kube-scheduler sends full Node objects (tests/compat/test_hami_semantics.py
    # test_full_nodes_of_cached_nodes_use_live_usage_and_quota); only a node the cache
    # does not know is judged from the object, with zero usage.
    text = " ".join((ROOT / path).read_text(encoding="utf-8").split())
    text = re.sub(r"\s*#\s*", " ", text)  # a YAML comment's line breaks
    assert not re.search(r"(as if|treats?) every device (were|is|as) free", text), path
    assert not re.search(r"answer as if every device", text), path


def test_readme_states_what_nodecachecapable_false_does_now():
    text = " ".join(README.split())
    assert "a node the extender's cache knows is judged from the cache" in text
    assert "zero usage" in text


def _called_by(doc: str) -> str:
    match = re.search(r"Called by[^:]*:(.*?)(?:\n\s*Args:|\n\s*Returns:)", doc, re.S)
    assert match, "no Called by: paragraph"
    return " ".join(match.group(1).split())


def test_hami_parse_request_names_the_callers_it_has():
    """Each component whose code reads a pod's requests through the backends
    (``parse_requests``, ``read_pod_request``, ``requested_vendors``) is named, and the
    device plugin's use is the one it has: which vendors a pod still waits for, not
    matching ``Allocate`` to a pod (``pending`` matches by device counts)."""
    called_by = _called_by(hookspecs.hami_parse_request.__doc__ or "")
    readers = re.compile(r"\b(parse_requests|read_pod_request|requested_vendors|HoldingsReader)\(")
    components = {
        "hami_core/webhook": "webhook",
        "hami_core/scheduling": "scheduler",
        "hami_core/deviceplugin": "device plugin",
        "hami_core/servers/metrics.py": "metrics",
        "hami_core/top": "hami top",
        "hami_core/monitor": "monitor",
    }
    for where, name in components.items():
        path = ROOT / where
        files = [path] if path.is_file() else sorted(path.rglob("*.py"))
        calls = any(readers.search(f.read_text(encoding="utf-8")) for f in files)
        # Only one way: a component may reach the hook through a shared reader
        # (``HoldingsReader``), so naming one whose own code calls none is no error.
        if calls:
            assert name in called_by, f"{where} reads requests but Called by: omits {name!r}"
    pending = (ROOT / "hami_core/deviceplugin/pending.py").read_text(encoding="utf-8")
    assert not readers.search(pending)
    assert "device plugin (matching Allocate to a pod)" not in called_by


def test_readme_says_which_parts_mix_with_hamis_and_which_do_not():
    """The shim's shared region is not HAMi-core's: our monitor refuses a HAMi-core
    region, and README says the node side goes together."""
    from hami_nvidia.shared_region import MAGIC, RegionFormatError, parse_region

    # HAMi-core's sharedRegionT begins with int32 initializedFlag = 19920718, then its
    # major and minor version (HAMi pkg/monitor/nvidia/cudevshr.go).
    hami_core_region = struct.pack("<iii", 19920718, 1, 0) + bytes(8192)
    with pytest.raises(RegionFormatError):
        parse_region(hami_core_region)
    text = " ".join(README.split())
    assert "one at a time" not in text or "not HAMi-core's" in text
    assert MAGIC.decode() in text and "19920718" in text
    for wire in ("annotations", "extender JSON", "AdmissionReview", "device-plugin env"):
        assert wire in text, wire
