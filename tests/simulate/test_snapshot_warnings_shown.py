"""What the snapshot loader leaves out (an object its API server could not have stored)
is said on stderr by every reader of a snapshot, as ``hami defrag`` says it: ``hami
explain`` and ``hami top`` dropped a node silently, so a user read "fits on none of 1
node(s)" of a two-node snapshot with no word of the other."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from hami_core.cli import cli

EXAMPLE = Path(__file__).parents[2] / "examples" / "snapshot-pending.yaml"


def snapshot_with_a_bad_node(tmp_path: Path) -> Path:
    doc = copy.deepcopy(yaml.safe_load(EXAMPLE.read_text()))
    (node,) = [i for i in doc["items"] if i["metadata"]["name"] == "gpu-a100-01"]
    node["status"]["allocatable"]["nvidia.com/gpu"] = "lots"
    path = tmp_path / "snapshot.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.parametrize(
    "args",
    [["explain", "ml-team/finetune-7b"], ["top"], ["top", "-o", "json"]],
    ids=["explain", "top", "top-json"],
)
def test_a_skipped_node_is_said_on_stderr(tmp_path, args):
    result = CliRunner().invoke(cli, [*args, "--snapshot", str(snapshot_with_a_bad_node(tmp_path))])
    assert result.exit_code in (0, 3), result.output
    assert "warning:" in result.stderr and "Node skipped" in result.stderr
    assert "nvidia.com/gpu" in result.stderr
    assert "warning:" not in result.stdout  # -o json stays JSON
