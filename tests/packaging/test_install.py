"""Installing the built sdists into fresh venvs, as a user does, and running hami.

1. hami-core + hami-nvidia from their sdists (hami-nvidia compiles libvgpu.so);
2. hami-core + one other backend only;
3. hami-core alone: the light core (simulate works, servers name their extra).
"""

from __future__ import annotations

import json
import platform
import re
import tarfile
import textwrap
import zipfile
from pathlib import Path

from elftools.elf.elffile import ELFFile

from .conftest import REPO, Dists, Index, Venv

#: ELF e_machine of each machine platform.machine() names (the ELF specification's
#: EM_* constants, as pyelftools spells them).
ELF_MACHINE = {"x86_64": "EM_X86_64", "aarch64": "EM_AARCH64", "arm64": "EM_AARCH64"}


def site_packages(venv: Venv) -> Path:
    (site,) = (venv.path / "lib").glob("python3*/site-packages")
    return site


def assert_installed_not_from_the_repository(venv: Venv, *modules: str) -> None:
    code = (
        "import sys, json, importlib\n"
        f"mods = {list(modules)!r}\n"
        "print(json.dumps({'path': sys.path, 'files': "
        "[importlib.import_module(m).__file__ for m in mods]}))"
    )
    proc = venv.py(code)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    assert not any(p and Path(p).resolve() == REPO for p in seen["path"])
    site = site_packages(venv)
    for f in seen["files"]:
        assert Path(f).is_relative_to(site), f


def simulate_summary(venv: Venv, *args: str) -> dict[str, object]:
    proc = venv.hami("simulate", "-o", "json", *args)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_core_and_nvidia_from_their_sdists(dists: Dists, index: Index, make_venv) -> None:
    # By name from the index, as pip does where no wheel fits (an older C library).
    venv: Venv = make_venv()
    installed = venv.install_by_name(
        index, "--no-binary", "hami-core,hami-nvidia", "hami-core", "hami-nvidia"
    )
    ours = {i["metadata"]["name"]: i["download_info"]["url"] for i in installed}
    assert ours["hami-core"] == index.files_url + dists.sdist["hami-core"].name
    assert ours["hami-nvidia"] == index.files_url + dists.sdist["hami-nvidia"].name
    assert_installed_not_from_the_repository(venv, "hami_core", "hami_nvidia")

    backends = json.loads(venv.hami("backends", "-o", "json").stdout)
    assert [b["name"] for b in backends] == ["nvidia"]
    assert venv.hami("--version").stdout == "hami-core 0.1.0\n"

    # The bundled example, from the installed package data, run from another directory.
    report = simulate_summary(venv)
    site = site_packages(venv)
    assert Path(str(report["cluster"]["source"])).is_relative_to(site / "hami_core" / "examples")
    assert report["summary"]["placed"] == 19 and report["summary"]["unschedulable"] == 1
    assert report["warnings"] == []

    # The web view's page, script and style are package data (hami ui fetches nothing
    # from elsewhere), in the wheel pip built from the sdist and in the one built here.
    for name in ("index.html", "ui.js", "ui.css"):
        assert (site / "hami_core" / "ui" / "static" / name).is_file(), name
    with zipfile.ZipFile(dists.wheel["hami-core"]) as zf:
        assert {f"hami_core/ui/static/{n}" for n in ("index.html", "ui.js", "ui.css")} <= set(
            zf.namelist()
        )

    # libvgpu.so was compiled by pip from the sdist: an ELF of this machine, stripped.
    shim = venv.hami("nvidia", "shim-path")
    assert shim.returncode == 0, shim.stderr
    lib = Path(shim.stdout.strip())
    assert lib.is_relative_to(site) and lib.is_file()
    with lib.open("rb") as f:
        elf = ELFFile(f)
        assert elf["e_machine"] == ELF_MACHINE[platform.machine()]
        assert elf["e_type"] == "ET_DYN"
        sections = {s.name for s in elf.iter_sections()}
    assert ".symtab" not in sections and not any(s.startswith(".debug") for s in sections)

    # The wheel pip built and installed is a manylinux wheel (the build backend's
    # auditwheel repair), the same tag as the built one, and carries the licence.
    (dist_info,) = site.glob("hami_nvidia-*.dist-info")
    wheel_meta = (dist_info / "WHEEL").read_text()
    assert "Root-Is-Purelib: false" in wheel_meta
    tag = dists.wheel["hami-nvidia"].name.removesuffix(".whl").split("-", 2)[2]
    assert re.fullmatch(rf"py3-none-manylinux_2_\d+_{platform.machine()}", tag), tag
    assert f"Tag: {tag}\n" in wheel_meta
    for name in ("hami_core", "hami_nvidia"):
        (info,) = site.glob(f"{name}-*.dist-info")
        assert (
            (info / "licenses" / "LICENSE")
            .read_text()
            .startswith("\n                                 Apache License")
        )


def test_the_nvidia_distributions_as_built(dists: Dists) -> None:
    wheel = dists.wheel["hami-nvidia"]
    assert re.search(rf"-py3-none-manylinux_2_\d+_{platform.machine()}\.whl$", wheel.name), wheel
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        assert "hami_nvidia/lib/libvgpu.so" in names and "hami_nvidia/py.typed" in names
        assert "hami_nvidia-0.1.0.dist-info/licenses/LICENSE" in names
        assert "Root-Is-Purelib: false" in zf.read("hami_nvidia-0.1.0.dist-info/WHEEL").decode()
    with tarfile.open(dists.sdist["hami-nvidia"]) as tf:
        names = set(tf.getnames())
    top = "hami_nvidia-0.1.0"
    # The shim's sources travel in the sdist, the same files as <repo>/shim.
    for src in [REPO / "shim" / "Makefile", *sorted((REPO / "shim" / "src").iterdir())]:
        assert f"{top}/shim/{src.relative_to(REPO / 'shim')}" in names, src
    assert f"{top}/LICENSE" in names and f"{top}/README.md" in names
    # and the build backend that repairs the wheel it builds
    assert f"{top}/build_backend/manylinux_backend.py" in names
    assert not any("/lib/libvgpu.so" in n for n in names)  # sources, not a stale binary


def test_core_and_one_other_backend_only(dists: Dists, make_venv) -> None:
    venv: Venv = make_venv()
    venv.install(dists.sdist["hami-core"], dists.sdist["hami-ascend"])
    assert_installed_not_from_the_repository(venv, "hami_core", "hami_ascend")
    backends = json.loads(venv.hami("backends", "-o", "json").stdout)
    assert [b["name"] for b in backends] == ["ascend"]
    assert venv.hami("nvidia", "shim-path").returncode != 0  # no NVIDIA command here

    # The bundled example runs (its NVIDIA GPUs left out, said so) ...
    report = simulate_summary(venv)
    assert report["cluster"]["gpus"] == 0 and report["summary"]["unmanaged"] == 20
    assert "pip install hami-nvidia" in report["warnings"][0]
    # ... and the installed backend places its own devices.
    (venv.cwd / "cluster.yaml").write_text(
        textwrap.dedent(
            """\
            nodes:
              - name: npu-node
                gpus:
                  - {vendor: Ascend910B3, model: Ascend910B3, memoryMiB: 65536, count: 2}
            """
        )
    )
    (venv.cwd / "pod.yaml").write_text(
        textwrap.dedent(
            """\
            apiVersion: v1
            kind: Pod
            metadata: {name: train, namespace: default}
            spec:
              containers:
                - name: c
                  image: x
                  resources:
                    limits: {huawei.com/Ascend910B3: 1, huawei.com/Ascend910B3-memory: 16384}
            """
        )
    )
    placed = simulate_summary(venv, "--cluster", "cluster.yaml", "pod.yaml")
    assert placed["summary"]["placed"] == 1, placed
    (pod,) = placed["pods"]
    assert pod["node"] == "npu-node" and len(pod["devices"]) == 1


def test_core_alone_is_light_and_names_the_extras(dists: Dists, make_venv) -> None:
    venv: Venv = make_venv()
    venv.install(dists.sdist["hami-core"])
    assert_installed_not_from_the_repository(venv, "hami_core")

    installed = venv.py(
        "import importlib.metadata as m; print(' '.join(sorted({d.metadata['Name'].lower() "
        "for d in m.distributions()})))"
    ).stdout.split()
    assert set(installed) <= {
        "hami-core",
        "pluggy",
        "attrs",
        "click",
        "pyyaml",
        "jsonpatch",
        "jsonpointer",
    }, installed

    assert "no backends installed" in venv.hami("backends").stdout
    report = simulate_summary(venv)
    assert report["summary"]["pods"] == 20 and report["summary"]["unmanaged"] == 20
    assert "pip install hami-nvidia" in report["warnings"][0]
    text = venv.hami("simulate")
    assert text.returncode == 0 and "Summary: 0 pods on 0 GPUs" in text.stdout

    for command in (
        ["scheduler"],
        ["webhook"],
        ["device-plugin", "--node-name", "n"],
        ["monitor", "--node-name", "n"],
    ):
        proc = venv.hami(*command)
        assert proc.returncode == 2, proc
        (line,) = proc.stderr.strip().splitlines()
        assert line.startswith(f"error: hami {command[0]} needs hami-core[server] (not installed: ")
        assert line.endswith("install it with: pip install 'hami-core[server]'")
    # hami top reads the bundled snapshot without the extra; the API server needs it.
    assert venv.hami("top", "--example").returncode == 0
    top = venv.hami("top")
    assert top.returncode == 2 and "hami top needs hami-core[server]" in top.stderr
    kit = venv.py("import hami_core.testing")
    assert "needs hami-core[testing] (not installed: pytest)" in kit.stderr
