"""The image's extras (docs/consolidation.md, *The image*): the Dockerfile, the engine-less
build (scripts/build-image.py) and the install script share one default, ``server``
(no HiGHS), take ``server,defrag`` to add it, and refuse anything but a list of
hami-core's extras before building or installing anything."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
INSTALL = ROOT / "scripts" / "image" / "install-hami.sh"


def _build_image():
    spec = importlib.util.spec_from_file_location(
        "build_image", ROOT / "scripts" / "build-image.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_one_default_everywhere_and_both_extras_exist():
    default = _build_image().DEFAULT_EXTRAS
    assert default == "server"
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.findall(r"^ARG EXTRAS=(\S+)$", dockerfile, re.M) == [default]
    assert '"/src[${EXTRAS}]"' in dockerfile and 'HAMI_EXTRAS="${EXTRAS}"' in dockerfile
    assert f"EXTRAS=${{HAMI_EXTRAS:-{default}}}" in INSTALL.read_text()
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert {"server", "defrag"} <= set(extras)
    assert any(d.startswith("highspy") for d in extras["defrag"])


@pytest.mark.parametrize("bad", ["server;rm -rf /", "server,", ",server", "a,,b", "Server", ""])
def test_anything_but_a_list_of_extras_is_refused_before_any_work(bad, tmp_path):
    with pytest.raises(SystemExit, match="is not a comma list of extras"):
        _build_image().build("hami.local/hami:t", extras=bad)
    if bad:  # (empty is the install script's default: server)
        done = subprocess.run(
            ["sh", str(INSTALL), str(tmp_path)],
            env={"PATH": "/usr/bin:/bin", "HAMI_EXTRAS": bad},
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 1 and "is not a list of extras" in done.stderr
