"""Signed allocations (PROTOCOL.md §4a): the scheduler signs what it writes at bind, the
device plugin serves only what verifies.

The scheduler alone holds an Ed25519 private key; the device plugins get only the public
keys, so neither a tenant (past a webhook outage) nor a compromised node can mint an
allocation. At bind the scheduler writes ``hami.io/allocation-signature``::

    v1:<key id>:<signed key>,<signed key>,...:<signature>

- ``key id``: 16 lowercase hex digits, the first 8 bytes of SHA-256 of the raw 32-byte
  public key (``key_id``): the device plugin picks the public key by it, so several keys
  can be listed during a rotation;
- ``signed keys``: the pod annotation keys covered, sorted, comma-separated (annotation
  keys hold neither ``,`` nor ``:``): every allocation annotation of the Binding except
  those the device plugin rewrites while it serves the pod (``hami.io/bind-phase``, each
  vendor's ``*-devices-to-allocate`` and MIG-instance key, ``UNSIGNED_KEYS``);
- ``signature``: Ed25519 over ``canonical_bytes`` (base64url, no padding).

``canonical_bytes`` is the compact JSON (sorted keys, ASCII) of
``["hami.io/allocation-signature/v1", key id, pod uid, namespace, name, node,
{key: value, ...}]``: the pod's identity (its UID: a copy onto another pod, even one of
the same name, does not verify), the node it was bound to, and the exact values.

``cryptography`` (hami-core[server]) is imported only by the functions that sign or
verify: the light core (``hami simulate``) signs nothing.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

import attrs

from hami_core.errors import AnnotationError, ConfigError

from . import annotations as keys

#: The annotation's version tag, and the domain tag of the signed bytes.
VERSION: Final = "v1"
DOMAIN: Final = "hami.io/allocation-signature/v1"
_KID = re.compile(r"^[0-9a-f]{16}$")
_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
#: The longest annotation value parsed (a signature lists a few dozen keys at most).
MAX_VALUE_CHARS: Final = 4096


@attrs.frozen(kw_only=True)
class Signature:
    """A parsed ``hami.io/allocation-signature``.

    Attributes:
        key_id: which public key verifies it (``key_id``).
        signed_keys: the annotation keys covered, sorted, unique.
        signature: the 64 raw bytes of the Ed25519 signature.
    """

    key_id: str
    signed_keys: tuple[str, ...]
    signature: bytes

    def encode(self) -> str:
        """The annotation value (``v1:<kid>:<keys>:<b64url sig>``)."""
        sig = base64.urlsafe_b64encode(self.signature).rstrip(b"=").decode("ascii")
        return f"{VERSION}:{self.key_id}:{','.join(self.signed_keys)}:{sig}"


def decode_signature(value: str) -> Signature:
    """Parse a ``hami.io/allocation-signature`` value.

    Raises:
        AnnotationError: anything but ``v1:<16 hex>:<sorted unique keys>:<86 base64url
            chars>`` (the message says which part).
    """
    if not isinstance(value, str) or len(value) > MAX_VALUE_CHARS:
        raise AnnotationError(f"{keys.ALLOCATION_SIGNATURE}: not a string of a sane length")
    parts = value.split(":")
    if len(parts) != 4:
        raise AnnotationError(
            f"{keys.ALLOCATION_SIGNATURE}: expected v1:<key id>:<keys>:<signature>, "
            f"got {len(parts)} ':'-separated parts"
        )
    version, kid, listed, sig = parts
    if version != VERSION:
        raise AnnotationError(f"{keys.ALLOCATION_SIGNATURE}: unknown version {version[:16]!r}")
    if not _KID.match(kid):
        raise AnnotationError(f"{keys.ALLOCATION_SIGNATURE}: malformed key id {kid[:32]!r}")
    signed = tuple(listed.split(",")) if listed else ()
    if not signed or any(not _KEY.match(k) for k in signed):
        raise AnnotationError(f"{keys.ALLOCATION_SIGNATURE}: malformed list of signed keys")
    if list(signed) != sorted(set(signed)):
        raise AnnotationError(f"{keys.ALLOCATION_SIGNATURE}: signed keys not sorted and unique")
    try:
        raw = base64.urlsafe_b64decode(sig + "=" * (-len(sig) % 4))
    except (binascii.Error, ValueError):
        raise AnnotationError(f"{keys.ALLOCATION_SIGNATURE}: signature is not base64url") from None
    if len(raw) != 64:
        raise AnnotationError(
            f"{keys.ALLOCATION_SIGNATURE}: signature has {len(raw)} bytes, not 64"
        )
    return Signature(key_id=kid, signed_keys=signed, signature=raw)


def canonical_bytes(
    *, key_id: str, uid: str, namespace: str, name: str, node: str, values: Mapping[str, str]
) -> bytes:
    """The bytes signed: compact JSON, keys sorted, ASCII only, of ``[DOMAIN, key_id,
    uid, namespace, name, node, values]`` (see the module docstring). Unambiguous: JSON
    quotes every string, so no two inputs give the same bytes."""
    doc = [DOMAIN, key_id, uid, namespace, name, node, dict(values)]
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def key_id(public_raw: bytes) -> str:
    """A public key's id: the first 8 bytes of SHA-256 of its 32 raw bytes, as hex."""
    return hashlib.sha256(public_raw).hexdigest()[:16]


def _meta(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    return pod.get("metadata") or {}


def _identity(pod: Mapping[str, Any]) -> tuple[str, str, str]:
    meta = _meta(pod)
    return (
        str(meta.get("uid") or ""),
        str(meta.get("namespace") or "default"),
        str(meta.get("name") or ""),
    )


# -- keys ------------------------------------------------------------------------------


def load_private_key(pem: bytes, *, setting: str) -> Any:
    """An Ed25519 private key from PEM (PKCS#8, unencrypted).

    Raises:
        ConfigError: not such a key; the message names ``setting``.
    """
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{setting}: not a PEM private key ({exc})") from None
    if not isinstance(key, ed25519.Ed25519PrivateKey):
        raise ConfigError(f"{setting}: the key is not an Ed25519 key ({type(key).__name__})")
    return key


def generate_private_key_pem() -> bytes:
    """A new Ed25519 private key, PKCS#8 PEM."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    return ed25519.Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def public_key_pem(private_pem: bytes, *, setting: str = "the signing key") -> bytes:
    """The SubjectPublicKeyInfo PEM of an Ed25519 private key (what device plugins get).

    Raises:
        ConfigError: as ``load_private_key``.
    """
    from cryptography.hazmat.primitives import serialization

    key = load_private_key(private_pem, setting=setting)
    return bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )


def _raw_public(key: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return bytes(key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw))


def load_public_keys(pems: Iterable[tuple[str, bytes]]) -> dict[str, Any]:
    """Ed25519 public keys by key id, from ``(source, PEM)`` pairs; a PEM may hold one
    key. ``source`` names the file or ConfigMap key in errors.

    Raises:
        ConfigError: a PEM that is not an Ed25519 public key, naming its source.
    """
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    out: dict[str, Any] = {}
    for source, pem in pems:
        try:
            key = serialization.load_pem_public_key(pem)
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"{source}: not a PEM public key ({exc})") from None
        if not isinstance(key, ed25519.Ed25519PublicKey):
            raise ConfigError(f"{source}: not an Ed25519 public key ({type(key).__name__})")
        out[key_id(_raw_public(key))] = key
    return out


# -- signing ---------------------------------------------------------------------------


#: Allocation annotations left out of the signature: the device plugin rewrites them
#: while it serves the pod (the phase; each vendor's ``*-devices-to-allocate`` and
#: MIG-instance keys are added by the caller from the backends' ``DeviceTypeInfo``).
UNSIGNED_KEYS: Final = frozenset({keys.BIND_PHASE, keys.ALLOCATION_SIGNATURE})


class AllocationSigner:
    """Signs the allocation annotations the scheduler writes at bind."""

    def __init__(self, private_pem: bytes, *, setting: str = "the signing key") -> None:
        """Args:
        private_pem: the Ed25519 private key, PKCS#8 PEM.
        setting: names the key's source in errors (a flag, a Secret).

        Raises:
            ConfigError: not an Ed25519 private key.
        """
        self._key = load_private_key(private_pem, setting=setting)
        self.key_id = key_id(_raw_public(self._key.public_key()))

    def public_pem(self) -> bytes:
        """The public half, SubjectPublicKeyInfo PEM (what the device plugins get)."""
        from cryptography.hazmat.primitives import serialization

        return bytes(
            self._key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )

    def sign(
        self,
        pod: Mapping[str, Any],
        *,
        node: str,
        annotations: Mapping[str, str],
        unsigned: Iterable[str] = (),
    ) -> str:
        """The ``hami.io/allocation-signature`` value for ``annotations`` written on
        ``pod`` (its uid, namespace and name) bound to ``node``.

        Args:
            annotations: the allocation annotations of the Binding (key -> value).
            unsigned: further keys to leave out (the vendors' progress keys), besides
                ``UNSIGNED_KEYS``.
        """
        skip = UNSIGNED_KEYS | set(unsigned)
        values = {k: v for k, v in annotations.items() if k not in skip}
        uid, namespace, name = _identity(pod)
        data = canonical_bytes(
            key_id=self.key_id, uid=uid, namespace=namespace, name=name, node=node, values=values
        )
        return Signature(
            key_id=self.key_id,
            signed_keys=tuple(sorted(values)),
            signature=self._key.sign(data),
        ).encode()


# -- verifying -------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class SignatureCheck:
    """What a pod's signature says.

    Attributes:
        present: the pod carries ``hami.io/allocation-signature``.
        verified: it verifies (then ``reason`` is "").
        reason: why it does not verify, for the device plugin's log and errors.
    """

    present: bool
    verified: bool = False
    reason: str = ""


UNSIGNED: Final = SignatureCheck(present=False)


class AllocationVerifier:
    """Checks pods' allocation signatures against the listed public keys.

    Thread-safe. Results are kept for the exact bytes checked (key id, signature and
    the SHA-256 of the canonical bytes), so a pod seen again costs one JSON encoding and
    a dict lookup, and a change of any signed value is checked afresh.
    """

    def __init__(self, keys_source: Callable[[], Mapping[str, Any]], *, cache: int = 4096) -> None:
        """Args:
        keys_source: the public keys by key id (``load_public_keys``); called on
            every check whose key id is not in the last answer, and may re-read its
            files (rotation). Its errors are reported as the check's reason.
        cache: results kept.
        """
        self._source = keys_source
        self._keys: Mapping[str, Any] = {}
        self._cache: OrderedDict[tuple[str, bytes, bytes], bool] = OrderedDict()
        self._size = cache
        self._lock = threading.Lock()

    def key_ids(self) -> tuple[str, ...]:
        """The key ids known at the last look."""
        return tuple(sorted(self._keys))

    def _public(self, kid: str) -> Any:
        key = self._keys.get(kid)
        if key is None:
            self._keys = dict(self._source())
            key = self._keys.get(kid)
        return key

    def check(
        self, pod: Mapping[str, Any], *, node: str, required: Sequence[str] = ()
    ) -> SignatureCheck:
        """Check ``pod``'s signature for ``node``. Never raises for what the pod holds.

        Args:
            node: this device plugin's node (a pod signed for another node fails).
            required: keys the signature must cover (e.g. this vendor's
                ``*-devices-allocated``, ``hami.io/vgpu-node``).

        Returns:
            ``UNSIGNED`` when the pod carries no signature; else verified or not, with
            the reason.
        """
        from cryptography.exceptions import InvalidSignature

        ann = _meta(pod).get("annotations") or {}
        value = ann.get(keys.ALLOCATION_SIGNATURE)
        if value is None:
            return UNSIGNED
        try:
            sig = decode_signature(value)
        except AnnotationError as exc:
            return SignatureCheck(present=True, reason=str(exc))
        missing = sorted(set(required) - set(sig.signed_keys))
        if missing:
            return SignatureCheck(
                present=True, reason=f"the signature does not cover {', '.join(missing)}"
            )
        absent = [k for k in sig.signed_keys if not isinstance(ann.get(k), str)]
        if absent:
            return SignatureCheck(
                present=True,
                reason=f"signed annotations missing from the pod: {', '.join(absent)}",
            )
        uid, namespace, name = _identity(pod)
        data = canonical_bytes(
            key_id=sig.key_id,
            uid=uid,
            namespace=namespace,
            name=name,
            node=node,
            values={k: ann[k] for k in sig.signed_keys},
        )
        memo = (sig.key_id, sig.signature, hashlib.sha256(data).digest())
        with self._lock:
            known = self._cache.get(memo)
            if known is None:
                try:
                    public = self._public(sig.key_id)
                except Exception as exc:  # a broken key source: refuse, never crash
                    return SignatureCheck(
                        present=True, reason=f"the public keys cannot be read: {exc}"
                    )
                if public is None:
                    listed = ", ".join(self.key_ids()) or "none"
                    return SignatureCheck(
                        present=True,
                        reason=f"signed with key {sig.key_id}, which this device plugin "
                        f"does not have (it has: {listed})",
                    )
                try:
                    public.verify(sig.signature, data)
                    known = True
                except InvalidSignature:
                    known = False
                self._cache[memo] = known
                if len(self._cache) > self._size:
                    self._cache.popitem(last=False)
            else:
                self._cache.move_to_end(memo)
        if not known:
            return SignatureCheck(
                present=True,
                reason=f"the signature (key {sig.key_id}) does not verify for this pod "
                f"(uid {uid}), node {node} and its annotation values: forged, altered or "
                "copied from another pod",
            )
        return SignatureCheck(present=True, verified=True)


__all__ = [
    "DOMAIN",
    "UNSIGNED",
    "UNSIGNED_KEYS",
    "VERSION",
    "AllocationSigner",
    "AllocationVerifier",
    "Signature",
    "SignatureCheck",
    "canonical_bytes",
    "decode_signature",
    "generate_private_key_pem",
    "key_id",
    "load_private_key",
    "load_public_keys",
    "public_key_pem",
]
