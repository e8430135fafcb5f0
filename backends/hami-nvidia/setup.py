"""Builds libvgpu.so (the shim) and ships it as package data, in a platform wheel.

All metadata lives in pyproject.toml; this file adds three build steps:

- ``sdist`` copies the shim's sources (``<repo>/shim/Makefile`` and ``shim/src/``) into
  ``shim/`` of this project (git-ignored), so the sdist carries them: ``<repo>/shim`` is
  the one copy in the repository.
- ``build_py`` runs ``make`` on those sources (the sdist's ``shim/``, or ``<repo>/shim``
  in a checkout, or ``$HAMI_SHIM_SRC``) into a scratch directory, strips the library
  and copies it to ``hami_nvidia/lib/libvgpu.so`` (of the wheel, or of the source tree
  for an editable install). A missing tool stops the build with one line naming it.
  ``CC`` picks the compiler (``CC=aarch64-linux-gnu-gcc`` cross-builds for aarch64)
  and ``STRIP`` the strip, by default the compiler's own (``aarch64-linux-gnu-strip``).
- ``bdist_wheel`` tags the wheel for the machine the library was compiled for (read
  from its ELF header, so a cross compiler's ``CC`` gives e.g. ``py3-none-linux_aarch64``
  on an x86_64 host): the library is machine code, so the wheel is not pure. It does not
  depend on the Python ABI, hence ``py3-none``. The build backend
  (``build_backend/manylinux_backend.py``) then retags it ``manylinux`` with auditwheel.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sysconfig
import tempfile
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70.1
    from wheel.bdist_wheel import bdist_wheel  # type: ignore[no-redef]

HERE = Path(__file__).resolve().parent
REPO_SHIM = HERE.parent.parent / "shim"
SDIST_SHIM = HERE / "shim"
#: What the shim's ``make all`` reads (relative to shim/).
SHIM_FILES = ("Makefile", "README.md", "src")


def shim_sources() -> Path:
    """The shim directory to build: $HAMI_SHIM_SRC, the sdist's copy, or the checkout's."""
    if os.environ.get("HAMI_SHIM_SRC"):
        return Path(os.environ["HAMI_SHIM_SRC"])
    in_sdist = (HERE / "PKG-INFO").is_file()
    return SDIST_SHIM if in_sdist or not (REPO_SHIM / "Makefile").is_file() else REPO_SHIM


def fail(message: str) -> SystemExit:
    return SystemExit(f"error: hami-nvidia: {message}")


def cross_tool(cc: str, tool: str) -> str:
    """``tool`` of the same toolchain as ``cc``: ``aarch64-linux-gnu-strip`` for
    ``aarch64-linux-gnu-gcc`` (Debian's cross compilers), else plain ``tool``."""
    name = Path(cc.split()[0]).name
    for driver in ("gcc", "clang", "cc"):
        if name.endswith(f"-{driver}"):
            return name.removesuffix(driver) + tool
    return tool


def build_shim() -> Path:
    """Run ``make all`` in a scratch build dir; return the stripped library's path."""
    src = shim_sources()
    if not (src / "Makefile").is_file():
        raise fail(
            f"the libvgpu.so sources are not at {src} (build from the sdist or a checkout, "
            "or set HAMI_SHIM_SRC to the shim/ directory)"
        )
    make, cc = os.environ.get("MAKE", "make"), os.environ.get("CC", "cc")
    for tool, what in ((make, "make"), (cc.split()[0], "a C compiler")):
        if shutil.which(tool) is None:
            raise fail(
                f"building libvgpu.so needs '{tool}' ({what}), which is not on PATH "
                "(Debian/Ubuntu: apt-get install make gcc libc6-dev; Fedora/RHEL: dnf "
                "install make gcc glibc-devel)"
            )
    out = Path(tempfile.mkdtemp(prefix="hami-shim-"))
    try:
        proc = subprocess.run(
            [make, "-C", str(src), f"BUILD={out}", f"CC={cc}", "all"],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            # The Makefile's tool check says what is missing in one "error: " line.
            said = [ln for ln in proc.stderr.splitlines() if ln.startswith("error: ")]
            if said:
                raise fail(said[0].removeprefix("error: "))
            raise fail(f"building libvgpu.so failed:\n{proc.stdout}\n{proc.stderr}")
        lib = out / "libvgpu.so"
        strip = os.environ.get("STRIP") or cross_tool(cc, "strip")
        if shutil.which(strip) is not None:  # binutils comes with the compiler
            subprocess.run([strip, "--strip-unneeded", str(lib)], check=True)
        final = Path(tempfile.mkdtemp(prefix="hami-shim-lib-")) / "libvgpu.so"
        shutil.copy2(lib, final)
        return final
    finally:
        shutil.rmtree(out, ignore_errors=True)


class BuildPyWithShim(build_py):
    def run(self) -> None:
        super().run()
        lib = build_shim()
        if getattr(self, "editable_mode", False):
            target = HERE / "hami_nvidia" / "lib"
        else:
            target = Path(self.build_lib) / "hami_nvidia" / "lib"
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy2(lib, target / "libvgpu.so")
        shutil.rmtree(lib.parent, ignore_errors=True)


class SdistWithShim(sdist):
    def run(self) -> None:
        if (REPO_SHIM / "Makefile").is_file() and not (HERE / "PKG-INFO").is_file():
            shutil.rmtree(SDIST_SHIM, ignore_errors=True)
            for name in SHIM_FILES:
                src = REPO_SHIM / name
                if src.is_dir():
                    shutil.copytree(src, SDIST_SHIM / name)
                else:
                    SDIST_SHIM.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(src, SDIST_SHIM / name)
        if not (SDIST_SHIM / "Makefile").is_file():
            raise fail(f"no shim sources to put in the sdist (looked in {REPO_SHIM})")
        super().run()


class BinaryDistribution(Distribution):
    """Holds machine code: built into platlib, and the wheel says Root-Is-Purelib: false."""

    def has_ext_modules(self) -> bool:
        return True


#: ELF e_machine -> the machine part of a ``linux_<machine>`` platform tag (PEP 600's
#: names; the ELF specification's EM_* numbers). ppc64 is big-endian EM_PPC64.
ELF_MACHINES = {3: "i686", 62: "x86_64", 183: "aarch64", 22: "s390x", 243: "riscv64"}
EM_PPC64 = 21


def elf_machine(lib: Path) -> str:
    """The platform-tag machine (``x86_64``, ``aarch64``, ...) a shared library was built
    for, from its ELF header (e_ident[EI_DATA] gives the byte order of e_machine at
    offset 18). Raises SystemExit naming the file when it is not an ELF of a known one."""
    head = lib.read_bytes()[:20]
    if len(head) < 20 or head[:4] != b"\x7fELF" or head[5] not in (1, 2):
        raise fail(f"{lib} is not an ELF file")
    little = head[5] == 1
    number = int.from_bytes(head[18:20], "little" if little else "big")
    if number == EM_PPC64:
        return "ppc64le" if little else "ppc64"
    if number not in ELF_MACHINES:
        raise fail(f"{lib}: no platform tag for ELF machine {number}")
    return ELF_MACHINES[number]


class PlatformWheel(bdist_wheel):
    """Tags the wheel ``py3-none-linux_<machine of libvgpu.so>`` (``bdist_wheel`` asks
    after the build, so the library is there)."""

    def get_tag(self) -> tuple[str, str, str]:
        build_lib = Path(self.get_finalized_command("build_py").build_lib)
        lib = build_lib / "hami_nvidia" / "lib" / "libvgpu.so"
        if not lib.is_file():  # an editable install asks before it builds: this host
            return "py3", "none", sysconfig.get_platform().replace("-", "_").replace(".", "_")
        return "py3", "none", f"linux_{elf_machine(lib)}"


setup(
    distclass=BinaryDistribution,
    cmdclass={"build_py": BuildPyWithShim, "sdist": SdistWithShim, "bdist_wheel": PlatformWheel},
)
