"""Package charts/hami as a chart repository serves it: the archive, linted, and the
repository's ``index.yaml``.

Usage: python scripts/package-chart.py [--out DIR] [--url BASE_URL] [--chart CHART]
       (default DIR: dist/charts, CHART: charts/hami; a Python with helm-python-sdk,
       e.g. .venv/bin/python)

1. ``helm package`` of charts/hami into DIR (``hami-<version>.tgz``; .helmignore applies);
2. ``helm lint --strict`` of that archive with every example values file
   (charts/hami/examples/), a finding of warning or error level stops with the list;
3. ``helm repo index`` of DIR (``index.yaml``, each entry with the archive's sha256
   digest; ``--url`` makes its links absolute, an existing index.yaml is merged).

Serve DIR over HTTP(S) and users run ``helm repo add hami <URL>`` and
``helm install hami hami/hami``. Prints the archive's path. Helm itself is
helm-python-sdk (Helm's Go SDK as a shared library), as everywhere in this repository.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "charts" / "hami"


def lint_problems(archive: Path, values_files: list[Path]) -> list[str]:
    """Warning- and error-level findings of ``helm lint --strict`` of ``archive`` with
    each values file, as ``"<file>: <finding>"`` lines (empty: clean)."""
    import helm_python

    problems = []
    for path in values_files:
        values: dict[str, Any] = yaml.safe_load(path.read_text()) or {}
        report = helm_python.lint(archive, values, strict=True, namespace="hami")
        problems += [f"{path.name}: {m['error']}" for m in report["messages"] if m["severity"] >= 2]
        problems += [f"{path.name}: {e}" for e in report["errors"]]
    return problems


def package(out: Path, base_url: str | None = None, chart: Path = CHART) -> Path:
    """Package, lint and index ``chart`` into ``out``; the archive's path.

    Raises SystemExit listing the lint findings (and removes the archive) when the
    archive is not clean with every values file of ``chart``/examples."""
    import helm_python

    out.mkdir(parents=True, exist_ok=True)
    archive = Path(helm_python.package(chart, destination=out))
    problems = lint_problems(archive, sorted((chart / "examples").glob("*.yaml")))
    if problems:
        archive.unlink()
        raise SystemExit("package-chart: helm lint of the archive:\n  " + "\n  ".join(problems))
    index = out / "index.yaml"
    helm_python.repo_index_generate(
        out, base_url=base_url, merge=index if index.is_file() else None
    )
    return archive


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--out", type=Path, default=REPO / "dist" / "charts")
    parser.add_argument("--url", help="the repository's URL (absolute links in index.yaml)")
    parser.add_argument("--chart", type=Path, default=CHART, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    print(package(args.out, args.url, args.chart))
    return 0


if __name__ == "__main__":
    sys.exit(main())
