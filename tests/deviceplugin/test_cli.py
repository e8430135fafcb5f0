"""``hami device-plugin --help`` documents every flag and environment variable."""

from __future__ import annotations

import re

from click.testing import CliRunner

from hami_core.cli import cli

FLAGS_AND_ENV = {
    "--node-name": "NODE_NAME",
    "--backend": "HAMI_BACKEND",
    "--vendor": "HAMI_VENDOR",
    "--kubeconfig": "KUBECONFIG",
    "--config": "HAMI_CONFIG",
    "--config-file": "HAMI_CONFIG",  # HAMi's name of --config
    "--mig-strategy": "HAMI_MIG_STRATEGY",
    "--disable-core-limit": "HAMI_DISABLE_CORE_LIMIT",
    "--node-config": "HAMI_NODE_CONFIG",
    "--device-plugin-path": "HAMI_DEVICE_PLUGIN_PATH",
    "--pod-resources-socket": "HAMI_POD_RESOURCES_SOCKET",
    "--socket-name": "HAMI_SOCKET_NAME",
    "--register-interval": "HAMI_REGISTER_INTERVAL",
    "--health-interval": "HAMI_HEALTH_INTERVAL",
    "--cdi": "HAMI_CDI",
    "--cdi-spec-dir": "HAMI_CDI_SPEC_DIR",
    "--state-dir": "HAMI_STATE_DIR",
    "--link-scores": "HAMI_LINK_SCORES",
    "--fail-on-init-error": "HAMI_FAIL_ON_INIT_ERROR",
    "--api-timeout": "HAMI_API_TIMEOUT",
    "--allocate-timeout": "HAMI_ALLOCATE_TIMEOUT",
    "--metrics-port": "HAMI_METRICS_PORT",
    "--metrics-bind-address": "HAMI_METRICS_BIND_ADDRESS",
    "--allocation-public-keys": "HAMI_ALLOCATION_PUBLIC_KEYS",
    "--unsigned-allocations": "HAMI_UNSIGNED_ALLOCATIONS",
    "--log-level": "HAMI_LOG_LEVEL",
}


def test_help_documents_every_flag_and_its_environment_variable():
    command = cli.commands["device-plugin"]
    declared = {o for p in command.params for o in p.opts if o.startswith("--")} - {"--help"}
    result = CliRunner().invoke(cli, ["device-plugin", "--help"], terminal_width=200)
    text = re.sub(r"\s+", " ", result.output)

    assert result.exit_code == 0
    assert declared == set(FLAGS_AND_ENV)
    for flag, env in FLAGS_AND_ENV.items():
        assert flag in text
        assert f"env var: {env}" in text, env
    for env in ("HAMI_DISABLED_BACKENDS", "LD_LIBRARY_PATH", "HAMI_NVIDIA_SYSFS_ROOT"):
        assert env in text


def test_node_name_is_required():
    result = CliRunner().invoke(cli, ["device-plugin"], env={"NODE_NAME": ""})
    assert result.exit_code == 2
    assert "Missing option '--node-name'" in result.output
