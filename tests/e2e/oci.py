"""OCI image layout tarballs written by hand (no registry, no build tool).

``busybox_image(path, name, entrypoint)`` writes an image with one uncompressed layer
holding the host's static ``/bin/busybox`` (Debian's ``busybox-static``) and a symlink
per applet under ``/bin``, so ``sh``, ``env``, ``cat``, ``sleep`` work in the container.
Load it with ``ctr -n k8s.io images import <tar>``; pods use it with
``imagePullPolicy: Never``.

Layout (OCI image-spec v1.0, image-layout.md): ``oci-layout``, ``index.json`` (the
manifest descriptor, annotated with ``io.containerd.image.name`` and
``org.opencontainers.image.ref.name``), ``blobs/sha256/<digest>`` for the layer, the
config and the manifest.
"""

from __future__ import annotations

import hashlib
import io
import json
import platform
import subprocess
import tarfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

BUSYBOX = Path("/bin/busybox")
#: The name scripts/build-image.py gives the hami image in the e2e tier.
HAMI_IMAGE = "hami.local/hami:0.1.0"
#: OCI architecture names of ``uname -m`` values (image-spec config.md, Go's GOARCH).
_ARCH = {"x86_64": "amd64", "aarch64": "arm64", "ppc64le": "ppc64le", "s390x": "s390x"}


def _arch() -> str:
    machine = platform.machine()
    return _ARCH.get(machine, machine)


def _applets(busybox: Path) -> list[str]:
    out = subprocess.run([str(busybox), "--list"], capture_output=True, text=True, check=True)
    return sorted({a.strip() for a in out.stdout.split() if a.strip() and "/" not in a})


def _layer(busybox: Path) -> bytes:
    buf = io.BytesIO()
    now = int(time.time())
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in ("bin", "etc", "tmp", "proc", "sys", "dev", "usr", "usr/local", "usr/local/vgpu"):
            info = tarfile.TarInfo(d)
            info.type = tarfile.DIRTYPE
            info.mode = 0o1777 if d == "tmp" else 0o755
            info.mtime = now
            tar.addfile(info)
        data = busybox.read_bytes()
        info = tarfile.TarInfo("bin/busybox")
        info.size, info.mode, info.mtime = len(data), 0o755, now
        tar.addfile(info, io.BytesIO(data))
        for applet in _applets(busybox):
            if applet == "busybox":
                continue
            link = tarfile.TarInfo(f"bin/{applet}")
            link.type, link.linkname, link.mode, link.mtime = tarfile.SYMTYPE, "busybox", 0o777, now
            tar.addfile(link)
        for name, text in (
            ("etc/passwd", "root:x:0:0:root:/:/bin/sh\n"),
            ("etc/group", "root:x:0:\n"),
        ):
            raw = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(raw), 0o644, now
            tar.addfile(info, io.BytesIO(raw))
    return buf.getvalue()


def _blob(tar: tarfile.TarFile, data: bytes) -> dict[str, Any]:
    digest = hashlib.sha256(data).hexdigest()
    info = tarfile.TarInfo(f"blobs/sha256/{digest}")
    info.size, info.mode = len(data), 0o644
    tar.addfile(info, io.BytesIO(data))
    return {"digest": f"sha256:{digest}", "size": len(data)}


def _json(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), sort_keys=True).encode()


def busybox_image(
    path: Path,
    name: str,
    *,
    entrypoint: Sequence[str] = ("/bin/sleep", "2147483647"),
    busybox: Path = BUSYBOX,
) -> Path:
    """Write the image ``name`` (e.g. ``hami.local/busybox:1``) to ``path``; return it.

    Raises:
        FileNotFoundError: no static busybox at ``busybox`` (apt-get install busybox-static).
    """
    if not busybox.is_file():
        raise FileNotFoundError(f"{busybox} is missing: apt-get install busybox-static")
    layer = _layer(busybox)
    config = {
        "architecture": _arch(),
        "os": "linux",
        "config": {"Entrypoint": list(entrypoint), "Env": ["PATH=/bin"], "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{hashlib.sha256(layer).hexdigest()}"]},
        "history": [{"created_by": "hami e2e: busybox-static"}],
    }
    return _write_layout(path, name, layer, config)


def binary_image(
    path: Path,
    name: str,
    binary: Path,
    *,
    dest: str = "usr/local/bin",
    entrypoint: Sequence[str] = (),
) -> Path:
    """Write the image ``name`` holding one static ``binary`` at ``/<dest>/<its name>``
    (on ``PATH``), e.g. kube-scheduler from the kube-build cache, as its upstream image
    has it at /usr/local/bin/kube-scheduler."""
    buf = io.BytesIO()
    now = int(time.time())
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        parts = dest.strip("/").split("/")
        for i in range(1, len(parts) + 1):
            info = tarfile.TarInfo("/".join(parts[:i]))
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, now
            tar.addfile(info)
        for d, mode in (("tmp", 0o1777), ("etc", 0o755)):
            info = tarfile.TarInfo(d)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, mode, now
            tar.addfile(info)
        data = binary.read_bytes()
        info = tarfile.TarInfo(f"{dest.strip('/')}/{binary.name}")
        info.size, info.mode, info.mtime = len(data), 0o755, now
        tar.addfile(info, io.BytesIO(data))
    layer = buf.getvalue()
    config = {
        "architecture": _arch(),
        "os": "linux",
        "config": {
            "Entrypoint": list(entrypoint) or [f"/{dest.strip('/')}/{binary.name}"],
            "Env": [f"PATH=/{dest.strip('/')}:/usr/bin:/bin"],
            "WorkingDir": "/",
        },
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{hashlib.sha256(layer).hexdigest()}"]},
        "history": [{"created_by": f"hami e2e: {binary.name}"}],
    }
    return _write_layout(path, name, layer, config)


def _write_layout(path: Path, name: str, layer: bytes, config: dict[str, Any]) -> Path:
    with tarfile.open(path, "w") as tar:
        layer_desc = _blob(tar, layer)
        config_desc = _blob(tar, _json(config))
        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **config_desc},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", **layer_desc}],
        }
        manifest_desc = _blob(tar, _json(manifest))
        tag = name.rsplit(":", 1)[-1] if ":" in name.rsplit("/", 1)[-1] else "latest"
        index = {
            "schemaVersion": 2,
            "manifests": [
                {
                    "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    **manifest_desc,
                    "platform": {"architecture": _arch(), "os": "linux"},
                    "annotations": {
                        "io.containerd.image.name": name,
                        "org.opencontainers.image.ref.name": tag,
                    },
                }
            ],
        }
        for member, data in (
            ("oci-layout", _json({"imageLayoutVersion": "1.0.0"})),
            ("index.json", _json(index)),
        ):
            info = tarfile.TarInfo(member)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return path
