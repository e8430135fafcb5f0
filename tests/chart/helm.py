"""The chart through real Helm: helm-python-sdk (Helm v4's Go SDK as a shared library,
loaded with ctypes; no helm binary). Shared by the chart tests and the e2e tier."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "hami"
EXAMPLES = sorted((CHART / "examples").glob("*.yaml"))


def example_values(path: Path) -> dict[str, Any]:
    """An example values file as Helm reads it (``{}`` for an empty one)."""
    return yaml.safe_load(path.read_text()) or {}


def objects(manifests: dict[str, str]) -> list[dict[str, Any]]:
    """Every object of a render (template path -> text), NOTES.txt left out."""
    out: list[dict[str, Any]] = []
    for path, text in sorted(manifests.items()):
        if path.endswith("NOTES.txt"):
            continue
        out.extend(doc for doc in yaml.safe_load_all(text) if doc)
    return out


def render(values: dict[str, Any] | None = None, **kw: Any) -> list[dict[str, Any]]:
    """Render the chart offline (the SDK's default Kubernetes version) into objects."""
    from helm_python import Chart

    chart = Chart.load(CHART)
    manifests = chart.render(
        values or {},
        name=kw.pop("name", "hami"),
        namespace=kw.pop("namespace", "hami-system"),
        **kw,
    )
    return objects(manifests)


def find(objs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    """The one object of ``kind`` (and ``name``); AssertionError names what was there."""
    hits = [
        o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
    ]
    assert len(hits) == 1, f"{kind}/{name}: {[(o['kind'], o['metadata']['name']) for o in objs]}"
    return hits[0]


def container(deploy: dict[str, Any], name: str) -> dict[str, Any]:
    for c in deploy["spec"]["template"]["spec"]["containers"]:
        if c["name"] == name:
            return c
    raise AssertionError(f"no container {name} in {deploy['metadata']['name']}")
