"""Installing the hami-nvidia sdist without a compiler or without the C library headers
stops with one line that names what is missing."""

from __future__ import annotations

import shutil

import pytest

from .conftest import Dists, Venv


def failed_install(venv: Venv, sdist, cc: str) -> str:
    import os
    import subprocess
    import sys

    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(venv.python),
            "install",
            "--no-deps",
            "--disable-pip-version-check",
            str(sdist),
        ],
        capture_output=True,
        text=True,
        env={**venv.env(), "CC": cc, "PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        cwd=venv.cwd,
        timeout=600,
    )
    assert proc.returncode != 0
    return proc.stdout + proc.stderr


def test_a_missing_compiler_is_named(dists: Dists, make_venv) -> None:
    out = failed_install(make_venv(), dists.sdist["hami-nvidia"], "no-such-cc")
    assert (
        "error: hami-nvidia: building libvgpu.so needs 'no-such-cc' (a C compiler), which "
        "is not on PATH (Debian/Ubuntu: apt-get install make gcc libc6-dev; Fedora/RHEL: "
        "dnf install make gcc glibc-devel)"
    ) in out


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_missing_c_library_headers_are_named(dists: Dists, make_venv) -> None:
    # -nostdinc: a compiler that finds no C library headers, as on a machine without
    # libc6-dev.
    out = failed_install(make_venv(), dists.sdist["hami-nvidia"], "gcc -nostdinc")
    assert (
        "error: hami-nvidia: 'gcc -nostdinc' cannot build against the C library: install "
        "its headers (Debian/Ubuntu: libc6-dev, Fedora/RHEL: glibc-devel)"
    ) in out
