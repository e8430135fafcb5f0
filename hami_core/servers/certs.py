"""Serving certificates of the webhook: from files, or made and shared through a Secret.

``auto`` mode (no cert-manager needed): a private CA and a serving certificate signed by
it are kept in one Secret (type ``kubernetes.io/tls``: ``tls.crt``, ``tls.key``,
``ca.crt``, ``ca.key``), so every replica serves a certificate from the same CA; the
CA bundle goes into ``clientConfig.caBundle`` of each webhook of the
``MutatingWebhookConfiguration`` (the API server trusts exactly that CA for the
call; Kubernetes "Dynamic Admission Control", "Contacting the webhook").

Reuse rules (``plan_certificates``): an existing Secret is reused while its CA and
certificate parse, match their keys, chain (certificate signed by the CA), stay valid
for ``renew_before`` more, and the certificate's SANs cover every name and IP asked
for. A bad or expiring certificate is reissued from the same CA (the ``caBundle`` stays
the same, so replicas still serving the old certificate keep working); a bad or
expiring CA is replaced together with the certificate. Keys are ECDSA P-256.

The API functions take a ``kubernetes.client.ApiClient``; the rest is pure and is
tested without a cluster.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import logging
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Final, Literal

import attrs
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from hami_core.errors import ConflictError, HamiError, NotFoundError

log = logging.getLogger(__name__)

CA_VALID_DAYS: Final = 3650
CERT_VALID_DAYS: Final = 1825
#: Renew when less than this is left (checked at start-up).
RENEW_BEFORE: Final = dt.timedelta(days=30)
#: Backdating of ``notBefore``, for clocks slightly behind ours.
CLOCK_SKEW: Final = dt.timedelta(minutes=5)
#: Attempts of a read-modify-write that loses a race with another replica.
WRITE_ATTEMPTS: Final = 5

SECRET_TYPE: Final = "kubernetes.io/tls"
KEY_CERT: Final = "tls.crt"
KEY_KEY: Final = "tls.key"
KEY_CA: Final = "ca.crt"
KEY_CA_KEY: Final = "ca.key"
MANAGED_BY: Final = {"app.kubernetes.io/managed-by": "hami"}


class CertificateError(HamiError):
    """Certificates could not be made, stored or published; the message says which."""


@attrs.frozen(kw_only=True)
class CertBundle:
    """PEM bytes of a CA and a serving certificate it signed.

    Attributes:
        ca_pem: the CA certificate (what ``caBundle`` carries).
        ca_key_pem: the CA's private key (PKCS#8, unencrypted).
        cert_pem: the serving certificate.
        key_pem: the serving certificate's private key (PKCS#8, unencrypted).
    """

    ca_pem: bytes
    ca_key_pem: bytes
    cert_pem: bytes
    key_pem: bytes

    @property
    def ca_bundle_b64(self) -> str:
        """``caBundle`` as the API expects it in JSON: base64 of the PEM."""
        return base64.b64encode(self.ca_pem).decode("ascii")


@attrs.frozen(kw_only=True)
class CertPlan:
    """What to do with an existing bundle.

    Attributes:
        action: ``reuse`` it, ``reissue`` the serving certificate from its CA, or
            ``create`` a new CA and certificate.
        reason: why (for the log), "" for reuse.
    """

    action: Literal["reuse", "reissue", "create"]
    reason: str = ""


def _now(now: dt.datetime | None) -> dt.datetime:
    return now if now is not None else dt.datetime.now(dt.UTC)


def service_dns_names(service: str, namespace: str) -> list[str]:
    """DNS names under which the API server reaches a Service: ``svc``, ``svc.ns``,
    ``svc.ns.svc`` (what it dials for ``clientConfig.service``) and
    ``svc.ns.svc.cluster.local``."""
    return [
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
    ]


def _private_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def generate_ca(
    *,
    common_name: str = "hami-webhook-ca",
    valid_days: int = CA_VALID_DAYS,
    now: dt.datetime | None = None,
) -> tuple[bytes, bytes]:
    """A self-signed CA (path length 0: it signs serving certificates only).

    Returns:
        (certificate PEM, private key PEM).
    """
    start = _now(now)
    key = _private_key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    public = key.public_key()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(start - CLOCK_SKEW)
        .not_valid_after(start + dt.timedelta(days=valid_days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)


def _ips(ip_addresses: Iterable[str]) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    try:
        return [ipaddress.ip_address(ip) for ip in ip_addresses]
    except ValueError as exc:
        raise CertificateError(f"not an IP address: {exc}") from None


def issue_serving_cert(
    ca_pem: bytes,
    ca_key_pem: bytes,
    *,
    dns_names: Sequence[str],
    ip_addresses: Sequence[str] = (),
    valid_days: int = CERT_VALID_DAYS,
    now: dt.datetime | None = None,
    client_auth: bool = False,
) -> tuple[bytes, bytes]:
    """A TLS server certificate signed by the CA, for exactly these names and IPs.

    Args:
        dns_names: subject alternative DNS names; the first is also the common name.
        ip_addresses: subject alternative IPs (``127.0.0.1``, ``::1``, a pod IP).
        client_auth: also valid as a TLS client certificate (extended key usage
            ``clientAuth``), e.g. kube-scheduler's certificate for a mutual-TLS extender.

    Returns:
        (certificate PEM, private key PEM).

    Raises:
        CertificateError: no name at all, a malformed IP, or an unreadable CA.
    """
    if not dns_names and not ip_addresses:
        raise CertificateError("a serving certificate needs at least one DNS name or IP")
    ips = _ips(ip_addresses)
    try:
        ca = x509.load_pem_x509_certificate(ca_pem)
        ca_key = serialization.load_pem_private_key(ca_key_pem, password=None)
    except ValueError as exc:
        raise CertificateError(f"unreadable CA: {exc}") from None
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise CertificateError("the CA key is not an ECDSA key")
    start = _now(now)
    key = _private_key()
    public = key.public_key()
    common_name = dns_names[0] if dns_names else str(ips[0])
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
    sans += [x509.IPAddress(ip) for ip in ips]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca.subject)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(start - CLOCK_SKEW)
        .not_valid_after(min(start + dt.timedelta(days=valid_days), ca.not_valid_after_utc))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH]
                + ([ExtendedKeyUsageOID.CLIENT_AUTH] if client_auth else [])
            ),
            critical=False,
        )
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)


def generate_bundle(
    *,
    dns_names: Sequence[str],
    ip_addresses: Sequence[str] = (),
    now: dt.datetime | None = None,
    ca: tuple[bytes, bytes] | None = None,
) -> CertBundle:
    """A serving certificate for ``dns_names`` / ``ip_addresses`` and its CA.

    Args:
        ca: (certificate PEM, key PEM) of an existing CA to sign with; None makes one.

    Raises:
        CertificateError: as ``issue_serving_cert``.
    """
    ca_pem, ca_key_pem = ca if ca is not None else generate_ca(now=now)
    cert_pem, key_pem = issue_serving_cert(
        ca_pem, ca_key_pem, dns_names=dns_names, ip_addresses=ip_addresses, now=now
    )
    return CertBundle(ca_pem=ca_pem, ca_key_pem=ca_key_pem, cert_pem=cert_pem, key_pem=key_pem)


def certificate_sans(cert_pem: bytes) -> tuple[set[str], set[str]]:
    """(DNS names, IP addresses as text) of a PEM certificate's SAN extension.

    Raises:
        ValueError: not a PEM certificate.
    """
    cert = x509.load_pem_x509_certificate(cert_pem)
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set(), set()
    dns = set(san.get_values_for_type(x509.DNSName))
    ips = {str(ip) for ip in san.get_values_for_type(x509.IPAddress)}
    return dns, ips


def _same_key(cert: x509.Certificate, key_pem: bytes) -> bool:
    key = serialization.load_pem_private_key(key_pem, password=None)
    spki = serialization.PublicFormat.SubjectPublicKeyInfo
    der = serialization.Encoding.DER
    return bool(
        cert.public_key().public_bytes(der, spki) == key.public_key().public_bytes(der, spki)
    )


def _ca_problem(bundle: CertBundle, now: dt.datetime, renew_before: dt.timedelta) -> str | None:
    try:
        ca = x509.load_pem_x509_certificate(bundle.ca_pem)
        if not _same_key(ca, bundle.ca_key_pem):
            return "the CA key does not match the CA certificate"
    except (ValueError, TypeError) as exc:
        return f"unreadable CA: {exc}"
    constraints = ca.extensions.get_extension_for_class(x509.BasicConstraints).value
    if not constraints.ca:
        return "the CA certificate is not a CA"
    if ca.not_valid_before_utc > now:
        return f"the CA is not valid before {ca.not_valid_before_utc.isoformat()}"
    if ca.not_valid_after_utc - renew_before <= now:
        return f"the CA expires {ca.not_valid_after_utc.isoformat()}"
    return None


def _cert_problem(
    bundle: CertBundle,
    *,
    dns_names: Iterable[str],
    ip_addresses: Iterable[str],
    now: dt.datetime,
    renew_before: dt.timedelta,
) -> str | None:
    try:
        cert = x509.load_pem_x509_certificate(bundle.cert_pem)
        ca = x509.load_pem_x509_certificate(bundle.ca_pem)
        if not _same_key(cert, bundle.key_pem):
            return "the key does not match the certificate"
        cert.verify_directly_issued_by(ca)
        dns, ips = certificate_sans(bundle.cert_pem)
    except (ValueError, TypeError, InvalidSignature, x509.ExtensionNotFound) as exc:
        return f"the certificate is unreadable or not signed by the CA: {exc or type(exc).__name__}"
    if cert.not_valid_before_utc > now:
        return f"the certificate is not valid before {cert.not_valid_before_utc.isoformat()}"
    if cert.not_valid_after_utc - renew_before <= now:
        return f"the certificate expires {cert.not_valid_after_utc.isoformat()}"
    wanted_ips = {str(ip) for ip in _ips(ip_addresses)}
    missing = sorted((set(dns_names) - dns) | (wanted_ips - ips))
    if missing:
        return f"the certificate does not cover {', '.join(missing)}"
    return None


def plan_certificates(
    existing: CertBundle | None,
    *,
    dns_names: Sequence[str],
    ip_addresses: Sequence[str] = (),
    now: dt.datetime | None = None,
    renew_before: dt.timedelta = RENEW_BEFORE,
) -> CertPlan:
    """Decide whether ``existing`` can be served for these names (see the module doc).

    Never raises: whatever is wrong with ``existing`` becomes the plan's ``reason``.
    """
    if existing is None:
        return CertPlan(action="create", reason="no certificate yet")
    at = _now(now)
    problem = _ca_problem(existing, at, renew_before)
    if problem is not None:
        return CertPlan(action="create", reason=problem)
    try:
        problem = _cert_problem(
            existing,
            dns_names=dns_names,
            ip_addresses=ip_addresses,
            now=at,
            renew_before=renew_before,
        )
    except CertificateError as exc:
        problem = str(exc)
    if problem is not None:
        return CertPlan(action="reissue", reason=problem)
    return CertPlan(action="reuse")


def apply_plan(
    existing: CertBundle | None,
    plan: CertPlan,
    *,
    dns_names: Sequence[str],
    ip_addresses: Sequence[str] = (),
    now: dt.datetime | None = None,
) -> CertBundle:
    """The bundle to serve after ``plan``: ``existing`` itself, a certificate reissued
    from its CA, or a new CA and certificate.

    Raises:
        CertificateError: as ``issue_serving_cert``.
    """
    if plan.action == "reuse" and existing is not None:
        return existing
    if plan.action == "reissue" and existing is not None:
        return generate_bundle(
            dns_names=dns_names,
            ip_addresses=ip_addresses,
            now=now,
            ca=(existing.ca_pem, existing.ca_key_pem),
        )
    return generate_bundle(dns_names=dns_names, ip_addresses=ip_addresses, now=now)


# -- Secret ---------------------------------------------------------------------------


def bundle_from_secret(secret: dict[str, Any] | None) -> CertBundle | None:
    """The bundle stored in a Secret (its JSON form), or None when it holds none or
    an unreadable one."""
    if not secret:
        return None
    data = secret.get("data") or {}
    try:
        return CertBundle(
            ca_pem=base64.b64decode(data[KEY_CA], validate=True),
            ca_key_pem=base64.b64decode(data[KEY_CA_KEY], validate=True),
            cert_pem=base64.b64decode(data[KEY_CERT], validate=True),
            key_pem=base64.b64decode(data[KEY_KEY], validate=True),
        )
    except (KeyError, TypeError, ValueError):
        return None


def secret_data(bundle: CertBundle) -> dict[str, str]:
    """The Secret's ``data``: base64 of each PEM under its standard key."""

    def b64(raw: bytes) -> str:
        return base64.b64encode(raw).decode("ascii")

    return {
        KEY_CA: b64(bundle.ca_pem),
        KEY_CA_KEY: b64(bundle.ca_key_pem),
        KEY_CERT: b64(bundle.cert_pem),
        KEY_KEY: b64(bundle.key_pem),
    }


def ensure_secret(
    api_client: Any,
    *,
    namespace: str,
    name: str,
    dns_names: Sequence[str],
    ip_addresses: Sequence[str] = (),
    now: dt.datetime | None = None,
) -> CertBundle:
    """The bundle every replica serves: reused from the Secret, or made and stored.

    Reads ``Secret namespace/name``; applies ``plan_certificates``; writes a new bundle
    with ``create`` (absent) or a merge patch carrying the read ``resourceVersion``
    (present), so of two replicas racing, one writes and the other re-reads and reuses
    what the first wrote.

    Args:
        api_client: a ``kubernetes.client.ApiClient`` allowed to get, create and patch
            Secrets in ``namespace``.

    Raises:
        CertificateError: the Secret could not be read or written (the API error is
            chained and named), or races were lost ``WRITE_ATTEMPTS`` times.
    """
    from kubernetes import client as k8s

    from hami_core.cluster.kube import call

    core = k8s.CoreV1Api(api_client)
    what = f"secret {namespace}/{name}"
    for _ in range(WRITE_ATTEMPTS):
        try:
            secret: dict[str, Any] | None = call(
                f"read {what}", core.read_namespaced_secret, name, namespace
            )
        except NotFoundError:
            secret = None
        except HamiError as exc:
            raise CertificateError(str(exc)) from exc
        existing = bundle_from_secret(secret)
        plan = plan_certificates(existing, dns_names=dns_names, ip_addresses=ip_addresses, now=now)
        if plan.action == "reuse" and existing is not None:
            log.info("serving the certificate of %s", what)
            return existing
        bundle = apply_plan(existing, plan, dns_names=dns_names, ip_addresses=ip_addresses, now=now)
        try:
            if secret is None:
                body = {
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "metadata": {"name": name, "namespace": namespace, "labels": MANAGED_BY},
                    "type": SECRET_TYPE,
                    "data": secret_data(bundle),
                }
                call(f"create {what}", core.create_namespaced_secret, namespace, body)
            else:
                rv = (secret.get("metadata") or {}).get("resourceVersion")
                patch = {"metadata": {"resourceVersion": rv}, "data": secret_data(bundle)}
                call(
                    f"update {what}",
                    core.patch_namespaced_secret,
                    name,
                    namespace,
                    patch,
                    _content_type="application/merge-patch+json",
                )
        except ConflictError:
            log.info("%s changed while writing it; reading it again", what)
            continue
        except HamiError as exc:
            raise CertificateError(str(exc)) from exc
        log.info("wrote a new certificate to %s (%s: %s)", what, plan.action, plan.reason)
        return bundle
    raise CertificateError(f"{what}: lost {WRITE_ATTEMPTS} races with other writers")


def patch_ca_bundle(api_client: Any, *, name: str, ca_pem: bytes) -> int:
    """Set ``clientConfig.caBundle`` of every webhook of ``MutatingWebhookConfiguration
    name`` to base64(``ca_pem``).

    Writes only when some webhook differs, with the read ``resourceVersion`` as a
    precondition (a concurrent change is re-read and retried).

    Args:
        api_client: a ``kubernetes.client.ApiClient`` allowed to get and patch
            mutatingwebhookconfigurations.

    Returns:
        How many webhooks were changed (0 when all carried the bundle already).

    Raises:
        CertificateError: the configuration does not exist, has no webhooks, or could
            not be written.
    """
    from kubernetes import client as k8s

    from hami_core.cluster.kube import call

    api = k8s.AdmissionregistrationV1Api(api_client)
    what = f"mutatingwebhookconfiguration {name}"
    value = base64.b64encode(ca_pem).decode("ascii")
    for _ in range(WRITE_ATTEMPTS):
        try:
            obj = call(f"read {what}", api.read_mutating_webhook_configuration, name)
        except HamiError as exc:
            raise CertificateError(str(exc)) from exc
        webhooks = obj.get("webhooks") or []
        if not webhooks:
            raise CertificateError(f"{what} has no webhooks to carry the CA bundle")
        changed = 0
        for hook in webhooks:
            client_config = hook.setdefault("clientConfig", {})
            if client_config.get("caBundle") != value:
                client_config["caBundle"] = value
                changed += 1
        if not changed:
            return 0
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        try:
            call(
                f"patch {what}",
                api.patch_mutating_webhook_configuration,
                name,
                {"metadata": {"resourceVersion": rv}, "webhooks": webhooks},
                _content_type="application/merge-patch+json",
            )
        except ConflictError:
            continue
        except HamiError as exc:
            raise CertificateError(str(exc)) from exc
        log.info("set the CA bundle of %d webhook(s) of %s", changed, what)
        return changed
    raise CertificateError(f"{what}: lost {WRITE_ATTEMPTS} races with other writers")


def write_key_pair(bundle: CertBundle, *, cert_file: str | Path, key_file: str | Path) -> None:
    """Write the serving certificate (then the CA, as a chain) and its key (mode 0600)
    for the HTTPS server, replacing the files atomically."""
    for path, data, mode in (
        (Path(cert_file), bundle.cert_pem + bundle.ca_pem, 0o644),
        (Path(key_file), bundle.key_pem, 0o600),
    ):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
