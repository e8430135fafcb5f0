"""The prepared real-GPU scripts (shim/tests/gpu/) run as they are: on a machine without
an NVIDIA driver they say so and exit 0, and they refuse an unknown check by name."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.skips import not_applicable

from .support import SHIM

SCRIPT = SHIM / "tests" / "gpu" / "modes_check.py"


def _run(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PATH"}
    env["PATH"] = "/usr/bin:/bin"  # no nvidia-smi here (CI machines have no GPU)
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=60
    )


def test_modes_check_skips_without_a_driver():
    if any(os.access(os.path.join(d, "nvidia-smi"), os.X_OK) for d in ("/usr/bin", "/bin")):
        not_applicable("a machine with an NVIDIA driver: the script would really run")
    p = _run()
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout) == {"skipped": "no NVIDIA driver (nvidia-smi not found)"}


def test_modes_check_refuses_an_unknown_check_by_name():
    p = _run("--only", "oversub,mgi")
    assert p.returncode == 2
    assert "unknown check 'mgi'" in p.stderr


def test_modes_check_says_what_it_checks():
    p = _run("--help")
    assert p.returncode == 0
    for word in ("--only", "--enable-mig", "oversub", "mps", "mig"):
        assert word in p.stdout
    doc = SCRIPT.read_text()
    for claim in ("CUDA_OVERSUBSCRIBE", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "MIG-", "IS_MANAGED"):
        assert claim in doc
