"""A controller's burst of pod creations through a real kube-apiserver 1.20 to ``hami
webhook`` at its default 32 workers, ``failurePolicy: Fail`` (issue 24 item 12).

kube-apiserver calls a webhook over HTTP/1.1 with one connection per review in flight,
all from one address. A Deployment or Job scale-up puts dozens of reviews in flight at
once; the webhook closed the connections past one address's share of workers (half) and
180 of 200 creations from 48 client threads failed with ``failed calling webhook ...
EOF``. Every creation must now be admitted and mutated, also while slow clients from
other addresses (a tenant's pods) hold what they can of the webhook's workers.

The figures (seconds, reviews per second) are printed for docs/performance.md.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.e2e.test_webhook import (
    SELECT,
    _config,
    _create,
    _gpu_pod,
    _namespace,
    _webhook,
    _Webhooks,
)
from tests.servers.slowclients import tls_loris

pytestmark = pytest.mark.e2e

#: The issue's run: 200 creations from 48 client threads (a scale-up's concurrency).
PODS, CLIENTS = 200, 48
#: Slow tenants, each from its own loopback address, during the burst.
TENANTS = 32


@pytest.fixture()
def hooks(control_plane) -> Iterator[_Webhooks]:
    """``hami webhook`` replicas and their configuration; at the end they stop and the
    pods of this test's namespaces are deleted (they would outlive it on the shared
    control plane)."""
    running = _Webhooks(control_plane, uuid.uuid4().hex[:6])
    try:
        yield running
    finally:
        running.stop()
        control_plane.delete_pods(
            ns.metadata.name
            for ns in running.core.list_namespace(label_selector=f"{SELECT}={running.suffix}").items
        )


def _burst(cp, ns: str, tag: str) -> tuple[list[str], float]:
    """``PODS`` GPU pods created from ``CLIENTS`` threads, each with its own API client;
    the failures (one line each) and the seconds the burst took."""
    local = threading.local()
    made: list[client.ApiClient] = []
    lock = threading.Lock()

    def core() -> client.CoreV1Api:
        if not hasattr(local, "core"):
            api = cp.api_client(new=True)
            with lock:
                made.append(api)
            local.core = client.CoreV1Api(api)
        return local.core

    def create(i: int) -> str | None:
        pod = _gpu_pod(f"{tag}-{i}", **{"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"})
        try:
            core().create_namespaced_pod(ns, pod)
        except ApiException as exc:
            return f"{exc.status}: {(exc.body or '')[:200]}"
        return None

    start = time.monotonic()
    with ThreadPoolExecutor(CLIENTS) as pool:
        results = list(pool.map(create, range(PODS)))
    took = time.monotonic() - start
    for api in made:
        api.close()
    return [r for r in results if r is not None], took


def _unmutated(core: client.CoreV1Api, ns: str, tag: str) -> list[str]:
    """Names of the burst's pods the webhook did not mutate (our scheduler and the
    defaulted ``nvidia.com/gpucores`` are what its patch writes)."""
    pods = [p for p in core.list_namespaced_pod(ns).items if p.metadata.name.startswith(tag)]
    assert len(pods) == PODS
    return [
        p.metadata.name
        for p in pods
        if p.spec.scheduler_name != "hami-scheduler"
        or "nvidia.com/gpucores" not in (p.spec.containers[0].resources.limits or {})
    ]


@pytest.mark.parametrize("tenants", [0, TENANTS], ids=["quiet", "slow-tenants"])
def test_a_scale_up_burst_through_the_api_server_is_all_admitted_and_mutated(
    hooks: _Webhooks, control_plane, tenants: int
):
    webhooks = hooks
    core = webhooks.core
    port = webhooks.start("a", threads=None)  # the default: 32 workers
    url = f"https://127.0.0.1:{port}/webhook"
    webhooks.adm.create_mutating_webhook_configuration(
        _config(webhooks.config_name, [_webhook("pods.hami.io", url, webhooks.suffix, ["v1"])])
    )
    webhooks.wait_ready("a")
    ns = _namespace(core, f"wh-burst-{webhooks.suffix}", webhooks.suffix)
    _create(core, ns, _gpu_pod("warm", **{"nvidia.com/gpu": "1"}))  # caches listed

    stop = threading.Event()
    loris = [
        threading.Thread(
            target=tls_loris, args=(port, f"127.0.2.{i + 1}", stop, "headers"), daemon=True
        )
        for i in range(tenants)
    ]
    for t in loris:
        t.start()
    try:
        if tenants:
            time.sleep(2)  # they hold what they can before the burst
        failures, took = _burst(control_plane, ns, "burst")
    finally:
        stop.set()
    print(
        f"\nburst of {PODS} from {CLIENTS} threads, {tenants} slow tenants: "
        f"{len(failures)} failed, {took:.1f} s, {PODS / took:.0f} creations/s"
    )
    assert failures == [], f"{len(failures)} of {PODS} failed, first: {failures[0]}"
    assert _unmutated(core, ns, "burst") == []
