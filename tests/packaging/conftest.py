"""The packaging tier: build every distribution as a release would, install them as
users do, and run what users run.

One session fixture builds every sdist and wheel (``python -m build``: the sdist, then
the wheel from the unpacked sdist, in isolated build environments) into one temporary
directory. Each test installs some of them into a fresh venv made here, runs commands
from another directory with a clean environment (no repository on ``sys.path``, no
editable install), and checks the outcome. Dependencies come from the package index
through pip's cache.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import attrs
import pytest

REPO = Path(__file__).resolve().parents[2]
BACKENDS = sorted(p for p in (REPO / "backends").glob("hami-*") if (p / "pyproject.toml").is_file())


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.packaging)


def project_name(project: Path) -> str:
    return tomllib.loads((project / "pyproject.toml").read_text())["project"]["name"]


def backend_entry_points(project: Path) -> list[str]:
    data = tomllib.loads((project / "pyproject.toml").read_text())
    return sorted(data["project"].get("entry-points", {}).get("hami.backends", {}))


@attrs.frozen
class Dists:
    """The built distributions: ``sdist[name]`` and ``wheel[name]`` are file paths."""

    root: Path
    sdist: dict[str, Path]
    wheel: dict[str, Path]


def _build(project: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(project)],
        capture_output=True,
        text=True,
        timeout=900,
    )


@pytest.fixture(scope="session")
def dists(tmp_path_factory: pytest.TempPathFactory) -> Dists:
    out = tmp_path_factory.mktemp("dist")
    projects = [REPO, *BACKENDS]
    with ThreadPoolExecutor(max_workers=3) as pool:
        results = list(pool.map(lambda p: (p, _build(p, out)), projects))
    for project, proc in results:
        assert proc.returncode == 0, f"building {project} failed:\n{proc.stdout}\n{proc.stderr}"
    sdist, wheel = {}, {}
    for project in projects:
        name = project_name(project)
        stem = name.replace("-", "_")
        (sdist[name],) = out.glob(f"{stem}-*.tar.gz")
        (wheel[name],) = out.glob(f"{stem}-*.whl")
    return Dists(root=out, sdist=sdist, wheel=wheel)


@attrs.frozen
class Venv:
    """A fresh virtual environment; commands run in ``cwd`` (not the repository) with
    only its ``bin`` and the system's on PATH."""

    path: Path
    cwd: Path

    @property
    def bin(self) -> Path:
        return self.path / "bin"

    @property
    def python(self) -> Path:
        return self.bin / "python"

    def env(self) -> dict[str, str]:
        keep = {k: os.environ[k] for k in ("HOME", "LANG", "TMPDIR") if k in os.environ}
        return {**keep, "PATH": f"{self.bin}:/usr/local/bin:/usr/bin:/bin"}

    def install(self, *args: str | Path, timeout: float = 900) -> None:
        # The outer pip installs into this interpreter (pip --python), so the venv
        # itself needs no pip; the build of an sdist gets the system's compiler.
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "--python",
                str(self.python),
                "install",
                "--quiet",
                "--disable-pip-version-check",
                *map(str, args),
            ],
            capture_output=True,
            text=True,
            env={**self.env(), "PATH": f"{self.bin}:{os.environ.get('PATH', '/usr/bin:/bin')}"},
            cwd=self.cwd,
            timeout=timeout,
        )
        assert proc.returncode == 0, f"pip install {args} failed:\n{proc.stdout}\n{proc.stderr}"

    def run(self, *args: str | Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(a) for a in args],
            capture_output=True,
            text=True,
            env=self.env(),
            cwd=self.cwd,
            timeout=timeout,
        )

    def hami(self, *args: str | Path) -> subprocess.CompletedProcess[str]:
        return self.run(self.bin / "hami", *args)

    def py(self, code: str) -> subprocess.CompletedProcess[str]:
        return self.run(self.python, "-c", code)


@pytest.fixture
def make_venv(tmp_path: Path) -> Iterator[object]:
    made = 0

    def make() -> Venv:
        nonlocal made
        made += 1
        path = tmp_path / f"venv{made}"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
        cwd = tmp_path / f"elsewhere{made}"
        cwd.mkdir()
        return Venv(path=path, cwd=cwd)

    yield make
