"""The light core: server commands without hami-core[server] name the extra to install.

The packaging tier (tests/packaging) checks the same from a real install of hami-core
alone; these run the CLI in a subprocess with the extra's modules blocked.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from hami_core.extras import EXTRA_MODULES, MissingExtraError, extra_of_module, require_extra

BLOCK = "import sys\nfor m in {mods!r}: sys.modules[m] = None\n"


def run_hami(args: list[str], blocked: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
    code = BLOCK.format(mods=list(blocked)) + (
        f"sys.argv = ['hami', *{args!r}]\nfrom hami_core.cli import main\nmain()\n"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    "command",
    [
        ["scheduler"],
        ["webhook"],
        ["device-plugin", "--node-name", "n1"],
        ["monitor", "--node-name", "n1"],
    ],
)
def test_a_server_command_without_the_extra_names_it(command):
    proc = run_hami(command, ("flask", "grpc"))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0] == (
        f"error: hami {command[0]} needs hami-core[server] (not installed: flask, grpc); "
        "install it with: pip install 'hami-core[server]'"
    )


def test_help_and_simulate_work_without_the_extra():
    blocked = EXTRA_MODULES["server"]
    help_ = run_hami(["scheduler", "--help"], blocked)
    assert help_.returncode == 0 and "--leader-elect" in help_.stdout
    sim = run_hami(["simulate", "-o", "json"], blocked)
    assert sim.returncode == 0, sim.stderr
    summary = json.loads(sim.stdout)["summary"]
    assert (summary["pods"], summary["placed"], summary["unschedulable"]) == (20, 19, 1)


def test_a_module_of_an_extra_reached_by_any_command_is_reported_with_the_extra():
    # A command (of a backend, say) that imports a server module itself: main() turns
    # the ModuleNotFoundError into the extra's name, not a traceback.
    code = (
        BLOCK.format(mods=["prometheus_client"])
        + "import click\nfrom hami_core import cli\n"
        + "@cli.cli.command('probe')\ndef probe():\n    import prometheus_client\n"
        + "sys.argv = ['hami', 'probe']\ncli.main()\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "error: hami probe needs hami-core[server] (not installed: prometheus_client); "
        "install it with: pip install 'hami-core[server]'"
    )


def test_the_testing_extra_is_named_by_the_conformance_kit():
    code = BLOCK.format(mods=["pytest"]) + "import hami_core.testing\n"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 1
    assert (
        "MissingExtraError: hami_core.testing (the backend conformance kit) needs "
        "hami-core[testing] (not installed: pytest)" in proc.stderr
    )


def test_require_extra_and_the_module_table():
    require_extra("server", "x")  # the dev install has every extra
    assert extra_of_module("google.protobuf.descriptor") == "server"
    assert extra_of_module("google") == "server"
    assert extra_of_module("werkzeug.exceptions") == "server"
    assert extra_of_module("pytest") == "testing"
    assert extra_of_module("numpy") is None and extra_of_module(None) is None
    err = MissingExtraError("hami webhook", "server", ["cryptography"])
    assert isinstance(err, ImportError) and err.extra == "server"


def test_version_option():
    from click.testing import CliRunner

    from hami_core import __version__
    from hami_core.cli import cli

    out = CliRunner().invoke(cli, ["--version"])
    assert out.exit_code == 0 and out.output == f"hami-core {__version__}\n"
