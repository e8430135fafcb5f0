"""The issue-24 attack run on the webhook under load: the burst of
``test_webhook_burst.py`` (200 pod creations from 48 client threads through a real
kube-apiserver 1.20, the webhook at its default 32 workers, ``failurePolicy: Fail``)
while tenants from 32 other addresses attack it in the ways the item-12 test did not:
bodies trickled a byte a second, TLS handshakes that never end, and bodies of a
gigabyte declared and sent as fast as the socket goes (reconnecting when cut). Every
creation must still be admitted and mutated.

``flood`` is the attack run's row 8 (docs/threat-model.md): the tenants' reconnections,
a TLS handshake each, starved the webhook's CPU on a 2-core machine, its pressure rule
(a connection still receiving after 0.5 s while others wait is cut) then cut some of the
API server's own handshakes, and 1-3 of the 200 creations failed with ``EOF`` or
``broken pipe`` in 5 of 9 runs. An address whose connections fail is now paced (a new
connection a second once it has failed 16 times, ``hami_core/servers/https.py``)."""

from __future__ import annotations

import socket
import ssl
import threading
import time

import pytest

from tests.e2e.test_webhook import _config, _create, _gpu_pod, _namespace, _webhook
from tests.e2e.test_webhook_burst import PODS, _burst, _unmutated, hooks  # noqa: F401
from tests.servers.slowclients import tls_loris

pytestmark = pytest.mark.e2e

TENANTS = 32


def flood(port: int, address: str, stop: threading.Event) -> None:
    """A client from ``address`` that declares a 1 GiB review and sends it as fast as it
    can, reconnecting whenever the webhook cuts or refuses it, until ``stop``."""
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    chunk = b" " * (1 << 16)
    while not stop.is_set():
        try:
            s = socket.socket()
            s.bind((address, 0))
            s.settimeout(10)
            s.connect(("127.0.0.1", port))
            t = ctx.wrap_socket(s)
            t.sendall(
                b"POST /webhook HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {1 << 30}\r\n\r\n".encode()
            )
            while not stop.is_set():
                t.sendall(chunk)
        except OSError:
            time.sleep(0.05)


@pytest.mark.parametrize("mode", ["body", "handshake", "flood"])
def test_a_burst_is_all_admitted_while_tenants_attack_the_webhook(
    hooks,  # noqa: F811
    control_plane,
    mode: str,
):
    webhooks = hooks
    core = webhooks.core
    port = webhooks.start("a", threads=None)  # the default: 32 workers
    url = f"https://127.0.0.1:{port}/webhook"
    webhooks.adm.create_mutating_webhook_configuration(
        _config(webhooks.config_name, [_webhook("pods.hami.io", url, webhooks.suffix, ["v1"])])
    )
    webhooks.wait_ready("a")
    ns = _namespace(core, f"wh-attack-{webhooks.suffix}", webhooks.suffix)
    _create(core, ns, _gpu_pod("warm", **{"nvidia.com/gpu": "1"}))  # caches listed

    stop = threading.Event()
    if mode == "flood":
        targets = [(flood, (port, f"127.0.3.{i + 1}", stop)) for i in range(TENANTS)]
    else:
        targets = [(tls_loris, (port, f"127.0.3.{i + 1}", stop, mode)) for i in range(TENANTS)]
    attackers = [threading.Thread(target=f, args=a, daemon=True) for f, a in targets]
    for t in attackers:
        t.start()
    try:
        time.sleep(2)  # they hold what they can before the burst
        failures, took = _burst(control_plane, ns, "attack")
    finally:
        stop.set()
        for t in attackers:
            t.join(timeout=15)
    print(
        f"\nburst of {PODS} with {TENANTS} tenants ({mode}): {len(failures)} failed, "
        f"{took:.1f} s, {PODS / took:.0f} creations/s"
    )
    assert failures == [], f"{len(failures)} of {PODS} failed, first: {failures[0]}"
    assert _unmutated(core, ns, "attack") == []
