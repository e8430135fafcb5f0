"""Render the ``device-config.yaml`` of HAMi's chart at each release into fixtures.

Usage: python scripts/render-hami-device-configs.py <HAMi git checkout> [OUT]

For every release tag from v2.4.0 on, the chart at that tag is rendered with its default values (2.4.0: with ``devices.ascend.enabled``, without
which it renders none; Helm's SDK, helm-python-sdk, no cluster) and the
ConfigMap's ``device-config.yaml`` is written to ``OUT/<tag>.yaml`` when it differs from the previous release's (default
``tests/fixtures/hami/device-config``), headed by the tag and the template's blob id.
``tests/compat/test_hami_chart_device_configs.py`` loads each file. The chart's
dependencies (HAMi-DRA, behind ``dra.enabled``, off by default) are dropped: they add
nothing to the device ConfigMap.
"""

from __future__ import annotations

import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path

import yaml

TEMPLATE = "charts/hami/templates/scheduler/device-configmap.yaml"
#: HAMi 2.4.0 renders the ConfigMap (then ``ascend-config.yaml``, the ``vnpus`` list)
#: only with Ascend on.
ASCEND_ON = {"devices": {"ascend": {"enabled": True}}}


def _git(repo: Path, *args: str) -> bytes:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True).stdout


def releases(repo: Path) -> list[tuple[str, str]]:
    """(tag, template blob) of each release from v2.4.0."""
    tags = _git(repo, "tag", "--list", "v2.*", "--sort=version:refname").decode().split()
    out: list[tuple[str, str]] = []
    for tag in tags:
        if tuple(int(p) for p in tag[1:].split(".")[:2]) < (2, 4):
            continue
        blob = _git(repo, "rev-parse", f"{tag}:{TEMPLATE}").decode().strip()
        out.append((tag, blob))
    return out


def render(repo: Path, tag: str) -> str:
    """The ``device-config.yaml`` HAMi's chart at ``tag`` renders with default values."""
    from helm_python import Chart

    with tempfile.TemporaryDirectory() as tmp:
        data = _git(repo, "archive", "--format=tar", tag, "charts/hami")
        with tarfile.open(fileobj=BytesIO(data)) as tar:
            tar.extractall(tmp, filter="data")
        root = Path(tmp) / "charts" / "hami"
        meta = yaml.safe_load((root / "Chart.yaml").read_text())
        meta.pop("dependencies", None)
        (root / "Chart.yaml").write_text(yaml.safe_dump(meta))
        chart = Chart.load(root)
        for values in ({}, ASCEND_ON):
            manifests = chart.render(values, name="hami", namespace="kube-system")
            text = next(t for p, t in manifests.items() if p.endswith("device-configmap.yaml"))
            doc = yaml.safe_load(text)
            if doc:
                (content,) = doc["data"].values()
                return str(content)
    raise SystemExit(f"{tag}: the chart renders no device ConfigMap")


def main() -> None:
    repo = Path(sys.argv[1])
    out = Path(sys.argv[2]) if len(sys.argv) > 2 else Path("tests/fixtures/hami/device-config")
    out.mkdir(parents=True, exist_ok=True)
    previous = None
    for tag, blob in releases(repo):
        text = render(repo, tag).rstrip("\n") + "\n"
        if text == previous:
            continue  # same file as the previous release's
        previous = text
        head = f"# HAMi {tag}: {TEMPLATE} (blob {blob}) rendered with the chart's defaults\n"
        (out / f"{tag}.yaml").write_text(head + text)
        print(tag, blob)


if __name__ == "__main__":
    main()
