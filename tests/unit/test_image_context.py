"""The image's build context (``COPY . /src`` in the Dockerfile) as ``.dockerignore``
leaves it, read with docker's own matcher (``docker.utils.build.exclude_paths``, the
rules ``docker build`` applies): every source file is in it, nothing a build, a test run
or a venv leaves is (each ``.gitignore`` entry, at the top and in a backend)."""

import re
import subprocess
from pathlib import Path

from docker.utils.build import exclude_paths

ROOT = Path(__file__).resolve().parents[2]


def _patterns() -> list[str]:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def _gitignored_samples() -> list[str]:
    """A concrete path for each ``.gitignore`` entry; an entry with no inner slash
    matches at any depth in git, so it is also tried inside a backend."""
    samples = []
    for line in (ROOT / ".gitignore").read_text().splitlines():
        entry = line.strip()
        if not entry or entry.startswith("#"):
            continue
        is_dir = entry.endswith("/")
        concrete = re.sub(r"\[[^]]*\]", "1", entry.rstrip("/")).replace("*", "x")
        leaf = f"{concrete}/f" if is_dir else concrete
        samples.append(leaf)
        if "/" not in entry.rstrip("/"):
            samples.append(f"backends/hami-x/{leaf}")
    return samples


def test_no_build_output_enters_the_image_context(tmp_path):
    samples = _gitignored_samples()
    assert {"dist/f", ".import_linter_cache/f", "backends/hami-x/dist/f"} <= set(samples)
    for rel in [*samples, "hami_core/__init__.py", "backends/hami-x/pyproject.toml"]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x")
    context = set(exclude_paths(str(tmp_path), _patterns()))
    assert {"hami_core/__init__.py", "backends/hami-x/pyproject.toml"} <= context
    assert sorted(s for s in samples if s in context) == []


def test_every_source_file_is_in_the_image_context():
    tracked = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    context = set(exclude_paths(str(ROOT), _patterns()))
    assert sorted(f for f in tracked if (ROOT / f).is_file() and f not in context) == []
