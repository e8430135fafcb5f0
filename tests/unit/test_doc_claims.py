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


#: A repository path opening a backticked span, with an optional ``::test`` or ``:name``.
_PATH_REF = re.compile(
    r"((?:tests|hami_core|benchmarks|scripts|charts|backends|shim|examples|docs)/"
    r"[A-Za-z0-9_./-]*[A-Za-z0-9_/])(?:(::|:)([A-Za-z0-9_]+\*?))?"
)


def _path_refs() -> list[tuple[str, str, str | None]]:
    """``(document, path or pattern, name or None)`` for every repository path the
    documents name in backticks; a placeholder (``backends/hami-<vendor>/``) is not a path, nor one
    of HAMi's repository (``HAMi's `docs/...```)."""
    documents = [ROOT / "README.md", ROOT / "examples/README.md", *sorted(ROOT.glob("docs/*.md"))]
    refs = []
    for doc in documents:
        text = doc.read_text(encoding="utf-8")
        for span in re.finditer(r"`([^`\n]+)`", text):
            m = _PATH_REF.match(span.group(1))
            if m is None or "<" in span.group(1) or text[: span.start()].endswith("HAMi's "):
                continue
            glob = span.group(1).split(":")[0]
            if "*" in glob:  # a pattern (``backends/hami-*``): something matches it
                refs.append((str(doc.relative_to(ROOT)), glob, None))
                continue
            refs.append((str(doc.relative_to(ROOT)), m.group(1), m.group(3)))
    return refs


def test_every_path_and_test_a_document_names_exists():
    """A newcomer follows the paths the documents give from the repository root: each
    exists, and a ``file.py::name`` / ``file.py:name`` names a function or class there
    (``name*``: one whose name starts so). Seen failing first: README.md and
    docs/threat-model.md gave the chart's ``examples/ha.yaml`` from the root, where
    ``examples/`` is the simulator's and holds no such file."""
    wrong = []
    for doc, path, name in _path_refs():
        target = ROOT / path
        if "*" in path:
            if not any(ROOT.glob(path)):
                wrong.append(f"{doc}: nothing matches {path}")
            continue
        if not target.exists():
            wrong.append(f"{doc}: {path} does not exist")
            continue
        if name is None or target.suffix != ".py":
            continue
        prefix = name.endswith("*")
        pattern = rf"^\s*(?:async\s+)?(?:def|class)\s+{re.escape(name.rstrip('*'))}"
        pattern += r"\w*" if prefix else r"\b"
        source = target.read_text(encoding="utf-8")
        if not re.search(pattern, source, re.M) and not re.search(
            rf"^{re.escape(name)}\s*[:=]", source, re.M
        ):
            wrong.append(f"{doc}: {path} has no {name}")
    assert not wrong, "\n".join(wrong)
