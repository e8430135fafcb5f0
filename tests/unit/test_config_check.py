"""Every backend's section is checked when a process starts (issue #12 item 13, #14 item 1).

A typo in one backend's section used to pass the load and deny every pod later (an
unknown Ascend ``vnpuMode``: ``hami simulate`` reported 20 of 20 pods denied, exit 0).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from hami_core.errors import ConfigError
from hami_core.model import BackendInfo
from hami_core.plugin import BackendManager, hookimpl
from hami_core.protocol.config import HamiConfig, VendorConfig, parse_config
from tests.toy_backend import ToyBackend
from tests.unit.test_config_start import commands

TYPOS = {
    "ascend.vnpuMode": "ascend:\n  vnpuMode: tempalte\n",
    "ascend.vnpus.Ascend910B3.templates[0].memory": (
        "ascend:\n  vnpus:\n    Ascend910B3:\n      templates: [{name: vir05, memory: -1}]\n"
    ),
    "nvidia.corePolicy": "nvidia:\n  corePolicy: forced\n",
    "kunlun.memoryTiersMiB": "kunlun:\n  memoryTiersMiB: [49152, 24576]\n",
}

#: Each server with the least flags that get it past argument parsing to its start.
COMMANDS = {k: v for k, v in commands("nvidia").items() if k != "monitor"}


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("key", sorted(TYPOS))
def test_a_typo_in_a_backend_section_stops_the_process_at_start(tmp_path, command, key):
    path = tmp_path / "hami.yaml"
    path.write_text("version: v1\n" + TYPOS[key], encoding="utf-8")
    out = subprocess.run(
        [sys.executable, "-m", "hami_core", *COMMANDS[command], "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "KUBECONFIG": str(tmp_path / "missing")},
    )
    assert out.returncode == 2, out.stderr
    assert key in out.stderr, out.stderr


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_typo_in_a_hami_device_config_stops_the_process_at_start(tmp_path, command):
    """HAMi's format: a key neither HAMi nor we know, in a real process, exit 2."""
    path = tmp_path / "device-config.yaml"
    path.write_text("nvidia:\n  deviceSplitCount: 4\n  deviceMemoryScalling: 2\n")
    out = subprocess.run(
        [sys.executable, "-m", "hami_core", *COMMANDS[command], "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "KUBECONFIG": str(tmp_path / "missing")},
    )
    assert out.returncode == 2, out.stderr
    assert f"error: {path}: nvidia.deviceMemoryScalling: unknown key" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr


class Checked(ToyBackend):
    """A toy backend with an option and a check of its own."""

    seen: list[VendorConfig]

    def __init__(self) -> None:
        self.seen = []

    @hookimpl
    def hami_backend_info(self) -> BackendInfo:
        return BackendInfo(
            name="toy", device_types=self.info().device_types, option_defaults={"mode": "a", "n": 2}
        )

    @hookimpl
    def hami_check_config(self, config: VendorConfig) -> tuple[str, int]:
        mode = config.options["mode"]
        if mode not in ("a", "b"):
            raise ConfigError(f"toy.mode: {mode!r} is not one of a, b")
        return (mode, config.options["n"])

    @hookimpl
    def hami_allocate(self, config):
        self.seen.append(config)
        return super().hami_allocate()


def manager_for(backend: Checked, doc: dict[str, object]) -> BackendManager:
    infos = {"toy": backend.hami_backend_info()}
    return BackendManager.from_plugins(
        {"toy": backend}, config=parse_config({"version": "v1", **doc}, backends=infos)
    )


def test_hooks_get_the_complete_section_and_the_parsed_settings():
    backend = Checked()
    absent = manager_for(backend, {}).vendor_config("toy")
    assert dict(absent.options) == {"mode": "a", "n": 2}
    assert absent.settings == ("a", 2)
    partial = manager_for(backend, {"toy": {"mode": "b"}}).vendor_config("toy")
    assert dict(partial.options) == {"mode": "b", "n": 2}
    assert partial.settings == ("b", 2)


def test_the_check_runs_for_every_configuration_the_manager_takes():
    backend = Checked()
    good = manager_for(backend, {})
    bad = HamiConfig(vendors={"toy": VendorConfig(options={"mode": "c"})})
    with pytest.raises(ConfigError, match=r"toy\.mode: 'c'"):
        good.with_config(bad)


def test_every_installed_backend_accepts_its_own_defaults():
    manager = BackendManager.from_entry_points()
    for record in manager.backends:
        section = manager.vendor_config(record.name)
        assert dict(section.options) == dict(record.info.option_defaults)


def test_a_config_stating_every_default_loads():
    manager = BackendManager.from_entry_points()
    doc = {"version": "v1", **{r.name: dict(r.info.option_defaults) for r in manager.backends}}
    loaded = manager.with_config(parse_config(doc, backends=manager.infos))
    for record in manager.backends:
        stated, default = loaded.vendor_config(record.name), manager.vendor_config(record.name)
        # Stating every default changes nothing: the same options and the same checked
        # settings as a configuration that states none.
        assert dict(stated.options) == dict(record.info.option_defaults), record.name
        assert stated.settings == default.settings, record.name
    assert loaded.vendor_config("ascend").settings is not None  # Ascend parses its section
