"""The ``hami`` command."""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any, TypeVar

import click
import yaml

from hami_core import __version__
from hami_core.errors import HamiError
from hami_core.extras import MissingExtraError, extra_of_module, require_extra
from hami_core.model import DEVICE_POLICY_TOKENS
from hami_core.plugin import BackendManager

F = TypeVar("F", bound=Callable[..., Any])

COMMANDS_GROUP = "hami.commands"
GPU_POLICY_TOKENS = "|".join(DEVICE_POLICY_TOKENS)


class _Cli(click.Group):
    """The ``hami`` group, plus commands that backends register in the ``hami.commands``
    entry-point group (e.g. ``hami nvidia shim-path``); loaded only when named."""

    def _plugin_commands(self) -> dict[str, Any]:
        disabled = {n.strip() for n in os.environ.get("HAMI_DISABLED_BACKENDS", "").split(",")}
        return {ep.name: ep for ep in entry_points(group=COMMANDS_GROUP) if ep.name not in disabled}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self._plugin_commands()})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is not None:
            return command
        ep = self._plugin_commands().get(cmd_name)
        if ep is None:
            return None
        try:
            loaded = ep.load()
        except Exception as exc:
            raise click.ClickException(
                f"command {cmd_name!r} of a backend failed to load: {exc}"
            ) from exc
        return loaded if isinstance(loaded, click.Command) else None


LOG_LEVELS = ["debug", "info", "warning", "error"]
LOG_LEVEL_OPTION = click.option(
    "--log-level",
    envvar="HAMI_LOG_LEVEL",
    default="info",
    show_default=True,
    show_envvar=True,
    type=click.Choice(LOG_LEVELS),
    help="Logging threshold.",
)


def kubeconfig_option(uses: str = "") -> Callable[[F], F]:
    """``--kubeconfig`` for the servers; ``uses`` says what they read, e.g. "(quotas)"."""
    return click.option(
        "--kubeconfig",
        envvar="KUBECONFIG",
        default=None,
        show_default="in-cluster config, else ~/.kube/config",
        show_envvar=True,
        help=f"kubeconfig file for the API server{' ' + uses if uses else ''}.",
    )


def config_option(details: str = "") -> Callable[[F], F]:
    """``--config``: the hami configuration file (``hami_core.protocol.config``)."""
    return click.option(
        "--config",
        "config_file",
        envvar="HAMI_CONFIG",
        default=None,
        show_default="built-in defaults",
        show_envvar=True,
        help=f"hami configuration file (YAML, version v1){': ' + details if details else ''}.",
    )


@click.group(cls=_Cli, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(
    __version__, "--version", package_name="hami-core", message="hami-core %(version)s"
)
def cli() -> None:
    """hami: GPU sharing for Kubernetes (HAMi-compatible)."""


@cli.command()
def version() -> None:
    """Print the version of hami-core."""
    click.echo(f"hami-core {__version__}")


@cli.command()
@click.option(
    "--output", "-o", type=click.Choice(["text", "json"]), default="text", show_default=True
)
def backends(output: str) -> None:
    """List installed backends, their versions, vendor keys and implemented hooks.

    Backends are found through the ``hami.backends`` entry-point group; names listed in
    HAMI_DISABLED_BACKENDS (comma-separated) are skipped.
    """
    manager = BackendManager.from_entry_points()
    rows = [
        {
            "name": r.name,
            "version": r.version,
            "vendors": list(r.info.vendors),
            "hooks": list(r.hooks),
            "description": r.info.description,
        }
        for r in manager.backends
    ]
    if output == "json":
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo("no backends installed (or all disabled by HAMI_DISABLED_BACKENDS)")
        return
    for row in rows:
        click.echo(f"{row['name']} {row['version']}  vendors: {', '.join(row['vendors'])}")
        click.echo(f"  hooks: {', '.join(row['hooks'])}")


@cli.command()
@click.option(
    "--bind-address",
    default="127.0.0.1",
    show_default=True,
    help="Address of the extender. Loopback by default: the extender has no "
    "authentication of its own (it runs beside kube-scheduler, e.g. as a sidecar); to "
    "listen elsewhere, use --tls-cert-file with --tls-client-ca-file.",
)
@click.option(
    "--metrics-bind-address",
    default="0.0.0.0",
    show_default=True,
    help="Address of the Prometheus metrics server (read-only).",
)
@click.option(
    "--port",
    default=8888,
    show_default=True,
    type=click.IntRange(1, 65535),
    help="Extender port (/filter, /prioritize, /score, /bind, /healthz, /readyz, /-/backends).",
)
@click.option(
    "--metrics-port",
    default=9395,
    show_default=True,
    type=click.IntRange(1, 65535),
    help="Prometheus metrics port.",
)
@kubeconfig_option()
@config_option()
@click.option(
    "--tls-cert-file",
    default=None,
    help="Serve the extender over HTTPS with this certificate (PEM).",
)
@click.option("--tls-private-key-file", default=None, help="Private key (PEM) of --tls-cert-file.")
@click.option(
    "--tls-client-ca-file",
    default=None,
    help="With --tls-cert-file: only clients presenting a certificate signed by this CA "
    "(PEM) are served (mutual TLS; give kube-scheduler the client certificate).",
)
@click.option(
    "--leader-elect/--no-leader-elect",
    default=True,
    show_default=True,
    help="Elect a leader on a coordination.k8s.io/v1 Lease; only the leader binds.",
)
@click.option(
    "--lease-name", default="hami-scheduler", show_default=True, help="Name of the Lease."
)
@click.option(
    "--lease-namespace",
    default=lambda: os.environ.get("POD_NAMESPACE", "kube-system"),
    show_default="$POD_NAMESPACE or kube-system",
    help="Namespace of the Lease.",
)
@click.option(
    "--identity",
    default="",
    show_default="<hostname>_<pid>",
    help="This replica's identity in the Lease.",
)
@click.option(
    "--lease-duration",
    default=15.0,
    show_default=True,
    type=float,
    help="Seconds a follower waits on an unrenewed Lease before taking over.",
)
@click.option(
    "--renew-deadline",
    default=10.0,
    show_default=True,
    type=float,
    help="Seconds a leader keeps acting without a successful renewal.",
)
@click.option(
    "--retry-period",
    default=2.0,
    show_default=True,
    type=float,
    help="Seconds between election rounds.",
)
@click.option(
    "--node-policy",
    metavar="binpack|spread",
    default=None,
    callback=lambda _ctx, _param, value: _policy(value, "node"),
    show_default="from config (binpack)",
    help="Default node policy; a pod's hami.io/node-scheduler-policy wins.",
)
@click.option(
    "--gpu-policy",
    metavar="POLICY[,POLICY...]",
    default=None,
    callback=lambda _ctx, _param, value: _policy(value, "gpu"),
    show_default="from config (spread)",
    help=f"Default device policy: {GPU_POLICY_TOKENS}, or an ordered comma list as in "
    "hami.io/gpu-scheduler-policy (spread,numa; mutex,spread); a pod's annotation wins.",
)
@click.option(
    "--threads",
    default=32,
    show_default=True,
    type=click.IntRange(1, 1024),
    help="Worker threads of the HTTP server (a bind waiting for a node lock holds one "
    "while it sleeps; /filter must not queue behind those).",
)
@click.option(
    "--handshake-period",
    default=30.0,
    show_default=True,
    type=float,
    help="Seconds between the leader's Requesting_ handshakes to each node's device plugin.",
)
@click.option(
    "--bind-lock-wait",
    default=2.0,
    show_default=True,
    type=click.FloatRange(0),
    help="Seconds /bind waits for another pod's node lock before failing. Keep it well "
    "under kube-scheduler's extender timeout (the extender's httpTimeout, 5 s by default "
    "in 1.20): a bind cut by the caller is retried while the first still runs.",
)
@click.option(
    "--node-label-selector",
    default="",
    callback=lambda _ctx, _param, value: _label_pairs(value),
    help="key=value[,key=value]: only nodes with these labels are ours (HAMi's flag; the "
    "chart's convention is gpu=on). Others fail the filter with NodeUnregistered.",
)
@LOG_LEVEL_OPTION
def scheduler(**opts: Any) -> None:
    """Run the kube-scheduler extender (filter, prioritize, bind) against the API server.

    Environment: HAMI_DISABLED_BACKENDS (comma list of backends to skip),
    POD_NAMESPACE (default Lease namespace), KUBECONFIG.
    """
    require_extra("server", "hami scheduler")
    from hami_core.servers.scheduler_main import SchedulerOptions, run_scheduler

    logging.basicConfig(
        level=opts.pop("log_level").upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    run_scheduler(
        SchedulerOptions(
            bind_address=opts["bind_address"],
            metrics_bind_address=opts["metrics_bind_address"],
            port=opts["port"],
            metrics_port=opts["metrics_port"],
            kubeconfig=opts["kubeconfig"],
            config=opts["config_file"],
            tls_cert_file=opts["tls_cert_file"],
            tls_private_key_file=opts["tls_private_key_file"],
            tls_client_ca_file=opts["tls_client_ca_file"],
            leader_elect=opts["leader_elect"],
            lease_name=opts["lease_name"],
            lease_namespace=opts["lease_namespace"],
            identity=opts["identity"],
            lease_duration_s=opts["lease_duration"],
            renew_deadline_s=opts["renew_deadline"],
            retry_period_s=opts["retry_period"],
            node_policy=opts["node_policy"],
            gpu_policy=opts["gpu_policy"],
            threads=opts["threads"],
            bind_lock_wait_s=opts["bind_lock_wait"],
            handshake_period_s=opts["handshake_period"],
            node_label_selector=opts["node_label_selector"],
        )
    )


def _policy(value: str | None, kind: str) -> str | None:
    """Check a ``--node-policy`` / ``--gpu-policy`` value as the annotations are read
    (``hami_core.scheduling.policy``): a usage error naming the bad token."""
    if value is None:
        return None
    from hami_core.scheduling.policy import device_policy_option, node_policy_option

    read = node_policy_option if kind == "node" else device_policy_option
    try:
        read(value, f"--{kind}-policy")
    except HamiError as exc:
        raise click.BadParameter(str(exc).split(": ", 1)[1]) from None
    return value


def _label_pairs(value: str) -> dict[str, str]:
    """``"gpu=on,zone=a"`` -> ``{"gpu": "on", "zone": "a"}`` (HAMi's StringToString form).

    Raises:
        click.BadParameter: an item without ``=`` or with an empty key.
    """
    out: dict[str, str] = {}
    for item in (i.strip() for i in value.split(",")):
        if not item:
            continue
        key, sep, val = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(
                f"{item!r} is not key=value", param_hint="--node-label-selector"
            )
        out[key.strip()] = val.strip()
    return out


@cli.command()
@click.option(
    "--bind-address",
    default="0.0.0.0",
    show_default=True,
    help="Address the HTTPS server listens on.",
)
@click.option(
    "--port",
    default=9443,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="HTTPS port (/webhook, /healthz, /readyz).",
)
@click.option(
    "--cert-mode",
    type=click.Choice(["files", "auto"]),
    default="files",
    show_default=True,
    help="files: serve --tls-cert-file / --tls-private-key-file. auto: make a CA and a "
    "serving certificate, keep them in --secret-name (reused by every replica) and write "
    "the CA into the caBundle of --webhook-config-name.",
)
@click.option(
    "--tls-cert-file",
    default=None,
    show_default="none; auto mode: a temporary file",
    help="Serving certificate (PEM). In auto mode, where the generated one is written.",
)
@click.option(
    "--tls-private-key-file",
    default=None,
    show_default="none; auto mode: a temporary file",
    help="Private key (PEM) of --tls-cert-file. In auto mode, where the generated one is written.",
)
@click.option(
    "--service-name",
    default="hami-webhook",
    show_default=True,
    help="Service in front of the webhook (auto mode: the certificate names "
    "<svc>, <svc>.<ns>, <svc>.<ns>.svc and <svc>.<ns>.svc.cluster.local).",
)
@click.option(
    "--service-namespace",
    default=None,
    show_default="$POD_NAMESPACE, else the service-account namespace, else kube-system",
    help="Namespace of the Service and of --secret-name.",
)
@click.option(
    "--webhook-config-name",
    default="hami-webhook",
    show_default=True,
    help="MutatingWebhookConfiguration whose webhooks get the CA bundle (auto mode).",
)
@click.option(
    "--secret-name",
    default="hami-webhook-tls",
    show_default=True,
    help="Secret (type kubernetes.io/tls, plus ca.crt and ca.key) holding the auto-mode "
    "certificates.",
)
@click.option(
    "--cert-ip-address",
    "cert_ip_addresses",
    multiple=True,
    default=(),
    show_default="none",
    help="Extra IP SAN of the auto-mode certificate (repeatable), e.g. 127.0.0.1 when the "
    "API server calls a url on loopback.",
)
@click.option(
    "--cert-dns-name",
    "cert_dns_names",
    multiple=True,
    default=(),
    show_default="none",
    help="Extra DNS SAN of the auto-mode certificate (repeatable).",
)
@kubeconfig_option("(quotas, namespaces, Secret, caBundle)")
@config_option()
@click.option(
    "--threads",
    default=8,
    show_default=True,
    type=click.IntRange(1, 1024),
    help="Worker threads of the HTTPS server.",
)
@click.option(
    "--namespace-cache-seconds",
    default=30.0,
    show_default=True,
    type=click.FloatRange(0),
    help="How long a namespace's labels (hami.io/webhook: ignore) are reused.",
)
@click.option(
    "--trusted-user",
    "trusted_users",
    multiple=True,
    default=(),
    show_default="system:serviceaccount:<ns>:hami-scheduler and "
    "system:serviceaccount:<ns>:hami-device-plugin, <ns> as --service-namespace",
    help="userInfo.username allowed to write scheduler-owned pod annotations (repeatable): "
    "the scheduler's and the device plugin's service accounts. Everyone else is denied.",
)
@LOG_LEVEL_OPTION
def webhook(**opts: Any) -> None:
    """Run the mutating admission webhook (AdmissionReview v1 and v1beta1 at /webhook,
    HTTPS only).

    Pods asking for managed devices get schedulerName and the backend defaults; pods
    that break the rules (privileged, nodeName preset, bad quantities, over quota) are
    denied with the reason. Environment: HAMI_DISABLED_BACKENDS, POD_NAMESPACE,
    KUBECONFIG.
    """
    require_extra("server", "hami webhook")
    from hami_core.servers.webhook_main import WebhookOptions, run_webhook

    logging.basicConfig(
        level=opts.pop("log_level").upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    options = WebhookOptions(
        bind_address=opts["bind_address"],
        port=opts["port"],
        cert_mode=opts["cert_mode"],
        tls_cert_file=opts["tls_cert_file"],
        tls_private_key_file=opts["tls_private_key_file"],
        service_name=opts["service_name"],
        service_namespace=opts["service_namespace"],
        webhook_config_name=opts["webhook_config_name"],
        secret_name=opts["secret_name"],
        cert_ip_addresses=tuple(opts["cert_ip_addresses"]),
        cert_dns_names=tuple(opts["cert_dns_names"]),
        kubeconfig=opts["kubeconfig"],
        config=opts["config_file"],
        threads=opts["threads"],
        namespace_cache_s=opts["namespace_cache_seconds"],
        trusted_users=tuple(opts["trusted_users"]),
    )
    try:
        run_webhook(options)
    except OSError as exc:  # port taken, unreadable or mismatched certificate files
        raise click.ClickException(f"cannot serve HTTPS: {exc}") from exc


@cli.command()
@click.option(
    "--node-name",
    envvar="NODE_NAME",
    required=True,
    show_envvar=True,
    help="This node's name (in a DaemonSet: the downward API's spec.nodeName).",
)
@click.option(
    "--bind-address", default="0.0.0.0", show_default=True, help="Address to serve /metrics on."
)
@click.option(
    "--port",
    "--metrics-port",
    "port",
    type=click.IntRange(1, 65535),
    default=9394,
    show_default=True,
    help="Port of /metrics and /healthz.",
)
@kubeconfig_option("(this node's pods)")
@config_option()
@click.option(
    "--containers-dir",
    envvar="HAMI_CONTAINERS_DIR",
    default="/usr/local/vgpu/containers",
    show_default=True,
    show_envvar=True,
    help="Host directory holding one <pod UID>_<container> directory per container.",
)
@click.option(
    "--gc-grace",
    type=click.FloatRange(min=0),
    default=300.0,
    show_default=True,
    help="Seconds the directory of a pod that no longer exists is kept before removal.",
)
@click.option(
    "--proc-root",
    default="/proc",
    show_default=True,
    help="procfs of the host's PID namespace (the DaemonSet runs with hostPID).",
)
@LOG_LEVEL_OPTION
def monitor(**opts: Any) -> None:
    """Run the node monitor: per-container device usage from the usage files under
    --containers-dir (NVIDIA: the shim's shared regions), host figures from the
    driver (NVML), served as Prometheus metrics under HAMi's names on :9394/metrics.

    Only live processes count. Usage files are tenant-written: links, FIFOs, files
    of the wrong size or format are skipped (hami_monitor_usage_files_skipped_total).
    hami-nvidia loads libnvidia-ml.so.1 through the dynamic loader (LD_LIBRARY_PATH).
    """
    require_extra("server", "hami monitor")
    from hami_core.servers.monitor import MonitorOptions, run_monitor

    logging.basicConfig(
        level=opts.pop("log_level").upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        run_monitor(
            MonitorOptions(
                node_name=opts["node_name"],
                bind_address=opts["bind_address"],
                port=opts["port"],
                kubeconfig=opts["kubeconfig"],
                config=opts["config_file"],
                containers_dir=opts["containers_dir"],
                gc_grace_s=opts["gc_grace"],
                proc_root=opts["proc_root"],
            )
        )
    except OSError as exc:  # port in use
        raise click.ClickException(f"cannot serve the monitor: {exc}") from exc


@cli.command()
@click.argument("nodes", nargs=-1)
@kubeconfig_option("(nodes and pods, listed once)")
@config_option("the scheduler name and backend sections")
@click.option(
    "--snapshot",
    "snapshot",
    type=click.Path(dir_okay=False),
    default=None,
    help="Read nodes and pods from this file instead of the API server: a "
    "`kubectl get nodes,pods -A -o yaml` snapshot, or a cluster file of hami simulate.",
)
@click.option(
    "--example", is_flag=True, help="Show the bundled example snapshot (examples/snapshot.yaml)."
)
@click.option(
    "--prometheus",
    default=None,
    metavar="URL",
    help="Prometheus that scrapes `hami monitor`: adds memory in use and utilization "
    "per device (NVML).",
)
@click.option(
    "-o",
    "--output",
    type=click.Choice(["table", "wide", "json"]),
    default="table",
    show_default=True,
    help="wide: every pod of a device; json: machine-readable.",
)
@click.option(
    "--sort-by",
    type=click.Choice(["node", "memory", "free", "cores", "used", "sharers"]),
    default="node",
    show_default=True,
    help="Order of devices and nodes; all but node largest first.",
)
@click.option(
    "-l",
    "--selector",
    default=None,
    help="Only nodes with these labels, e.g. -l gpu=on,zone=a.",
)
@click.option("--vendor", default=None, help="Only devices of this vendor key, e.g. NVIDIA.")
def top(**opts: Any) -> None:
    """Show the cluster's accelerators: per node and device the memory and compute
    allocated of what is schedulable, memory in use and utilization (with
    --prometheus), sharers, the pods holding each device, health, and what is free.

    NODES limits the view to those nodes. Reads the API server (KUBECONFIG) unless
    --snapshot or --example is given.
    """
    from hami_core import top as view_
    from hami_core.simulate.runner import bundled_examples, make_manager

    selector: dict[str, str] = {}
    for part in filter(None, (opts["selector"] or "").split(",")):
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{part!r} is not key=value", param_hint="--selector")
        selector[key.strip()] = value.strip()
    try:
        manager = make_manager(opts["config_file"])
        if opts["example"]:
            store = view_.cluster_from_file(bundled_examples() / "snapshot.yaml", manager)
        elif opts["snapshot"]:
            store = view_.cluster_from_file(opts["snapshot"], manager)
        else:
            store = view_.cluster_from_api(opts["kubeconfig"])
        usage = view_.usage_from_prometheus(opts["prometheus"]) if opts["prometheus"] else None
        result = view_.build_view(
            store,
            manager,
            usage=usage,
            nodes=opts["nodes"],
            selector=selector,
            vendor=opts["vendor"],
            sort_by=opts["sort_by"],
        )
    except HamiError as exc:
        raise click.ClickException(str(exc)) from exc
    if opts["output"] == "json":
        click.echo(view_.render_json(result), nl=False)
    else:
        click.echo(view_.render_table(result, wide=opts["output"] == "wide"), nl=False)


@cli.command("device-plugin")
@click.option(
    "--node-name",
    envvar="NODE_NAME",
    required=True,
    show_envvar=True,
    help="This node's name: where the inventory is published and whose pods are "
    "allocated (in a DaemonSet: the downward API's spec.nodeName).",
)
@click.option(
    "--backend",
    envvar="HAMI_BACKEND",
    default="nvidia",
    show_default=True,
    show_envvar=True,
    help="Backend (entry point of hami.backends) whose devices this process serves.",
)
@click.option(
    "--vendor",
    envvar="HAMI_VENDOR",
    default=None,
    show_default="the backend's first vendor key",
    show_envvar=True,
    help="Vendor key served, for backends with several (one resource per process).",
)
@kubeconfig_option()
@config_option(
    "split count, scaling, resource names and backend options (hami-nvidia: hookPath, "
    "libraryPath, corePolicy, unifiedMemoryMiB, ignoredXids, healthRecoverySeconds)"
)
@click.option(
    "--node-config",
    envvar="HAMI_NODE_CONFIG",
    default=None,
    show_default="none",
    show_envvar=True,
    help="Per-node overrides in HAMi's device-plugin config.json shape (JSON or YAML): "
    '{"nodeconfig": [{"name": NODE, "devicesplitcount": N, "devicememoryscaling": F, '
    '"devicecorescaling": F, "filterdevices": {"uuid": [...], "index": [...]}}]}.',
)
@click.option(
    "--device-plugin-path",
    envvar="HAMI_DEVICE_PLUGIN_PATH",
    default="/var/lib/kubelet/device-plugins",
    show_default=True,
    show_envvar=True,
    help="kubelet's device-plugin directory, holding kubelet.sock and our socket.",
)
@click.option(
    "--socket-name",
    envvar="HAMI_SOCKET_NAME",
    default=None,
    show_default="<backend>-<resource suffix>.sock, e.g. nvidia-gpu.sock",
    show_envvar=True,
    help="File name of the plugin's socket in --device-plugin-path.",
)
@click.option(
    "--register-interval",
    envvar="HAMI_REGISTER_INTERVAL",
    default=30.0,
    show_default=True,
    type=click.FloatRange(min=1),
    show_envvar=True,
    help="Seconds between checks of the inventory and handshake annotations (written "
    "only when they change or the scheduler asks; health changes publish at once).",
)
@click.option(
    "--health-interval",
    envvar="HAMI_HEALTH_INTERVAL",
    default=5.0,
    show_default=True,
    type=click.FloatRange(min=0.1),
    show_envvar=True,
    help="Longest wait, seconds, for a device health event before discovering again "
    "(recovered devices are noticed at this pace).",
)
@click.option(
    "--cdi/--no-cdi",
    envvar="HAMI_CDI",
    default=False,
    show_default=True,
    show_envvar=True,
    help="Answer Allocate with CDI device names (and a CDI spec per container) instead "
    "of env, mounts and device nodes.",
)
@click.option(
    "--cdi-spec-dir",
    envvar="HAMI_CDI_SPEC_DIR",
    default="/var/run/cdi",
    show_default=True,
    show_envvar=True,
    help="Directory the container runtime reads CDI specs from (--cdi).",
)
@click.option(
    "--link-scores/--no-link-scores",
    envvar="HAMI_LINK_SCORES",
    default=False,
    show_default=True,
    show_envvar=True,
    help="Publish device link scores (hami.io/node-<backend>-score) for the topology-aware policy.",
)
@click.option(
    "--fail-on-init-error/--no-fail-on-init-error",
    envvar="HAMI_FAIL_ON_INIT_ERROR",
    default=True,
    show_default=True,
    show_envvar=True,
    help="Exit when discovery fails at start (no driver, NVML error); with --no-..., "
    "log it and idle without registering (DaemonSets on nodes without devices).",
)
@click.option(
    "--api-timeout",
    envvar="HAMI_API_TIMEOUT",
    show_envvar=True,
    default=5.0,
    show_default=True,
    type=click.FloatRange(min=0.1),
    help="Seconds one API server request may take (connect and read).",
)
@click.option(
    "--allocate-timeout",
    envvar="HAMI_ALLOCATE_TIMEOUT",
    show_envvar=True,
    default=10.0,
    show_default=True,
    type=click.FloatRange(min=0.1),
    help="Seconds an Allocate answer may take; past it kubelet gets UNAVAILABLE and its "
    "retry with the same device IDs gets the answer once it is ready.",
)
@click.option(
    "--metrics-port",
    envvar="HAMI_METRICS_PORT",
    show_envvar=True,
    type=click.IntRange(0, 65535),
    default=0,
    show_default=True,
    help="Serve the device plugin's metrics (Allocate durations, devices, health) on "
    "this port; 0: off.",
)
@click.option(
    "--metrics-bind-address",
    envvar="HAMI_METRICS_BIND_ADDRESS",
    show_envvar=True,
    default="0.0.0.0",
    show_default=True,
    help="Address of --metrics-port.",
)
@LOG_LEVEL_OPTION
def device_plugin(**opts: Any) -> None:
    """Run the device plugin: discover this node's devices, publish them on the Node
    (inventory, handshake), and serve kubelet's device plugin API v1beta1.

    Each physical device is advertised to kubelet split-count times as <UUID>-<i>.
    Allocate finds the pod being allocated (node lock, node name, bind-phase, device
    count), answers each container with the limits the scheduler wrote, sets
    hami.io/bind-phase to success (or failed, with the reason in the gRPC error) and
    releases the node lock. Re-registers when kubelet restarts.

    Environment, besides the variables shown per option: HAMI_DISABLED_BACKENDS (comma
    list of backends to skip). hami-nvidia loads libnvidia-ml.so.1 through the dynamic
    loader (LD_LIBRARY_PATH) and reads NUMA nodes under HAMI_NVIDIA_SYSFS_ROOT
    (default /sys).
    """
    require_extra("server", "hami device-plugin")
    from hami_core.servers.deviceplugin_main import DevicePluginOptions, run_device_plugin

    logging.basicConfig(
        level=opts.pop("log_level").upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    options = DevicePluginOptions(
        node_name=opts["node_name"],
        backend=opts["backend"],
        vendor=opts["vendor"],
        kubeconfig=opts["kubeconfig"],
        config=opts["config_file"],
        node_config=opts["node_config"],
        plugin_dir=opts["device_plugin_path"],
        socket_name=opts["socket_name"],
        register_interval_s=opts["register_interval"],
        health_interval_s=opts["health_interval"],
        cdi=opts["cdi"],
        cdi_spec_dir=opts["cdi_spec_dir"],
        link_scores=opts["link_scores"],
        fail_on_init_error=opts["fail_on_init_error"],
        api_timeout_s=opts["api_timeout"],
        allocate_timeout_s=opts["allocate_timeout"],
        metrics_port=opts["metrics_port"],
        metrics_bind_address=opts["metrics_bind_address"],
    )
    try:
        run_device_plugin(options)
    except OSError as exc:  # socket directory missing, path too long
        raise click.ClickException(f"cannot serve the device plugin: {exc}") from exc


@cli.command()
@click.argument("workloads", nargs=-1, type=click.Path(exists=True))
@click.option(
    "--cluster",
    "cluster_file",
    type=click.Path(exists=True, dir_okay=False),
    help="The cluster: a simple YAML of nodes and their GPUs, or a "
    "'kubectl get nodes,pods -A -o yaml' snapshot whose existing allocations count. "
    "Default: the bundled examples/cluster.yaml.",
)
@config_option()
@click.option(
    "--node-policy",
    metavar="binpack|spread",
    callback=lambda _ctx, _param, value: _policy(value, "node"),
    help="Node policy for every pod without a hami.io/node-scheduler-policy annotation "
    "(overrides the configuration).",
)
@click.option(
    "--gpu-policy",
    metavar="POLICY[,POLICY...]",
    callback=lambda _ctx, _param, value: _policy(value, "gpu"),
    help="GPU policy for every pod without a hami.io/gpu-scheduler-policy annotation "
    f"(overrides the configuration): {GPU_POLICY_TOKENS}, or an ordered comma list "
    "(spread,numa; mutex,spread).",
)
@click.option(
    "--output",
    "-o",
    type=click.Choice(["text", "json", "yaml"]),
    default="text",
    show_default=True,
    help="text for people (warnings on stderr); json or yaml for the same report as data "
    "(keys documented in hami_core/simulate/report.py), with what the webhook changed and "
    "what the device plugin gives each container.",
)
@click.option(
    "--explain",
    metavar="POD",
    help="Print only the reasoning for one pod (NAMESPACE/NAME, or NAME when unique): "
    "its request, policies, per node the outcome and per GPU the reason, the node scores "
    "and the chosen GPUs.",
)
def simulate(
    workloads: tuple[str, ...],
    cluster_file: str | None,
    config_file: str | None,
    node_policy: str | None,
    gpu_policy: str | None,
    output: str,
    explain: str | None,
) -> None:
    """Place workloads on a cluster, as the scheduler would, without a cluster.

    Every pod of WORKLOADS (files or directories of Pod, Deployment, StatefulSet,
    ReplicaSet and Job manifests; directories are read recursively, in name order) goes
    through the webhook, filter, prioritize, bind and allocate, in order, on an embedded
    copy of the cluster. Prints where each pod landed with its GPUs, MiB and cores, why
    the others did not fit, how full each GPU is, and a summary.

    With no arguments, runs the bundled example (examples/cluster.yaml and
    examples/workloads); with only --cluster, the bundled workloads run on that cluster;
    with only WORKLOADS, they run on the bundled cluster. Runs of more than 200 pods
    show progress on stderr. Unschedulable pods are a result: the exit status is 0; bad
    input exits non-zero with a one-line message.
    """
    from hami_core.simulate import report, runner

    def progress(n: int) -> Any:
        return click.progressbar(length=n, label=f"simulating {n} pods", file=sys.stderr)

    try:
        sim = runner.run_files(
            cluster_path=cluster_file,
            workload_paths=list(workloads),
            config_path=config_file,
            node_policy=node_policy,
            device_policy=gpu_policy,
            explain=explain,
            progress=progress,
        )
        if explain is not None:
            data = report.build_explanation(sim, explain)
            text = report.render_explanation(data)
        else:
            data = report.build_report(sim)
            text = report.render_text(data, warnings=False)
    except HamiError as exc:
        raise click.ClickException(str(exc)) from None
    if output == "json":
        click.echo(json.dumps(data, indent=2))
    elif output == "yaml":
        click.echo(yaml.safe_dump(data, sort_keys=False), nl=False)
    else:
        for warning in data.get("warnings") or ():
            click.echo(f"warning: {warning}", err=True)
        click.echo(text, nl=False)


def main() -> None:
    """Entry point: run the CLI, turning hami errors into a one-line message, exit 2."""
    try:
        cli(standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except HamiError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    except ModuleNotFoundError as exc:
        # A command (of the core or of a backend) reached a module of an extra that is
        # not installed: name the extra instead of printing a traceback.
        extra = extra_of_module(exc.name)
        if extra is None:
            raise
        command = " ".join(["hami", *sys.argv[1:2]])
        click.echo(f"error: {MissingExtraError(command, extra, [str(exc.name)])}", err=True)
        sys.exit(2)
