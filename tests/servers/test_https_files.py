"""TLS files that cannot serve stop the server at start with the file named: ``ssl``
alone says ``[Errno 2] No such file or directory`` or ``[SSL] PEM lib``, naming nothing."""

import pytest

from hami_core.servers import certs
from hami_core.servers.https import HttpsServer
from hami_core.servers.webhook import create_webhook_app
from hami_core.webhook import Admission
from tests.builders import manager


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("tls")
    ca_pem, ca_key = certs.generate_ca()
    cert, key = certs.issue_serving_cert(
        ca_pem, ca_key, dns_names=["hami"], ip_addresses=["127.0.0.1"]
    )
    other_cert, _ = certs.issue_serving_cert(
        ca_pem, ca_key, dns_names=["hami"], ip_addresses=["127.0.0.1"]
    )
    out = {"missing": str(d / "missing.pem")}
    for name, data in {
        "ca": ca_pem,
        "cert": cert,
        "key": key,
        "other": other_cert,
        "junk": b"not a certificate\n",
    }.items():
        (d / f"{name}.pem").write_bytes(data)
        out[name] = str(d / f"{name}.pem")
    return out


@pytest.mark.parametrize(
    ("cert", "key", "ca", "named", "says"),
    [
        ("missing", "key", None, "missing", "no such file"),
        ("cert", "missing", None, "missing", "no such file"),
        ("junk", "key", None, "junk", "not a PEM certificate and its private key"),
        ("cert", "junk", None, "junk", "not a PEM certificate and its private key"),
        ("key", "cert", None, "key", "not a PEM certificate"),  # the two swapped
        ("other", "key", None, "other", "do not match"),  # a key of another certificate
        ("cert", "key", "missing", "missing", "no such file"),
        ("cert", "key", "junk", "junk", "not a PEM CA bundle"),
    ],
)
def test_unusable_tls_files_are_named(files, cert, key, ca, named, says):
    with pytest.raises(OSError) as exc:
        HttpsServer(
            create_webhook_app(Admission(manager())),
            host="127.0.0.1",
            port=0,
            cert_file=files[cert],
            key_file=files[key],
            client_ca_file=files[ca] if ca else None,
        )
    assert files[named] in str(exc.value)
    assert says in str(exc.value)


def test_good_files_still_serve(files):
    server = HttpsServer(
        create_webhook_app(Admission(manager())),
        host="127.0.0.1",
        port=0,
        cert_file=files["cert"],
        key_file=files["key"],
        client_ca_file=files["ca"],
    )
    try:
        assert server.port > 0
    finally:
        server.close()
