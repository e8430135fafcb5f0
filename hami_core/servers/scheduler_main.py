"""``hami scheduler``: the extender server process (kube API store, leader election,
metrics, HTTP or HTTPS)."""

from __future__ import annotations

import gc
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable
from typing import Any

from hami_core.cluster.backoff import Backoff
from hami_core.cluster.events import EventRecorder
from hami_core.cluster.kube import KubeCluster, make_api_client
from hami_core.cluster.kube_eviction import KubeEvictions
from hami_core.cluster.lease import LeaderElector, LeaseFollower
from hami_core.cluster.podgroups import PodGroupReader, PodGroupSpec
from hami_core.errors import ConfigError
from hami_core.facts.handshake import request_handshakes
from hami_core.facts.policy import device_policy_option, node_policy_option
from hami_core.plugin import BackendManager
from hami_core.plugin.manager import disabled_backends
from hami_core.protocol.config import load_config, with_overrides
from hami_core.scheduling.gangs import GangOptions
from hami_core.scheduling.preemptor import Preemptor
from hami_core.scheduling.scheduler import Scheduler

from .address import is_loopback, url_host
from .consolidation import start_consolidation
from .extender import MAX_BODY_BYTES, create_extender_app
from .keepalive import KeepAliveServer
from .metrics import SchedulerMetrics
from .metrics_http import serve_metrics
from .options import SchedulerOptions
from .signingkeys import SECRET_PREFIX, publish_public_key, signer_from_setting

SIGNING_KEY_FLAG = "--allocation-signing-key"

log = logging.getLogger(__name__)

#: The interpreter's GIL switch interval for ``hami scheduler`` (seconds; CPython's
#: default is 0.005). kube-scheduler waits for ``/filter`` and ``/prioritize`` one pod at
#: a time, and each request's socket reads and writes give up the GIL: while a watch
#: thread decodes events, every one of them waits up to the interval to get it back
#: (the convoy effect), ~150 ms a pod at 1000 nodes with two busy threads
#: (``benchmarks/bench_extender_http.py``, docs/performance.md). A tenth of the default
#: halves that; the cost is more frequent switching among busy threads.
SWITCH_INTERVAL_S = 0.0005


def settle_gc() -> None:
    """Move what the listed caches hold out of the collector's sight (``gc.freeze``).

    The caches are tens of thousands of long-lived dicts; a full collection walking
    them all pauses a request for tens of milliseconds at 1000+ nodes, for objects that
    live as long as the process. Objects created later are collected as usual.
    """
    gc.collect()
    gc.freeze()


def favour_request_latency() -> None:
    """Shorten the GIL switch interval to ``SWITCH_INTERVAL_S`` (process-wide), so a
    request thread back from a socket call gets the GIL soon from a busy thread."""
    sys.setswitchinterval(SWITCH_INTERVAL_S)


def build_scheduler(
    opts: SchedulerOptions,
    store: Any,
    manager: BackendManager,
    events: Any,
    *,
    pod_groups: Callable[[str, str], PodGroupSpec | None] | None = None,
) -> Scheduler:
    """The ``Scheduler`` as ``hami scheduler`` runs it with ``opts`` (``run_scheduler``
    and the benches that measure it build it here, so they cannot drift apart).

    Args:
        store: the ``ClusterStore`` (``KubeCluster`` in the server).
        events: where its events go (the server's ``EventRecorder``).
        pod_groups: the PodGroup reader (``PodGroupReader.over``); None reads none.

    Raises:
        InvalidInputError: ``--node-policy`` or ``--gpu-policy`` is not a policy.
    """
    return Scheduler(
        store,
        manager,
        events=events,
        node_policy=node_policy_option(opts.node_policy, "--node-policy")
        if opts.node_policy
        else None,
        device_policy=device_policy_option(opts.gpu_policy, "--gpu-policy")
        if opts.gpu_policy
        else None,
        lock_wait_s=opts.bind_lock_wait_s,
        success_events=opts.success_events,
        node_selector=opts.node_label_selector,
        gang=GangOptions(
            timeout_s=opts.gang_timeout_s,
            max_members=opts.gang_max_members,
            pod_groups=pod_groups,
        ),
    )


def run_scheduler(opts: SchedulerOptions, *, stop: threading.Event | None = None) -> None:
    """Serve until SIGTERM / SIGINT (or ``stop`` is set).

    Raises:
        HamiError: bad configuration, or the API server cannot be listed at start.
        OSError: the extender's or the metrics' port cannot be bound, or the TLS files
            cannot be loaded; the message names the address and the file.
    """
    opts = opts.resolved()
    check_exposure(opts)
    check_lease_timing(opts)
    check_follow_lease(opts)
    favour_request_latency()
    manager = BackendManager.from_entry_points(
        disabled=[*disabled_backends(), *opts.disabled_backends()]
    )
    config = load_config(opts.config, backends=manager.infos)
    manager = manager.with_config(
        with_overrides(
            config,
            scheduler_name=opts.scheduler_name,
            force_overwrite_default_scheduler=opts.force_overwrite_default_scheduler,
        )
    )
    # the key after the configuration's checks, a file before the API server is reached
    key = opts.allocation_signing_key
    in_secret = bool(key and key.startswith(SECRET_PREFIX))
    signer = None if in_secret else signer_from_setting(key, flag=SIGNING_KEY_FLAG)
    api = make_api_client(opts.kubeconfig)
    if signer is None:
        signer = signer_from_setting(key, flag=SIGNING_KEY_FLAG, api_client=api)
    if opts.allocation_public_keys_configmap:
        publish_public_key(
            api,
            signer,
            value=opts.allocation_public_keys_configmap,
            flag="--allocation-public-keys-configmap",
        )
    log.info("signing allocations with key %s", signer.key_id)
    # only our pods: the usage and quota count no other (PROTOCOL.md §6), and a cluster's
    # other pods' events are most of its pod events
    store = KubeCluster(
        api, component="hami-scheduler", scheduler_name=manager.config.scheduler_name
    )
    store.start()
    settle_gc()
    events = EventRecorder(store).start()  # off the request thread, aggregated
    scheduler = build_scheduler(opts, store, manager, events, pod_groups=PodGroupReader.over(api))
    scheduler.binder.signer = signer
    elector: LeaderElector | None = None
    if opts.leader_elect:
        elector = LeaderElector(
            api,
            name=opts.lease_name,
            namespace=opts.lease_namespace,
            identity=opts.identity or f"{socket.gethostname()}_{os.getpid()}",
            lease_duration_s=opts.lease_duration_s,
            renew_deadline_s=opts.renew_deadline_s,
            retry_period_s=opts.retry_period_s,
        )
        elector.start()
    follower = follow_lease(opts, api)
    # the writes made on this process's own initiative (evictions, nominations,
    # handshakes): the leader's alone, by our election or by kube-scheduler's Lease
    acts = elector.is_leader if elector else (follower.is_leader if follower else (lambda: True))
    metrics = SchedulerMetrics(
        scheduler,
        informers={"nodes": store.nodes, "pods": store.pods, "resourcequotas": store.quotas},
    )
    metrics_server = serve_metrics(
        metrics.registry, host=opts.metrics_bind_address, port=opts.metrics_port
    )
    preemptor = (
        Preemptor.over(
            scheduler,
            KubeEvictions(store),
            is_leader=acts,
            settle_s=opts.preemption_settle_s,
        ).start()
        if opts.preemption
        else None
    )
    metrics.watch_preemption(preemptor)
    consolidator = start_consolidation(opts, api, scheduler, store, is_leader=acts)
    metrics.watch_consolidation(consolidator)
    app = create_extender_app(
        scheduler,
        is_leader=elector.is_leader if elector else (lambda: True),
        leader_identity=elector.leader_identity if elector else (lambda: None),
        is_ready=lambda: all(inf.wait_synced(0) for inf in (store.nodes, store.pods, store.quotas)),
        metrics=metrics,
        preemptor=preemptor,
        on_no_node=consolidator.request if consolidator else None,
        filter_answer=opts.filter_answer,
    )
    try:
        server = extender_server(app, opts)
    except OSError as exc:  # port taken, certificate files missing or not PEM
        metrics_server.close()
        raise OSError(
            f"extender on {url_host(opts.bind_address)}:{opts.port}: {exc.strerror or exc}"
        ) from exc
    done = stop or threading.Event()

    def shutdown(*_: Any) -> None:
        done.set()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, shutdown)
        signal.signal(signal.SIGINT, shutdown)
    thread = threading.Thread(target=server.run, name="extender-http", daemon=True)
    thread.start()
    threading.Thread(
        target=_handshake_loop,
        args=(
            scheduler,
            done,
            opts.handshake_period_s,
            acts,
        ),
        name="handshake",
        daemon=True,
    ).start()
    log.info(
        "hami scheduler extender on %s:%s, metrics on :%s",
        url_host(opts.bind_address),
        opts.port,
        opts.metrics_port,
    )
    done.wait()
    server.close()
    metrics_server.close()
    if elector is not None:
        elector.stop()
    if follower is not None:
        follower.stop()
    if preemptor is not None:
        preemptor.stop()
    if consolidator is not None:
        consolidator.stop()
    events.stop()
    store.stop()


def _handshake_loop(
    scheduler: Scheduler, done: threading.Event, period_s: float, is_leader: Callable[[], bool]
) -> None:
    """Ask every node's device plugin for a sign of life, as the leader (PROTOCOL.md §2)."""
    state = Backoff("handshake rounds", log)
    while not done.wait(period_s):
        if not is_leader():
            continue
        try:
            request_handshakes(
                scheduler.store, scheduler.manager.device_types(), now=scheduler.clock()
            )
            state.succeeded()
        except Exception as exc:  # the loop must outlive API hiccups; log state changes
            state.failed(exc)


def check_lease_timing(opts: SchedulerOptions) -> None:
    """client-go's rule (``leaderelection.NewLeaderElector``): the retry period is under
    the renew deadline, which is under the lease duration; checked before the API server
    is reached, naming the flags.

    Raises:
        ConfigError: the three are out of that order.
    """
    if opts.leader_elect and not (
        opts.retry_period_s < opts.renew_deadline_s < opts.lease_duration_s
    ):
        raise ConfigError(
            f"need --retry-period ({opts.retry_period_s:g}) < --renew-deadline "
            f"({opts.renew_deadline_s:g}) < --lease-duration ({opts.lease_duration_s:g})"
        )


def check_follow_lease(opts: SchedulerOptions) -> None:
    """``--follow-lease`` replaces our own election; checked before the API server is
    reached.

    Raises:
        ConfigError: ``--follow-lease`` with ``--leader-elect`` (two answers to who
            leads).
    """
    if opts.follow_lease and opts.leader_elect:
        raise ConfigError(
            f"--follow-lease {opts.follow_lease}: give --no-leader-elect with it (the "
            "followed Lease decides who leads, not an election of ours)"
        )


def follow_lease(
    opts: SchedulerOptions, api: Any, *, hostname: str | None = None
) -> LeaseFollower | None:
    """The follower of ``--follow-lease`` (None without it), started: this process leads
    while kube-scheduler in its pod (identity ``<hostname>_<uuid>``; ``hostname`` is
    this host's unless given) holds that Lease. Polled every ``--retry-period``."""
    if not opts.follow_lease:
        return None
    namespace, _, name = opts.follow_lease.partition("/")
    follower = LeaseFollower.over(
        api,
        namespace=namespace,
        name=name,
        holder_prefix=f"{hostname or socket.gethostname()}_",
        period_s=opts.retry_period_s,
    )
    log.info("leading while %s holds lease %s", follower.holder_prefix, opts.follow_lease)
    return follower.start()


def check_exposure(opts: SchedulerOptions) -> None:
    """Refuse to serve /bind unauthenticated beyond loopback.

    Raises:
        ConfigError: ``--bind-address`` is not a loopback address and the extender is
            not served over TLS with client certificates (anyone who reaches the port
            could bind pending pods of our scheduler to any node).
    """
    if opts.tls_client_ca_file and not (opts.tls_cert_file and opts.tls_private_key_file):
        raise ConfigError("--tls-client-ca-file needs --tls-cert-file and --tls-private-key-file")
    if is_loopback(opts.bind_address) or opts.tls_client_ca_file:
        return
    given = (
        f"--http_bind {opts.http_bind}" if opts.http_bind else f"--bind-address {opts.bind_address}"
    )
    raise ConfigError(
        f"{given}: the extender authenticates no client; listen on "
        "loopback (run it beside kube-scheduler) or serve mutual TLS with --tls-cert-file, "
        "--tls-private-key-file and --tls-client-ca-file"
    )


def extender_server(app: Any, opts: SchedulerOptions) -> Any:
    """The extender's server around ``app``, bound but not serving (``run()`` serves until
    ``close()``): HTTPS (``https.make_https_server``, ``opts.threads`` workers, client
    certificates under ``--tls-client-ca-file``) when a certificate and key are given,
    else ``KeepAliveServer`` (a thread per kept-alive connection, ``opts.threads`` at
    most). ``run_scheduler`` serves with it, and ``benchmarks/bench_filter.py`` measures
    it, so the bench serves as the product does.

    Raises:
        OSError: the address cannot be bound, or the TLS files cannot be loaded.
        ConfigError: the bind address is not an address to listen on.
    """
    if opts.tls_cert_file and opts.tls_private_key_file:
        from .https import make_https_server

        return make_https_server(
            app,
            host=opts.bind_address,
            port=opts.port,
            cert_file=opts.tls_cert_file,
            key_file=opts.tls_private_key_file,
            threads=opts.threads,
            client_ca_file=opts.tls_client_ca_file,
        )
    return KeepAliveServer(
        app,
        host=opts.bind_address,
        port=opts.port,
        max_connections=opts.threads,
        max_body_bytes=MAX_BODY_BYTES,
    )
