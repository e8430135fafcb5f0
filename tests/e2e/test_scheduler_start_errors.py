"""`hami scheduler` that cannot serve stops at start with one line naming the address or
the file, exit status 1, no traceback (a taken port or a missing TLS file was an
``OSError`` traceback)."""

from __future__ import annotations

import socket
import subprocess

import pytest

from tests.e2e.controlplane import LOOPBACK, free_port
from tests.e2e.hami_servers import HAMI, signing_keys

pytestmark = pytest.mark.e2e


def run_scheduler(control_plane, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            HAMI,
            "scheduler",
            f"--kubeconfig={control_plane.kubeconfig_path}",
            "--no-leader-elect",
            f"--allocation-signing-key={signing_keys(control_plane)[0]}",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=90,
    )


def assert_one_line_error(proc: subprocess.CompletedProcess[str], *words: str) -> None:
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, proc.stderr
    for word in words:
        assert word in errors[0], errors[0]


@pytest.mark.parametrize("which", ["--port", "--metrics-port"])
def test_a_taken_port_is_named(control_plane, which):
    with socket.socket() as taken:
        taken.bind((LOOPBACK if which == "--port" else "0.0.0.0", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        ports = {"--port": free_port(), "--metrics-port": free_port(), which: port}
        proc = run_scheduler(control_plane, *(f"{flag}={value}" for flag, value in ports.items()))
    assert_one_line_error(proc, f":{port}", "in use")


def test_a_missing_tls_file_is_named(control_plane, tmp_path):
    missing = str(tmp_path / "serving.crt")
    proc = run_scheduler(
        control_plane,
        f"--port={free_port()}",
        f"--metrics-port={free_port()}",
        f"--tls-cert-file={missing}",
        f"--tls-private-key-file={missing}",
    )
    assert_one_line_error(proc, missing, "no such file")
