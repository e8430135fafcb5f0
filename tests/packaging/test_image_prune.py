"""scripts/build-image.py shares its cache between checkouts and concurrent test runs: a
new build prunes only images nobody has built or used lately, never one another run is
using (it used to delete every other image, breaking a parallel e2e run)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

SCRIPT = Path(__file__).parents[2] / "scripts" / "build-image.py"


def _script():
    spec = importlib.util.spec_from_file_location("build_image", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_new_build_prunes_only_images_unused_for_the_prune_age(tmp_path: Path):
    build_image = _script()
    now = 1_000_000_000.0
    ages = {"hami-new.oci.tar": 0, "hami-in-use.oci.tar": 600, "hami-stale.oci.tar": 7 * 3600}
    for name, age in ages.items():
        (tmp_path / name).write_bytes(b"x")
        os.utime(tmp_path / name, (now - age, now - age))
    (tmp_path / "hami-base-1.layer.tar").write_bytes(b"base")  # not an image: kept
    gone = build_image.prune(tmp_path, keep=tmp_path / "hami-new.oci.tar", now=now)
    assert gone == [tmp_path / "hami-stale.oci.tar"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "hami-base-1.layer.tar",
        "hami-in-use.oci.tar",
        "hami-new.oci.tar",
    ]


def test_the_image_kept_is_never_pruned_however_old(tmp_path: Path):
    build_image = _script()
    image = tmp_path / "hami-old.oci.tar"
    image.write_bytes(b"x")
    os.utime(image, (0, 0))
    assert build_image.prune(tmp_path, keep=image) == []
    assert image.exists()
