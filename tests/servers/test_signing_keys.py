"""The allocation-signing keys of the servers (hami_core.servers.signingkeys,
PROTOCOL.md §4a): bad configuration stops the start with the setting named; the
device plugin's key directory (a mounted ConfigMap) is read again for a new key."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from hami_core.cli import cli
from hami_core.errors import ConfigError
from hami_core.protocol.signature import AllocationSigner, generate_private_key_pem
from hami_core.servers.deviceplugin_main import verifier_of
from hami_core.servers.options import DevicePluginOptions, SchedulerOptions
from hami_core.servers.scheduler_main import run_scheduler
from hami_core.servers.signingkeys import PublicKeyFiles, namespaced, signer_from_setting

FLAG = "--allocation-signing-key"


def test_the_scheduler_stops_at_start_without_a_key():
    with pytest.raises(ConfigError, match=f"{FLAG} is not set"):
        run_scheduler(SchedulerOptions(leader_elect=False))
    out = CliRunner().invoke(cli, ["scheduler", "--no-leader-elect"])
    assert out.exit_code != 0 and FLAG in out.output, out.output


def test_a_missing_or_malformed_key_file_is_named(tmp_path: Path):
    missing = tmp_path / "nope.key"
    with pytest.raises(ConfigError, match=f"{FLAG} {missing}: cannot read the key"):
        run_scheduler(SchedulerOptions(leader_elect=False, allocation_signing_key=str(missing)))
    bad = tmp_path / "bad.key"
    bad.write_text("-----BEGIN PRIVATE KEY-----\nnot base64\n-----END PRIVATE KEY-----\n")
    with pytest.raises(ConfigError, match=f"{FLAG} {bad}: not a PEM private key"):
        signer_from_setting(str(bad), flag=FLAG)
    good = tmp_path / "good.key"
    good.write_bytes(generate_private_key_pem())
    assert len(signer_from_setting(str(good), flag=FLAG).key_id) == 16


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("secret:", "is not NAMESPACE/NAME"),
        ("secret:ns", "is not NAMESPACE/NAME"),
        ("secret:/name", "is not NAMESPACE/NAME"),
        ("secret:a/b/c", "is not NAMESPACE/NAME"),
        # a namespace or a Secret name kube-apiserver would refuse: said at start, not
        # as the API server's 404 / 422 after the client is made
        ("secret:Kube-System/keys", "has a namespace that is not a DNS-1123 label"),
        ("secret:hami/Keys_1", "has a name that is not a DNS-1123 subdomain"),
    ],
)
def test_a_malformed_secret_reference_is_named(value: str, says: str):
    with pytest.raises(ConfigError, match=f"{FLAG} '{value[len('secret:') :]}' {says}"):
        signer_from_setting(value, flag=FLAG)


def test_namespaced():
    assert namespaced("hami/keys", "--x") == ("hami", "keys")


def _public(path: Path, pem: bytes | None = None) -> AllocationSigner:
    signer = AllocationSigner(pem or generate_private_key_pem())
    path.write_bytes(signer.public_pem())
    return signer


def test_the_device_plugin_reads_a_key_directory_like_a_mounted_configmap(tmp_path: Path):
    """kubelet's ConfigMap volume: each key a link into ``..data``; a key added later
    (rotation) is seen at the next read."""
    data = tmp_path / "..2026_12_02"
    data.mkdir()
    first = _public(data / "a.pem")
    (tmp_path / "..data").symlink_to(data.name)
    os.symlink("..data/a.pem", tmp_path / "a.pem")
    files = PublicKeyFiles(str(tmp_path), flag="--allocation-public-keys", rescan_s=0)
    assert files.key_ids() == (first.key_id,)
    second = _public(data / "b.pem")
    os.symlink("..data/b.pem", tmp_path / "b.pem")
    assert set(files()) == {first.key_id, second.key_id}


def test_the_device_plugin_stops_at_start_on_a_bad_key_path(tmp_path: Path):
    flag = "--allocation-public-keys"
    with pytest.raises(ConfigError, match=f"{flag} {tmp_path / 'none'}: no such file"):
        verifier_of(
            DevicePluginOptions(node_name="n", allocation_public_keys=str(tmp_path / "none"))
        )
    (tmp_path / "bad.pem").write_text("garbage")
    with pytest.raises(ConfigError, match=f"{flag} {tmp_path / 'bad.pem'}: not a PEM public key"):
        verifier_of(DevicePluginOptions(node_name="n", allocation_public_keys=str(tmp_path)))
    assert verifier_of(DevicePluginOptions(node_name="n")) is None  # HAMi's lock alone


def test_a_key_file_broken_at_runtime_refuses_without_crashing(tmp_path: Path):
    signer = _public(tmp_path / "k.pem")
    verifier = verifier_of(DevicePluginOptions(node_name="n", allocation_public_keys=str(tmp_path)))
    assert verifier is not None
    (tmp_path / "k.pem").write_text("garbage")
    other = AllocationSigner(generate_private_key_pem())  # an unknown key id: a re-read
    pod = {"metadata": {"uid": "u", "name": "p", "namespace": "d", "annotations": {}}}
    pod["metadata"]["annotations"]["hami.io/allocation-signature"] = other.sign(
        pod, node="n", annotations={"hami.io/vgpu-node": "n"}
    )
    pod["metadata"]["annotations"]["hami.io/vgpu-node"] = "n"
    import time

    time.sleep(2.1)  # past the re-read interval
    check = verifier.check(pod, node="n")
    assert not check.verified and "not a PEM public key" in check.reason
    assert signer.key_id
