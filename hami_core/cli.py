"""The ``hami`` command."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterable
from importlib.metadata import entry_points
from typing import Any

import click
import yaml

from hami_core import __version__
from hami_core.errors import ConfigError, HamiError, InvalidInputError
from hami_core.extras import MissingExtraError, extra_of_module, require_extra
from hami_core.options import (
    DefragOptions,
    ExplainOptions,
    SimulateOptions,
    TopOptions,
    UiOptions,
)
from hami_core.plugin import BackendManager
from hami_core.plugin.manager import disabled_backends
from hami_core.protocol.documents import printable, shown_text
from hami_core.servers.options import (
    DevicePluginOptions,
    MonitorOptions,
    SchedulerOptions,
    WebhookOptions,
)
from hami_core.settings import SettingsCommand, click_options

COMMANDS_GROUP = "hami.commands"
#: Characters of one warning of ``hami simulate`` shown at most.
WARNING_SHOWN = 500


class ConfigFailure(click.ClickException):
    """A bad configuration, as every ``hami`` command reports it: one line on stderr,
    ``error: <file>: <key>: <problem>``, and exit status 2, the status of a usage error
    (``click.UsageError.exit_code``, as argparse's ``parser.error``), so a wrapper
    tells "fix the configuration" from a run that failed (exit 1)."""

    exit_code = 2

    def show(self, file: Any = None) -> None:
        """Print the one line to stderr."""
        click.echo(f"error: {self.format_message()}", err=True)


def failure(exc: HamiError) -> click.ClickException:
    """How a command reports ``exc``: ``ConfigFailure`` (exit 2) for a ``ConfigError``,
    else click's one-line error (exit 1)."""
    message = printable(str(exc), keep_newlines=True)  # names from files and servers
    if isinstance(exc, ConfigError):
        return ConfigFailure(message)
    return click.ClickException(message)


class _Cli(click.Group):
    """The ``hami`` group, plus commands that backends register in the ``hami.commands``
    entry-point group (e.g. ``hami nvidia shim-path``); loaded only when named. A
    ``ConfigError`` out of any command becomes ``ConfigFailure`` (exit 2). Its commands
    take Go's ``--x=false`` for their boolean flags (``SettingsCommand``)."""

    command_class = SettingsCommand

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ConfigError as exc:
            raise ConfigFailure(printable(str(exc), keep_newlines=True)) from None

    def _plugin_commands(self) -> dict[str, Any]:
        disabled = disabled_backends()
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
    rows: list[dict[str, Any]] = [
        {
            "name": r.name,
            "version": r.version,
            "vendors": list(r.info.vendors),
            "hooks": list(r.hooks),
            "description": r.info.description,
            # what runs the vendor's nodes (charts/hami/backends.yaml is made from these)
            "hamiDevicePlugin": r.serves_nodes,
            "vendorDevicePlugin": r.info.vendor_device_plugin,
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
        if row["vendorDevicePlugin"]:
            click.echo(f"  nodes: {row['vendorDevicePlugin']}")


def _start_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )


@cli.command()
@click_options(SchedulerOptions)
@LOG_LEVEL_OPTION
def scheduler(log_level: str, **opts: Any) -> None:
    """Run the kube-scheduler extender (filter, prioritize, bind) against the API server.

    Environment: HAMI_DISABLED_BACKENDS (comma list of backends to skip),
    POD_NAMESPACE (default Lease namespace), KUBECONFIG.
    """
    require_extra("server", "hami scheduler")
    from hami_core.servers.scheduler_main import run_scheduler

    _start_logging(log_level)
    try:
        run_scheduler(SchedulerOptions(**opts))
    except OSError as exc:  # port taken, unreadable or mismatched certificate files
        raise click.ClickException(f"cannot serve the scheduler extender: {exc}") from exc


@cli.command()
@click_options(WebhookOptions)
@LOG_LEVEL_OPTION
def webhook(log_level: str, **opts: Any) -> None:
    """Run the mutating admission webhook (AdmissionReview v1 and v1beta1 at /webhook,
    HTTPS only).

    Pods asking for managed devices get schedulerName and the backend defaults; pods
    that break the rules (privileged, nodeName preset, bad quantities, over quota) are
    denied with the reason. Environment: HAMI_DISABLED_BACKENDS, POD_NAMESPACE,
    KUBECONFIG.
    """
    require_extra("server", "hami webhook")
    from hami_core.servers.webhook_main import run_webhook

    _start_logging(log_level)
    try:
        run_webhook(WebhookOptions(**opts))
    except OSError as exc:  # port taken, unreadable or mismatched certificate files
        raise click.ClickException(f"cannot serve HTTPS: {exc}") from exc


@cli.command()
@click_options(MonitorOptions)
@LOG_LEVEL_OPTION
def monitor(log_level: str, **opts: Any) -> None:
    """Run the node monitor: per-container device usage from the usage files under
    --containers-dir (NVIDIA: the shim's shared regions), host figures from the
    driver (NVML), served as Prometheus metrics under HAMi's names on :9394/metrics.

    Only live processes count. Usage files are tenant-written: links, FIFOs, files
    of the wrong size or format are skipped (hami_monitor_usage_files_skipped_total).
    hami-nvidia loads libnvidia-ml.so.1 through the dynamic loader (LD_LIBRARY_PATH).
    """
    require_extra("server", "hami monitor")
    from hami_core.servers.monitor import run_monitor

    _start_logging(log_level)
    try:
        run_monitor(MonitorOptions(**opts))
    except OSError as exc:  # port in use
        raise click.ClickException(f"cannot serve the monitor: {exc}") from exc


@cli.command()
@click.argument("nodes", nargs=-1)
@click_options(TopOptions)
def top(nodes: tuple[str, ...], **opts: Any) -> None:
    """Show the cluster's accelerators: per node and device the memory and compute
    allocated of what is schedulable, memory in use and utilization (with
    --prometheus), sharers, the pods holding each device, health, and what is free.

    NODES limits the view to those nodes. Reads the API server (KUBECONFIG) unless
    --snapshot or --example is given.
    """
    from hami_core import top as view_
    from hami_core.simulate.runner import bundled_examples, make_manager

    o = TopOptions(**opts)
    try:
        manager = make_manager(o.config)
    except HamiError as exc:
        raise failure(exc) from exc

    warnings: list[str] = []  # the snapshot's, said once, before the first frame

    def frame() -> str:
        if o.example:
            store = view_.cluster_from_file(bundled_examples() / "snapshot.yaml", manager)
        elif o.snapshot:
            store = view_.cluster_from_file(o.snapshot, manager, warnings=warnings)
        else:
            store = view_.cluster_from_api(o.kubeconfig)
        measured = view_.Measured()
        if o.monitor:
            measured = view_.from_monitors(o.monitor)
        if o.prometheus:  # besides the monitors' figures, where they have none
            prom = view_.from_prometheus(o.prometheus)
            measured = view_.Measured(
                devices={**prom.devices, **measured.devices},
                pods={**prom.pods, **measured.pods},
                source=measured.source or prom.source,
                unreachable=(*measured.unreachable, *prom.unreachable),
            )
        result = view_.build_view(
            store,
            manager,
            usage=measured.devices,
            nodes=nodes,
            selector=o.selector,
            vendor=o.vendor,
            namespace=o.namespace,
            sort_by=o.sort_by,
            pod_usage=measured.pods,
            usage_source=measured.source,
            unreachable=measured.unreachable,
        )
        if o.output == "json":
            return view_.render_json(result)
        return view_.render_table(result, wide=o.output == "wide")

    try:
        first = frame()  # a bad flag or an unreachable cluster fails before any redraw
    except HamiError as exc:
        raise failure(exc) from exc
    _warn(warnings)
    if o.watch is None:
        click.echo(first, nl=False)
        return
    from hami_core.top.watch import watch

    watch(frame, o.watch)


@cli.command("device-plugin")
@click_options(DevicePluginOptions)
@LOG_LEVEL_OPTION
def device_plugin(log_level: str, **opts: Any) -> None:
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
    from hami_core.servers.deviceplugin_main import run_device_plugin

    _start_logging(log_level)
    try:
        run_device_plugin(DevicePluginOptions(**opts))
    except OSError as exc:  # socket directory missing, path too long
        raise click.ClickException(f"cannot serve the device plugin: {exc}") from exc


@cli.command()
@click.argument("workloads", nargs=-1, type=click.Path(exists=True))
@click_options(SimulateOptions)
def simulate(workloads: tuple[str, ...], **opts: Any) -> None:
    """Place workloads on a cluster, as the scheduler would, without a cluster.

    Every pod of WORKLOADS (files or directories of Pod, Deployment, StatefulSet,
    ReplicaSet and Job manifests; directories are read recursively, in name order) goes
    through the webhook, filter, prioritize, bind and allocate, in order, on an embedded
    copy of the cluster. Prints where each pod landed with its GPUs, MiB and cores, why
    the others did not fit, how full each GPU is, and a summary.

    With no arguments, runs the bundled example (examples/cluster.yaml and
    examples/workloads); with only --cluster, the bundled workloads run on that cluster;
    with only WORKLOADS, they run on the bundled cluster. Runs of more than 200 pods
    show progress on stderr. Unschedulable pods are a result: the exit status is 0; a bad
    configuration exits 2 (as the servers do), other bad input 1, with a one-line
    message.
    """
    from hami_core.simulate import report, runner

    o = SimulateOptions(**opts)

    def progress(n: int) -> Any:
        return click.progressbar(length=n, label=f"simulating {n} pods", file=sys.stderr)

    try:
        sim = runner.run_files(
            cluster_path=o.cluster,
            workload_paths=list(workloads),
            config_path=o.config,
            node_policy=o.node_policy,
            device_policy=o.gpu_policy,
            explain=o.explain,
            progress=progress,
            force_overwrite_default_scheduler=o.force_overwrite_default_scheduler,
        )
        if o.explain is not None:
            data = report.build_explanation(sim, o.explain)
            text = report.render_explanation(data)
        else:
            data = report.build_report(sim)
            text = report.render_text(data, warnings=False)
    except HamiError as exc:
        raise failure(exc) from None
    if not _echo_structured(data, o.output):
        # names come from the snapshot and the workloads: nothing they hold may act on
        # the terminal (JSON and YAML escape it themselves)
        for warning in data.get("warnings") or ():
            click.echo(f"warning: {shown_text(str(warning), WARNING_SHOWN)}", err=True)
        click.echo(text, nl=False)


@cli.command()
@click_options(DefragOptions)
def defrag(**opts: Any) -> None:
    """Plan moves after which pending pods fit (a dry run: nothing is evicted).

    Reads the cluster from the API server (KUBECONFIG) or --snapshot. Pending pods are
    taken highest priority first; one that fits nowhere gets the fewest moves of movable
    pods (owned by a ReplicaSet, StatefulSet or a Job with restarts left, allowed by
    their PodDisruptionBudgets, of priority not above it, not opted out with the
    annotation hami.io/defrag: never or by a protected namespace) after which it fits,
    each evicted pod re-placed by the scheduler's own fit. Prints per move the pod, its
    GPUs before and after, and each changed GPU's load (docs/consolidation.md).
    """
    from hami_core.defrag import render, sources
    from hami_core.defrag.goal import parse_goal
    from hami_core.defrag.movable import MovePolicy, pod_key
    from hami_core.defrag.planner import Planner, policy_overrides
    from hami_core.simulate.runner import make_manager

    o = DefragOptions(**opts)
    try:
        goal = parse_goal(o.goal) if o.goal is not None else None
        if goal is not None and o.pod:
            raise ConfigError("--goal and --pod: plan for a goal or for pods, not both")
        manager = make_manager(o.config)
        if o.apply and goal is not None:
            raise ConfigError("--apply carries out plans for pending pods; --goal only plans")
        if o.apply:
            _apply_plan(o, manager)
            return
        read = (
            sources.from_file(o.snapshot, manager)
            if o.snapshot
            else sources.from_api(o.kubeconfig, manager)
        )
        policy = MovePolicy.build(
            protected_namespaces=o.protect_namespace,
            namespace_labels=read.namespace_labels,
            budgets=read.budgets,
            jobs=read.jobs,
        )
        pending = list(read.pending)
        if o.pod:
            for ref in o.pod:
                if ref in read.refused:
                    raise InvalidInputError(
                        f"--pod {ref}: the snapshot's Pod was refused (no API server could "
                        f"have stored it), so nothing is planned for it: {read.refused[ref]}"
                    )
            known = {pod_key(p): p for p in pending}
            missing = [ref for ref in o.pod if ref not in known]
            if missing:
                raise InvalidInputError(f"not a pending pod of the scheduler: {', '.join(missing)}")
            pending = [known[ref] for ref in o.pod]
        planner = Planner(
            read.cluster,
            manager,
            policy,
            **policy_overrides(o.node_policy, o.gpu_policy),
            max_nodes=o.max_nodes,
            max_moves_per_pod=o.max_moves,
        )
        plan = planner.plan_goal(goal) if goal is not None else planner.plan(pending)
    except HamiError as exc:
        raise failure(exc) from None
    if o.output == "json":
        click.echo(render.render_json(plan, refused=read.refused), nl=False)
    else:
        for warning in read.warnings:
            if goal is not None and "no pending pods" in warning:
                continue  # a goal plan reads none
            click.echo(f"warning: {shown_text(str(warning), WARNING_SHOWN)}", err=True)
        click.echo(render.render_text(plan), nl=False)


def _warn(warnings: Iterable[str]) -> None:
    """Each of a snapshot's warnings on stderr, printable and bounded (stdout stays the
    answer: -o json is JSON)."""
    for warning in warnings:
        click.echo(f"warning: {shown_text(str(warning), WARNING_SHOWN)}", err=True)


def _apply_plan(o: DefragOptions, manager: Any) -> None:
    """``hami defrag --apply``: carry plans out (``defrag.apply``) and print each step."""
    from hami_core.defrag.apply import ApplyLimits
    from hami_core.defrag.live import api_applier
    from hami_core.defrag.planner import policy_overrides
    from hami_core.defrag.render import render_apply

    if o.snapshot:
        raise ConfigError("--apply acts on the API server's cluster, not on --snapshot")
    applier = api_applier(
        manager,
        kubeconfig=o.kubeconfig,
        ledger=o.ledger,
        ledger_flag="--ledger",
        limits=ApplyLimits(
            max_evictions=o.max_evictions,
            max_evictions_per_hour=o.max_evictions_per_hour,
            budget_wait_s=o.budget_wait_s,
            replacement_wait_s=o.replacement_wait_s,
        ),
        protected_namespaces=o.protect_namespace,
        planner_options={
            **policy_overrides(o.node_policy, o.gpu_policy),
            "max_nodes": o.max_nodes,
            "max_moves_per_pod": o.max_moves,
        },
    )
    report = applier.run(list(o.pod) or None)
    if o.output == "json":
        click.echo(json.dumps(render_apply(report), indent=2))
        return
    for step in report.steps:
        m = step.move
        click.echo(
            f"{step.result}: {shown_text(m.pod, WARNING_SHOWN)} from {m.from_node} "
            f"({', '.join(m.from_gpus)}), planned on {m.to_node} ({', '.join(m.to_gpus)}), "
            f"for {shown_text(m.for_pod, WARNING_SHOWN)}"
        )
    for pod, why in report.skipped.items():
        click.echo(f"not helped: {shown_text(pod, WARNING_SHOWN)}: {why}")
    click.echo(f"{report.evicted} evicted; stopped: {report.stopped}")


def _echo_structured(data: Any, output: str) -> bool:
    """Print ``data`` as ``--output json`` (indented) or ``yaml`` (keys in order); False
    for any other output (the caller renders its text)."""
    if output == "json":
        click.echo(json.dumps(data, indent=2))
    elif output == "yaml":
        click.echo(yaml.safe_dump(data, sort_keys=False), nl=False)
    else:
        return False
    return True


@cli.command()
@click.argument("pod", metavar="NAMESPACE/POD")
@click_options(ExplainOptions)
def explain(pod: str, **opts: Any) -> None:
    """Say why a pod is Pending, or where it runs (nothing is changed).

    Reads the cluster once from the API server (KUBECONFIG) or --snapshot and asks the
    scheduler's own filter. A Pending pod: its request as the webhook resolved it, per
    node and GPU the filter's reason codes, its namespace's quota (used / hard), the
    largest request that fits now, node locks held by other pods, what preemption would
    evict for it and what consolidation (hami defrag) would move, or why nothing. A
    bound pod: its node, GPUs, slices, mode (shim, MIG profile, MPS), priority, group.

    Exit status: 0 placed; 3 pending (with its reason); 4 not ours (another scheduler's
    pod, or one asking no managed device); 1 not found, finished or another error; 2 a
    bad configuration.
    """
    from hami_core import explain as explain_
    from hami_core.explain import sources
    from hami_core.explain.engine import parse_ref
    from hami_core.explain.oneshot import paused_collector
    from hami_core.simulate.runner import make_manager

    o = ExplainOptions(**opts)
    try:
        parse_ref(pod)  # a pod no API server could hold: said before the cluster is read
        manager = make_manager(o.config)
        with paused_collector():  # read once, answer, exit: nothing to collect
            if o.snapshot:
                read, lookup = sources.from_file(o.snapshot, manager)
            else:
                read, lookup = sources.from_api(o.kubeconfig, manager)
            data = explain_.explain(
                read, manager, pod, lookup=lookup, protected_namespaces=o.protect_namespace
            )
    except HamiError as exc:
        raise failure(exc) from None
    _warn(w for w in read.warnings if "no pending pods of" not in w)  # what it left out
    if not _echo_structured(data, o.output):
        click.echo(explain_.render_text(data), nl=False)
    sys.exit(explain_.exit_code(data))


@cli.command()
@click_options(UiOptions)
@LOG_LEVEL_OPTION
def ui(log_level: str, **opts: Any) -> None:
    """Serve the web view: nodes, GPUs and each pod's slice drawn as bars of memory and
    compute, each GPU's mode and MIG instances, namespaces with quota used / hard,
    pending pods with hami explain's reason, live usage with --prometheus. Refreshes
    itself; read-only (GET and HEAD only).

    Listens on 127.0.0.1:8090 (reach it with kubectl port-forward). Off loopback, every
    viewer needs a bearer token the API server accepts and sees only the namespaces it
    may list pods in, as kubernetes-dashboard does.
    """
    require_extra("server", "hami ui")
    from hami_core.simulate.runner import make_manager
    from hami_core.ui.main import run_ui

    _start_logging(log_level)
    o = UiOptions(**opts)
    try:
        manager = make_manager(o.config)
        run_ui(o, manager)
    except HamiError as exc:
        raise failure(exc) from None
    except OSError as exc:  # port taken, unreadable certificate files
        raise click.ClickException(
            f"cannot serve the web view (--address {o.address}, --port {o.port}): {exc}"
        ) from exc


def main() -> None:
    """Entry point: run the CLI, turning hami errors into a one-line message, exit 2.

    A bad configuration (``ConfigError``: the ``--config`` file, a per-node file, flags
    that contradict each other) exits 2 from every command (``ConfigFailure``);
    ``simulate`` and ``top`` exit 1 for other bad input (a workload file, an
    unreachable API server).
    """
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
        click.echo(f"error: {printable(str(exc), keep_newlines=True)}", err=True)
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
