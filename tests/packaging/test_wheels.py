"""hami-nvidia's wheels as an index needs them: tagged ``manylinux`` for exactly the C
library versions libvgpu.so uses, for this machine and cross-built for aarch64, and
the shim's own tests passing on the aarch64 wheel's library under QEMU user-mode.

The expected tag is worked out here from binutils' ``readelf`` (the library's machine,
NEEDED libraries and versioned symbol needs) and the manylinux policies of PEP 600 as
auditwheel ships them; auditwheel's own verdict must agree.
"""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
import zipfile
from importlib import resources
from pathlib import Path

import attrs
import pytest

from tests.skips import not_applicable_if

from .conftest import CROSS_MACHINE, REPO, Dists

#: readelf's name of each machine (the ELF header's e_machine).
READELF_MACHINE = {"x86_64": "Advanced Micro Devices X86-64", "aarch64": "AArch64"}
#: The C library, all that libvgpu.so may need (it dlopens the driver at run time).
C_LIBRARY = {"libc.so.6", "libdl.so.2", "libpthread.so.0"}
LIB = "hami_nvidia/lib/libvgpu.so"
MACHINES = [platform.machine(), *([CROSS_MACHINE] if CROSS_MACHINE else [])]


@attrs.frozen
class ElfFacts:
    machine: str  # readelf's "Machine:"
    needed: frozenset[str]
    #: versioned symbol needs per library: {"libc.so.6": {"GLIBC_2.34", ...}}
    versions: dict[str, frozenset[str]]


def readelf(lib: Path) -> ElfFacts:
    """Machine, NEEDED and version needs of ``lib``, as binutils' readelf shows them."""
    out = subprocess.run(
        ["readelf", "--wide", "-h", "-d", "-V", str(lib)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    (machine,) = re.findall(r"^\s*Machine:\s+(.+?)\s*$", out, re.M)
    needed = frozenset(re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", out))
    versions: dict[str, set[str]] = {}
    current = None
    for line in out.splitlines():
        if m := re.search(r"File: (\S+)\s+Cnt:", line):
            current = versions.setdefault(m[1], set())
        elif (m := re.search(r"Name: (\S+)\s+Flags:", line)) and current is not None:
            current.add(m[1])
    return ElfFacts(machine, needed, {k: frozenset(v) for k, v in versions.items()})


def oldest_manylinux(facts: ElfFacts, machine: str) -> str:
    """The manylinux tag of the oldest policy (PEP 600, auditwheel's policy file) that
    allows every library ``facts`` needs and every symbol version it uses."""
    policies = json.loads(
        resources.files("auditwheel.policy").joinpath("manylinux-policy.json").read_text()
    )
    fitting = []
    for policy in policies:
        if policy["name"] == "linux" or machine not in policy["symbol_versions"]:
            continue
        allowed = policy["symbol_versions"][machine]
        if not facts.needed <= set(policy["lib_whitelist"]):
            continue
        if all(
            v.split("_", 1)[1] in allowed.get(v.split("_", 1)[0], [])
            for needs in facts.versions.values()
            for v in needs
        ):
            fitting.append(policy)
    assert fitting, f"no manylinux policy allows {facts}"
    return f"{max(fitting, key=lambda p: p['priority'])['name']}_{machine}"


def wheel_of(dists: Dists, machine: str) -> Path:
    return dists.wheel["hami-nvidia"] if machine == platform.machine() else dists.cross[machine]


def library_of(wheel: Path, into: Path) -> Path:
    with zipfile.ZipFile(wheel) as zf:
        lib = into / "libvgpu.so"
        lib.write_bytes(zf.read(LIB))
    return lib


@pytest.mark.parametrize("machine", MACHINES)
def test_the_nvidia_wheel_is_tagged_manylinux_for_what_libvgpu_uses(
    dists: Dists, machine: str, tmp_path: Path
) -> None:
    wheel = wheel_of(dists, machine)
    facts = readelf(library_of(wheel, tmp_path))
    assert facts.machine == READELF_MACHINE[machine]
    # Only the C library: nothing for auditwheel to graft, nothing beyond any policy.
    assert "libc.so.6" in facts.needed and facts.needed <= C_LIBRARY, facts.needed
    assert set(facts.versions) <= C_LIBRARY
    tag = oldest_manylinux(facts, machine)
    assert wheel.name == f"hami_nvidia-0.1.0-py3-none-{tag}.whl"
    with zipfile.ZipFile(wheel) as zf:
        meta = zf.read("hami_nvidia-0.1.0.dist-info/WHEEL").decode()
    assert "Root-Is-Purelib: false" in meta and f"Tag: py3-none-{tag}\n" in meta

    # auditwheel (the tool an index's users trust) says the same, with nothing to graft.
    shown = subprocess.run(
        [Path(sys.executable).parent / "auditwheel", "show", wheel],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert shown.returncode == 0, shown.stderr
    text = " ".join(shown.stdout.split())
    assert f'consistent with the following platform tag: "{tag}"' in text, text
    assert "system-provided shared libraries: libc.so.6" in text


@not_applicable_if(CROSS_MACHINE is None, "cross-builds from an x86_64 host only")
def test_the_aarch64_wheel_holds_what_the_native_one_holds(dists: Dists) -> None:
    native, cross = dists.wheel["hami-nvidia"], dists.cross["aarch64"]
    with zipfile.ZipFile(native) as a, zipfile.ZipFile(cross) as b:
        assert sorted(a.namelist()) == sorted(b.namelist())
        for name in a.namelist():
            if name.endswith(("/WHEEL", "/RECORD")) or name == LIB:
                continue
            assert a.read(name) == b.read(name), name
        assert a.read(LIB) != b.read(LIB)
        # stripped like the native one: no symbol table, no debug sections
        assert b.read(LIB).count(b".debug_info") == 0 and b".symtab" not in b.read(LIB)


@not_applicable_if(CROSS_MACHINE is None, "cross-builds from an x86_64 host only")
def test_the_shim_tests_pass_on_the_aarch64_wheels_library_under_qemu(
    dists: Dists, tmp_path: Path
) -> None:
    """tests/shim with HAMI_SHIM_ARCH=aarch64: its programs and stand-in drivers built by
    the cross compiler, all run under qemu-aarch64-static with the wheel's libvgpu.so
    preloaded (tests/shim/conftest.py lists what only runs natively, and why)."""
    lib = library_of(dists.cross["aarch64"], tmp_path)
    env = {**os.environ, "HAMI_SHIM_ARCH": "aarch64", "HAMI_SHIM_LIB": str(lib)}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", "tests/shim"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    summary = proc.stdout.strip().splitlines()[-1]
    passed = int(re.search(r"(\d+) passed", summary)[1])  # type: ignore[index]
    assert passed >= 100 and "failed" not in summary and "error" not in summary, summary
    skipped = [ln for ln in proc.stdout.splitlines() if ln.startswith("SKIPPED")]
    assert all("native only under QEMU" in ln or "NVIDIA driver" in ln for ln in skipped), skipped


def _backend():
    """backends/hami-nvidia/build_backend/manylinux_backend.py, imported from the tree."""
    import importlib.util

    path = REPO / "backends" / "hami-nvidia" / "build_backend" / "manylinux_backend.py"
    spec = importlib.util.spec_from_file_location("hami_nvidia_manylinux_backend", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _wheel_with(lib: Path, out: Path) -> Path:
    """A minimal platform wheel ``demo-0.1`` holding ``lib`` as demo/lib.so."""
    tag = f"py3-none-linux_{platform.machine()}"
    wheel = out / f"demo-0.1-{tag}.whl"
    info = "demo-0.1.dist-info"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.write(lib, "demo/lib.so")
        zf.writestr(f"{info}/METADATA", "Metadata-Version: 2.1\nName: demo\nVersion: 0.1\n")
        zf.writestr(
            f"{info}/WHEEL",
            f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: {tag}\n",
        )
        zf.writestr(f"{info}/RECORD", f"demo/lib.so,,\n{info}/METADATA,,\n{info}/WHEEL,,\n")
    return wheel


def test_a_library_beyond_the_policy_stops_the_build(tmp_path: Path, monkeypatch) -> None:
    """The repair grafts nothing: a library that needs one outside every manylinux
    policy (here a libextra.so that auditwheel could find and graft) fails the build
    with auditwheel's reason instead of shipping a wheel with a copied library."""
    src = tmp_path / "x.c"
    src.write_text("int extra(void);\nint use(void) { return extra(); }\n")
    (tmp_path / "extra.c").write_text("int extra(void) { return 1; }\n")
    cc = ["cc", "-shared", "-fPIC"]
    subprocess.run([*cc, "-o", tmp_path / "libextra.so", tmp_path / "extra.c"], check=True)
    lib = tmp_path / "libdemo.so"
    subprocess.run([*cc, "-o", lib, src, f"-L{tmp_path}", "-lextra"], check=True)
    monkeypatch.setenv("LD_LIBRARY_PATH", str(tmp_path))  # where auditwheel finds libextra
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(SystemExit) as stopped:
        _backend().repair(_wheel_with(lib, tmp_path), out)
    message = str(stopped.value)
    assert message.startswith(
        "error: hami-nvidia: auditwheel cannot retag demo-0.1-py3-none-linux_"
    )
    assert "libextra.so" in message, message
    assert "HAMI_NVIDIA_REPAIR=0" in message
    assert list(out.iterdir()) == []

    # The same wheel with only the C library is retagged, nothing added.
    plain = tmp_path / "plain"
    plain.mkdir()
    subprocess.run([*cc, "-o", plain / "libdemo.so", tmp_path / "extra.c"], check=True)
    name = _backend().repair(_wheel_with(plain / "libdemo.so", plain), out)
    # (an old policy's tag comes with its alias: manylinux1_x86_64.manylinux_2_5_x86_64)
    machine = platform.machine()
    assert re.fullmatch(rf"demo-0\.1-py3-none-(\w+\.)?manylinux_2_\d+_{machine}\.whl", name)
    with zipfile.ZipFile(out / name) as zf:
        assert not [n for n in zf.namelist() if ".libs/" in n]
