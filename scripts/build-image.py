#!/usr/bin/env python3
"""Build the hami image without a container engine, as an OCI image layout tarball.

The same content as the Dockerfile's runtime stage: a Debian bookworm root filesystem
(``debootstrap --variant=minbase`` with python3 and python3-venv, from the Debian mirror
this machine's apt uses), the project's wheels (``pip wheel`` of hami-core and every
backend, dependencies included; hami-nvidia's build compiles libvgpu.so), installed by
``scripts/image/install-hami.sh`` in a chroot. Two layers: the Debian base, and
``/opt/hami``.

Cached under ``${XDG_CACHE_HOME:-~/.cache}/hami/image/`` (or ``$HAMI_IMAGE_CACHE``):
the base root filesystem by the inputs that make it (suite, packages, mirror, this
script), the image by the base's key plus a hash of the sources that go into the wheels
(every file git lists under hami_core/, backends/, shim/ and the top-level
pyproject.toml, README.md, LICENSE) and of install-hami.sh. A second run with the same
inputs builds nothing and returns in about a second. The cache is shared by checkouts
and concurrent runs: a build prunes only images none of them has built or used for
``PRUNE_AFTER_S``.

Load the result into containerd with ``ctr -n k8s.io images import FILE``; its name is
``--name`` (default ``hami.local/hami:<version>``).

Needs root (debootstrap, chroot) and Debian's ``debootstrap`` package (installed with
apt-get when missing). The last stdout line is the tarball's path.

Usage: scripts/build-image.py [--name NAME] [--force] [--extras server,defrag]
(with a Python that has pip, e.g. .venv/bin/python scripts/build-image.py)
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SUITE = "bookworm"
PACKAGES = ("python3", "python3-venv")
INSTALL_SCRIPT = REPO / "scripts" / "image" / "install-hami.sh"
SOURCE_DIRS = ("hami_core", "backends", "shim")
SOURCE_FILES = ("pyproject.toml", "README.md", "LICENSE")
#: hami-core's extras the image installs unless told (``--extras``, the Dockerfile's
#: ``EXTRAS``): the servers' dependencies; not ``defrag`` (docs/consolidation.md).
DEFAULT_EXTRAS = "server"
ENV = [
    "PATH=/opt/hami/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "PYTHONUNBUFFERED=1",
]
#: OCI architecture names of ``uname -m`` values (image-spec config.md).
ARCH = {"x86_64": "amd64", "aarch64": "arm64", "ppc64le": "ppc64le", "s390x": "s390x"}


def log(msg: str) -> None:
    print(f"[build-image] {msg}", file=sys.stderr, flush=True)


def cache_dir() -> Path:
    base = os.environ.get("HAMI_IMAGE_CACHE")
    if base:
        return Path(base)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "hami" / "image"


def version() -> str:
    text = (REPO / "pyproject.toml").read_text()
    m = re.search(r'^version\s*=\s*"([^"]+)"', text, re.M)
    return m.group(1) if m else "0.0.0"


def debian_mirror() -> str:
    """The first Debian archive URI of this machine's apt sources (deb822 or one-line)."""
    sources = Path("/etc/apt/sources.list.d/debian.sources")
    if sources.exists():
        for block in sources.read_text().split("\n\n"):
            fields = dict(
                line.split(":", 1)
                for line in block.splitlines()
                if ":" in line and not line.startswith("#")
            )
            uris = fields.get("URIs", "").split()
            suites = fields.get("Suites", "").split()
            if uris and SUITE in suites and "deb" in fields.get("Types", "").split():
                return uris[0].strip()
    listing = Path("/etc/apt/sources.list")
    if listing.exists():
        for line in listing.read_text().splitlines():
            parts = line.split()
            if len(parts) >= 3 and parts[0] == "deb" and parts[2].startswith(SUITE):
                return parts[1]
    raise SystemExit("build-image: no Debian bookworm entry in /etc/apt/sources.list(.d)")


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def source_files() -> list[Path]:
    """The files whose content goes into the wheels (tracked or new, not ignored)."""
    try:
        out = subprocess.run(
            [
                "git",
                "-C",
                str(REPO),
                "ls-files",
                "-co",
                "--exclude-standard",
                "-z",
                "--",
                *SOURCE_DIRS,
                *SOURCE_FILES,
            ],
            capture_output=True,
            check=True,
        ).stdout
        names = [n for n in out.decode().split("\0") if n]
    except (OSError, subprocess.CalledProcessError):
        names = [
            str(p.relative_to(REPO))
            for d in SOURCE_DIRS
            for p in (REPO / d).rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and ".egg-info" not in str(p)
        ] + [f for f in SOURCE_FILES if (REPO / f).exists()]
    return sorted(REPO / n for n in names if (REPO / n).is_file())


def sources_key() -> str:
    h = hashlib.sha256()
    for path in source_files():
        h.update(str(path.relative_to(REPO)).encode() + b"\0")
        h.update(sha256_file(path).encode() + b"\n")
    h.update(INSTALL_SCRIPT.read_bytes())
    return h.hexdigest()


def base_key(mirror: str) -> str:
    recipe = json.dumps(
        {
            "suite": SUITE,
            "packages": PACKAGES,
            "mirror": mirror,
            "variant": "minbase",
            "arch": platform.machine(),
            "v": 1,
        }
    )
    return hashlib.sha256(recipe.encode()).hexdigest()


def run(argv: list[str], **kw) -> None:
    log("$ " + " ".join(argv))
    subprocess.run(argv, check=True, **kw)


def ensure_debootstrap() -> None:
    if shutil.which("debootstrap"):
        return
    if os.geteuid() != 0:
        raise SystemExit("build-image: needs root (debootstrap and chroot)")
    log("installing debootstrap")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    if subprocess.run(["apt-get", "install", "-y", "-q", "debootstrap"], env=env).returncode != 0:
        run(["apt-get", "update", "-q"], env=env)
        run(["apt-get", "install", "-y", "-q", "debootstrap"], env=env)


def build_base(cache: Path, mirror: str) -> Path:
    """The debootstrapped root filesystem (a directory), built once per recipe."""
    key = base_key(mirror)[:16]
    root = cache / f"base-{SUITE}-{key}"
    if (root / ".hami-base-complete").exists():
        return root
    ensure_debootstrap()
    scratch = cache / f".base-{key}.tmp"
    shutil.rmtree(scratch, ignore_errors=True)
    t0 = time.monotonic()
    run(
        [
            "debootstrap",
            "--variant=minbase",
            f"--include={','.join(PACKAGES)}",
            SUITE,
            str(scratch),
            mirror,
        ],
        stdout=sys.stderr,
    )
    # Nothing the runtime needs: downloaded packages, package lists, docs, logs.
    for sub in (
        "var/cache/apt/archives",
        "var/lib/apt/lists",
        "usr/share/doc",
        "usr/share/man",
        "var/log",
    ):
        for p in (scratch / sub).glob("*"):
            if p.is_file() or p.is_symlink():
                p.unlink()
            elif p.is_dir() and p.name != "partial":
                shutil.rmtree(p, ignore_errors=True)
    (scratch / ".hami-base-complete").write_text(f"{SUITE} {' '.join(PACKAGES)} {mirror}\n")
    shutil.rmtree(root, ignore_errors=True)
    scratch.rename(root)
    log(f"base root filesystem in {time.monotonic() - t0:.0f} s: {root}")
    return root


def build_wheels(src: Path, out: Path, extras: str = DEFAULT_EXTRAS) -> None:
    """hami-core with ``extras``, every backend, and their dependencies, as wheels in
    ``out``, built from a copy of exactly the hashed source files (so the checkout gets
    no build debris)."""
    for path in source_files():
        dest = src / path.relative_to(REPO)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, dest)
    backends = sorted(
        str(p) for p in (src / "backends").glob("hami-*") if (p / "pyproject.toml").exists()
    )
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--disable-pip-version-check",
            "-w",
            str(out),
            f"{src}[{extras}]",
            *backends,
        ],
        stdout=sys.stderr,
    )


def layer_tar(root: Path, out: Path, members: list[str], *, exclude: tuple[str, ...] = ()) -> None:
    """A layer: ``members`` of ``root`` (paths relative to it), numeric owners, GNU tar."""
    argv = ["tar", "--numeric-owner", "--sort=name", "--xattrs", "-C", str(root), "-cf", str(out)]
    argv += [f"--exclude={e}" for e in exclude]
    run([*argv, *members])


def oci_tarball(
    path: Path, name: str, layers: list[Path], *, entrypoint: list[str], cmd: list[str]
) -> None:
    """Write an OCI image layout (image-spec v1.0) holding ``layers`` to ``path``."""
    arch = ARCH.get(platform.machine(), platform.machine())
    diff_ids = [f"sha256:{sha256_file(p)}" for p in layers]
    config = {
        "architecture": arch,
        "os": "linux",
        "config": {"Entrypoint": entrypoint, "Cmd": cmd, "Env": ENV, "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
        "history": [
            {"created_by": f"debootstrap --variant=minbase --include={','.join(PACKAGES)} {SUITE}"},
            {"created_by": "scripts/image/install-hami.sh (hami wheels)"},
        ],
    }

    def add_bytes(tar: tarfile.TarFile, data: bytes) -> dict[str, object]:
        digest = hashlib.sha256(data).hexdigest()
        info = tarfile.TarInfo(f"blobs/sha256/{digest}")
        info.size, info.mode = len(data), 0o644
        tar.addfile(info, io.BytesIO(data))
        return {"digest": f"sha256:{digest}", "size": len(data)}

    def dumps(obj: object) -> bytes:
        return json.dumps(obj, separators=(",", ":"), sort_keys=True).encode()

    tmp = path.with_suffix(".tmp")
    with tarfile.open(tmp, "w") as tar:
        layer_descs = []
        for layer, diff in zip(layers, diff_ids, strict=True):
            tar.add(layer, arcname=f"blobs/sha256/{diff.split(':')[1]}")
            layer_descs.append(
                {
                    "mediaType": "application/vnd.oci.image.layer.v1.tar",
                    "digest": diff,
                    "size": layer.stat().st_size,
                }
            )
        config_desc = add_bytes(tar, dumps(config))
        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **config_desc},
            "layers": layer_descs,
        }
        manifest_desc = add_bytes(tar, dumps(manifest))
        tag = name.rsplit(":", 1)[1] if ":" in name.rsplit("/", 1)[-1] else "latest"
        index = {
            "schemaVersion": 2,
            "manifests": [
                {
                    "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    **manifest_desc,
                    "platform": {"architecture": arch, "os": "linux"},
                    "annotations": {
                        "io.containerd.image.name": name,
                        "org.opencontainers.image.ref.name": tag,
                    },
                }
            ],
        }
        for member, data in (
            ("oci-layout", dumps({"imageLayoutVersion": "1.0.0"})),
            ("index.json", dumps(index)),
        ):
            info = tarfile.TarInfo(member)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    tmp.rename(path)


def build(name: str, *, force: bool = False, extras: str = DEFAULT_EXTRAS) -> Path:
    if not re.fullmatch(r"[a-z]+(,[a-z]+)*", extras):
        raise SystemExit(f"build-image: --extras {extras!r} is not a comma list of extras")
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    mirror = debian_mirror()
    variant = "" if extras == DEFAULT_EXTRAS else f" {extras}"
    key = hashlib.sha256(
        f"{base_key(mirror)} {sources_key()} {name}{variant}".encode()
    ).hexdigest()[:16]
    image = cache / f"hami-{key}.oci.tar"
    if image.exists() and not force:
        os.utime(image)  # in use: prune() keeps what another run touched lately
        log(f"cached: {image}")
        return image
    if os.geteuid() != 0:
        raise SystemExit("build-image: needs root (debootstrap and chroot)")
    t0 = time.monotonic()
    base = build_base(cache, mirror)
    work = Path(tempfile.mkdtemp(prefix="hami-image-", dir=cache))
    try:
        base_layer = cache / f"{base.name}.layer.tar"
        if not base_layer.exists():
            layer_tar(
                base,
                base_layer.with_suffix(".tmp"),
                sorted(os.listdir(base)),
                exclude=("./dev/*", "dev/*", ".hami-base-complete"),
            )
            base_layer.with_suffix(".tmp").rename(base_layer)
        # The install runs in a copy of the base, so the cached base stays pristine.
        root = work / "root"
        run(["cp", "-a", str(base), str(root)])
        wheels = root / "tmp" / "wheels"
        wheels.mkdir(parents=True)
        build_wheels(work / "src", wheels, extras)
        shutil.copy(INSTALL_SCRIPT, root / "tmp" / "install-hami.sh")
        env = {
            "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": "/root",
            "LANG": "C.UTF-8",
            "HAMI_EXTRAS": extras,
        }
        run(
            ["chroot", str(root), "/bin/sh", "/tmp/install-hami.sh", "/tmp/wheels"],
            env=env,
            stdout=sys.stderr,
        )
        app_layer = work / "app.layer.tar"
        layer_tar(root, app_layer, ["opt/hami"], exclude=("__pycache__",))
        # Written beside and renamed: a run reading the cache never sees half an image.
        partial = work / image.name
        oci_tarball(
            partial,
            name,
            [base_layer, app_layer],
            entrypoint=["/opt/hami/bin/hami"],
            cmd=["--help"],
        )
        partial.rename(image)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    prune(cache, keep=image)
    log(
        f"built {name} in {time.monotonic() - t0:.0f} s: {image} ({image.stat().st_size >> 20} MiB)"
    )
    return image


#: An image no run has built or used for this long is pruned (other checkouts and
#: concurrent test runs share the cache: an image one of them is using is never removed).
PRUNE_AFTER_S = 6 * 3600


def prune(cache: Path, *, keep: Path, now: float | None = None) -> list[Path]:
    """Remove the cache's ``hami-*.oci.tar`` images other than ``keep`` that no run has
    built or used (mtime, touched on each cache hit) for ``PRUNE_AFTER_S``; the removed."""
    now = time.time() if now is None else now
    gone = []
    for old in cache.glob("hami-*.oci.tar"):
        try:
            stale = old != keep and now - old.stat().st_mtime > PRUNE_AFTER_S
        except FileNotFoundError:
            continue  # pruned by another run meanwhile
        if stale:
            old.unlink(missing_ok=True)
            gone.append(old)
    return gone


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--name", default=f"hami.local/hami:{version()}", help="image name in the tarball"
    )
    parser.add_argument("--force", action="store_true", help="rebuild even when cached")
    parser.add_argument(
        "--extras",
        default=DEFAULT_EXTRAS,
        help="hami-core's extras installed, comma-separated (server,defrag adds HiGHS for "
        "consolidation's integer program; docs/consolidation.md)",
    )
    args = parser.parse_args(argv)
    print(build(args.name, force=args.force, extras=args.extras))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
