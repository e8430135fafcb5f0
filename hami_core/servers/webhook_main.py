"""``hami webhook``: the admission webhook process (HTTPS only, certificates from files
or ``auto``, namespace quotas from the API server)."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from hami_core.cluster.kube import make_api_client
from hami_core.cluster.quotapods import QuotaPodsKubeCluster
from hami_core.errors import ConfigError
from hami_core.plugin import BackendManager
from hami_core.protocol.config import load_config, with_overrides
from hami_core.webhook import Admission

from . import certs
from .https import serve_https
from .options import WebhookOptions
from .webhook import NamespaceLabels, create_webhook_app, kube_namespace_fetch

log = logging.getLogger(__name__)

SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


#: Service accounts (in the webhook's namespace) that write scheduler-owned annotations.
DEFAULT_TRUSTED_ACCOUNTS = ("hami-scheduler", "hami-device-plugin")


def trusted_users(opts: WebhookOptions) -> frozenset[str]:
    """``--trusted-user`` values, else the default service accounts of the scheduler and
    the device plugin in the webhook's namespace (``system:serviceaccount:<ns>:<name>``,
    the username Kubernetes gives a service account's token)."""
    if opts.trusted_users:
        return frozenset(opts.trusted_users)
    namespace = opts.service_namespace or default_namespace()
    return frozenset(f"system:serviceaccount:{namespace}:{a}" for a in DEFAULT_TRUSTED_ACCOUNTS)


def default_namespace(path: Path = SERVICE_ACCOUNT_NAMESPACE) -> str:
    """``$POD_NAMESPACE``, else the pod's own namespace (service-account mount), else
    ``kube-system``."""
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    try:
        return path.read_text(encoding="utf-8").strip() or "kube-system"
    except OSError:
        return "kube-system"


def auto_certificates(
    api_client: Any, opts: WebhookOptions, *, cert_file: str, key_file: str
) -> certs.CertBundle:
    """``auto`` mode: the Secret's bundle (made when needed), written to ``cert_file`` /
    ``key_file``, with its CA put into the webhook configuration's ``caBundle``.

    Raises:
        CertificateError: the Secret or the configuration could not be read or written.
    """
    namespace = opts.service_namespace or default_namespace()
    dns = [*certs.service_dns_names(opts.service_name, namespace), *opts.cert_dns_names]
    bundle = certs.ensure_secret(
        api_client,
        namespace=namespace,
        name=opts.secret_name,
        dns_names=dns,
        ip_addresses=opts.cert_ip_addresses,
    )
    certs.write_key_pair(bundle, cert_file=cert_file, key_file=key_file)
    certs.patch_ca_bundle(api_client, name=opts.webhook_config_name, ca_pem=bundle.ca_pem)
    return bundle


def run_webhook(
    opts: WebhookOptions,
    *,
    stop: threading.Event | None = None,
    on_ready: Callable[[int], None] | None = None,
) -> None:
    """Serve the webhook until SIGTERM / SIGINT (or ``stop`` is set).

    Raises:
        ConfigError: inconsistent flags or a bad configuration file.
        HamiError: no Kubernetes configuration, caches that cannot list, or
            certificates that cannot be made or published.
        OSError: the port cannot be bound or the certificate files cannot be read.
    """
    opts = opts.resolved()
    if opts.cert_mode == "files" and not (opts.tls_cert_file and opts.tls_private_key_file):
        raise ConfigError(
            "--cert-mode files needs --tls-cert-file and --tls-private-key-file "
            "(or use --cert-mode auto)"
        )
    manager = BackendManager.from_entry_points()
    config = load_config(opts.config, backends=manager.infos)
    manager = manager.with_config(
        with_overrides(
            config,
            scheduler_name=opts.scheduler_name,
            force_overwrite_default_scheduler=opts.force_overwrite_default_scheduler,
        )
    )
    api = make_api_client(opts.kubeconfig)
    scratch: str | None = None
    store: QuotaPodsKubeCluster | None = None
    try:
        if opts.cert_mode == "auto":
            if opts.tls_cert_file and opts.tls_private_key_file:
                cert_file, key_file = opts.tls_cert_file, opts.tls_private_key_file
            else:
                scratch = tempfile.mkdtemp(prefix="hami-webhook-")
                cert_file = str(Path(scratch) / "tls.crt")
                key_file = str(Path(scratch) / "tls.key")
            auto_certificates(api, opts, cert_file=cert_file, key_file=key_file)
        else:
            assert opts.tls_cert_file and opts.tls_private_key_file
            cert_file, key_file = opts.tls_cert_file, opts.tls_private_key_file
        # the quota check counts only our scheduler's pods (PROTOCOL.md §8): no other pod
        # is watched, and ours only once the cluster has a ResourceQuota
        store = QuotaPodsKubeCluster(api, scheduler_name=manager.config.scheduler_name)
        store.start()
        labels: Callable[[str], Mapping[str, str]] = NamespaceLabels(
            kube_namespace_fetch(api), ttl_s=opts.namespace_cache_s
        )
        caches = (store.quotas,)  # pods are read once listed, else live (QuotaPodsKubeCluster)
        app = create_webhook_app(
            Admission(manager, store, trusted_users=trusted_users(opts)),
            namespace_labels=labels,
            is_ready=lambda: all(inf.wait_synced(0) for inf in caches),
        )
        done = stop or threading.Event()
        if threading.current_thread() is threading.main_thread():

            def shutdown(*_: Any) -> None:
                done.set()

            signal.signal(signal.SIGTERM, shutdown)
            signal.signal(signal.SIGINT, shutdown)
        serve_https(
            app,
            host=opts.bind_address,
            port=opts.port,
            cert_file=cert_file,
            key_file=key_file,
            threads=opts.threads,
            stop=done,
            on_ready=on_ready,
        )
    finally:
        if store is not None:
            store.stop()
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
