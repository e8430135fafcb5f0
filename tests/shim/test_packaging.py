"""Installing hami-nvidia builds libvgpu.so and ships it as package data."""

import subprocess
import sys
import zipfile
from pathlib import Path

from hami_nvidia.shim import library_path

ROOT = Path(__file__).resolve().parents[2]


def test_the_wheel_carries_the_library(tmp_path):
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path),
            str(ROOT / "backends" / "hami-nvidia"),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    (wheel,) = tmp_path.glob("hami_nvidia-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        info = zf.getinfo("hami_nvidia/lib/libvgpu.so")
        assert info.file_size > 10_000
        assert zf.read("hami_nvidia/lib/libvgpu.so")[:4] == b"\x7fELF"


def test_installed_library_path_and_cli():
    path = library_path()
    assert path.is_file() and path.read_bytes()[:4] == b"\x7fELF"
    out = subprocess.run(
        [str(Path(sys.executable).parent / "hami"), "nvidia", "shim-path"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == str(path)


def test_a_missing_compiler_is_named(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "CC": "no-such-cc"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path),
            str(ROOT / "backends" / "hami-nvidia"),
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert proc.returncode != 0
    assert "needs 'no-such-cc'" in proc.stdout + proc.stderr


def test_install_hook_files_is_atomic_and_idempotent(tmp_path):
    from hami_nvidia.shim import install_hook_files

    hook = tmp_path / "vgpu"
    paths = install_hook_files(hook)
    lib, preload = hook / "libvgpu.so", hook / "ld.so.preload"
    assert paths == [str(lib), str(preload)]
    assert lib.read_bytes() == library_path().read_bytes()
    assert preload.read_text() == "/usr/local/vgpu/libvgpu.so\n"
    assert (hook / "containers").is_dir()
    before = lib.stat().st_ino
    install_hook_files(hook)
    assert lib.stat().st_ino == before  # unchanged content: not rewritten
    lib.write_bytes(b"stale")
    install_hook_files(hook)
    assert lib.read_bytes() == library_path().read_bytes() and not list(hook.glob(".*tmp*"))


def test_prepare_node_hook_installs_into_hook_path(tmp_path):
    from hami_core.plugin import BackendManager
    from hami_core.protocol.config import parse_config

    base = BackendManager.from_entry_points(disabled=[])
    manager = base.with_config(
        parse_config({"version": "v1", "nvidia": {"hookPath": str(tmp_path)}}, backends=base.infos)
    )
    assert manager.prepare_node("nvidia") == [
        str(tmp_path / "libvgpu.so"),
        str(tmp_path / "ld.so.preload"),
    ]
    preset = base.with_config(
        parse_config({"version": "v1", "nvidia": {"libraryPath": "/opt/x.so"}}, backends=base.infos)
    )
    assert preset.prepare_node("nvidia") == []


def test_an_unwritable_hook_path_is_an_error(tmp_path):
    import pytest
    from hami_nvidia.shim import install_hook_files

    from hami_core.errors import HamiError

    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(HamiError, match="cannot install the shim under"):
        install_hook_files(blocker / "vgpu")
