"""Certificate generation, SANs, validity and the reuse decision, without a cluster.

(The Secret and caBundle writes run against a real kube-apiserver in
tests/e2e/test_webhook.py.)"""

from __future__ import annotations

import base64
import datetime as dt
import socket
import ssl
import stat
import threading

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from hami_core.servers import certs
from hami_core.servers.https import make_https_server

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
DNS = certs.service_dns_names("hami-webhook", "kube-system")


def load(pem: bytes) -> x509.Certificate:
    return x509.load_pem_x509_certificate(pem)


@pytest.fixture(scope="module")
def bundle() -> certs.CertBundle:
    return certs.generate_bundle(dns_names=DNS, ip_addresses=["127.0.0.1", "::1"], now=NOW)


def test_service_dns_names():
    assert DNS == [
        "hami-webhook",
        "hami-webhook.kube-system",
        "hami-webhook.kube-system.svc",
        "hami-webhook.kube-system.svc.cluster.local",
    ]


def test_ca_is_a_ca_for_ten_years(bundle):
    ca = load(bundle.ca_pem)
    assert ca.extensions.get_extension_for_class(
        x509.BasicConstraints
    ).value == x509.BasicConstraints(ca=True, path_length=0)
    usage = ca.extensions.get_extension_for_class(x509.KeyUsage).value
    assert usage.key_cert_sign and usage.crl_sign
    assert ca.not_valid_before_utc == NOW - certs.CLOCK_SKEW
    assert ca.not_valid_after_utc == NOW + dt.timedelta(days=certs.CA_VALID_DAYS)
    ca.verify_directly_issued_by(ca)


def test_serving_cert_names_usage_validity_and_chain(bundle):
    cert = load(bundle.cert_pem)
    dns, ips = certs.certificate_sans(bundle.cert_pem)
    assert dns == set(DNS)
    assert ips == {"127.0.0.1", "::1"}
    assert cert.subject.rfc4514_string() == "CN=hami-webhook"
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.SERVER_AUTH]
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert cert.not_valid_before_utc == NOW - certs.CLOCK_SKEW
    assert cert.not_valid_after_utc == NOW + dt.timedelta(days=certs.CERT_VALID_DAYS)
    cert.verify_directly_issued_by(load(bundle.ca_pem))
    assert cert.issuer == load(bundle.ca_pem).subject


def test_ca_bundle_is_base64_of_the_pem(bundle):
    assert base64.b64decode(bundle.ca_bundle_b64) == bundle.ca_pem
    assert bundle.ca_pem.startswith(b"-----BEGIN CERTIFICATE-----")


def test_cert_never_outlives_its_ca():
    ca = certs.generate_ca(valid_days=10, now=NOW)
    cert_pem, _ = certs.issue_serving_cert(*ca, dns_names=["x"], valid_days=100, now=NOW)
    assert load(cert_pem).not_valid_after_utc == NOW + dt.timedelta(days=10)


def test_ip_only_certificate_is_named_by_its_ip():
    ca = certs.generate_ca(now=NOW)
    cert_pem, _ = certs.issue_serving_cert(*ca, dns_names=[], ip_addresses=["127.0.0.1"], now=NOW)
    assert load(cert_pem).subject.rfc4514_string() == "CN=127.0.0.1"


def test_issue_errors():
    ca = certs.generate_ca(now=NOW)
    with pytest.raises(certs.CertificateError, match="at least one"):
        certs.issue_serving_cert(*ca, dns_names=[])
    with pytest.raises(certs.CertificateError, match="not an IP"):
        certs.issue_serving_cert(*ca, dns_names=["x"], ip_addresses=["localhost"])
    with pytest.raises(certs.CertificateError, match="unreadable CA"):
        certs.issue_serving_cert(b"junk", ca[1], dns_names=["x"])


# -- reuse decision ----------------------------------------------------------------------


def plan(existing, **kw):
    kw.setdefault("dns_names", DNS)
    kw.setdefault("ip_addresses", ["127.0.0.1"])
    kw.setdefault("now", NOW + dt.timedelta(days=1))
    return certs.plan_certificates(existing, **kw)


def test_nothing_yet_is_created():
    assert plan(None) == certs.CertPlan(action="create", reason="no certificate yet")


def test_a_valid_covering_bundle_is_reused(bundle):
    assert plan(bundle) == certs.CertPlan(action="reuse")
    # a certificate naming more than asked still covers what is asked
    assert plan(bundle, dns_names=DNS[2:], ip_addresses=[]).action == "reuse"
    # IPs compare as addresses, not as text
    assert plan(bundle, ip_addresses=["0:0:0:0:0:0:0:1"]).action == "reuse"


def test_missing_names_reissue_from_the_same_ca(bundle):
    p = plan(bundle, ip_addresses=["10.0.0.7"])
    assert p.action == "reissue" and "10.0.0.7" in p.reason
    p = plan(bundle, dns_names=["other.kube-system.svc"])
    assert p.action == "reissue" and "other.kube-system.svc" in p.reason
    new = certs.apply_plan(bundle, p, dns_names=["other.kube-system.svc"], now=NOW)
    assert new.ca_pem == bundle.ca_pem and new.ca_key_pem == bundle.ca_key_pem
    assert new.cert_pem != bundle.cert_pem
    assert certs.certificate_sans(new.cert_pem) == ({"other.kube-system.svc"}, set())
    assert plan(new, dns_names=["other.kube-system.svc"], ip_addresses=[]).action == "reuse"


def test_expiring_or_expired_certificate_is_reissued(bundle):
    end = load(bundle.cert_pem).not_valid_after_utc
    assert plan(bundle, now=end - certs.RENEW_BEFORE - dt.timedelta(days=1)).action == "reuse"
    p = plan(bundle, now=end - dt.timedelta(days=10))
    assert p.action == "reissue" and "expires" in p.reason
    assert plan(bundle, now=end + dt.timedelta(days=1)).action == "reissue"


def test_not_yet_valid_certificate_is_reissued():
    future = certs.generate_bundle(dns_names=DNS, now=NOW + dt.timedelta(days=100))
    # the CA is not valid yet either: everything is made again
    assert plan(future, ip_addresses=[]).action == "create"
    ca = certs.generate_ca(now=NOW)
    cert_pem, key_pem = certs.issue_serving_cert(
        *ca, dns_names=DNS, now=NOW + dt.timedelta(days=100)
    )
    b = certs.CertBundle(ca_pem=ca[0], ca_key_pem=ca[1], cert_pem=cert_pem, key_pem=key_pem)
    p = plan(b, ip_addresses=[])
    assert p.action == "reissue" and "not valid before" in p.reason


def test_expiring_ca_is_replaced_with_the_certificate(bundle):
    end = load(bundle.ca_pem).not_valid_after_utc
    p = plan(bundle, now=end - dt.timedelta(days=1))
    assert p.action == "create" and "CA expires" in p.reason
    new = certs.apply_plan(bundle, p, dns_names=DNS, now=end - dt.timedelta(days=1))
    assert new.ca_pem != bundle.ca_pem


def test_broken_pieces(bundle):
    other = certs.generate_bundle(dns_names=DNS, ip_addresses=["127.0.0.1"], now=NOW)
    swapped_key = certs.CertBundle(
        ca_pem=bundle.ca_pem,
        ca_key_pem=bundle.ca_key_pem,
        cert_pem=bundle.cert_pem,
        key_pem=other.key_pem,
    )
    assert plan(swapped_key) == certs.CertPlan(
        action="reissue", reason="the key does not match the certificate"
    )
    foreign = certs.CertBundle(
        ca_pem=bundle.ca_pem,
        ca_key_pem=bundle.ca_key_pem,
        cert_pem=other.cert_pem,
        key_pem=other.key_pem,
    )
    p = plan(foreign)
    assert p.action == "reissue" and "not signed by the CA" in p.reason
    bad_ca_key = certs.CertBundle(
        ca_pem=bundle.ca_pem,
        ca_key_pem=other.ca_key_pem,
        cert_pem=bundle.cert_pem,
        key_pem=bundle.key_pem,
    )
    assert plan(bad_ca_key).reason == "the CA key does not match the CA certificate"
    junk_ca = certs.CertBundle(
        ca_pem=b"junk",
        ca_key_pem=bundle.ca_key_pem,
        cert_pem=bundle.cert_pem,
        key_pem=bundle.key_pem,
    )
    assert plan(junk_ca).action == "create"
    junk_cert = certs.CertBundle(
        ca_pem=bundle.ca_pem, ca_key_pem=bundle.ca_key_pem, cert_pem=b"junk", key_pem=bundle.key_pem
    )
    assert plan(junk_cert).action == "reissue"
    # a serving certificate stored in place of the CA is not a CA
    not_ca = certs.CertBundle(
        ca_pem=bundle.cert_pem,
        ca_key_pem=bundle.key_pem,
        cert_pem=bundle.cert_pem,
        key_pem=bundle.key_pem,
    )
    assert plan(not_ca) == certs.CertPlan(action="create", reason="the CA certificate is not a CA")


def test_bad_requested_ip_is_a_reason_not_an_exception(bundle):
    p = plan(bundle, ip_addresses=["not-an-ip"])
    assert p.action == "reissue" and "not an IP" in p.reason


# -- Secret data and files ----------------------------------------------------------------


def test_secret_round_trip(bundle):
    data = certs.secret_data(bundle)
    assert set(data) == {"tls.crt", "tls.key", "ca.crt", "ca.key"}
    assert certs.bundle_from_secret({"type": "kubernetes.io/tls", "data": data}) == bundle
    assert certs.bundle_from_secret(None) is None
    assert certs.bundle_from_secret({"data": None}) is None
    assert (
        certs.bundle_from_secret({"data": {k: v for k, v in data.items() if k != "ca.key"}}) is None
    )
    assert certs.bundle_from_secret({"data": {**data, "tls.crt": "%%%"}}) is None


def test_write_key_pair(tmp_path, bundle):
    cert, key = tmp_path / "sub" / "tls.crt", tmp_path / "sub" / "tls.key"
    certs.write_key_pair(bundle, cert_file=cert, key_file=key)
    assert cert.read_bytes() == bundle.cert_pem + bundle.ca_pem
    assert key.read_bytes() == bundle.key_pem
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    certs.write_key_pair(bundle, cert_file=cert, key_file=key)  # replacing works
    assert sorted(p.name for p in cert.parent.iterdir()) == ["tls.crt", "tls.key"]


def test_a_tls_client_verifies_the_service_name(tmp_path):
    """Real TLS: a client trusting only the CA accepts the service DNS name and rejects
    a name the certificate does not carry."""
    b = certs.generate_bundle(dns_names=DNS, ip_addresses=["127.0.0.1"])
    certs.write_key_pair(b, cert_file=tmp_path / "c", key_file=tmp_path / "k")
    server = make_https_server(
        lambda env, start: [start("200 OK", []) or b""][1:],
        host="127.0.0.1",
        port=0,
        cert_file=str(tmp_path / "c"),
        key_file=str(tmp_path / "k"),
        threads=1,
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        ctx = ssl.create_default_context(cadata=b.ca_pem.decode())
        with (
            socket.create_connection(("127.0.0.1", server.port), timeout=5) as raw,
            ctx.wrap_socket(raw, server_hostname="hami-webhook.kube-system.svc") as tls,
        ):
            assert tls.version() in ("TLSv1.2", "TLSv1.3")
        with (
            pytest.raises(ssl.SSLCertVerificationError),
            socket.create_connection(("127.0.0.1", server.port), timeout=5) as raw,
            ctx.wrap_socket(raw, server_hostname="evil.example.com"),
        ):
            pass
    finally:
        server.close()
        thread.join(10)
