"""The scheduler's allocation-signing key through a real kube-apiserver
(hami_core.servers.signingkeys, PROTOCOL.md §4a): ``secret:NAMESPACE/NAME`` makes the
key once and every later start (or replica) reads the same; the public key is added to
the ConfigMap the device plugins mount, other keys kept (rotation); a Secret without the
key stops the start naming the setting."""

from __future__ import annotations

import uuid

import pytest
from kubernetes import client

from hami_core.errors import ConfigError
from hami_core.protocol.signature import AllocationSigner, generate_private_key_pem
from hami_core.servers.signingkeys import (
    PublicKeysConfigMap,
    publish_public_key,
    signer_from_setting,
)

pytestmark = pytest.mark.e2e
FLAG = "--allocation-signing-key"


def test_the_key_is_made_once_and_published_beside_the_others(control_plane):
    api = control_plane.api_client()
    core = client.CoreV1Api(api)
    ns = f"signing-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": ns}})
    try:
        first = signer_from_setting(f"secret:{ns}/key", flag=FLAG, api_client=api)
        again = signer_from_setting(f"secret:{ns}/key", flag=FLAG, api_client=api)
        assert first.key_id == again.key_id  # a restart or a second replica: the same key
        secret = core.read_namespaced_secret("key", ns)
        assert set(secret.data) == {"ed25519.key"}
        assert secret.metadata.labels == {"app.kubernetes.io/managed-by": "hami"}

        cm = f"{ns}/keys"
        flag = "--allocation-public-keys-configmap"
        assert publish_public_key(api, first, value=cm, flag=flag) is True
        assert publish_public_key(api, again, value=cm, flag=flag) is False
        rotated = AllocationSigner(generate_private_key_pem())
        assert publish_public_key(api, rotated, value=cm, flag=flag) is True
        data = core.read_namespaced_config_map("keys", ns).data
        assert data == {
            f"{first.key_id}.pem": first.public_pem().decode(),
            f"{rotated.key_id}.pem": rotated.public_pem().decode(),
        }

        # the device plugin's side (--allocation-public-keys configmap:NS/NAME): both keys;
        # a key published later is read at the next unknown key id
        keys = PublicKeysConfigMap(api, cm, flag="--allocation-public-keys", rescan_s=0)
        assert keys.key_ids() == tuple(sorted([first.key_id, rotated.key_id]))
        assert PublicKeysConfigMap(api, f"{ns}/none", flag="-").key_ids() == ()
        third = AllocationSigner(generate_private_key_pem())
        publish_public_key(api, third, value=cm, flag=flag)
        assert third.key_id in keys()

        core.create_namespaced_secret(ns, {"metadata": {"name": "other"}, "data": {"x": "eA=="}})
        with pytest.raises(ConfigError, match=f"{FLAG}: secret {ns}/other has no ed25519.key"):
            signer_from_setting(f"secret:{ns}/other", flag=FLAG, api_client=api)
    finally:
        core.delete_namespace(ns)
