import json
import subprocess
import sys

from click.testing import CliRunner

from hami_core import __version__
from hami_core.cli import cli


def test_version():
    result = CliRunner().invoke(cli, ["version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"hami-core {__version__}"


def test_backends_lists_nvidia_with_version_and_hooks():
    result = CliRunner().invoke(cli, ["backends", "-o", "json"])
    assert result.exit_code == 0, result.output
    rows = {r["name"]: r for r in json.loads(result.output)}
    assert rows["nvidia"]["version"] == "0.1.0"
    assert rows["nvidia"]["vendors"] == ["NVIDIA"]
    assert {"hami_fit", "hami_mutate", "hami_parse_request", "hami_allocate"} <= set(
        rows["nvidia"]["hooks"]
    )


def test_disabled_backends_env_in_a_real_process():
    def listed(disabled: str) -> list[str]:
        env = {"HAMI_DISABLED_BACKENDS": disabled, "PATH": "/usr/bin:/bin"}
        out = subprocess.run(
            [sys.executable, "-m", "hami_core", "backends", "-o", "json"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        return [r["name"] for r in json.loads(out.stdout)]

    everything = listed("")
    assert "nvidia" in everything
    assert "nvidia" not in listed("nvidia")
    assert listed(",".join(everything)) == []
    env = {"HAMI_DISABLED_BACKENDS": ",".join(everything), "PATH": "/usr/bin:/bin"}
    text = subprocess.run(
        [sys.executable, "-m", "hami_core", "backends"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert "no backends installed" in text.stdout
