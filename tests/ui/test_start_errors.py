"""``hami ui``'s start errors name what to change: an address that cannot be bound names
--address and --port (was only "[Errno -2] Name or service not known"), a token
requirement without a kubeconfig says the token is what needs the API server (a user
of --snapshot off loopback read only "no Kubernetes configuration"), and the URL it
logs for an IPv6 address has the address in brackets (RFC 3986), as a browser needs."""

from __future__ import annotations

from click.testing import CliRunner

from hami_core.cli import cli
from hami_core.ui.main import url_of
from tests.ui.cluster import write_snapshot


def ui(tmp_path, *args: str):
    snapshot = write_snapshot(tmp_path / "snapshot.json")
    return CliRunner().invoke(cli, ["ui", "--snapshot", str(snapshot), "--port", "0", *args])


def test_an_address_that_cannot_be_bound_is_named(tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n"
        "current-context: x\n"
    )
    # TEST-NET-1 (RFC 5737): an address, but none of this host's
    result = ui(tmp_path, "--address", "192.0.2.1", "--kubeconfig", str(kubeconfig))
    assert result.exit_code == 1
    assert "--address 192.0.2.1" in result.output, result.output


def test_what_is_no_address_is_refused_before_anything_is_read(tmp_path):
    result = ui(tmp_path, "--address", "not..an..address")
    assert result.exit_code == 2
    assert "'not..an..address' is not an address to listen on" in result.output, result.output


def test_a_token_without_a_kubeconfig_says_why_the_api_server_is_needed(tmp_path):
    result = ui(tmp_path, "--address", "0.0.0.0", "--kubeconfig", str(tmp_path / "none"))
    assert result.exit_code != 0
    assert "TokenReview" in result.output and "no such file" in result.output, result.output


def test_the_url_of_an_ipv6_address_is_bracketed():
    assert url_of("http", "::1", 8090) == "http://[::1]:8090/"
    assert url_of("https", "127.0.0.1", 8090) == "https://127.0.0.1:8090/"
    assert url_of("http", "localhost", 1) == "http://localhost:1/"


def test_what_a_snapshot_reading_leaves_out_is_logged_once(tmp_path, caplog):
    """A node the loader left out of the snapshot vanished from the page with no word
    anywhere; it is logged (printable), once while the file says the same."""
    import logging

    from hami_core.simulate.runner import make_manager
    from hami_core.ui.reading import from_file

    bad = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "bad\x1b[2J"}}
    bad["status"] = {"allocatable": {"nvidia.com/gpu": "lots"}}
    snapshot = write_snapshot(tmp_path / "snapshot.json", extra=[bad])
    read = from_file(snapshot, make_manager(None))
    caplog.set_level(logging.WARNING, logger="hami_core.ui.reading")
    read()
    read()
    lines = [r.getMessage() for r in caplog.records if "Node skipped" in r.getMessage()]
    assert len(lines) == 1, lines
    assert "\x1b" not in lines[0] and "nvidia.com/gpu" in lines[0]
