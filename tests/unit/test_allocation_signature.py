"""Signed allocations (hami_core.protocol.signature, PROTOCOL.md §4a): sign, verify,
the canonical bytes, rotation, and what a tenant can write into the annotation."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami_core.errors import AnnotationError, ConfigError
from hami_core.protocol import annotations as keys
from hami_core.protocol.signature import (
    AllocationSigner,
    AllocationVerifier,
    Signature,
    canonical_bytes,
    decode_signature,
    generate_private_key_pem,
    load_public_keys,
    public_key_pem,
)

NODE = "node-a"
ALLOCATED = "hami.io/vgpu-devices-allocated"
TO_ALLOCATE = "hami.io/vgpu-devices-to-allocate"
PRIVATE = generate_private_key_pem()
OTHER = generate_private_key_pem()


def _pod(uid: str = "uid-1", name: str = "p", namespace: str = "team", **ann: str) -> dict:
    return {"metadata": {"uid": uid, "name": name, "namespace": namespace, "annotations": ann}}


def _allocation() -> dict[str, str]:
    return {
        keys.VGPU_NODE: NODE,
        keys.BIND_TIME: "1700000000",
        keys.VGPU_TIME: "1700000000",
        keys.BIND_PHASE: "allocating",
        ALLOCATED: "GPU-1,NVIDIA,4000,30:;",
        TO_ALLOCATE: "GPU-1,NVIDIA,4000,30:;",
    }


def _signed(pod: dict, signer: AllocationSigner, node: str = NODE) -> dict:
    ann = pod["metadata"]["annotations"]
    ann[keys.ALLOCATION_SIGNATURE] = signer.sign(
        pod, node=node, annotations=dict(ann), unsigned=[TO_ALLOCATE]
    )
    return pod


def _verifier(*pems: bytes) -> AllocationVerifier:
    return AllocationVerifier(
        lambda: load_public_keys((f"key{i}", public_key_pem(p)) for i, p in enumerate(pems))
    )


def test_a_signed_allocation_verifies_for_its_pod_and_node():
    pod = _signed(_pod(**_allocation()), AllocationSigner(PRIVATE))
    check = _verifier(PRIVATE).check(pod, node=NODE, required=[ALLOCATED, keys.VGPU_NODE])
    assert (check.present, check.verified, check.reason) == (True, True, "")
    # the progress keys change as the device plugin serves the pod: not signed
    sig = decode_signature(pod["metadata"]["annotations"][keys.ALLOCATION_SIGNATURE])
    assert TO_ALLOCATE not in sig.signed_keys and keys.BIND_PHASE not in sig.signed_keys
    assert ALLOCATED in sig.signed_keys
    pod["metadata"]["annotations"][TO_ALLOCATE] = ";"
    pod["metadata"]["annotations"][keys.BIND_PHASE] = "success"
    assert _verifier(PRIVATE).check(pod, node=NODE).verified


def test_an_unsigned_pod_is_reported_unsigned():
    check = _verifier(PRIVATE).check(_pod(**_allocation()), node=NODE)
    assert (check.present, check.verified) == (False, False)


@pytest.mark.parametrize(
    "tamper",
    [
        pytest.param(
            lambda p: p["metadata"]["annotations"].update({ALLOCATED: "GPU-1,NVIDIA,16000,100:;"}),
            id="bigger slice",
        ),
        pytest.param(
            lambda p: p["metadata"]["annotations"].update({keys.BIND_TIME: "1700000001"}),
            id="bind time",
        ),
        pytest.param(lambda p: p["metadata"].update({"uid": "uid-2"}), id="another pod's uid"),
        pytest.param(lambda p: p["metadata"].update({"name": "q"}), id="another name"),
        pytest.param(
            lambda p: p["metadata"].update({"namespace": "other"}), id="another namespace"
        ),
    ],
)
def test_any_change_of_what_was_signed_fails(tamper):
    pod = _signed(_pod(**_allocation()), AllocationSigner(PRIVATE))
    tamper(pod)
    check = _verifier(PRIVATE).check(pod, node=NODE)
    assert check.present and not check.verified
    assert "does not verify" in check.reason


def test_a_replay_onto_another_pod_fails():
    """A tenant copies a served pod's signed annotations onto its own pod."""
    victim = _signed(_pod(uid="uid-v", name="victim", **_allocation()), AllocationSigner(PRIVATE))
    copy = _pod(uid="uid-t", name="victim", **victim["metadata"]["annotations"])  # same name
    check = _verifier(PRIVATE).check(copy, node=NODE)
    assert not check.verified and "copied from another pod" in check.reason


def test_a_signature_for_another_node_fails():
    pod = _signed(_pod(**_allocation()), AllocationSigner(PRIVATE), node="node-b")
    assert not _verifier(PRIVATE).check(pod, node=NODE).verified


def test_a_key_the_verifier_does_not_hold_is_named():
    pod = _signed(_pod(**_allocation()), AllocationSigner(OTHER))
    check = _verifier(PRIVATE).check(pod, node=NODE)
    assert not check.verified
    assert f"signed with key {AllocationSigner(OTHER).key_id}" in check.reason


def test_rotation_every_listed_key_verifies():
    """Rotation: the new public key is listed beside the old one first, then the
    scheduler signs with the new key, then the old one is dropped."""
    old = _signed(_pod(uid="u-old", **_allocation()), AllocationSigner(PRIVATE))
    new = _signed(_pod(uid="u-new", **_allocation()), AllocationSigner(OTHER))
    listed = [PRIVATE]
    verifier = AllocationVerifier(
        lambda: load_public_keys((f"k{i}", public_key_pem(p)) for i, p in enumerate(listed))
    )
    assert verifier.check(old, node=NODE).verified
    listed.append(OTHER)  # step 1: the new key is listed; the source is read again
    assert verifier.check(new, node=NODE).verified and verifier.check(old, node=NODE).verified
    dropped = _verifier(OTHER)  # step 3: the old key is gone
    assert dropped.check(new, node=NODE).verified and not dropped.check(old, node=NODE).verified


def test_required_keys_must_be_signed():
    signer = AllocationSigner(PRIVATE)
    pod = _pod(**_allocation())
    ann = pod["metadata"]["annotations"]
    ann[keys.ALLOCATION_SIGNATURE] = signer.sign(pod, node=NODE, annotations={keys.VGPU_NODE: NODE})
    check = _verifier(PRIVATE).check(pod, node=NODE, required=[ALLOCATED])
    assert not check.verified and f"does not cover {ALLOCATED}" in check.reason


def test_a_signed_key_removed_from_the_pod_fails():
    pod = _signed(_pod(**_allocation()), AllocationSigner(PRIVATE))
    del pod["metadata"]["annotations"][keys.VGPU_TIME]
    check = _verifier(PRIVATE).check(pod, node=NODE)
    assert not check.verified and keys.VGPU_TIME in check.reason


def test_canonical_bytes_are_unambiguous_json():
    data = canonical_bytes(
        key_id="0123456789abcdef",
        uid="u",
        namespace="n",
        name="p",
        node="x",
        values={"b": "2", "a": "1"},
    )
    assert data == (
        b'["hami.io/allocation-signature/v1","0123456789abcdef","u","n","p","x",{"a":"1","b":"2"}]'
    )
    # a value that looks like a separator cannot shift fields
    one = canonical_bytes(key_id="k", uid="u", namespace="n", name='p","x', node="y", values={})
    two = canonical_bytes(key_id="k", uid="u", namespace="n", name="p", node='x","y', values={})
    assert one != two
    assert (
        json.loads(
            canonical_bytes(key_id="k", uid="ü", namespace="n", name="p", node="x", values={})
        )[2]
        == "ü"
    )


MALFORMED = [
    "",
    "v1",
    "v2:0123456789abcdef:a:" + "A" * 86,
    "v1:XYZ:a:" + "A" * 86,
    "v1:0123456789abcdef::" + "A" * 86,
    "v1:0123456789abcdef:b,a:" + "A" * 86,  # not sorted
    "v1:0123456789abcdef:a,a:" + "A" * 86,  # repeated
    "v1:0123456789abcdef:a b:" + "A" * 86,
    "v1:0123456789abcdef:a:" + "A" * 10,  # too short
    "v1:0123456789abcdef:a:!!!!",
    "v1:0123456789abcdef:a:" + "A" * 86 + ":x",
    "v1:0123456789abcdef:a:" + "A" * 5000,
]


@pytest.mark.parametrize("value", MALFORMED)
def test_a_malformed_signature_is_refused_with_a_reason(value):
    with pytest.raises(AnnotationError, match=keys.ALLOCATION_SIGNATURE):
        decode_signature(value)
    pod = _pod(**{**_allocation(), keys.ALLOCATION_SIGNATURE: value})
    check = _verifier(PRIVATE).check(pod, node=NODE)
    assert check.present and not check.verified and keys.ALLOCATION_SIGNATURE in check.reason


@given(st.text(max_size=300))
def test_no_annotation_value_crashes_the_check(value):
    pod = _pod(**{**_allocation(), keys.ALLOCATION_SIGNATURE: value})
    check = _verifier(PRIVATE).check(pod, node=NODE)
    assert not check.verified and check.reason


def test_a_non_string_annotation_never_crashes_the_check():
    pod = _pod(**_allocation())
    pod["metadata"]["annotations"][keys.ALLOCATION_SIGNATURE] = 42
    assert not _verifier(PRIVATE).check(pod, node=NODE).verified


def test_a_well_formed_but_wrong_signature_fails():
    pod = _signed(_pod(**_allocation()), AllocationSigner(PRIVATE))
    sig = decode_signature(pod["metadata"]["annotations"][keys.ALLOCATION_SIGNATURE])
    flipped = bytes([sig.signature[0] ^ 1]) + sig.signature[1:]
    pod["metadata"]["annotations"][keys.ALLOCATION_SIGNATURE] = Signature(
        key_id=sig.key_id, signed_keys=sig.signed_keys, signature=flipped
    ).encode()
    assert not _verifier(PRIVATE).check(pod, node=NODE).verified


def test_results_are_cached_by_the_bytes_checked():
    calls = []
    pems = [public_key_pem(PRIVATE)]

    def source():
        calls.append(1)
        return load_public_keys([("k", pems[0])])

    verifier = AllocationVerifier(source)
    pod = _signed(_pod(**_allocation()), AllocationSigner(PRIVATE))
    for _ in range(50):
        assert verifier.check(pod, node=NODE).verified
    assert len(calls) == 1
    pod["metadata"]["annotations"][ALLOCATED] = "GPU-1,NVIDIA,8000,30:;"
    assert not verifier.check(pod, node=NODE).verified  # changed bytes: checked afresh


def test_a_broken_key_source_refuses_without_raising():
    def broken():
        raise ConfigError("keys.pem: not a PEM public key")

    pod = _signed(_pod(**_allocation()), AllocationSigner(PRIVATE))
    check = AllocationVerifier(broken).check(pod, node=NODE)
    assert not check.verified and "not a PEM public key" in check.reason


def test_bad_keys_are_refused_naming_their_source():
    with pytest.raises(ConfigError, match="--allocation-signing-key"):
        AllocationSigner(b"not a key", setting="--allocation-signing-key")
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    ecdsa = ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    with pytest.raises(ConfigError, match="not an Ed25519 key"):
        AllocationSigner(ecdsa, setting="--allocation-signing-key")
    with pytest.raises(ConfigError, match="pub.pem: not a PEM public key"):
        load_public_keys([("pub.pem", b"garbage")])
    ec_pub = (
        ec.generate_private_key(ec.SECP256R1())
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    with pytest.raises(ConfigError, match="pub.pem: not an Ed25519 public key"):
        load_public_keys([("pub.pem", ec_pub)])


def test_the_key_id_is_the_public_keys_fingerprint():
    signer = AllocationSigner(PRIVATE)
    (kid,) = load_public_keys([("k", public_key_pem(PRIVATE))])
    assert signer.key_id == kid and len(kid) == 16
    assert AllocationSigner(OTHER).key_id != kid
    sig = decode_signature(signer.sign(_pod(), node=NODE, annotations={keys.VGPU_NODE: NODE}))
    assert sig.key_id == kid and len(base64.urlsafe_b64encode(sig.signature)) == 88
