"""A snapshot's bound pod whose device allocation cannot be read holds the GPUs it names
whole (PROTOCOL.md §6, fail closed), as it does in the live scheduler's state: ``hami
top``, ``hami explain``, ``hami ui`` and ``hami defrag`` on a snapshot read it through
the loader, which used to leave such a pod out, so a GPU a live pod holds showed free
and a pending pod was told it fits there."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import yaml
from click.testing import CliRunner

from hami_core.cli import cli
from hami_core.simulate.loader import load_cluster

from .helpers import manager

EXAMPLE = Path(__file__).parents[2] / "examples" / "snapshot-pending.yaml"
HELD = "GPU-4f1e9c02-5b1a-8d7e-2c44-0a9b3e6f1d21"


def broken_snapshot(tmp_path: Path) -> Path:
    """examples/snapshot-pending.yaml with the allocation of the pod on ``HELD`` garbled
    (its uuid still named)."""
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc = copy.deepcopy(doc)
    (pod,) = [i for i in doc["items"] if i["metadata"]["name"] == "inference-6c8d9f7b5-x2k4p"]
    pod["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"] = f"{HELD},NVIDIA,xx,yy:;"
    path = tmp_path / "snapshot.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_the_loader_keeps_the_pod_and_says_its_gpus_are_held_whole(tmp_path):
    loaded = load_cluster(broken_snapshot(tmp_path), manager())
    names = [p["metadata"]["name"] for p in loaded.pods]
    assert "inference-6c8d9f7b5-x2k4p" in names
    text = "\n".join(loaded.warnings)
    assert "inference-6c8d9f7b5-x2k4p" in text and "held whole" in text


def test_top_shows_the_gpu_held_whole(tmp_path):
    result = CliRunner().invoke(
        cli, ["top", "--snapshot", str(broken_snapshot(tmp_path)), "-o", "json"]
    )
    assert result.exit_code == 0, result.output
    (dev,) = [d for d in json.loads(result.stdout)["devices"] if d["uuid"] == HELD]
    assert dev["memory_allocated_mib"] == dev["memory_total_mib"]
    assert [s["whole"] for s in dev["slices"]] == [True]


def test_explain_does_not_offer_the_held_gpu(tmp_path):
    result = CliRunner().invoke(
        cli,
        [
            "explain",
            "ml-team/finetune-7b",
            "--snapshot",
            str(broken_snapshot(tmp_path)),
            "-o",
            "json",
        ],
    )
    assert result.exit_code == 3, result.output
    answer = json.loads(result.stdout)
    assert "fits now" not in answer["reason"]


def test_the_log_of_an_unreadable_allocation_is_printable(caplog):
    """A snapshot's pod name is not checked as an API server checks it: the log line of
    its unreadable allocation (stderr of hami top/explain/defrag) carries no terminal
    escape or bidi override raw."""
    import logging

    from hami_core.facts.holdings import ProblemLog

    caplog.set_level(logging.WARNING)
    ProblemLog(logging.getLogger("test")).report(["pod ns/a\x1b[2J\u202eb: key: why"])
    (record,) = caplog.records
    text = record.getMessage()
    assert "\x1b" not in text and "\u202e" not in text
    assert "\\x1b[2J" in text and "\\u202e" in text
