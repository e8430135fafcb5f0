"""The chart rendered as a given Kubernetes minor sees it, and the scanners run over it.

Offline rendering (helm-python-sdk's ``Chart.render``) takes the SDK's default
``.Capabilities.KubeVersion``; :func:`chart_for_minor` copies the chart with the two
places that read it (``hami.kubeVersion``, ``hami.kubeMinor`` in ``_helpers.tpl``) set to
``v1.<minor>.0``, so what differs per version (the KubeSchedulerConfiguration API, the
kube-scheduler image tag, flags) renders as a cluster of that minor gets it.

The scanners live in ``.venv/scan`` (``make install``; tests/chart/scan-requirements.txt):
checkov, and kubernetes-validate 1.28 for 1.20-1.24's schemas; the dev venv's
kubernetes-validate serves 1.25 onwards. Both run offline: kubernetes-validate ships its
schemas, checkov is told to download nothing and skip its version check.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.chart.helm import CHART, objects

REPO = Path(__file__).resolve().parents[2]
#: The scanners' venv: next to the running interpreter's (``.venv/scan``).
SCAN_BIN = Path(sys.prefix) / "scan" / "bin"
RUNNER = Path(__file__).with_name("kube_validate_runner.py")
#: Every Kubernetes minor the chart is validated against statically.
MINORS = list(range(20, 38))
#: Minors whose schemas only the older kubernetes-validate (in the scan venv) ships.
OLD_SCHEMA_MINORS = range(20, 25)


def scanner(name: str) -> Path:
    """Path of a scan-venv executable; AssertionError saying how to get it when missing."""
    path = SCAN_BIN / name
    assert path.exists(), f"{path} missing: run `make install` (tests/chart/scan-requirements.txt)"
    return path


def chart_for_minor(minor: int, workdir: Path) -> Path:
    """A copy of charts/hami under ``workdir`` that renders as Kubernetes 1.<minor>.0."""
    dest = workdir / f"hami-1.{minor}"
    if dest.exists():
        return dest
    shutil.copytree(CHART, dest)
    helpers = dest / "templates" / "_helpers.tpl"
    text = helpers.read_text()
    for old, new in (
        (".Capabilities.KubeVersion.Version", f'"v1.{minor}.0"'),
        (".Capabilities.KubeVersion.Minor", f'"{minor}"'),
    ):
        assert old in text, f"_helpers.tpl no longer reads {old}: update tests/chart/scan.py"
        text = text.replace(old, new)
    helpers.write_text(text)
    return dest


def render_chart(chart: Path, values: dict[str, Any]) -> list[dict[str, Any]]:
    """Every object ``chart`` renders with ``values`` (release hami in hami-system)."""
    from helm_python import Chart

    return objects(Chart.load(chart).render(values, name="hami", namespace="hami-system"))


def write_objects(path: Path, objs: list[dict[str, Any]]) -> Path:
    path.write_text(yaml.safe_dump_all(objs, sort_keys=False))
    return path


def checkov(directory: Path) -> dict[str, Any]:
    """checkov's kubernetes framework over every YAML file under ``directory``, one run.

    Returns checkov's JSON report (``results.failed_checks`` / ``skipped_checks`` /
    ``passed_checks``, each entry with ``file_path``, ``resource``, ``check_id`` and, for
    a skip, ``suppress_comment``).
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BC_", "CKV_", "PRISMA_"))}
    # offline: no policy download, no version check against the package index
    env |= {"BC_SKIP_MAPPING": "TRUE", "CKV_SKIP_PACKAGE_UPDATE_CHECK": "true"}
    proc = subprocess.run(
        [
            str(scanner("checkov")),
            "--directory",
            str(directory),
            "--framework",
            "kubernetes",
            "--skip-download",
            "--output",
            "json",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert proc.returncode in (0, 1), f"checkov exited {proc.returncode}: {proc.stderr[-2000:]}"
    report = json.loads(proc.stdout)
    assert isinstance(report, dict), "one framework, one report"
    return report


def kubernetes_validate(minor: int, files: list[Path]) -> dict[str, Any]:
    """kubernetes-validate's strict schemas of 1.<minor>.0 over every object of ``files``
    (tests/chart/kube_validate_runner.py, run by the interpreter whose kubernetes-validate
    ships that minor): ``{"errors": [...], "unknown": [kinds], "checked": n}``."""
    python = scanner("python") if minor in OLD_SCHEMA_MINORS else Path(sys.executable)
    proc = subprocess.run(
        [str(python), str(RUNNER), f"1.{minor}.0", *map(str, files)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, f"kubernetes-validate 1.{minor}: {proc.stderr[-3000:]}"
    result: dict[str, Any] = json.loads(proc.stdout)
    return result
