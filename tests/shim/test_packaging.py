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
