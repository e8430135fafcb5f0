"""The settings of the client commands, ``hami top`` and ``hami simulate``, each stated
once, and ``all_commands``: every command with generated options (the server
processes' classes are in ``hami_core.servers.options``, which also holds the setting
builders both kinds share; the machinery is ``hami_core.settings``, whose docstring
says where a new setting goes). Their positional arguments (NODES, WORKLOADS) stay with
the commands."""

from __future__ import annotations

from collections.abc import Mapping

import attrs
import click

from hami_core.defrag.ledger import DEFAULT_LOCATION as DEFAULT_LEDGER
from hami_core.model import DEVICE_POLICY_TOKENS
from hami_core.servers.options import (
    address_text,
    config_file_setting,
    force_overwrite_setting,
    kubeconfig_setting,
    label_pairs,
    labels_valid,
    namespace_valid,
    object_name_valid,
    policy_text,
)
from hami_core.settings import setting


@attrs.frozen(kw_only=True)
class TopOptions:
    """The settings of ``hami top`` (``hami top --help``)."""

    kubeconfig: str | None = kubeconfig_setting("(nodes and pods, listed once)")
    config: str | None = config_file_setting("the scheduler name and backend sections")
    snapshot: str | None = setting(
        None,
        kind=click.Path(dir_okay=False),
        help="Read nodes and pods from this file instead of the API server: a "
        "`kubectl get nodes,pods -A -o yaml` snapshot, or a cluster file of hami simulate.",
    )
    example: bool = setting(
        False, help="Show the bundled example snapshot (examples/snapshot.yaml)."
    )
    prometheus: str | None = setting(
        None,
        metavar="URL",
        help="Prometheus that scrapes `hami monitor`: adds memory in use and utilization "
        "per device (NVML) and, with -o wide, per pod (the shim's figures); n/a with the "
        "reason when it cannot be read.",
    )
    monitor: tuple[str, ...] = setting(
        (),
        multiple=True,
        metavar="URL",
        show_default="none",
        help="A node monitor's metrics page to read the same figures from directly, e.g. "
        "http://NODE:9394/metrics (repeatable; through kubectl port-forward or the "
        "monitor's Service); one that cannot be read shows n/a with the reason.",
    )
    output: str = setting(
        "table",
        flag=("--output", "-o"),
        choices=("table", "wide", "json"),
        help="wide: every pod of a device; json: machine-readable.",
    )
    sort_by: str = setting(
        "node",
        flag=("--sort-by", "--sort"),
        choices=("node", "memory", "free", "cores", "used", "sharers"),
        help="Order of devices and nodes (and of -o wide's pods, by their devices): node "
        "name, allocated memory, free memory, allocated compute, used memory, sharers; "
        "all but node largest first.",
    )
    selector: Mapping[str, str] = setting(
        factory=dict,
        flag=("--selector", "-l"),
        convert=label_pairs,
        validator=labels_valid("--selector"),
        metavar="KEY=VALUE[,...]",
        help="Only nodes with these labels, e.g. -l gpu=on,zone=a.",
    )
    vendor: str | None = setting(None, help="Only devices of this vendor key, e.g. NVIDIA.")
    namespace: str | None = setting(
        None,
        flag=("--namespace", "-n"),
        help="Only devices holding a pod of this namespace, and only its pods listed.",
        validator=namespace_valid("--namespace"),
    )
    watch: float | None = setting(
        None,
        flag=("--watch", "-w"),
        unit="s",
        min=0.2,
        metavar="SECONDS",
        help="Redraw every SECONDS until q or Ctrl-C (in place on a terminal; as "
        "successive frames through a pipe or TERM=dumb, e.g. kubectl exec without -t).",
    )


@attrs.frozen(kw_only=True)
class SimulateOptions:
    """The settings of ``hami simulate`` (``hami simulate --help``)."""

    cluster: str | None = setting(
        None,
        kind=click.Path(exists=True, dir_okay=False),
        show_default="the bundled examples/cluster.yaml",
        help="The cluster: a simple YAML of nodes and their GPUs, or a "
        "'kubectl get nodes,pods -A -o yaml' snapshot whose existing allocations count.",
    )
    config: str | None = config_file_setting()
    force_overwrite_default_scheduler: bool | None = force_overwrite_setting()
    node_policy: str | None = setting(
        None,
        metavar="binpack|spread",
        convert=policy_text("--node-policy"),
        show_default="from config (binpack)",
        help="Node policy for every pod without a hami.io/node-scheduler-policy annotation "
        "(overrides the configuration).",
    )
    gpu_policy: str | None = setting(
        None,
        metavar="POLICY[,POLICY...]",
        convert=policy_text("--gpu-policy"),
        show_default="from config (spread)",
        help="GPU policy for every pod without a hami.io/gpu-scheduler-policy annotation "
        f"(overrides the configuration): {'|'.join(DEVICE_POLICY_TOKENS)}, or an ordered "
        "comma list (spread,numa; mutex,spread).",
    )
    output: str = setting(
        "text",
        flag=("--output", "-o"),
        choices=("text", "json", "yaml"),
        help="text for people (warnings on stderr); json or yaml for the same report as data "
        "(keys documented in hami_core/simulate/report.py), with what the webhook changed "
        "and what the device plugin gives each container.",
    )
    explain: str | None = setting(
        None,
        metavar="POD",
        help="Print only the reasoning for one pod (NAMESPACE/NAME, or NAME when unique): "
        "its request, policies, per node the outcome and per GPU the reason, the node "
        "scores and the chosen GPUs.",
    )


@attrs.frozen(kw_only=True)
class DefragOptions:
    """The settings of ``hami defrag`` (``hami defrag --help``)."""

    kubeconfig: str | None = kubeconfig_setting(
        "(nodes, pods, PodDisruptionBudgets, Jobs, namespaces, listed once)"
    )
    config: str | None = config_file_setting("the scheduler name and backend sections")
    snapshot: str | None = setting(
        None,
        kind=click.Path(exists=True, dir_okay=False),
        help="Read the cluster from this file instead of the API server: a `kubectl get "
        "nodes,pods,pdb,jobs,namespaces -A -o yaml` snapshot.",
    )
    pod: tuple[str, ...] = setting(
        (),
        multiple=True,
        metavar="NAMESPACE/NAME",
        show_default="every pending pod of the scheduler",
        help="Plan for this pending pod only (repeatable).",
        validator=object_name_valid("--pod", any_name=True),
    )
    goal: str | None = setting(
        None,
        metavar="whole-gpus=N[,model=M][,priority=P]",
        show_default="plan for the pending pods",
        help="Plan for N whole free GPUs (no sharer), of model M (whole words, as "
        "nvidia.com/use-gputype) or any, moving pods of priority up to P (default 0), "
        "instead of for pending pods (docs/consolidation.md).",
    )
    protect_namespace: tuple[str, ...] = setting(
        ("kube-system",),
        multiple=True,
        metavar="NAMESPACE",
        show_default="kube-system",
        help="A namespace whose pods never move (repeatable; giving any replaces the "
        "default). A namespace labelled hami.io/defrag=never is protected too.",
        validator=namespace_valid("--protect-namespace"),
        why="system pods are few and their moves disturb every tenant",
    )
    node_policy: str | None = setting(
        None,
        metavar="binpack|spread",
        convert=policy_text("--node-policy"),
        show_default="from config (binpack)",
        help="Node policy of the scheduler whose placements are planned.",
    )
    gpu_policy: str | None = setting(
        None,
        metavar="POLICY[,POLICY...]",
        convert=policy_text("--gpu-policy"),
        show_default="from config (spread)",
        help="GPU policy of the scheduler whose placements are planned.",
    )
    max_moves: int = setting(
        8,
        min=1,
        max=64,
        help="Most moves planned for one pending pod.",
        why="a pod that needs more moves than this is better served by a new node",
    )
    max_nodes: int = setting(
        16,
        min=1,
        max=10000,
        help="Nodes tried per pending pod that fits nowhere (cheapest estimate first).",
        why="bounds plan time on large clusters (2 s at 1000 nodes, docs/performance.md)",
    )
    apply: bool = setting(
        False,
        help="Carry the plan out: evict through the Eviction API one move at a time, "
        "re-planning after each, the freed room held for the pod it was freed for "
        "(docs/consolidation.md). The default (--no-apply) is a dry run.",
        why="an eviction cannot be undone: carrying a plan out is asked for by name",
    )
    max_evictions: int = setting(
        8,
        min=0,
        max=1000,
        help="With --apply: evictions in this run at most; a pod whose plan needs more "
        "is not started.",
        why="bounds what one run can disturb",
    )
    max_evictions_per_hour: int = setting(
        20,
        min=0,
        max=10000,
        help="With --apply: evictions by consolidation in any hour at most (every run and "
        "scheduler leader, counted in the ledger).",
        why="bounds the churn consolidation causes, whoever runs it",
    )
    budget_wait_s: float = setting(
        30.0,
        flag="--budget-wait",
        unit="seconds",
        min=0,
        max=3600,
        help="With --apply: how long a PodDisruptionBudget's refusal (429) is asked again "
        "before that pod's plan stops (never forced).",
        why="a budget often allows the disruption again once a replacement is ready",
    )
    replacement_wait_s: float = setting(
        30.0,
        flag="--replacement-wait",
        unit="seconds",
        min=0,
        max=3600,
        help="With --apply: how long the run waits for moved pods' replacements, to "
        "nominate each to the node the plan found for it.",
        why="a controller creates the replacement within seconds of the eviction",
    )
    ledger: str = setting(
        DEFAULT_LEDGER,
        metavar="NAMESPACE/NAME",
        help="With --apply: the ConfigMap recording consolidation's evictions and plans in "
        "progress (shared with the scheduler's --consolidation-ledger).",
        validator=object_name_valid("--ledger"),
        why="a record tenants cannot write: the hour's count and plans in progress",
    )
    output: str = setting(
        "text",
        flag=("--output", "-o"),
        choices=("text", "json"),
        help="json: machine-readable (keys documented in hami_core/defrag/render.py).",
    )


@attrs.frozen(kw_only=True)
class ExplainOptions:
    """The settings of ``hami explain`` (``hami explain --help``)."""

    kubeconfig: str | None = kubeconfig_setting(
        "(nodes, pods, quotas, PodDisruptionBudgets, Jobs, namespaces, listed once)"
    )
    config: str | None = config_file_setting("the scheduler name and backend sections")
    snapshot: str | None = setting(
        None,
        kind=click.Path(exists=True, dir_okay=False),
        help="Read the cluster from this file instead of the API server: a `kubectl get "
        "nodes,pods,resourcequotas,pdb,jobs,namespaces -A -o yaml` snapshot.",
    )
    protect_namespace: tuple[str, ...] = setting(
        ("kube-system",),
        multiple=True,
        metavar="NAMESPACE",
        show_default="kube-system",
        help="A namespace whose pods consolidation never moves (as hami defrag's).",
        validator=namespace_valid("--protect-namespace"),
        why="system pods are few and their moves disturb every tenant",
    )
    output: str = setting(
        "text",
        flag=("--output", "-o"),
        choices=("text", "json", "yaml"),
        help="json / yaml: machine-readable (keys documented in hami_core/explain/engine.py).",
    )


@attrs.frozen(kw_only=True)
class UiOptions:
    """The settings of ``hami ui`` (``hami ui --help``)."""

    kubeconfig: str | None = kubeconfig_setting(
        "(nodes, pods, quotas listed each refresh; TokenReview and SubjectAccessReview "
        "when a token is required)"
    )
    config: str | None = config_file_setting("the scheduler name and backend sections")
    snapshot: str | None = setting(
        None,
        kind=click.Path(dir_okay=False),
        help="Read the cluster from this file instead of the API server (re-read each "
        "refresh): a `kubectl get nodes,pods,resourcequotas -A -o yaml` snapshot.",
    )
    prometheus: str | None = setting(
        None,
        metavar="URL",
        help="Prometheus that scrapes `hami monitor`: adds memory in use and utilization per GPU.",
    )
    address: str = setting(
        "127.0.0.1",
        convert=address_text("--address"),
        help="Address to listen on. Off loopback every viewer needs a bearer token the API "
        "server accepts (TokenReview) and sees only the namespaces it may list pods in "
        "(SubjectAccessReview).",
        why="reach it with kubectl port-forward; exposing it is a choice",
    )
    port: int = setting(8090, min=0, max=65535, help="Port to listen on (0: any free one).")
    require_token: bool = setting(
        False, help="Ask for a bearer token on loopback too (always asked off loopback)."
    )
    tls_cert_file: str | None = setting(
        None, help="Serve HTTPS with this certificate (PEM); with --tls-private-key-file."
    )
    tls_private_key_file: str | None = setting(None, help="The certificate's key (PEM).")
    refresh: float = setting(
        5.0,
        unit="s",
        min=1.0,
        help="Seconds between readings of the cluster (one reading serves every viewer) "
        "and between the page's polls.",
        why="a reading lists every node and pod: seconds, not milliseconds",
    )
    pending_limit: int = setting(
        50,
        min=0,
        help="Pending pods explained at most per reading (each is run through the filter).",
        why="each explanation fits the pod on every node",
    )


def all_commands() -> tuple[tuple[str, type], ...]:
    """Every command with generated options and its class, for docs/settings.md."""
    from hami_core.servers.options import COMMANDS

    return (
        *COMMANDS,
        ("hami top", TopOptions),
        ("hami simulate", SimulateOptions),
        ("hami defrag", DefragOptions),
        ("hami explain", ExplainOptions),
        ("hami ui", UiOptions),
    )
