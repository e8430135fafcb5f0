"""Where the installed libvgpu.so is (built from ``shim/`` when hami-nvidia is installed)."""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

from hami_core.backend import HamiError


def library_path() -> Path:
    """Absolute path of the libvgpu.so shipped in this package.

    Raises:
        HamiError: the package was installed without the library (a broken build).
    """
    path = Path(str(resources.files("hami_nvidia") / "lib" / "libvgpu.so"))
    if not path.is_file():
        raise HamiError(
            f"libvgpu.so is missing at {path}: reinstall hami-nvidia (pip install "
            "--force-reinstall hami-nvidia; building it from source needs make and a C compiler)"
        )
    return path


def install_hook_files(
    hook_path: str | Path, *, container_dir: str = "/usr/local/vgpu"
) -> list[str]:
    """Install ``libvgpu.so`` and an ``ld.so.preload`` naming it under ``hook_path`` on the
    host, where Allocate mounts them from (PROTOCOL.md §7).

    Files are replaced atomically (write, then rename) and only when their content
    changed, so running containers that have the library mapped are never disturbed.

    Args:
        hook_path: the host directory (the device plugin's ``hookPath``).
        container_dir: where the library appears inside containers.

    Returns:
        The two host paths.

    Raises:
        HamiError: the library is missing from the package or cannot be written.
    """
    hook = Path(hook_path)
    source = library_path()
    wanted = {
        hook / "libvgpu.so": source.read_bytes(),
        hook / "ld.so.preload": f"{container_dir.rstrip('/')}/libvgpu.so\n".encode(),
    }
    try:
        hook.mkdir(parents=True, exist_ok=True)
        (hook / "containers").mkdir(exist_ok=True)
        for path, data in wanted.items():
            if path.is_file() and path.read_bytes() == data:
                continue
            tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
            tmp.write_bytes(data)
            tmp.chmod(0o755 if path.suffix == ".so" else 0o644)
            os.replace(tmp, path)
    except OSError as exc:
        raise HamiError(f"cannot install the shim under {hook}: {exc}") from exc
    return [str(p) for p in wanted]
