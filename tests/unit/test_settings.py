"""One statement per setting: the server commands' options are generated from the
``*Options`` attrs classes (``hami_core.settings``, ``hami_core.servers.options``)."""

from __future__ import annotations

import re

import attrs
import click
import pytest
from click.testing import CliRunner

from hami_core.cli import cli
from hami_core.options import SimulateOptions, TopOptions
from hami_core.servers.options import (
    DevicePluginOptions,
    MonitorOptions,
    SchedulerOptions,
    WebhookOptions,
)
from hami_core.settings import click_options, setting, settings_of


def context(name: str, args: list[str]) -> click.Context:
    """The command's parsed context under the ``hami`` group (its help option names:
    click keeps a command's help option from the first context made)."""
    parent = click.Context(cli, info_name="hami", **cli.context_settings)
    return cli.commands[name].make_context(name, args, parent=parent)


COMMANDS = {
    "top": (TopOptions, {}),
    "simulate": (SimulateOptions, {}),
    "scheduler": (SchedulerOptions, {}),
    "webhook": (WebhookOptions, {}),
    "monitor": (MonitorOptions, {"node_name": "n1"}),
    "device-plugin": (DevicePluginOptions, {"node_name": "n1"}),
}


@pytest.mark.parametrize("name", COMMANDS)
def test_the_command_line_defaults_are_the_classes_defaults(name):
    cls, required = COMMANDS[name]
    args = [a for k, v in required.items() for a in (f"--{k.replace('_', '-')}", v)]
    ctx = context(name, args)
    arguments = {p.name for p in cli.commands[name].params if isinstance(p, click.Argument)}
    params = {k: v for k, v in ctx.params.items() if k != "log_level" and k not in arguments}
    assert cls(**params) == cls(**required)
    # Every setting is an option of its command and nothing else is.
    assert set(params) == {f.name for f, _ in settings_of(cls)}


@pytest.mark.parametrize("name", COMMANDS)
def test_help_shows_every_flag_its_unit_and_its_environment_variable(name):
    cls, _ = COMMANDS[name]
    result = CliRunner().invoke(cli, [name, "--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    # click wraps lines (also at hyphens): compare without white space.
    text = re.sub(r"\s+", "", result.output)

    def shown(s: str) -> bool:
        return re.sub(r"\s+", "", s) in text

    for field, meta in settings_of(cls):
        assert shown(meta.flags[0]), field.name
        if meta.unit:
            assert shown(f"{meta.help} [unit: {meta.unit}]"), field.name
        if meta.env:
            assert shown(f"env var: {meta.env}"), field.name
        if meta.why:
            assert shown(f"Why this default: {meta.why}"), field.name


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["device-plugin", "--node-name", "n", "--register-interval", "0"], "--register-interval"),
        (["device-plugin", "--node-name", "n", "--metrics-port", "70000"], "--metrics-port"),
        (["scheduler", "--node-label-selector", "gpu"], "--node-label-selector"),
        (["scheduler", "--gpu-policy", "fastest"], "--gpu-policy"),
        (["webhook", "--cert-mode", "guess"], "--cert-mode"),
        (["monitor", "--node-name", "n", "--gc-grace", "-5"], "--gc-grace"),
    ],
)
def test_a_bad_flag_stops_the_command_at_start_with_the_flag_named(args, named):
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2
    assert named in result.output


def test_an_environment_variable_sets_the_setting(monkeypatch):
    ctx = context("device-plugin", ["--node-name", "n"])
    assert ctx.params["register_interval_s"] == 30.0
    monkeypatch.setenv("HAMI_REGISTER_INTERVAL", "7.5")
    ctx = context("device-plugin", ["--node-name", "n"])
    assert ctx.params["register_interval_s"] == 7.5
    bad = CliRunner().invoke(
        cli, ["device-plugin", "--node-name", "n"], env={"HAMI_REGISTER_INTERVAL": "0"}
    )
    assert bad.exit_code == 2 and "--register-interval" in bad.output


def test_a_setting_declared_once_makes_its_option():
    @attrs.frozen(kw_only=True)
    class Toy:
        wait_s: float = setting(
            1.5, flag="--wait", unit="seconds", env="TOY_WAIT", min=0, help="How long.", why="x."
        )
        names: tuple[str, ...] = setting((), flag="--name", multiple=True, help="Names.")
        on: bool = setting(True, help="Switch.")
        internal: int = 3

    @click.command()
    @click_options(Toy)
    def toy(**opts):
        click.echo(repr(Toy(**opts)))

    out = CliRunner().invoke(toy, ["--wait", "2", "--name", "a", "--name", "b", "--no-on"])
    assert out.output.strip() == repr(Toy(wait_s=2.0, names=("a", "b"), on=False))
    assert CliRunner().invoke(toy, []).output.strip() == repr(Toy())
    text = re.sub(r"\s+", " ", CliRunner().invoke(toy, ["--help"]).output)
    assert "How long. [unit: seconds] Why this default: x." in text
    assert "env var: TOY_WAIT" in text and "default: 1.5" in text
    assert "--internal" not in text
    assert CliRunner().invoke(toy, ["--wait", "-1"]).exit_code == 2


def test_the_settings_reference_is_generated_from_the_classes():
    from pathlib import Path

    from hami_core.options import all_commands
    from hami_core.settings import settings_markdown

    commands = all_commands()

    doc = Path(__file__).resolve().parents[2] / "docs" / "settings.md"
    assert doc.read_text(encoding="utf-8") == settings_markdown(commands), (
        "docs/settings.md is stale: run scripts/gen-settings-doc.py"
    )
    text = settings_markdown(commands)
    for title, cls in commands:
        assert f"## `{title}`" in text
        for _, meta in settings_of(cls):
            assert f"- `{meta.flags[0]}`" in text
            if meta.why:
                assert f"*Why this default:* {meta.why}" in text


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--example=true"], True),
        (["--example=T"], True),
        (["--example=1"], True),
        (["--example=false"], False),
        (["--example=F"], False),
        (["--example=0"], False),
        (["--example"], True),
        (["--no-example"], False),
        ([], False),
    ],
)
def test_a_boolean_setting_takes_gos_spelling_too(args, expected):
    """Go's ``flag`` / pflag take ``--x=<strconv.ParseBool value>`` for a boolean flag
    (HAMi's ``--force-overwrite-default-scheduler=false``); so does every ``hami``
    command's ``--x/--no-x`` (``settings.SettingsCommand``)."""
    assert context("top", args).params["example"] is expected


def test_gos_spelling_is_read_only_for_boolean_flags_and_before_double_dash():
    from hami_core.settings import go_bool_args

    command = cli.commands["top"]
    assert go_bool_args(command, ["--output=json", "--", "--example=true"]) == [
        "--output=json",
        "--",
        "--example=true",
    ]
    with pytest.raises(click.BadParameter, match="'yes' is not a boolean"):
        go_bool_args(command, ["--example=yes"])  # Go's ParseBool refuses it too
    result = CliRunner().invoke(cli, ["top", "--example=yes"])
    assert result.exit_code == 2 and "--example" in result.output


def test_every_commands_settings_import_none_of_the_server_extras():
    """The split of the settings (``hami_core.settings`` says it) rests on this: the
    server processes' settings module, which the client commands' settings import its
    shared builders from, loads without flask, grpc or prometheus_client."""
    code = (
        "import sys, hami_core.options, hami_core.servers.options\n"
        "bad = sorted({m.split('.')[0] for m in sys.modules} & "
        "{'flask', 'grpc', 'prometheus_client', 'waitress', 'cheroot'})\n"
        "assert not bad, bad\n"
    )
    import subprocess
    import sys

    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
