"""Installing by name, as users do: every built sdist and wheel in a local PEP 503 index
served over HTTP (simple_index), and ``pip install 'hami-core[server]' hami-nvidia
hami-ascend`` into a fresh venv, pip choosing the files."""

from __future__ import annotations

import hashlib
import json
import platform
import re
import urllib.request

from elftools.elf.elffile import ELFFile

from .conftest import BACKENDS, REPO, Dists, Index, Venv, project_name


def test_the_index_lists_every_built_distribution_with_its_hash(dists: Dists, index: Index) -> None:
    expected: dict[str, set[str]] = {}
    for project in [REPO, *BACKENDS]:
        name = project_name(project)
        expected[name] = {dists.sdist[name].name, dists.wheel[name].name}
    for wheel in dists.cross.values():
        expected["hami-nvidia"].add(wheel.name)
    assert {n: set(f) for n, f in index.files.items()} == expected

    # What pip reads: the project's page, over HTTP, each link with its sha256.
    page = urllib.request.urlopen(index.url + "hami-nvidia/", timeout=30).read().decode()
    links = dict(re.findall(r'href="../../files/([^"#]+)#sha256=([0-9a-f]{64})"', page))
    assert set(links) == expected["hami-nvidia"]
    for name, digest in links.items():
        assert hashlib.sha256((dists.root / name).read_bytes()).hexdigest() == digest
    assert 'data-requires-python="&gt;=3.11"' in page
    listing = urllib.request.urlopen(index.url, timeout=30).read().decode()
    assert set(re.findall(r'href="([^"/]+)/"', listing)) == set(expected)


def test_core_server_nvidia_and_ascend_install_by_name(
    dists: Dists, index: Index, make_venv
) -> None:
    venv: Venv = make_venv()
    installed = venv.install_by_name(index, "hami-core[server]", "hami-nvidia", "hami-ascend")
    urls = {i["metadata"]["name"]: i["download_info"]["url"] for i in installed}
    # ours came from the index, as the wheels for this machine (the manylinux one for
    # hami-nvidia, not its sdist, not the aarch64 wheel beside it)
    for name in ("hami-core", "hami-nvidia", "hami-ascend"):
        assert urls[name] == index.files_url + dists.wheel[name].name, urls[name]
    assert not [i for i in installed if i.get("is_direct")]
    # and the server extra's dependencies with them
    extras = venv.py(
        "from hami_core.extras import missing_modules; print(missing_modules('server'))"
    )
    assert extras.returncode == 0 and extras.stdout.strip() == "[]", extras

    listed = venv.hami("backends", "-o", "json")
    assert listed.returncode == 0, listed.stderr
    assert {b["name"] for b in json.loads(listed.stdout)} == {"nvidia", "ascend"}
    shim = venv.hami("nvidia", "shim-path")
    assert shim.returncode == 0, shim.stderr
    with open(shim.stdout.strip(), "rb") as f:
        machine = ELFFile(f)["e_machine"]
    assert machine == {"x86_64": "EM_X86_64", "aarch64": "EM_AARCH64"}[platform.machine()]
