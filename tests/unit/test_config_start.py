"""A bad configuration stops every process at start, naming the key (#14, "Done when").

For every installed backend, a misspelt key, a value of the wrong type and a value out of
range in its section stop ``hami webhook``, ``hami scheduler``, ``hami simulate``,
``hami device-plugin``, ``hami monitor`` and ``hami top`` through the real command path
(``hami_core.cli.main``), with exit status 2 (every command alike: ``cli.ConfigFailure``)
and a message naming ``<section>.<key>``,
before the API server is contacted (every server binds its ports only after that, so
none is bound). The three formats have their own rules, each tested here:

- our file (``version: v1``): an unknown key is an error;
- HAMi's ``device-config.yaml``: a key neither HAMi's config structs nor the backend
  know (a typo) is an error, a key of HAMi's we do not implement is one warning, a key we
  implement with a bad value is an error naming the key as HAMi's file writes it;
- the device plugin's per-node file (HAMi's ``nodeconfig``): an unknown key is an error.

``test_config_check.py`` runs the same through a subprocess for a few typos.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml

from hami_core.cli import main
from hami_core.cluster import kube
from hami_core.errors import HamiError
from hami_core.plugin import BackendManager
from hami_core.protocol.hamiconfig import SECTIONS
from hami_core.servers import monitor, scheduler_main, webhook_main

INFOS = BackendManager.from_entry_points(disabled=[]).infos
BACKENDS = sorted(INFOS)
#: The backends whose nodes hami's device plugin can run (the others' refuses to start,
#: naming the vendor's device plugin: tests/chart/test_node_side.py).
NODE_BACKENDS = sorted(
    r.name for r in BackendManager.from_entry_points(disabled=[]).backends if r.serves_nodes
)
HAMI_SECTION = {backend: section for section, backend in SECTIONS.items()}
REACHED = "reached the API server"
#: The exit status of a bad configuration, every command alike (a usage error's).
CONFIG_ERROR = 2


def commands(backend: str) -> dict[str, list[str]]:
    """Each process with the least flags that get it past argument parsing."""
    return {
        "webhook": [
            "webhook",
            "--cert-mode",
            "files",
            "--tls-cert-file",
            "c",
            "--tls-private-key-file",
            "k",
        ],
        # the signing key in a Secret: read through the API server (PROTOCOL.md §4a)
        "scheduler": ["scheduler", "--allocation-signing-key", "secret:hami/key"],
        "simulate": ["simulate"],
        "device-plugin": ["device-plugin", "--node-name", "n1", "--backend", backend],
        "monitor": ["monitor", "--node-name", "n1"],
        "top": ["top", "--example"],  # the bundled snapshot: no API server
    }


COMMANDS = sorted(commands("nvidia"))
#: The commands that run to the end without an API server.
OFFLINE = ("simulate", "top")


class Reached(HamiError):
    """Raised where a process would first contact the API server."""


@pytest.fixture
def start(monkeypatch, capsys) -> Callable[[list[str]], tuple[int, str]]:
    """Run ``hami <argv>`` in this process; return (exit status, stderr)."""
    monkeypatch.delenv("HAMI_DISABLED_BACKENDS", raising=False)

    def reached(*_: Any, **__: Any) -> Any:
        raise Reached(REACHED)

    for module in (kube, monitor, scheduler_main, webhook_main):
        monkeypatch.setattr(module, "make_api_client", reached)

    def run(argv: list[str]) -> tuple[int, str]:
        monkeypatch.setattr(sys, "argv", ["hami", *argv])
        capsys.readouterr()
        try:
            main()
            code = 0
        except SystemExit as exc:
            code = int(exc.code or 0)
        return code, capsys.readouterr().err

    return run


def _wrong_type(default: object) -> object:
    return ["x"] if isinstance(default, str) else "x"


def our_format_cases() -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(backend, key the message must name, section) for every backend: a typo, wrong
    types, values out of range, and a wrong type for each of its own options."""
    for b in BACKENDS:
        yield b, f"{b}.deviceSplitCont", {"deviceSplitCont": 4}
        yield b, f"{b}.deviceSplitCount", {"deviceSplitCount": "ten"}
        yield b, f"{b}.deviceSplitCount", {"deviceSplitCount": 0}
        yield b, f"{b}.deviceMemoryScaling", {"deviceMemoryScaling": -1}
        yield b, f"{b}.defaultCores", {"defaultCores": 101}
        yield b, f"{b}.resourceCountName", {"resourceCountName": "Not A Name"}
        for key, default in INFOS[b].option_defaults.items():
            yield b, f"{b}.{key}", {key: _wrong_type(default)}
            if key == "runtimeClassName":  # a RuntimeClass name: a DNS-1123 subdomain
                yield b, f"{b}.{key}", {key: "Not A Name!"}
            if key.endswith("TimeoutSeconds"):
                yield b, f"{b}.{key}", {key: 0}
            if key.startswith("resource") and key.endswith("Name"):
                yield b, f"{b}.{key}", {key: "Not A Name"}
            for ending, bad in NUMBER_RANGES.items():
                if key.endswith(ending):
                    for value in bad:
                        listed = isinstance(default, list)
                        named = f"{b}.{key}[0]" if listed else f"{b}.{key}"
                        yield b, named, {key: [value] if listed else value}
        if len(INFOS[b].device_types) > 1:
            # one common name for several device types (Ascend's models, MetaX's GPU
            # and sGPU) would merge their requests
            yield b, f"{b}.resourceCountName", {"resourceCountName": "example.com/x"}
    for b, (key, value) in OWN_CHECKS.items():
        if b in INFOS:
            yield b, f"{b}.{key}", {key: value}
    for b, key, section in NUMBERS_OUT_OF_RANGE:
        if b in INFOS:
            yield b, key, section


#: Option-name endings that state a range (``config._NUMBER_RANGES``), with values out of
#: it: a ``memoryFactor`` of 0 was silently 1 (HAMi applies a factor only when > 1).
NUMBER_RANGES = {"Factor": (0, -1), "Seconds": (-1,), "MiB": (-1,)}

#: A backend's own values out of range: (backend, key named, section).
NUMBERS_OUT_OF_RANGE = [
    # XIDs are positive (NVIDIA's "XID Errors" catalogue starts at 1)
    ("nvidia", "nvidia.ignoredXids[1]", {"ignoredXids": [13, -1]}),
    ("nvidia", "nvidia.ignoredXids[0]", {"ignoredXids": [0]}),
    ("ascend", "ascend.vnpus.Ascend910B3.aiCPU", {"vnpus": {"Ascend910B3": {"aiCPU": -1}}}),
    ("ascend", "ascend.vnpus.Ascend910B3.aiCore", {"vnpus": {"Ascend910B3": {"aiCore": -1}}}),
    # a model's own resource names: extended resource names, none another's
    (
        "ascend",
        "ascend.vnpus.Ascend910B3.resourceMemoryName",
        {"vnpus": {"Ascend910B3": {"resourceMemoryName": "Not A Name"}}},
    ),
    (
        "ascend",
        "ascend.vnpus.Ascend910B4.resourceName",
        {"vnpus": {"Ascend910B3": {"resourceName": "huawei.com/Ascend910B4"}}},
    ),
    (
        "ascend",
        "ascend.vnpus.Ascend910B3.templates",
        {"vnpus": {"Ascend910B3": {"templates": [{"name": "big", "memory": 8, "aiCore": 21}]}}},
    ),
]


#: A value each backend's own check (``hami_check_config``) refuses.
OWN_CHECKS = {
    "ascend": ("vnpuMode", "tempalte"),
    "nvidia": ("corePolicy", "forced"),
    "kunlun": ("memoryTiersMiB", [49152, 24576]),
    "mthreads": ("memoryPerCard", [0]),
}


CASES = list(our_format_cases())


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize(
    ("backend", "key", "section"), CASES, ids=[f"{k}={s}" for _, k, s in CASES]
)
def test_a_bad_section_stops_every_process_at_start_naming_the_key(
    start, tmp_path, command, backend, key, section
):
    path = tmp_path / "hami.yaml"
    path.write_text(yaml.safe_dump({"version": "v1", backend: section}), encoding="utf-8")
    code, err = start([*commands(backend)[command], "--config", str(path)])
    assert code == CONFIG_ERROR, err
    assert f"{path}: {key}:" in err, err
    assert REACHED not in err


@pytest.mark.parametrize("backend", sorted(b for b in OWN_CHECKS if b in INFOS))
def test_a_backends_own_check_stops_the_start_naming_the_key(start, tmp_path, backend):
    key, value = OWN_CHECKS[backend]
    path = tmp_path / "hami.yaml"
    path.write_text(yaml.safe_dump({"version": "v1", backend: {key: value}}), encoding="utf-8")
    code, err = start(["simulate", "--config", str(path)])
    assert code == CONFIG_ERROR and f"{path}: {backend}.{key}:" in err, err


def test_every_backend_and_every_option_has_a_case():
    named = {key for _, key, _ in CASES}
    for b in BACKENDS:
        assert f"{b}.deviceSplitCont" in named
        for key in INFOS[b].option_defaults:
            assert f"{b}.{key}" in named
    for key in ("hygon.memoryFactor", "nvidia.unifiedMemoryMiB", "kunlun.memoryTiersMiB[0]"):
        assert key in named or key.split(".")[0] not in INFOS, key


@pytest.mark.parametrize(
    ("backend", "section"),
    [
        ("hygon", {"memoryFactor": 1}),
        ("hygon", {"memoryFactor": 4}),
        ("nvidia", {"ignoredXids": [1, 13, 154]}),
        ("nvidia", {"ignoredXids": []}),
        ("nvidia", {"healthRecoverySeconds": 0, "unifiedMemoryMiB": 0}),
        ("ascend", {"vnpus": {"Ascend910B3": {"aiCPU": 0}}}),
    ],
)
def test_numbers_at_the_edge_of_their_range_are_accepted(start, tmp_path, backend, section):
    if backend not in INFOS:
        pytest.skip(f"hami-{backend} not installed")
    path = tmp_path / "hami.yaml"
    path.write_text(yaml.safe_dump({"version": "v1", backend: section}), encoding="utf-8")
    code, err = start(["simulate", "--config", str(path)])
    assert code == 0, err


@pytest.mark.parametrize("command", COMMANDS)
def test_a_good_section_gets_past_the_configuration(start, tmp_path, command):
    """The control: the same commands with every default stated reach the API server
    (simulate and top run), so the failures above are the configuration's."""
    path = tmp_path / "hami.yaml"
    doc = {"version": "v1", **{b: dict(INFOS[b].option_defaults) for b in BACKENDS}}
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    code, err = start([*commands("nvidia")[command], "--config", str(path)])
    if command in OFFLINE:
        assert code == 0, err
    else:
        assert code != 0 and REACHED in err, err


# -- HAMi's device-config.yaml: a typo stops, HAMi's keys we lack warn once, bad values stop


def hami_typos(backend: str) -> Iterator[tuple[dict[str, Any], str]]:
    """HAMi documents with a key neither HAMi's config structs nor ``backend`` know (a
    typo of one they do), and the key as the file writes it."""
    section = HAMI_SECTION[backend]
    if section == "iluvatars":
        yield {section: [{"chipName": "MR-V100"}, {"chipNme": "MR-V50"}]}, "iluvatars[1].chipNme"
    elif section == "vnpus":
        entry = {"commonWord": "Ascend910B3", "memoryAlocatable": 1}
        yield (
            {section: {"configs": [{"commonWord": "Ascend910A"}, entry]}},
            ("vnpus.configs[1].memoryAlocatable"),
        )
        yield {section: {"hamiVnpuCores": True}}, "vnpus.hamiVnpuCores"
    else:
        yield {section: {"deviceSplitCont": 4}}, f"{section}.deviceSplitCont"
        yield {section: {"resourceCountNam": "example.com/x"}}, f"{section}.resourceCountNam"


HAMI_TYPOS = [(b, doc, key) for b in BACKENDS if b in HAMI_SECTION for doc, key in hami_typos(b)]


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize(("backend", "doc", "key"), HAMI_TYPOS, ids=[k for _, _, k in HAMI_TYPOS])
def test_hami_device_config_a_typo_stops_every_process_naming_the_key(
    start, tmp_path, command, backend, doc, key
):
    path = tmp_path / "device-config.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    code, err = start([*commands(backend)[command], "--config", str(path)])
    assert code == CONFIG_ERROR, err
    assert f"error: {path}: {key}: unknown key (HAMi's keys: " in err, err
    assert REACHED not in err


def test_hami_device_config_a_misspelt_section_stops_the_start(start, tmp_path):
    path = tmp_path / "device-config.yaml"
    path.write_text(yaml.safe_dump({"nvidia": {}, "nvdia": {"deviceSplitCount": 4}}))
    code, err = start(["simulate", "--config", str(path)])
    assert code == CONFIG_ERROR
    assert f"{path}: nvdia: not a HAMi device-config section" in err, err


#: Per HAMi section, a key of HAMi's config struct our backend does not implement, with
#: a value (a resource name other than ours where the key is a resource name). Sections
#: missing here are those whose every HAMi key we implement (hygon, cambricon, ...).
HAMI_NOT_OURS: dict[str, tuple[dict[str, Any], str]] = {
    "nvidia": ({"nvidia": {"libCudaLogLevel": 4}}, "nvidia.libCudaLogLevel"),
    "metax": ({"metax": {"resourceVCoreName": "example.com/vcore"}}, "metax.resourceVCoreName"),
    "enflame": (
        {"enflame": {"resourceNameVGCU": "example.com/vgcu"}},
        "enflame.resourceNameVGCU",
    ),
    "iluvatar": (
        {"iluvatars": [{"chipName": "MR-V100", "resourceCountName": "example.com/v"}]},
        "iluvatars[].resourceCountName",
    ),
    "ascend": (
        {"vnpus": {"configs": [{"commonWord": "Ascend910B3", "overwriteEnv": True}]}},
        "vnpus.configs[].overwriteEnv",
    ),
}


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("backend", sorted(b for b in HAMI_NOT_OURS if b in INFOS))
def test_hami_device_config_a_hami_key_we_lack_warns_once_and_starts(
    start, tmp_path, caplog, command, backend
):
    doc, key = HAMI_NOT_OURS[backend]
    path = tmp_path / "device-config.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="hami_core.protocol.config"):
        plugin = backend if backend in NODE_BACKENDS else "nvidia"  # every section is read
        code, err = start([*commands(plugin)[command], "--config", str(path)])
    warned = [r.getMessage() for r in caplog.records if key in r.getMessage()]
    assert len(warned) == 1, [r.getMessage() for r in caplog.records]
    assert "not implemented" in warned[0]
    if command in OFFLINE:
        assert code == 0, err
    else:
        assert code != 0 and REACHED in err, err


def hami_bad_values() -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(backend, key as the HAMi file writes it, document) with a bad value of a key we
    implement, for every HAMi section that carries keys over (``iluvatars`` carries none)."""
    for b in BACKENDS:
        section = HAMI_SECTION.get(b)
        if section is None or section == "iluvatars":
            continue
        if section == "vnpus":
            entry = {"commonWord": "Ascend910B3", "memoryAllocatable": "lots"}
            yield b, "vnpus.configs[0].memoryAllocatable", {section: {"configs": [entry]}}
            continue
        yield b, f"{section}.deviceSplitCount", {section: {"deviceSplitCount": "ten"}}
        yield b, f"{section}.deviceMemoryScaling", {section: {"deviceMemoryScaling": 0}}
    # keys HAMi spells differently from us are named as HAMi writes them
    if "kunlun" in INFOS:
        yield "kunlun", "kunlun.resourceVCountName", {"kunlun": {"resourceVCountName": "Bad"}}
    yield "nvidia", "nvidia.gpuCorePolicy", {"nvidia": {"gpuCorePolicy": "forced"}}
    # numbers out of range in HAMi's own keys (HAMi treats a memoryFactor <= 1 as 1)
    if "hygon" in INFOS:
        yield "hygon", "hygon.memoryFactor", {"hygon": {"memoryFactor": 0}}
    if "ascend" in INFOS:
        entry = {"commonWord": "Ascend910B3", "aiCPU": -1}
        yield "ascend", "vnpus.configs[0].aiCPU", {"vnpus": {"configs": [entry]}}


HAMI_BAD = list(hami_bad_values())


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize(("backend", "key", "doc"), HAMI_BAD, ids=[k for _, k, _ in HAMI_BAD])
def test_hami_device_config_a_bad_value_stops_naming_the_key_as_written(
    start, tmp_path, command, backend, key, doc
):
    path = tmp_path / "device-config.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    code, err = start([*commands(backend)[command], "--config", str(path)])
    assert code == CONFIG_ERROR, err
    assert f"{path}: {key}:" in err, err
    assert REACHED not in err


# -- the device plugin's per-node file ---------------------------------------------------

NODE_BAD = {
    "nodeconfig[n1].devicesplitcont": [{"name": "n1", "devicesplitcont": 4}],
    "nodeconfig[n1].devicesplitcount": [{"name": "n1", "devicesplitcount": 0}],
    "nodeconfig[n1].devicememoryscaling": [{"name": "n1", "devicememoryscaling": "x"}],
    "nodeconfig[n1].operatingmode": [{"name": "n1", "operatingmode": "hami_core"}],
    # another node's typo stops this node too: the file is one ConfigMap for all
    "nodeconfig[n2].filterdevice": [{"name": "n1"}, {"name": "n2", "filterdevice": {}}],
}


@pytest.mark.parametrize("backend", NODE_BACKENDS)
@pytest.mark.parametrize("key", sorted(NODE_BAD))
def test_a_bad_per_node_file_stops_the_device_plugin_at_start(start, tmp_path, backend, key):
    path = tmp_path / "config.json"
    path.write_text(yaml.safe_dump({"nodeconfig": NODE_BAD[key]}), encoding="utf-8")
    argv = commands(backend)["device-plugin"]
    code, err = start([*argv, "--node-config", str(path)])
    assert code == CONFIG_ERROR, err
    assert f"{path}: {key}:" in err, err
    assert REACHED not in err


def test_a_good_per_node_file_gets_past_the_configuration(start, tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"nodeconfig": [{"name": "n1", "devicesplitcount": 4}]}', encoding="utf-8")
    code, err = start([*commands("nvidia")["device-plugin"], "--node-config", str(path)])
    assert code != 0 and REACHED in err, err
