"""The arguments HAMi's chart passes to its scheduler binary (which serves the extender
and the webhook in one process) start ``hami scheduler`` and ``hami webhook``.

HAMi 2.10 ``charts/hami/templates/scheduler/deployment.yaml``, container
``vgpu-scheduler-extender``, and ``cmd/scheduler/main.go`` for the flags' meanings:
``--http_bind`` is HOST:PORT, ``--metrics-bind-address`` HOST:PORT (``:9395``),
``--cert_file``/``--key_file`` the serving pair, ``--device-config-file`` the
``device-config.yaml``, ``--leader-elect-resource-name``/``-namespace`` the Lease,
``--scheduler-name`` the name the webhook writes, ``--enable-<vendor>`` a vendor switch.
``hami scheduler`` rejected every one of them as "no such option".
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from hami_core.cli import main
from hami_core.cluster import kube
from hami_core.errors import ConfigError, HamiError
from hami_core.servers import scheduler_main, webhook_main
from hami_core.servers.options import SchedulerOptions, split_host_port

HAMI_CONFIG = "nvidia:\n  deviceSplitCount: 4\n"


class Reached(HamiError):
    """Raised where a process would first contact the API server."""


def chart_args(config: Path, http_bind: str) -> list[str]:
    """The extender container's arguments as HAMi's chart renders them with its default
    values (webhook enabled, ascend and iluvatar enabled, legacy metrics on)."""
    return [
        f"--http_bind={http_bind}",
        f"--cert_file={config.parent / 'tls.crt'}",
        f"--key_file={config.parent / 'tls.key'}",
        "--scheduler-name=hami-scheduler",
        "--metrics-bind-address=:9395",
        "--node-scheduler-policy=binpack",
        "--gpu-scheduler-policy=spread",
        "--force-overwrite-default-scheduler=true",
        f"--device-config-file={config}",
        "--leader-elect=true",
        "--leader-elect-resource-name=hami-scheduler",
        "--leader-elect-resource-namespace=hami-system",
        "--enable-ascend=true",
        "--enable-iluvatar=true",
        "--node-label-selector=gpu=on",
        "--legacy-metrics=true",
    ]


@pytest.fixture
def run(monkeypatch, capsys, tmp_path):
    """``hami <argv>`` through ``cli.main`` up to the API server; returns (stderr, what
    the process would serve: options, configuration, disabled backends)."""
    seen: dict[str, object] = {}
    for name in ("tls.crt", "tls.key"):
        (tmp_path / name).write_text("")
    config = tmp_path / "device-config.yaml"
    config.write_text(HAMI_CONFIG)

    def reached(*_, **__):
        raise Reached("reached the API server")

    # HAMi's command line plus our one required setting, given as its environment
    # variable (the allocation-signing key, PROTOCOL.md §4a): the flags stay HAMi's
    monkeypatch.setenv("HAMI_ALLOCATION_SIGNING_KEY", "secret:hami-system/hami-allocation-key")

    for module in (kube, scheduler_main, webhook_main):
        monkeypatch.setattr(module, "make_api_client", reached)
        real = module.__dict__.get("with_overrides")
        if real is not None:

            def spy(cfg, _real=real, **overrides):
                seen["config"] = out = _real(cfg, **overrides)
                return out

            monkeypatch.setattr(module, "with_overrides", spy)
    real_exposure = scheduler_main.check_exposure

    def exposure(opts):
        seen["opts"] = opts
        real_exposure(opts)

    monkeypatch.setattr(scheduler_main, "check_exposure", exposure)
    real_from = scheduler_main.BackendManager.from_entry_points

    def from_entry_points(**kw):
        seen["disabled"] = kw.get("disabled")
        return real_from(**kw)

    monkeypatch.setattr(scheduler_main.BackendManager, "from_entry_points", from_entry_points)

    def go(argv):
        monkeypatch.setattr(sys, "argv", ["hami", *argv])
        capsys.readouterr()
        with pytest.raises(SystemExit):
            main()
        return capsys.readouterr().err, seen

    go.config = config
    return go


def test_hami_scheduler_takes_hamis_chart_arguments(run):
    err, seen = run(["scheduler", *chart_args(run.config, "127.0.0.1:443")])
    assert "reached the API server" in err, err
    opts = seen["opts"]
    assert (opts.bind_address, opts.port) == ("127.0.0.1", 443)
    assert (opts.metrics_bind_address, opts.metrics_port) == ("0.0.0.0", 9395)
    assert opts.tls_cert_file.endswith("tls.crt") and opts.tls_private_key_file.endswith("tls.key")
    assert (opts.lease_name, opts.lease_namespace) == ("hami-scheduler", "hami-system")
    assert opts.leader_elect is True and opts.node_label_selector == {"gpu": "on"}
    config = seen["config"]
    assert config.source == str(run.config)  # --device-config-file read, HAMi's format
    assert config.vendor("nvidia").split_count == 4
    assert config.scheduler_name == "hami-scheduler"
    assert config.force_overwrite_default_scheduler is True
    assert "ascend" not in seen["disabled"] and "iluvatar" not in seen["disabled"]


def test_the_chart_addresses_beyond_loopback_still_need_client_certificates(run):
    """HAMi's chart listens on 0.0.0.0:443 with no client CA: our extender refuses an
    unauthenticated /bind beyond loopback (issue #12 item 3), naming HAMi's flag."""
    err, _ = run(["scheduler", *chart_args(run.config, "0.0.0.0:443")])
    assert "error: --http_bind 0.0.0.0:443: the extender authenticates no client" in err, err


def test_hami_flags_override_the_configuration(run):
    err, seen = run(
        [
            "scheduler",
            f"--device-config-file={run.config}",
            "--scheduler-name=gpu-scheduler",
            "--force-overwrite-default-scheduler=false",
            "--enable-ascend=false",
        ]
    )
    assert "reached the API server" in err, err
    assert seen["config"].scheduler_name == "gpu-scheduler"
    assert seen["config"].force_overwrite_default_scheduler is False
    assert "ascend" in seen["disabled"] and "iluvatar" not in seen["disabled"]


def test_hami_webhook_takes_the_same_arguments(run):
    argv = ["webhook", "--cert-mode", "files", "--http_bind=:443", "--cert_file", "x"]
    argv += ["--key_file", "y", f"--device-config-file={run.config}"]
    err, seen = run([*argv, "--scheduler-name=gpu-scheduler"])
    assert "reached the API server" in err, err
    assert seen["config"].scheduler_name == "gpu-scheduler"
    assert seen["config"].vendor("nvidia").split_count == 4


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["scheduler", "--http_bind=127.0.0.1"], "--http_bind 127.0.0.1: expected HOST:PORT"),
        (["scheduler", "--http_bind=127.0.0.1:0"], "--http_bind 127.0.0.1:0: the port must"),
        (["scheduler", "--metrics-bind-address=:http"], "--metrics-bind-address :http: the port"),
        (["scheduler", "--scheduler-name=Not_A_Name"], "is not a DNS-1123 subdomain"),
        (["webhook", "--http_bind=:99999"], "--http_bind :99999: the port must"),
    ],
)
def test_a_bad_hami_flag_value_stops_the_start_naming_it(run, argv, message):
    err, _ = run(argv)
    assert message in err, err


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (":9395", ("", 9395)),
        ("0.0.0.0:443", ("0.0.0.0", 443)),
        ("[::1]:443", ("::1", 443)),
        ("::", ("::", None)),
        ("::1", ("::1", None)),
        ("0.0.0.0", ("0.0.0.0", None)),
    ],
)
def test_go_host_port_is_split_and_a_bare_ipv6_host_is_not(value, expected):
    assert split_host_port(value, "--x") == expected


def test_the_default_options_are_unchanged_by_resolution():
    opts = SchedulerOptions()
    assert opts.resolved() == opts
    with pytest.raises(ConfigError):
        SchedulerOptions(http_bind="x").resolved()
