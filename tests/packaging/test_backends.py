"""Every backend under backends/hami-* builds an sdist and a wheel that carry the
licence, the README and py.typed, and installs alone next to hami-core."""

from __future__ import annotations

import json
import tarfile
import zipfile
from email.parser import Parser

import pytest

from .conftest import BACKENDS, Dists, Venv, backend_entry_points, project_name

LICENSE_START = "\n                                 Apache License"


@pytest.mark.parametrize("project", BACKENDS, ids=lambda p: p.name)
def test_the_backend_distributions_carry_licence_readme_and_types(dists: Dists, project) -> None:
    name = project_name(project)
    stem = name.replace("-", "_")
    with zipfile.ZipFile(dists.wheel[name]) as zf:
        names = set(zf.namelist())
        (info,) = {n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info")}
        assert zf.read(f"{info}/licenses/LICENSE").decode().startswith(LICENSE_START)
        assert f"{stem}/py.typed" in names
        meta = Parser().parsestr(zf.read(f"{info}/METADATA").decode())
    assert meta["License-Expression"] == "Apache-2.0"
    assert meta["Description-Content-Type"] == "text/markdown"
    readme = (project / "README.md").read_text()
    assert meta.get_payload().strip() == readme.strip()
    # What a user looks for on the package's page: how to install it, its node side.
    assert f"pip install hami-core {name}" in readme and "## Node side" in readme
    assert meta.get_all("Project-URL") and meta.get_all("Classifier") and meta["Keywords"]
    with tarfile.open(dists.sdist[name]) as tf:
        top = tf.getnames()[0].split("/")[0]
        license_file = tf.extractfile(f"{top}/LICENSE")
        assert license_file is not None and license_file.read().decode().startswith(LICENSE_START)
        assert f"{top}/README.md" in tf.getnames()


def test_hami_core_distributions_carry_licence_example_and_types(dists: Dists) -> None:
    with zipfile.ZipFile(dists.wheel["hami-core"]) as zf:
        names = set(zf.namelist())
        meta = Parser().parsestr(zf.read("hami_core-0.1.0.dist-info/METADATA").decode())
    assert "hami_core-0.1.0.dist-info/licenses/LICENSE" in names
    assert {"hami_core/py.typed", "hami_core/examples/cluster.yaml"} <= names
    assert any(n.startswith("hami_core/examples/workloads/") for n in names)
    assert dists.wheel["hami-core"].name.endswith("-py3-none-any.whl")  # pure Python
    assert set(meta.get_all("Provides-Extra")) >= {"server", "testing", "dev"}
    # The light core: no server dependency without the extra.
    plain = [r for r in meta.get_all("Requires-Dist") if "extra ==" not in r]
    assert sorted(r.split(">")[0].split("<")[0] for r in plain) == [
        "attrs",
        "click",
        "jsonpatch",
        "pluggy",
        "pyyaml",
    ]
    with tarfile.open(dists.sdist["hami-core"]) as tf:
        names = set(tf.getnames())
    assert {"hami_core-0.1.0/LICENSE", "hami_core-0.1.0/examples/cluster.yaml"} <= names


@pytest.mark.parametrize("project", BACKENDS, ids=lambda p: p.name)
def test_each_backend_installs_alone_with_hami_core(dists: Dists, make_venv, project) -> None:
    name = project_name(project)
    venv: Venv = make_venv()
    venv.install(dists.wheel["hami-core"], dists.wheel[name])
    listed = venv.hami("backends", "-o", "json")
    assert listed.returncode == 0, listed.stderr
    assert sorted(b["name"] for b in json.loads(listed.stdout)) == backend_entry_points(project)
    report = venv.hami("simulate", "-o", "json")
    assert report.returncode == 0, report.stderr
    assert json.loads(report.stdout)["summary"]["pods"] == 20
