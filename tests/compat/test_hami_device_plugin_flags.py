"""The arguments HAMi's chart passes to its NVIDIA device plugin start ``hami
device-plugin``, each with its meaning.

HAMi 2.10 ``charts/hami/templates/device-plugin/daemonsetnvidia.yaml``, container
``device-plugin``: ``nvidia-device-plugin --config-file=/device-config.yaml
--mig-strategy={{ .Values.devicePlugin.migStrategy }} --disable-core-limit={{
.Values.devicePlugin.disablecorelimit }}`` (values.yaml: ``none``, ``"false"``).
``cmd/device-plugin/nvidia/main.go`` and ``vgpucfg.go`` for their meanings:
``--config-file`` is the scheduler's ``device-config.yaml`` (``config.LoadConfig``),
``--mig-strategy`` NVIDIA's none | single | mixed, ``--disable-core-limit`` the switch
whose effect is ``GPU_CORE_UTILIZATION_POLICY=disable`` in the Allocate answer
(``pkg/device-plugin/nvidiadevice/nvinternal/plugin/server.go``). ``hami device-plugin``
rejected every one of them as "no such option".
"""

from __future__ import annotations

import inspect
import logging
import sys

import attrs
import pytest

from hami_core.cli import main
from hami_core.cluster import kube
from hami_core.errors import ConfigError, HamiError
from hami_core.model import DevicePluginFlags
from hami_core.plugin import BackendManager, hookimpl
from hami_core.protocol.config import HamiConfig, load_config
from hami_core.protocol.nodeconfig import load_node_overrides
from hami_core.servers import deviceplugin_main, options
from tests.toy_backend import ToyBackend

HAMI_CONFIG = "nvidia:\n  deviceSplitCount: 4\n  gpuCorePolicy: force\n"


class Reached(HamiError):
    """Raised where the process would first contact the API server."""


def chart_args(config, mig_strategy: str = "none", disable_core_limit: str = "false"):
    """The device-plugin container's command after ``nvidia-device-plugin``, as HAMi's chart
    renders it (its defaults: ``migStrategy: "none"``, ``disablecorelimit: "false"``)."""
    return [
        f"--config-file={config}",
        f"--mig-strategy={mig_strategy}",
        f"--disable-core-limit={disable_core_limit}",
    ]


@pytest.fixture
def run(monkeypatch, capsys, tmp_path):
    """``hami device-plugin <argv>`` through ``cli.main`` up to the API server; returns
    (stderr, the nvidia section the process would serve: its manager's ``vendor_config``)."""
    seen: dict[str, object] = {}
    config = tmp_path / "device-config.yaml"
    config.write_text(HAMI_CONFIG)
    monkeypatch.setenv("NODE_NAME", "gpu-node-1")  # the chart's downward API value

    def reached(*_, **__):
        raise Reached("reached the API server")

    monkeypatch.setattr(kube, "make_api_client", reached)
    real_vendor = deviceplugin_main.backend_vendor

    def backend_vendor(opts, manager):
        seen["opts"] = opts
        seen["section"] = manager.vendor_config(opts.backend)
        return real_vendor(opts, manager)

    monkeypatch.setattr(deviceplugin_main, "backend_vendor", backend_vendor)
    real_overrides = deviceplugin_main.load_node_overrides

    def load_node_overrides(path, *, node):
        seen["node"] = out = real_overrides(path, node=node)
        return out

    monkeypatch.setattr(deviceplugin_main, "load_node_overrides", load_node_overrides)
    # HAMi's fixed per-node path, absent unless a test writes it
    monkeypatch.setattr(options, "HAMI_NODE_CONFIG_PATH", str(tmp_path / "config" / "config.json"))

    def go(argv):
        monkeypatch.setattr(sys, "argv", ["hami", "device-plugin", *argv])
        capsys.readouterr()
        with pytest.raises(SystemExit):
            main()
        return capsys.readouterr().err, seen.get("section")

    go.config = config
    go.seen = seen
    return go


def test_hami_device_plugin_takes_hamis_chart_arguments(run):
    err, section = run(chart_args(run.config))
    assert "reached the API server" in err, err
    assert section.split_count == 4  # --config-file read, HAMi's device-config.yaml
    assert section.mig_strategy == "none"
    # --disable-core-limit=false keeps the file's policy (gpuCorePolicy: force)
    assert section.options["corePolicy"] == "force"


def test_the_chart_switches_change_what_the_plugin_serves(run, caplog):
    caplog.set_level(logging.WARNING)
    err, section = run(chart_args(run.config, "mixed", "true"))
    assert "reached the API server" in err, err
    assert section.mig_strategy == "mixed"
    assert section.options["corePolicy"] == "disable"
    assert "--disable-core-limit=true overrides nvidia.corePolicy force" in caplog.text


def test_without_the_flags_the_configuration_is_unchanged(run):
    err, section = run([f"--config={run.config}"])
    assert "reached the API server" in err, err
    assert (section.mig_strategy, section.options["corePolicy"]) == ("", "force")


def test_a_nodes_migstrategy_still_overrides_the_flag(run, tmp_path):
    node_config = tmp_path / "config.json"
    node_config.write_text('{"nodeconfig": [{"name": "gpu-node-1", "migstrategy": "single"}]}')
    err, section = run([*chart_args(run.config, "mixed"), f"--node-config={node_config}"])
    assert "reached the API server" in err, err
    assert section.mig_strategy == "mixed"
    node = load_node_overrides(str(node_config), node="gpu-node-1")
    assert node.apply(section).mig_strategy == "single"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--mig-strategy=all"],
            "'--mig-strategy' (env var: 'HAMI_MIG_STRATEGY'): 'all' is not one of 'none', "
            "'single', 'mixed'",
        ),
        (["--disable-core-limit=maybe"], "for --disable-core-limit: 'maybe' is not a boolean"),
        (["--config-file=/nonexistent/device-config.yaml"], "/nonexistent/device-config.yaml"),
    ],
)
def test_a_bad_hami_flag_value_stops_the_start_naming_it(run, argv, message):
    err, section = run(argv)
    assert message in err, err
    assert section is None  # stopped before any backend served anything


def test_another_backend_ignores_the_nvidia_switches_with_a_warning(run, caplog):
    caplog.set_level(logging.WARNING)
    err, section = run(["--backend=amd", *chart_args(run.config, "single", "true")])
    assert "reached the API server" in err, err
    assert section.mig_strategy == ""
    assert "--mig-strategy: ignored, backend amd has no such setting" in caplog.text
    assert "--disable-core-limit: ignored, backend amd" in caplog.text


def test_the_chart_defaults_on_another_backend_warn_of_nothing(run, caplog):
    caplog.set_level(logging.WARNING)
    err, _ = run(["--backend=amd", *chart_args(run.config)])
    assert "reached the API server" in err, err
    assert "ignored" not in caplog.text


@pytest.mark.parametrize(("value", "policy"), [("true", "disable"), ("false", "force")])
def test_hamis_disable_core_limit_key_is_the_same_switch(tmp_path, value, policy):
    """HAMi's ``nvidia.disableCoreLimit`` (``pkg/device/nvidia/device.go``) in the file,
    formerly ignored with a warning, means what the flag means."""
    path = tmp_path / "device-config.yaml"
    path.write_text(f"{HAMI_CONFIG}  disableCoreLimit: {value}\n")
    manager = BackendManager.from_entry_points()
    manager = manager.with_config(load_config(str(path), backends=manager.infos))
    assert manager.vendor_config("nvidia").options["corePolicy"] == policy


def test_a_disable_core_limit_key_that_is_not_a_boolean_is_named(tmp_path):
    path = tmp_path / "device-config.yaml"
    path.write_text(f'{HAMI_CONFIG}  disableCoreLimit: "yes"\n')
    manager = BackendManager.from_entry_points()
    with pytest.raises(ConfigError, match=r"nvidia\.disableCoreLimit: expected true or false"):
        load_config(str(path), backends=manager.infos)


def test_the_chart_command_reads_hamis_per_node_file_at_its_fixed_path(run, tmp_path):
    """HAMi's chart mounts the device plugin's config.json at /config and names it to no
    flag (HAMi reads ``ConfigFilePath``); with no --node-config we read it there too."""
    fixed = tmp_path / "config" / "config.json"
    fixed.parent.mkdir()
    fixed.write_text('{"nodeconfig": [{"name": "gpu-node-1", "devicesplitcount": 7}]}')
    err, section = run(chart_args(run.config))
    assert "reached the API server" in err, err
    assert run.seen["opts"].node_config == str(fixed)
    assert run.seen["node"].apply(section).split_count == 7


def test_an_explicit_node_config_wins_over_the_fixed_path(run, tmp_path):
    fixed = tmp_path / "config" / "config.json"
    fixed.parent.mkdir()
    fixed.write_text('{"nodeconfig": [{"name": "gpu-node-1", "devicesplitcount": 7}]}')
    ours = tmp_path / "ours.json"
    ours.write_text('{"nodeconfig": [{"name": "gpu-node-1", "devicesplitcount": 3}]}')
    err, section = run([*chart_args(run.config), f"--node-config={ours}"])
    assert "reached the API server" in err, err
    assert run.seen["node"].apply(section).split_count == 3


def test_without_the_fixed_file_no_per_node_file_is_read(run):
    err, section = run(chart_args(run.config))
    assert "reached the API server" in err, err
    assert run.seen["opts"].node_config is None
    assert run.seen["node"].apply(section).split_count == 4


def test_hami_monitor_takes_the_vgpu_monitor_argument_of_the_same_daemonset(monkeypatch, capsys):
    """The DaemonSet's ``vgpu-monitor`` container runs ``vGPUmonitor --legacy-metrics=true``
    (chart value ``legacyMetrics``); ``hami monitor`` took no such option."""
    from hami_core.servers import monitor

    def reached(*_, **__):
        raise Reached("reached the API server")

    monkeypatch.setattr(monitor, "make_api_client", reached)
    monkeypatch.setattr(sys, "argv", ["hami", "monitor", "--node-name=n", "--legacy-metrics=true"])
    with pytest.raises(SystemExit):
        main()
    err = capsys.readouterr().err
    assert "reached the API server" in err, err


class FlagReader:
    """A backend other than NVIDIA that reads ``--mig-strategy`` (a vendor's own, to show
    the core holds no vendor's flags: the backend declares and applies them)."""

    def __init__(self) -> None:
        self.seen: list[object] = []

    @hookimpl
    def hami_backend_info(self):
        return attrs.evolve(ToyBackend.info("reader"), device_plugin_flags=("--mig-strategy",))

    @hookimpl
    def hami_device_plugin_flags(self, flags, config):
        self.seen.append(flags)
        return attrs.evolve(config, mig_strategy=flags.mig_strategy)


def test_a_backend_declares_and_applies_the_flags_it_reads(caplog):
    caplog.set_level(logging.WARNING)
    reader = FlagReader()
    manager = BackendManager.from_plugins({"reader": reader})
    flags = DevicePluginFlags(mig_strategy="single", disable_core_limit=True)
    config = manager.with_device_plugin_flags("reader", flags, HamiConfig())
    assert config.vendors["reader"].mig_strategy == "single"
    assert reader.seen == [flags]
    # the flag it does not declare is ignored, with a warning naming it
    assert "--disable-core-limit: ignored, backend reader has no such setting" in caplog.text
    assert "--mig-strategy: ignored" not in caplog.text
    # a backend that declares none keeps its section, every flag given ignored
    toy = BackendManager.from_plugins({"toy": ToyBackend()})
    assert toy.with_device_plugin_flags("toy", flags, HamiConfig()) == HamiConfig()
    assert "--mig-strategy: ignored, backend toy has no such setting" in caplog.text


def test_the_core_names_no_vendor_for_the_flags():
    """The device plugin's start holds no vendor's name: what a flag means is its
    backend's (``hami_nvidia.plugin_flags`` for NVIDIA's two)."""
    source = inspect.getsource(deviceplugin_main)
    assert '"nvidia"' not in source and "NVIDIA =" not in source
    info = BackendManager.from_entry_points().infos["nvidia"]
    assert set(info.device_plugin_flags) == {"--mig-strategy", "--disable-core-limit"}


def test_a_backend_answering_the_flags_with_garbage_is_named():
    class Garbage(FlagReader):
        @hookimpl
        def hami_device_plugin_flags(self, flags, config):
            return {"migstrategy": "single"}

    manager = BackendManager.from_plugins({"reader": Garbage()})
    flags = DevicePluginFlags(mig_strategy="single")
    with pytest.raises(HamiError, match="reader.*hami_device_plugin_flags returned dict"):
        manager.with_device_plugin_flags("reader", flags, HamiConfig())
