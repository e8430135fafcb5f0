"""Every ``device-config.yaml`` HAMi's chart renders, from 2.4.0 to the newest, starts
every process; each key keeps its meaning; a typo still stops the start, named.

The fixtures (``tests/fixtures/hami/device-config/<release>.yaml``) are HAMi's chart at
each release rendered with its defaults (``scripts/render-hami-device-configs.py``), one
file per distinct rendering, and the master after v2.10.0 whose default
``mthreads.memoryPerCard: [96]`` stopped every process with exit 2.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from hami_core.errors import ConfigError
from hami_core.plugin import BackendManager
from hami_core.protocol.config import load_config
from tests.unit import test_config_start
from tests.unit.test_config_start import COMMANDS, CONFIG_ERROR, OFFLINE, REACHED, commands

start = test_config_start.start  # the fixture: run ``hami <argv>`` in this process

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hami" / "device-config"
RENDERED = sorted(FIXTURES.glob("*.yaml"))


def test_there_is_a_rendering_of_every_release_line_and_the_newest():
    names = {p.stem for p in RENDERED}
    for line in ("v2.4", "v2.5", "v2.6", "v2.7", "v2.8", "v2.9", "v2.10"):
        assert any(n.startswith(line + ".") for n in names), line
    assert "v2.10.0-post-memoryPerCard" in names


@pytest.fixture(scope="module")
def infos():
    return BackendManager.from_entry_points(disabled=[]).infos


@pytest.mark.parametrize("path", RENDERED, ids=lambda p: p.stem)
def test_each_rendered_file_loads_with_no_unknown_key(infos, path):
    load_config(path, backends=infos)  # raises ConfigError on an unknown key


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("path", RENDERED, ids=lambda p: p.stem)
def test_each_rendered_file_starts_every_process(start, command, path):
    code, err = start([*commands("nvidia")[command], "--config", str(path)])
    if command in OFFLINE:
        assert code == 0, err
    else:
        assert code != 0 and REACHED in err, err


NEWEST = FIXTURES / "v2.10.0-post-memoryPerCard.yaml"


def _with_memory_per_card(tmp_path: Path, value: object) -> Path:
    doc = yaml.safe_load(NEWEST.read_text())
    doc["mthreads"]["memoryPerCard"] = value
    path = tmp_path / "device-config.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return path


def test_memory_per_card_is_carried_over_as_the_mthreads_option(infos, tmp_path):
    config = load_config(_with_memory_per_card(tmp_path, [96, 160]), backends=infos)
    assert config.vendor("mthreads").options["memoryPerCard"] == [96, 160]


@pytest.mark.parametrize("bad", [[0], [-96], ["96x"], [], 96, [[96]], [1.5]])
def test_a_bad_memory_per_card_stops_the_start_naming_the_key(start, tmp_path, bad):
    path = _with_memory_per_card(tmp_path, bad)
    code, err = start(["simulate", "--config", str(path)])
    assert code == CONFIG_ERROR and "mthreads.memoryPerCard" in err, err


def test_a_typo_of_memory_per_card_stops_the_start_naming_it(start, tmp_path):
    doc = yaml.safe_load(NEWEST.read_text())
    doc["mthreads"]["memoryPerCards"] = doc["mthreads"].pop("memoryPerCard")
    path = tmp_path / "device-config.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    code, err = start(["simulate", "--config", str(path)])
    assert code == CONFIG_ERROR and f"error: {path}: mthreads.memoryPerCards" in err, err
    with pytest.raises(ConfigError, match="mthreads.memoryPerCards: unknown key"):
        load_config(path, backends=BackendManager.from_entry_points(disabled=[]).infos)
