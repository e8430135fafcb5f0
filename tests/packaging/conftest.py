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

import json
import os
import platform
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import attrs
import pytest

from . import simple_index

REPO = Path(__file__).resolve().parents[2]
BACKENDS = sorted(p for p in (REPO / "backends").glob("hami-*") if (p / "pyproject.toml").is_file())


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.packaging)
            # the first test's setup builds every distribution (and the aarch64 wheel)
            item.add_marker(pytest.mark.timeout(1500))


def project_name(project: Path) -> str:
    return tomllib.loads((project / "pyproject.toml").read_text())["project"]["name"]


def backend_entry_points(project: Path) -> list[str]:
    data = tomllib.loads((project / "pyproject.toml").read_text())
    return sorted(data["project"].get("entry-points", {}).get("hami.backends", {}))


#: The other machine hami-nvidia's wheel is cross-built for (Debian's cross compiler,
#: installed by scripts/cross-install.sh), when this one is x86_64.
CROSS_MACHINE = "aarch64" if platform.machine() == "x86_64" else None
CROSS_CC = {"aarch64": "aarch64-linux-gnu-gcc"}


@attrs.frozen
class Dists:
    """The built distributions, all in ``root``: ``sdist[name]`` and ``wheel[name]`` (for
    this machine) are file paths; ``cross[machine]`` is hami-nvidia's wheel for another
    machine, cross-built from its sdist."""

    root: Path
    sdist: dict[str, Path]
    wheel: dict[str, Path]
    cross: dict[str, Path]


def _run_build(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "build", *args],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, **(env or {})},
    )


def _build(project: Path, out: Path) -> list[subprocess.CompletedProcess[str]]:
    """``python -m build`` of ``project`` (its sdist, then the wheel from the sdist); for
    hami-nvidia also the cross wheel, from that sdist."""
    done = [_run_build("--outdir", str(out), str(project))]
    if project_name(project) == "hami-nvidia" and CROSS_MACHINE and done[0].returncode == 0:
        (sdist,) = out.glob("hami_nvidia-*.tar.gz")
        cc = {"CC": CROSS_CC[CROSS_MACHINE]}
        done.append(_run_build("--wheel", "--outdir", str(out / "cross"), str(sdist), env=cc))
    return done


@pytest.fixture(scope="session")
def dists(tmp_path_factory: pytest.TempPathFactory) -> Dists:
    out = tmp_path_factory.mktemp("dist")
    if CROSS_MACHINE:
        tools = subprocess.run([REPO / "scripts" / "cross-install.sh"], capture_output=True)
        assert tools.returncode == 0, tools.stderr.decode(errors="replace")
    projects = [REPO, *BACKENDS]
    with ThreadPoolExecutor(max_workers=3) as pool:
        results = list(pool.map(lambda p: (p, _build(p, out)), projects))
    for project, procs in results:
        for proc in procs:
            assert proc.returncode == 0, f"building {project} failed:\n{proc.stdout}\n{proc.stderr}"
    sdist, wheel, cross = {}, {}, {}
    for project in projects:
        name = project_name(project)
        stem = name.replace("-", "_")
        (sdist[name],) = out.glob(f"{stem}-*.tar.gz")
        (wheel[name],) = out.glob(f"{stem}-*.whl")
    if CROSS_MACHINE:
        (made,) = (out / "cross").glob("hami_nvidia-*.whl")
        cross[CROSS_MACHINE] = made.rename(out / made.name)
    return Dists(root=out, sdist=sdist, wheel=wheel, cross=cross)


@attrs.frozen
class Index:
    """The built distributions as a package index serves them (simple_index):
    ``url`` is the PEP 503 index (``http://127.0.0.1:<port>/simple/``), ``files`` the
    file names listed per normalized project name."""

    url: str
    files: dict[str, list[str]]

    @property
    def files_url(self) -> str:
        """Where the index's links point (``http://127.0.0.1:<port>/files/``)."""
        return self.url.removesuffix("simple/") + "files/"


@pytest.fixture(scope="session")
def index(dists: Dists, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Index]:
    """Every built sdist and wheel (the cross-built one too) in a local simple index,
    served over HTTP for the session."""
    root = tmp_path_factory.mktemp("index")
    built = sorted([*dists.root.glob("*.whl"), *dists.root.glob("*.tar.gz")])
    files = simple_index.write(built, root)
    with simple_index.serve(root) as url:
        yield Index(url=url, files=files)


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

    def install_by_name(self, index: Index, *requirements: str) -> list[dict[str, Any]]:
        """``pip install`` of ``requirements`` by name: ours from ``index`` (an extra
        index, pip's configured one still serving third-party dependencies). Returns
        what pip installed (its installation report's ``install`` items)."""
        report = self.cwd / "pip-report.json"
        self.install("--extra-index-url", index.url, "--report", report, *requirements)
        return list(json.loads(report.read_text())["install"])

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
