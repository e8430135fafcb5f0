"""hami's own servers as real processes around a real control plane: what the e2e tests
and the real-pipeline benchmark (``benchmarks/bench_pipeline.py``) start alike.

- ``HAMI``: the ``hami`` executable of the running environment;
- ``server_argv`` / ``scheduler_argv``: ``hami <server>`` against the control plane, on
  loopback ports (the scheduler signing with ``signing_keys``, made once per control
  plane; a device plugin verifies with its public half);
- ``spawn_scheduler``: one ``hami scheduler`` process on free ports, its Lease in
  ``default`` (the e2e replicas and the benchmark's scheduler);
- ``start_webhook``: ``hami webhook`` with its own certificates (``--cert-mode auto``)
  and the ``MutatingWebhookConfiguration`` that sends it the pods of the selected
  namespaces, waiting until the webhook has written its CA into it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from kubernetes import client

from tests.e2e.controlplane import LOOPBACK, ControlPlane, free_port

HAMI = str(Path(sys.executable).parent / "hami")
if not Path(HAMI).exists():
    HAMI = shutil.which("hami") or "hami"


def server_argv(cp: ControlPlane, command: str, port: int, *extra: str) -> list[str]:
    """``hami <command>`` with the control plane's kubeconfig, serving on
    ``LOOPBACK:port``, then ``extra`` flags."""
    return [
        HAMI,
        command,
        "--kubeconfig",
        str(cp.kubeconfig_path),
        "--bind-address",
        LOOPBACK,
        "--port",
        str(port),
        *extra,
    ]


def signing_keys(cp: ControlPlane) -> tuple[Path, Path]:
    """(private key, public key) PEM files of the control plane's allocation-signing key
    (``--allocation-signing-key``, ``--allocation-public-keys``), made once."""
    from hami_core.protocol.signature import AllocationSigner, generate_private_key_pem

    home = Path(cp.workdir or tempfile.gettempdir()) / "allocation-keys"
    private, public = home / "signing.key", home / "public" / "scheduler.pem"
    if not public.exists():
        public.parent.mkdir(parents=True, exist_ok=True)
        pem = generate_private_key_pem()
        private.write_bytes(pem)
        public.write_bytes(AllocationSigner(pem).public_pem())
    return private, public


def scheduler_argv(cp: ControlPlane, port: int, metrics_port: int, *extra: str) -> list[str]:
    """``hami scheduler`` serving the extender on ``LOOPBACK:port`` and metrics on
    ``LOOPBACK:metrics_port``, signing with ``signing_keys``, then ``extra`` flags."""
    key = str(signing_keys(cp)[0])
    return server_argv(
        cp,
        "scheduler",
        port,
        "--metrics-port",
        str(metrics_port),
        "--allocation-signing-key",
        key,
        *extra,
    )


def spawn_scheduler(
    cp: ControlPlane,
    log_path: Path,
    *extra: str,
    preexec_fn: Callable[[], None] | None = None,
) -> tuple[subprocess.Popen[bytes], str, int]:
    """Start ``hami scheduler`` (``scheduler_argv``: extender and metrics on free
    loopback ports, its Lease in ``default``, then ``extra`` flags) with unbuffered
    output to ``log_path``, not waiting for it.

    Returns:
        The process, its extender URL (``http://LOOPBACK:port``) and its metrics port.
    """
    port, metrics = free_port(), free_port()
    with open(log_path, "wb") as log:  # the child keeps its own copy of the descriptor
        proc = subprocess.Popen(
            scheduler_argv(cp, port, metrics, "--lease-namespace", "default", *extra),
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            preexec_fn=preexec_fn,
        )
    return proc, f"http://{LOOPBACK}:{port}", metrics


def start_webhook(
    cp: ControlPlane,
    *,
    config_name: str,
    secret_name: str,
    namespace_labels: Mapping[str, str],
    operations: Sequence[str] = ("CREATE",),
    resources: Sequence[str] = ("pods",),
    extra: Sequence[str] = (),
) -> str:
    """Start ``hami webhook`` (process ``hami-webhook``, certificates in Secret
    ``secret_name`` of ``default``) and register it as ``config_name`` for ``operations``
    on ``resources`` in the namespaces labelled ``namespace_labels``, failure policy
    ``Fail``, 10 s timeout; return its URL once its CA is in the configuration (90 s)."""
    port = free_port()
    cp.start_process(
        "hami-webhook",
        server_argv(
            cp,
            "webhook",
            port,
            "--cert-mode",
            "auto",
            "--cert-ip-address",
            LOOPBACK,
            "--service-namespace",
            "default",
            "--secret-name",
            secret_name,
            "--webhook-config-name",
            config_name,
            *extra,
        ),
        env={"PYTHONUNBUFFERED": "1"},
    )
    url = f"https://{LOOPBACK}:{port}/webhook"
    rule = {
        "apiGroups": [""],
        "apiVersions": ["v1"],
        "operations": list(operations),
        "resources": list(resources),
    }
    admission = client.AdmissionregistrationV1Api(cp.api_client())
    admission.create_mutating_webhook_configuration(
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": config_name},
            "webhooks": [
                {
                    "name": "pods.hami.io",
                    "admissionReviewVersions": ["v1", "v1beta1"],
                    "sideEffects": "None",
                    "failurePolicy": "Fail",
                    "timeoutSeconds": 10,
                    "clientConfig": {"url": url},
                    "namespaceSelector": {"matchLabels": dict(namespace_labels)},
                    "rules": [rule],
                }
            ],
        }
    )

    def has_ca() -> bool:
        obj = admission.read_mutating_webhook_configuration(config_name)
        return bool(obj.webhooks[0].client_config.ca_bundle)

    cp.wait_for(has_ca, timeout=90, message="the webhook's CA in its configuration")
    return url
