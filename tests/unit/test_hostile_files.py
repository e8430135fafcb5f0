"""Files written to hurt: every loader of a configuration or a snapshot, given an alias
bomb, a 5000-digit integer, deep nesting, bytes that are not UTF-8, a file without end
or an oversized value, answers with one short error naming the file, within seconds,
and never a traceback (issue 24, item 18)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from hami_core.cli import cli
from hami_core.errors import ConfigError, InvalidInputError
from hami_core.protocol import documents
from hami_core.protocol.config import load_config
from hami_core.protocol.nodeconfig import load_node_overrides
from hami_core.simulate.loader import read_documents
from tests.builders import manager

#: An error message a person can read: the offending value is never put in whole.
MESSAGE_LIMIT = 600


def _bomb(key: str) -> str:
    """A billion-laughs document: ~1 KiB whose aliases expand to 10^9 strings."""
    parts = ["&a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    parts += [f"&a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
    return f"{key}: [" + ", ".join(parts) + "]\n"


HOSTILE = {
    "alias bomb": ("version: v1\n" + _bomb("schedulerName")).encode(),
    "5000-digit int": b"version: v1\nnodeLockExpirySeconds: " + b"9" * 5000 + b"\n",
    "deep nesting": b"version: v1\nschedulerName: " + b"[" * 5000 + b"]" * 5000 + b"\n",
    "not UTF-8": b"version: v1\nschedulerName: \xff\xfe hami\n",
    "long value": b"version: v1\nschedulerName: " + b"x" * 1_000_000 + b"\n",
}

NODE_HOSTILE = {
    "alias bomb": _bomb("nodeconfig").encode(),
    "5000-digit int": b"nodeconfig: [{name: n1, devicesplitcount: " + b"9" * 5000 + b"}]\n",
    "deep nesting": b"nodeconfig: " + b"[" * 5000 + b"]" * 5000 + b"\n",
    "not UTF-8": b"nodeconfig: [{name: \xff\xfe}]\n",
    "long value": b"nodeconfig: [{name: n1, operatingmode: " + b"x" * 1_000_000 + b"}]\n",
}


def _short_error(exc: BaseException, path: Path) -> str:
    message = str(exc)
    assert str(path) in message, message
    assert len(message) < MESSAGE_LIMIT, message[:1000]
    assert "\x1b" not in message and "\n" not in message
    return message


@pytest.mark.timeout(30)
@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_the_configuration_loader_refuses_hostile_files_briefly(tmp_path, case):
    path = tmp_path / "config.yaml"
    path.write_bytes(HOSTILE[case])
    started = time.monotonic()
    with pytest.raises(ConfigError) as caught:
        load_config(path, backends=manager().infos)
    assert time.monotonic() - started < 10
    _short_error(caught.value, path)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("case", sorted(NODE_HOSTILE))
def test_the_node_configuration_loader_refuses_hostile_files_briefly(tmp_path, case):
    path = tmp_path / "config.json"
    path.write_bytes(NODE_HOSTILE[case])
    with pytest.raises(ConfigError) as caught:
        load_node_overrides(path, node="n1")
    _short_error(caught.value, path)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("case", ["alias bomb", "5000-digit int", "deep nesting", "not UTF-8"])
@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_the_snapshot_loader_refuses_hostile_files_briefly(tmp_path, case, suffix):
    path = tmp_path / f"snap{suffix}"
    body = HOSTILE[case]
    if suffix == ".json":
        body = {
            "alias bomb": b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
            "5000-digit int": b'{"kind": "Node", "x": ' + b"9" * 5000 + b"}",
            "deep nesting": b"[" * 5000 + b"]" * 5000,
            "not UTF-8": b'{"kind": "\xff"}',
        }[case]
    path.write_bytes(body)
    with pytest.raises(InvalidInputError) as caught:
        read_documents(path)
    assert len(str(caught.value)) < MESSAGE_LIMIT


@pytest.mark.timeout(30)
def test_a_file_without_end_is_read_only_up_to_the_bound(monkeypatch):
    monkeypatch.setattr(documents, "SNAPSHOT_LIMIT_BYTES", 1024 * 1024)
    with pytest.raises(InvalidInputError, match="larger than 1048576 bytes"):
        read_documents(Path("/dev/zero"))


@pytest.mark.parametrize(
    "name",
    ["hami\x00scheduler", "hami\nscheduler", "hami\u202escheduler", "Hami", "x" * 254, ""],
)
def test_schedulername_is_a_dns_subdomain_as_kubernetes_validates_it(tmp_path, name):
    # kube-apiserver's ValidatePodSpec: spec.schedulerName is a DNS-1123 subdomain, so a
    # name that is not one would have every pod the webhook mutates refused.
    path = tmp_path / "config.yaml"
    path.write_text(f'version: v1\nschedulerName: "{name.encode("unicode_escape").decode()}"\n')
    with pytest.raises(ConfigError, match="schedulerName") as caught:
        load_config(path, backends=manager().infos)
    assert "\x00" not in str(caught.value) and "\u202e" not in str(caught.value)


def test_a_good_scheduler_name_still_loads(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("version: v1\nschedulerName: gpu.hami-scheduler\n")
    assert load_config(path, backends=manager().infos).scheduler_name == ("gpu.hami-scheduler")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("command", ["simulate", "top"])
@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_the_commands_answer_hostile_configuration_without_a_traceback(tmp_path, command, case):
    path = tmp_path / "config.yaml"
    path.write_bytes(HOSTILE[case])
    args = [command, "--config", str(path)] + (["--example"] if command == "top" else [])
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and result.exception.__class__ is SystemExit
    assert len(result.output) < MESSAGE_LIMIT + 100


def test_shown_bounds_any_value_and_escapes_what_a_terminal_would_obey():
    nested: list[object] = []
    for _ in range(1000):
        nested = [nested, "x" * 10_000]
    assert len(documents.shown(nested)) < 200
    assert len(documents.shown("y" * 1_000_000)) < 100
    assert documents.shown("\x1b[31mred\u202e") == "'\\x1b[31mred\\u202e'"
    assert documents.printable("a\x1b]0;owned\x07b\u202ec\nd") == (
        "a\\x1b]0;owned\\x07b\\u202ec\\x0ad"
    )
    assert documents.printable("GPU ñ 日本") == "GPU ñ 日本"
