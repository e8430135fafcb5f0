"""charts/hami as a chart repository serves it (scripts/package-chart.py): ``helm
package``, the archive linted with every example, ``index.yaml`` generated; Helm reads
the repository over HTTP and the archive renders what the directory renders.
(tests/e2e/test_helm_install.py installs the archive onto a real node.)"""

from __future__ import annotations

import fnmatch
import hashlib
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

from tests.chart.helm import CHART, REPO, objects
from tests.packaging.simple_index import serve

helm_python = pytest.importorskip("helm_python", reason="pip install -e '.[dev]' (helm-python-sdk)")

SCRIPT = REPO / "scripts" / "package-chart.py"


def run_script(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, SCRIPT, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
    )


def chart_files(chart: Path) -> set[str]:
    """The files ``helm package`` takes: all but what .helmignore names (its patterns
    here are plain file globs)."""
    ignored = [
        line.strip()
        for line in (chart / ".helmignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    return {
        f"{chart.name}/{p.relative_to(chart)}"
        for p in chart.rglob("*")
        if p.is_file() and not any(fnmatch.fnmatch(p.name, pat) for pat in ignored)
    }


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("charts")
    proc = run_script("--out", out)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(out / "hami-0.1.0.tgz")
    return out


def test_the_archive_holds_the_chart(repo: Path) -> None:
    archive = repo / "hami-0.1.0.tgz"
    with tarfile.open(archive) as tf:
        names = {m.name for m in tf.getmembers() if m.isfile()}
    assert names == chart_files(CHART)
    meta = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert helm_python.Chart.load(archive).version == meta["version"] == "0.1.0"


def test_the_archive_renders_what_the_directory_renders(repo: Path) -> None:
    values = yaml.safe_load((CHART / "examples" / "all-vendors.yaml").read_text())

    def rendered(source: Path) -> list[dict]:
        manifests = helm_python.Chart.load(source).render(
            values, name="hami", namespace="hami-system"
        )
        return objects(manifests)

    assert rendered(repo / "hami-0.1.0.tgz") == rendered(CHART)


def test_the_repository_index_names_the_archive_with_its_digest(repo: Path) -> None:
    archive = repo / "hami-0.1.0.tgz"
    index = yaml.safe_load((repo / "index.yaml").read_text())
    assert index["apiVersion"] == "v1"
    (entry,) = index["entries"]["hami"]
    assert entry["version"] == "0.1.0" and entry["appVersion"] == "0.1.0"
    assert entry["urls"] == ["hami-0.1.0.tgz"]
    assert entry["digest"] == hashlib.sha256(archive.read_bytes()).hexdigest()
    assert helm_python.digest(archive) == f"sha256:{entry['digest']}"

    # Helm, as `helm repo add` + `helm show` do, reads it over HTTP and pulls the chart.
    from helm_python import registry

    with serve(repo) as url:
        base = url.removesuffix("simple/")
        fetched = registry.repo_index(base)
        assert [e["version"] for e in fetched["entries"]["hami"]] == ["0.1.0"]
        shown = yaml.safe_load(registry.show("hami", repo_url=base, output_format="chart"))
    assert shown["name"] == "hami" and shown["version"] == "0.1.0"


def test_an_archive_that_does_not_lint_is_not_published(tmp_path: Path) -> None:
    chart = tmp_path / "hami"
    shutil.copytree(CHART, chart)
    for other in (chart / "examples").glob("*.yaml"):  # one lint is enough here
        other.unlink()
    (chart / "examples" / "default.yaml").write_text("scheduler:\n  replicaz: 2\n")
    out = tmp_path / "out"
    proc = run_script("--out", out, "--chart", chart)
    assert proc.returncode == 1
    assert "helm lint of the archive" in proc.stderr
    assert "default.yaml:" in proc.stderr and "replicaz" in proc.stderr
    assert not list(out.glob("*.tgz")) and not (out / "index.yaml").exists()
