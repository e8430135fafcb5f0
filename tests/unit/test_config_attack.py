"""The issue-24 attack run on the configuration loaders: hostile *keys* and values the
earlier hostile-file cases (``test_hostile_files.py``) did not reach. A 3 MB key, a key
carrying a terminal escape, a bidirectional override or a newline, and an alias bomb
small enough to pass the expansion budget, put where a section, a list or a flag is
expected, in our ``version: v1`` file, HAMi's ``device-config.yaml`` and its ConfigMap,
and the per-node file. Each must be refused (or warned about) with a short, printable
message, quickly: before the fix the bomb took ~45 s and a 215 MB message, the key was
copied whole into the message, and an escape reached the log raw."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from hami_core.errors import ConfigError
from hami_core.protocol.config import load_config
from hami_core.protocol.nodeconfig import load_node_overrides
from tests.builders import manager

#: As ``test_hostile_files.MESSAGE_LIMIT``: the offending value is never put in whole.
MESSAGE_LIMIT = 600
LONG = "k" * 3_000_000
ESCAPES = '"\\e[2J\\e]0;owned\\a\\u202eevil\\nERROR forged line"'


def _bomb() -> str:
    """A flow list whose aliases expand to 7^9 (40 million) strings: under the general
    document budget (50 million), so only the loader's own handling bounds it."""
    flow = "&a0 [x, x, x, x, x, x, x]"
    for i in range(1, 9):
        flow = f"&a{i} [" + flow + ", " + ", ".join([f"*a{i - 1}"] * 6) + "]"
    return flow


HAMI = {  # HAMi device-config.yaml documents
    "section is a bomb": f"nvidia: {_bomb()}\n",
    "iluvatars is a bomb mapping": f"iluvatars: {{a: {_bomb()}}}\n",
    "vnpus.configs is a bomb mapping": f"vnpus:\n  configs: {{a: {_bomb()}}}\n",
    "flag is a bomb": f"nvidia:\n  disablecorelimit: {_bomb()}\n",
    "long key": f"nvidia:\n  ? {LONG}\n  : 1\n",
    "long section": f"nvidia: {{}}\n? {LONG}\n: 1\n",
    "escape key": f"nvidia:\n  {ESCAPES}: 1\n",
    "escape section": f"nvidia: {{}}\n{ESCAPES}: 1\n",
    "iluvatars long key": f"iluvatars:\n- ? {LONG}\n  : 1\n",
    "vnpus entry escape key": f"vnpus:\n  configs:\n  - {ESCAPES}: 1\n",
}
OURS = {  # version: v1 documents
    "vendor long key": f"version: v1\nnvidia:\n  ? {LONG}\n  : 1\n",
    "policy long key": f"version: v1\ndefaultSchedulerPolicy:\n  ? {LONG}\n  : 1\n",
    "vendor escape key": f"version: v1\nnvidia:\n  {ESCAPES}: 1\n",
    "policy escape key": f"version: v1\ndefaultSchedulerPolicy:\n  {ESCAPES}: 1\n",
    "vendor section is a bomb": f"version: v1\nnvidia: {_bomb()}\n",
    "option is a bomb": f"version: v1\nnvidia:\n  deviceSplitCount: {_bomb()}\n",
    "ascend vnpus is a bomb": f"version: v1\nascend:\n  vnpus: {_bomb()}\n",
    "ascend vnpus escape model": f"version: v1\nascend:\n  vnpus:\n    {ESCAPES}: {{}}\n",
    "nvidia mig profiles long name": (
        f"version: v1\nnvidia:\n  migGeometries:\n  - models: [A100]\n    profiles: [{LONG}]\n"
    ),
}
NODE = {
    "long node name": f'nodeconfig:\n- name: "{LONG}"\n  bogus: 1\n',
    "escape node name": f"nodeconfig:\n- name: {ESCAPES}\n  bogus: 1\n",
    "long key": f"nodeconfig:\n- name: n1\n  ? {LONG}\n  : 1\n",
    "escape key": f"nodeconfig:\n- name: n1\n  {ESCAPES}: 1\n",
    "filter is a bomb": f"nodeconfig:\n- name: n1\n  filterdevices: {_bomb()}\n",
}


def _load(path: Path) -> None:
    """Load ``path`` as every process does at start: parsed, then checked by each
    installed backend's ``hami_check_config``."""
    backends = manager()
    backends.with_config(load_config(path, backends=backends.infos))


def _short(message: str, path: Path) -> None:
    assert str(path) in message, message[:300]
    assert len(message) < MESSAGE_LIMIT, f"{len(message)} characters: {message[:300]}"
    for raw in ("\x1b", "\x07", "\u202e", "\n"):
        assert raw not in message, message[:300]


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "case,text", [*sorted(HAMI.items()), *sorted(OURS.items())], ids=[*sorted(HAMI), *sorted(OURS)]
)
def test_hostile_keys_and_bombs_in_a_configuration_are_refused_briefly(
    tmp_path, caplog, case, text
):
    path = tmp_path / "config.yaml"
    path.write_text(text)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING), pytest.raises(ConfigError) as caught:
        _load(path)
    assert time.monotonic() - started < 10
    _short(str(caught.value), path)
    for record in caplog.records:
        _short(record.getMessage(), path)


@pytest.mark.timeout(60)
def test_a_bomb_where_hami_names_a_chip_is_warned_about_briefly(tmp_path, caplog):
    """``vnpus.configs[].commonWord`` is only warned about when unknown: the warning
    names it bounded (it was ``str()`` of the whole 40-million-string value)."""
    path = tmp_path / "config.yaml"
    path.write_text(f"vnpus:\n  configs:\n  - commonWord: {_bomb()}\n")
    started = time.monotonic()
    with caplog.at_level(logging.WARNING):
        try:
            _load(path)
        except ConfigError as exc:
            _short(str(exc), path)
    assert time.monotonic() - started < 10
    for record in caplog.records:
        _short(record.getMessage(), path)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", sorted(NODE))
def test_hostile_keys_and_names_in_the_per_node_file_are_refused_briefly(tmp_path, case):
    path = tmp_path / "nodes.yaml"
    path.write_text(NODE[case])
    started = time.monotonic()
    with pytest.raises(ConfigError) as caught:
        load_node_overrides(path, node="n1")
    assert time.monotonic() - started < 10
    _short(str(caught.value), path)


def test_a_configmap_embedding_a_hostile_key_is_refused_briefly(tmp_path):
    inner = f"nvidia:\n  {ESCAPES}: 1\n  ? {LONG[:100_000]}\n  : 2\n"
    import yaml

    path = tmp_path / "cm.yaml"
    path.write_text(
        yaml.safe_dump(
            {"apiVersion": "v1", "kind": "ConfigMap", "data": {"device-config.yaml": inner}}
        )
    )
    with pytest.raises(ConfigError) as caught:
        _load(path)
    _short(str(caught.value), path)
