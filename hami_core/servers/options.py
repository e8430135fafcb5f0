"""The settings of the four server processes, each stated once: default, flag, help,
unit, environment variable and why that default (``hami_core.settings``). ``hami
scheduler|webhook|monitor|device-plugin`` generate their options from these classes,
and the processes take an instance. Also the setting builders every command shares
(``kubeconfig_setting``, ``config_file_setting``, ``force_overwrite_setting``,
``policy_text``, ``label_pairs``): the client commands' settings
(``hami_core.options``) are built from them. Imports nothing of the server extras, so
``--help`` works without them and the client commands may import it (a test holds it).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any, Literal

import attrs

from hami_core.defrag.ledger import DEFAULT_LOCATION as DEFAULT_LEDGER
from hami_core.errors import ConfigError, InvalidInputError
from hami_core.facts.policy import device_policy_option, node_policy_option
from hami_core.model import DEVICE_POLICY_TOKENS
from hami_core.protocol.config import (
    is_dns_subdomain,
    label_key_problem,
    label_value_problem,
    namespace_problem,
    namespaced_name_problem,
)
from hami_core.protocol.documents import shown
from hami_core.protocol.nodeconfig import MIG_STRATEGIES
from hami_core.servers.address import listen_host, split_host_port
from hami_core.settings import setting

#: kubelet's device-plugin directory (k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1
#: ``DevicePluginPath``).
DEFAULT_PLUGIN_DIR = "/var/lib/kubelet/device-plugins"

#: kube-scheduler 1.20's extender timeout (``DefaultExtenderTimeout``), seconds.
EXTENDER_TIMEOUT_S = 5.0
#: ``hami scheduler --filter-answer``: the best node only, or every node that fits.
FILTER_ANSWERS = ("best", "all")


def label_pairs(value: str) -> dict[str, str]:
    """``"gpu=on,zone=a"`` -> ``{"gpu": "on", "zone": "a"}``: HAMi's StringToString form,
    which is also a Kubernetes equality-based label selector (``kubectl -l``); ``""``
    selects everything. Each key and value must be one a label can have
    (``label_problem``).

    Raises:
        InvalidInputError: an empty item (``a=b,``), an item without ``=`` or with a key
            or value no label can have (``a=b=c``: the value ``b=c``; ``a!=b``: the key
            ``a!``), or a key given twice.
    """
    out: dict[str, str] = {}
    if not (value or "").strip():
        return out
    for item in (i.strip() for i in value.split(",")):
        key, sep, val = item.partition("=")
        key, val = key.strip(), val.strip()
        if not sep or not key:
            raise InvalidInputError(f"{shown(item)} is not key=value")
        if key in out:
            raise InvalidInputError(f"{shown(item)}: the key {shown(key)} is given twice")
        problem = label_problem(key, val)
        if problem:
            raise InvalidInputError(f"{shown(item)}: {problem}")
        out[key] = val
    return out


def label_problem(key: str, value: str) -> str | None:
    """Why ``key=value`` cannot be a label (``protocol.config.label_key_problem`` and
    ``label_value_problem``: what kube-apiserver validates), or None when it can."""
    problem = label_key_problem(key)
    if problem:
        return f"the key {shown(key)} {problem}"
    problem = label_value_problem(value)
    if problem:
        return f"the value {shown(value)} {problem}"
    return None


def labels_valid(option: str) -> Callable[[Any, Any, Mapping[str, str]], None]:
    """The attrs validator of a label-selector setting (``label_pairs``' mapping): one
    built by code is refused at start too, with the option named."""

    def validate(_obj: Any, _attr: Any, value: Mapping[str, str]) -> None:
        for key, val in value.items():
            problem = label_problem(str(key), str(val))
            if problem:
                raise ConfigError(f"{option}: {problem}")

    return validate


def namespace_valid(option: str) -> Callable[[Any, Any, str | tuple[str, ...] | None], None]:
    """The attrs validator of a namespace setting (one name, None for unset, or a tuple of
    names for a repeatable flag): each must be a namespace kube-apiserver can hold (a
    DNS-1123 label, ``protocol.config.namespace_problem``); refused at start, before
    the API server is reached, with the option named (``-n ''`` matched nothing)."""

    def validate(_obj: Any, _attr: Any, value: str | tuple[str, ...] | None) -> None:
        for name in (value,) if isinstance(value, str) else value or ():
            problem = namespace_problem(str(name))
            if problem:
                raise ConfigError(f"{option}: {shown(name)} {problem}")

    return validate


def policy_text(option: str) -> Callable[[str | None], str | None]:
    """A ``--node-policy`` / ``--gpu-policy`` value checked as its annotation is read
    (``hami_core.facts.policy``), kept as given.

    Raises:
        InvalidInputError: a bad token; the message starts with ``option``.
    """
    read = node_policy_option if option == "--node-policy" else device_policy_option

    def check(value: str | None) -> str | None:
        if value is not None:
            read(value, option)
        return value

    return check


def _policy_valid(option: str) -> Callable[[Any, Any, str | None], None]:
    """The attrs validator of a policy setting: options built by code are refused at
    start too, with the option named."""
    check = policy_text(option)

    def validate(_obj: Any, _attr: Any, value: str | None) -> None:
        try:
            check(value)
        except InvalidInputError as exc:
            raise ConfigError(str(exc)) from None

    return validate


def object_name_valid(
    option: str, *, prefix: str = "", any_name: bool = False
) -> Callable[[Any, Any, str | tuple[str, ...] | None], None]:
    """The attrs validator of a ``NAMESPACE/NAME`` setting (one value, None for unset, or
    a tuple for a repeatable flag: one slash, a namespace and an object name the API
    server accepts): refused at start, before the API server is reached, with the
    option named. ``prefix``: only a value starting with it names an object (after it,
    e.g. ``secret:NAMESPACE/NAME``); any other value is something else (a file path).
    ``any_name``: the name is only looked up, so any non-empty one will do (the
    namespace is still checked: ``protocol.config.namespaced_name_problem``)."""

    def validate(_obj: Any, _attr: Any, value: str | tuple[str, ...] | None) -> None:
        for ref in (value,) if isinstance(value, str) else value or ():
            if not str(ref).startswith(prefix):
                continue
            problem = namespaced_name_problem(str(ref)[len(prefix) :], any_name=any_name)
            if problem:
                raise ConfigError(f"{option}: {shown(ref)} {problem}")

    return validate


def kubeconfig_setting(uses: str = "") -> str | None:
    """``--kubeconfig`` (env ``KUBECONFIG``); ``uses`` says what is read, e.g. "(quotas)"."""
    return setting(  # type: ignore[no-any-return]
        None,
        env="KUBECONFIG",
        show_default="in-cluster config, else ~/.kube/config",
        help=f"kubeconfig file for the API server{' ' + uses if uses else ''}.",
    )


def config_file_setting(
    details: str = "", *, hami: bool = False, hami_flag: str = "--device-config-file"
) -> str | None:
    """``--config`` (env ``HAMI_CONFIG``): the hami configuration file; ``hami``: also
    HAMi's name for it, ``hami_flag``: ``--device-config-file`` (its chart passes
    ``--device-config-file=/device-config.yaml`` to the scheduler binary, which serves the
    webhook too) or the device plugin's ``--config-file`` (the same file:
    ``charts/hami/templates/device-plugin/daemonsetnvidia.yaml``)."""
    return setting(  # type: ignore[no-any-return]
        None,
        flag=("--config", hami_flag) if hami else "--config",
        env="HAMI_CONFIG",
        show_default="built-in defaults",
        help=f"hami configuration file (YAML, version v1){': ' + details if details else ''}.",
    )


#: How ``--config`` names HAMi's spelling of it.
HAMI_CONFIG_FLAG = "--device-config-file is HAMi's name for it"


def scheduler_name_setting() -> str | None:
    """``--scheduler-name``: overrides the configuration's ``schedulerName``. HAMi's flag
    (``cmd/scheduler/main.go``: the name the webhook writes into ``spec.schedulerName``)."""
    return setting(  # type: ignore[no-any-return]
        None,
        convert=_scheduler_name,
        show_default="from config (hami-scheduler)",
        help="The scheduler name: the one the webhook writes into pods' spec.schedulerName "
        "and whose bound pods the scheduler counts. Overrides the configuration's "
        "schedulerName (HAMi's flag).",
    )


def _scheduler_name(value: str | None) -> str | None:
    if value is not None and not is_dns_subdomain(value):
        raise ValueError(f"{shown(value)} is not a DNS-1123 subdomain (a pod's schedulerName)")
    return value


def address_text(flag: str, *, port: bool = False) -> Callable[[str | None], str | None]:
    """The ``convert`` of an address setting (``servers.address``): the host to bind,
    an IPv6 address's brackets dropped (``[::1]`` -> ``::1``); ``port``: Go's
    ``HOST:PORT`` is taken too and kept as given (the options' ``resolved`` splits it).

    Raises:
        ConfigError: not an address to listen on, or a bad port, naming ``flag``.
    """

    def convert(value: str | None) -> str | None:
        if value is None:
            return None
        if port:
            split_host_port(value, flag)
            return value
        return listen_host(value, flag)

    return convert


def force_overwrite_setting() -> bool | None:
    """``--force-overwrite-default-scheduler`` / ``--no-...`` (or HAMi's
    ``--force-overwrite-default-scheduler=false``): overrides the configuration's
    ``forceOverwriteDefaultScheduler`` (``HamiConfig.force_overwrite_default_scheduler``);
    None when not given. HAMi's flag: ``cmd/scheduler/main.go``, default true."""
    return setting(  # type: ignore[no-any-return]
        None,
        show_default="from config (on)",
        help="Take pods whose schedulerName is default-scheduler (kube-apiserver's default "
        "for a pod naming none) and set ours; --no-force-overwrite-default-scheduler (HAMi: "
        "--force-overwrite-default-scheduler=false) leaves them to kube's scheduler, so only "
        "pods naming our scheduler get devices. Overrides the configuration's "
        "forceOverwriteDefaultScheduler.",
        why="HAMi's default (true): GPU pods need no schedulerName of their own.",
    )


@attrs.frozen(kw_only=True)
class SchedulerOptions:
    """The settings of ``hami scheduler`` (``hami scheduler --help``)."""

    bind_address: str = setting(
        "127.0.0.1",
        convert=address_text("--bind-address"),
        help="Address of the extender. Loopback by default: the extender has no "
        "authentication of its own (it runs beside kube-scheduler, e.g. as a sidecar); to "
        "listen elsewhere, use --tls-cert-file with --tls-client-ca-file.",
        why="an open address would let anyone bind pods (issue #12 item 3).",
    )
    metrics_bind_address: str = setting(
        "0.0.0.0",
        convert=address_text("--metrics-bind-address", port=True),
        help="Address of the Prometheus metrics server (read-only). HAMi's HOST:PORT form "
        "(its chart's :9395) also sets --metrics-port.",
    )
    http_bind: str | None = setting(
        None,
        flag="--http_bind",
        convert=address_text("--http_bind", port=True),
        metavar="HOST:PORT",
        show_default="--bind-address and --port",
        help="HAMi's spelling of --bind-address and --port together (cmd/scheduler/main.go; "
        "its chart passes 0.0.0.0:443 with --cert_file).",
    )
    port: int = setting(
        8888,
        min=1,
        max=65535,
        help="Extender port (/filter, /prioritize, /score, /bind, /healthz, /readyz, /-/backends).",
    )
    metrics_port: int = setting(9395, min=1, max=65535, help="Prometheus metrics port.")
    kubeconfig: str | None = kubeconfig_setting()
    config: str | None = config_file_setting(HAMI_CONFIG_FLAG, hami=True)
    tls_cert_file: str | None = setting(
        None,
        flag=("--tls-cert-file", "--cert_file"),
        help="Serve the extender over HTTPS with this certificate (PEM); --cert_file is "
        "HAMi's name for it.",
    )
    tls_private_key_file: str | None = setting(
        None,
        flag=("--tls-private-key-file", "--key_file"),
        help="Private key (PEM) of --tls-cert-file; --key_file is HAMi's name for it.",
    )
    tls_client_ca_file: str | None = setting(
        None,
        help="With --tls-cert-file: only clients presenting a certificate signed by this CA "
        "(PEM) are served (mutual TLS; give kube-scheduler the client certificate).",
    )
    leader_elect: bool = setting(
        True,
        help="Elect a leader on a coordination.k8s.io/v1 Lease; only the leader binds.",
        why="two replicas binding at once would double-book devices.",
    )
    lease_name: str = setting(
        "hami-scheduler",
        flag=("--lease-name", "--leader-elect-resource-name"),
        help="Name of the Lease (HAMi: --leader-elect-resource-name).",
    )
    lease_namespace: str = setting(
        "kube-system",
        flag=("--lease-namespace", "--leader-elect-resource-namespace"),
        env="POD_NAMESPACE",
        help="Namespace of the Lease (HAMi: --leader-elect-resource-namespace).",
        validator=namespace_valid("--lease-namespace"),
        why="the release's own namespace when the chart sets POD_NAMESPACE.",
    )
    identity: str = setting(
        "", show_default="<hostname>_<pid>", help="This replica's identity in the Lease."
    )
    lease_duration_s: float = setting(
        15.0,
        flag="--lease-duration",
        unit="seconds",
        min=0.1,
        help="How long a follower waits on an unrenewed Lease before taking over.",
        why="client-go's and kube-scheduler's leader-election default.",
    )
    renew_deadline_s: float = setting(
        10.0,
        flag="--renew-deadline",
        unit="seconds",
        min=0.1,
        help="How long a leader keeps acting without a successful renewal.",
        why="client-go's default; under --lease-duration so a leader stops before another starts.",
    )
    retry_period_s: float = setting(
        2.0,
        flag="--retry-period",
        unit="seconds",
        min=0.1,
        help="Time between election rounds.",
        why="client-go's default.",
    )
    follow_lease: str | None = setting(
        None,
        metavar="NAMESPACE/NAME",
        validator=attrs.validators.optional(object_name_valid("--follow-lease")),
        help="With --no-leader-elect: the writes this process makes on its own "
        "(preemption's and consolidation's evictions and nominations, handshakes) only "
        "while this Lease is held by kube-scheduler beside it (holder <hostname>_..., "
        "renewed within its duration); its binds are kube-scheduler's to ask. The chart "
        "passes kube-scheduler's own Lease.",
        why="the extender of every replica runs; only the one whose kube-scheduler leads "
        "may evict, or two would act on one plan (docs/consolidation.md)",
    )
    node_policy: str | None = setting(
        None,
        flag=("--node-policy", "--node-scheduler-policy"),
        metavar="binpack|spread",
        convert=policy_text("--node-policy"),
        validator=_policy_valid("--node-policy"),
        show_default="from config (binpack)",
        help="Default node policy, read as hami.io/node-scheduler-policy is; a pod's "
        "annotation wins. --node-scheduler-policy is HAMi's name for it "
        "(cmd/scheduler/main.go).",
    )
    gpu_policy: str | None = setting(
        None,
        metavar="POLICY[,POLICY...]",
        flag=("--gpu-policy", "--gpu-scheduler-policy"),
        convert=policy_text("--gpu-policy"),
        validator=_policy_valid("--gpu-policy"),
        show_default="from config (spread)",
        help=f"Default device policy: {'|'.join(DEVICE_POLICY_TOKENS)}, or an ordered comma "
        "list as in hami.io/gpu-scheduler-policy (spread,numa; mutex,spread); a pod's "
        "annotation wins. --gpu-scheduler-policy is HAMi's name for it "
        "(cmd/scheduler/main.go).",
    )
    threads: int = setting(
        32,
        min=1,
        max=1024,
        help="Worker threads of the HTTP server.",
        why="a bind waiting for a node lock holds one while it sleeps; /filter must not "
        "queue behind those.",
    )
    filter_answer: str = setting(
        "best",
        choices=FILTER_ANSWERS,
        help="What /filter answers kube-scheduler for a pod asking devices: best, the one "
        "node the pod's node policy ranks first (the node /prioritize would put alone at "
        "the top, reserved for the pod's bind; HAMi's filter answers so), or all, every "
        "node that fits (kube-scheduler's own scores then weigh in through /prioritize).",
        why="kube-scheduler 1.20 calls the extender one pod at a time and skips scoring "
        "when one node is left, so best saves the /prioritize round trip of every pod: "
        "kube-scheduler's pace (docs/performance.md, issue #26).",
    )
    success_events: bool = setting(
        False,
        help="Also write the Normal events FilteringSucceed (on /filter) and BindingSucceed "
        "(on /bind, naming the devices chosen) on every pod placed, as HAMi does; failure "
        "events (FilteringFailed, BindingFailed) are written either way.",
        why="they are two of every placed pod's three Events (kube-scheduler writes "
        "Scheduled): two API writes and two etcd objects a pod, for what Scheduled, the "
        "pod's allocation annotations and hami explain already say (docs/performance.md, "
        "issue #26).",
    )
    bind_lock_wait_s: float = setting(
        2.0,
        flag="--bind-lock-wait",
        unit="seconds",
        min=0,
        help="How long /bind waits for another pod's node lock before failing.",
        why="well under kube-scheduler's extender timeout (the extender's httpTimeout, "
        f"{EXTENDER_TIMEOUT_S:g} s by default in 1.20): a bind cut by the caller is retried "
        "while the first still runs (issue #12 item 9).",
    )
    preemption: bool = setting(
        True,
        help="Slice-aware preemption: a pod asking devices that fits on no node may evict "
        "pods of lower priority (spec.priority, from its PriorityClass) to make room; the "
        "leader chooses and evicts them (docs/preemption-and-gangs.md).",
        why="kube-scheduler cannot preempt for resources it ignores (our devices): it "
        "nominates a node with zero victims and the pod stays Pending.",
    )
    consolidation: bool = setting(
        False,
        help="Continuous consolidation: a pod asking devices that has waited longer than "
        "--consolidation-after with no node may have movable pods moved for it, as hami "
        "defrag --apply does, by the leader (docs/consolidation.md).",
        why="moves disturb running pods: an administrator turns them on",
    )
    consolidation_after_s: float = setting(
        300.0,
        flag="--consolidation-after",
        unit="seconds",
        min=0,
        max=86400,
        help="How long a pod waits (from its creation) before consolidation plans for it.",
        why="most pods find room as others finish; moves are for those that do not",
    )
    consolidation_max_evictions: int = setting(
        4,
        min=1,
        max=1000,
        help="Evictions per consolidation run at most; a plan that needs more is not started.",
        why="bounds what one pending pod can make consolidation disturb",
    )
    consolidation_max_evictions_per_hour: int = setting(
        20,
        min=0,
        max=10000,
        help="Evictions by consolidation in any hour at most (every leader and hami defrag "
        "--apply run, counted in the ledger).",
        why="bounds the churn consolidation causes",
    )
    consolidation_ledger: str = setting(
        DEFAULT_LEDGER,
        metavar="NAMESPACE/NAME",
        help="The ConfigMap recording consolidation's evictions and plans in progress.",
        validator=object_name_valid("--consolidation-ledger"),
        why="a new leader resumes a plan in progress from it, and tenants cannot write it",
    )
    preemption_settle_s: float = setting(
        1.0,
        flag="--preemption-settle",
        unit="seconds",
        min=0,
        max=60,
        help="How long after the filter finds no node the preemption acts.",
        why="kube-scheduler writes its own (zero-victim) nomination right after the "
        "filter's answer; ours must land after it.",
    )
    gang_timeout_s: float = setting(
        60.0,
        flag="--gang-timeout",
        unit="seconds",
        min=1,
        max=3600,
        help="How long a gang group's reservation holds its members' slices before it is "
        "let go (docs/preemption-and-gangs.md).",
        why="a group whose members never bind must not keep other pods' room: the "
        "reservation is bounded.",
    )
    gang_max_members: int = setting(
        256,
        min=1,
        max=10000,
        help="The largest hami.io/gang-min-member a gang group may state.",
        why="the annotation is the pod author's: an unbounded minimum is refused.",
    )
    handshake_period_s: float = setting(
        30.0,
        flag="--handshake-period",
        unit="seconds",
        min=0.1,
        help="Time between the leader's Requesting_ handshakes to each node's device plugin.",
    )
    node_label_selector: Mapping[str, str] = setting(
        factory=dict,
        convert=label_pairs,
        validator=labels_valid("--node-label-selector"),
        metavar="KEY=VALUE[,...]",
        help="key=value[,key=value]: only nodes with these labels are ours (HAMi's flag; the "
        "chart's convention is gpu=on). Others fail the filter with NodeUnregistered.",
    )
    scheduler_name: str | None = scheduler_name_setting()
    force_overwrite_default_scheduler: bool | None = setting(
        None,
        show_default="from config (on)",
        help="Overrides the configuration's forceOverwriteDefaultScheduler. HAMi's scheduler "
        "binary also serves its webhook, so HAMi's chart passes this flag here; the "
        "extender itself never rewrites a pod (hami webhook does).",
    )
    enable_ascend: bool | None = setting(
        None,
        show_default="on when hami-ascend is installed",
        help="HAMi's switch for Ascend (its chart passes --enable-ascend=true): "
        "--enable-ascend=false serves no Ascend device, as HAMI_DISABLED_BACKENDS=ascend.",
    )
    enable_iluvatar: bool | None = setting(
        None,
        show_default="on when hami-iluvatar is installed",
        help="HAMi's switch for Iluvatar, as --enable-ascend.",
    )
    legacy_metrics: bool | None = setting(
        None,
        show_default="off",
        help="Accepted as HAMi's chart passes it (legacy metric names beside the new ones); "
        "our metrics keep HAMi's names already (docs/monitoring.md), so it changes nothing.",
    )

    allocation_signing_key: str | None = setting(
        None,
        env="HAMI_ALLOCATION_SIGNING_KEY",
        metavar="FILE|secret:NAMESPACE/NAME",
        show_default="none: the scheduler stops at start",
        help="The Ed25519 private key every allocation written at bind is signed with "
        "(hami.io/allocation-signature, PROTOCOL.md §4a): a PEM file (PKCS#8), or "
        "secret:NAMESPACE/NAME, a Secret read through the API (data key ed25519.key) and "
        "created with a new key when absent. Required; a malformed key stops the start.",
        why="device plugins serve only allocations that verify: a forged or copied "
        "allocation (a webhook outage, a tenant's PATCH) gets no device.",
        validator=object_name_valid("--allocation-signing-key", prefix="secret:"),
    )
    allocation_public_keys_configmap: str | None = setting(
        None,
        env="HAMI_ALLOCATION_PUBLIC_KEYS_CONFIGMAP",
        metavar="NAMESPACE/NAME",
        show_default="not published",
        help="At start, add the signing key's public half to this ConfigMap as <key id>.pem "
        "(created when absent; listed keys are kept, for rotation); the device plugins "
        "read it (--allocation-public-keys configmap:NAMESPACE/NAME).",
        validator=object_name_valid("--allocation-public-keys-configmap"),
    )

    def resolved(self) -> SchedulerOptions:
        """These options with HAMi's address forms read: ``--http_bind HOST:PORT`` as
        ``--bind-address``/``--port``, ``--metrics-bind-address HOST:PORT`` as
        ``--metrics-bind-address``/``--metrics-port``.

        Raises:
            ConfigError: an address whose port is not a number in 1-65535, naming the flag.
        """
        changes: dict[str, Any] = {}
        if self.http_bind is not None:
            changes["bind_address"], port = split_host_port(self.http_bind, "--http_bind")
            if port is None:
                raise ConfigError(f"--http_bind {self.http_bind}: expected HOST:PORT")
            changes["port"] = port
        host, port = split_host_port(self.metrics_bind_address, "--metrics-bind-address")
        if port is not None:
            changes["metrics_port"] = port
        if host != self.metrics_bind_address:  # a port, or an IPv6 address's brackets
            changes["metrics_bind_address"] = host or "0.0.0.0"
        if "bind_address" in changes and not changes["bind_address"]:
            changes["bind_address"] = "0.0.0.0"  # Go's ":443": every address
        return attrs.evolve(self, **changes) if changes else self

    def disabled_backends(self) -> list[str]:
        """The backends HAMi's ``--enable-<vendor>=false`` switch off."""
        return [
            name
            for name, on in (("ascend", self.enable_ascend), ("iluvatar", self.enable_iluvatar))
            if on is False
        ]


@attrs.frozen(kw_only=True)
class WebhookOptions:
    """The settings of ``hami webhook`` (``hami webhook --help``)."""

    bind_address: str = setting(
        "0.0.0.0",
        convert=address_text("--bind-address"),
        help="Address the HTTPS server listens on.",
    )
    port: int = setting(9443, min=0, max=65535, help="HTTPS port (/webhook, /healthz, /readyz).")
    http_bind: str | None = setting(
        None,
        flag="--http_bind",
        convert=address_text("--http_bind", port=True),
        metavar="HOST:PORT",
        show_default="--bind-address and --port",
        help="HAMi's spelling of --bind-address and --port together (its scheduler binary "
        "serves the webhook; its chart passes 0.0.0.0:443).",
    )
    cert_mode: Literal["files", "auto"] = setting(
        "files",
        choices=["files", "auto"],
        help="files: serve --tls-cert-file / --tls-private-key-file. auto: make a CA and a "
        "serving certificate, keep them in --secret-name (reused by every replica) and write "
        "the CA into the caBundle of --webhook-config-name.",
    )
    tls_cert_file: str | None = setting(
        None,
        flag=("--tls-cert-file", "--cert_file"),
        show_default="none; auto mode: a temporary file",
        help="Serving certificate (PEM). In auto mode, where the generated one is written. "
        "--cert_file is HAMi's name for it.",
    )
    tls_private_key_file: str | None = setting(
        None,
        flag=("--tls-private-key-file", "--key_file"),
        show_default="none; auto mode: a temporary file",
        help="Private key (PEM) of --tls-cert-file. In auto mode, where the generated one is "
        "written. --key_file is HAMi's name for it.",
    )
    service_name: str = setting(
        "hami-webhook",
        help="Service in front of the webhook (auto mode: the certificate names "
        "<svc>, <svc>.<ns>, <svc>.<ns>.svc and <svc>.<ns>.svc.cluster.local).",
    )
    service_namespace: str | None = setting(
        None,
        show_default="$POD_NAMESPACE, else the service-account namespace, else kube-system",
        help="Namespace of the Service and of --secret-name.",
        validator=namespace_valid("--service-namespace"),
    )
    webhook_config_name: str = setting(
        "hami-webhook",
        help="MutatingWebhookConfiguration whose webhooks get the CA bundle (auto mode).",
    )
    secret_name: str = setting(
        "hami-webhook-tls",
        help="Secret (type kubernetes.io/tls, plus ca.crt and ca.key) holding the auto-mode "
        "certificates.",
    )
    cert_ip_addresses: tuple[str, ...] = setting(
        (),
        flag="--cert-ip-address",
        multiple=True,
        show_default="none",
        help="Extra IP SAN of the auto-mode certificate (repeatable), e.g. 127.0.0.1 when the "
        "API server calls a url on loopback.",
    )
    cert_dns_names: tuple[str, ...] = setting(
        (),
        flag="--cert-dns-name",
        multiple=True,
        show_default="none",
        help="Extra DNS SAN of the auto-mode certificate (repeatable).",
    )
    kubeconfig: str | None = kubeconfig_setting("(quotas, namespaces, Secret, caBundle)")
    config: str | None = config_file_setting(HAMI_CONFIG_FLAG, hami=True)
    scheduler_name: str | None = scheduler_name_setting()
    force_overwrite_default_scheduler: bool | None = force_overwrite_setting()
    threads: int = setting(
        32,
        min=1,
        max=1024,
        help="Worker threads of the HTTPS server.",
        why="a slow client holds one while it sends (half a second once others wait): "
        "32 keep reviews within seconds with 128 such clients from as many addresses.",
    )
    namespace_cache_s: float = setting(
        30.0,
        flag="--namespace-cache-seconds",
        unit="seconds",
        min=0,
        help="How long a namespace's labels (hami.io/webhook: ignore) are reused.",
        why="one namespace read per half minute per namespace, not one per pod.",
    )
    trusted_users: tuple[str, ...] = setting(
        (),
        flag="--trusted-user",
        multiple=True,
        show_default="system:serviceaccount:<ns>:hami-scheduler and "
        "system:serviceaccount:<ns>:hami-device-plugin, <ns> as --service-namespace",
        help="userInfo.username allowed to write scheduler-owned pod annotations (repeatable): "
        "the scheduler's and the device plugin's service accounts. Everyone else is denied.",
    )

    def resolved(self) -> WebhookOptions:
        """These options with HAMi's ``--http_bind HOST:PORT`` read as ``--bind-address``
        and ``--port`` (Go's ``:443``: every address).

        Raises:
            ConfigError: no port, or one not in 1-65535, naming the flag.
        """
        if self.http_bind is None:
            return self
        host, port = split_host_port(self.http_bind, "--http_bind")
        if port is None:
            raise ConfigError(f"--http_bind {self.http_bind}: expected HOST:PORT")
        return attrs.evolve(self, bind_address=host or "0.0.0.0", port=port)


@attrs.frozen(kw_only=True)
class MonitorOptions:
    """The settings of ``hami monitor`` (``hami monitor --help``)."""

    node_name: str = setting(
        env="NODE_NAME",
        help="This node's name (in a DaemonSet: the downward API's spec.nodeName).",
    )
    bind_address: str = setting(
        "0.0.0.0", convert=address_text("--bind-address"), help="Address to serve /metrics on."
    )
    port: int = setting(
        9394,
        flag=("--port", "--metrics-port"),
        min=1,
        max=65535,
        help="Port of /metrics and /healthz.",
        why="HAMi's vGPU monitor port, which HAMi's dashboards scrape.",
    )
    kubeconfig: str | None = kubeconfig_setting("(this node's pods)")
    config: str | None = config_file_setting()
    containers_dir: str = setting(
        "/usr/local/vgpu/containers",
        env="HAMI_CONTAINERS_DIR",
        help="Host directory holding one <pod UID>_<container> directory per container.",
        why="where HAMi's device plugin puts each container's shared region.",
    )
    gc_grace_s: float = setting(
        300.0,
        flag="--gc-grace",
        unit="seconds",
        min=0,
        help="How long the directory of a pod that no longer exists is kept before removal.",
        why="a pod read from a lagging cache is not mistaken for a gone one.",
    )
    proc_root: str = setting(
        "/proc",
        help="procfs of the host's PID namespace (the DaemonSet runs with hostPID).",
    )
    overuse_policy: str = setting(
        "report",
        choices=("report", "evict"),
        help="What to do about a container whose device memory, measured from the host "
        "(NVML per process), is over its allocation: report (a metric and a Warning "
        "Event) or evict (also an eviction). A namespace's label or a pod's annotation "
        "hami.io/overuse-policy can only make it stricter.",
        why="the shim runs inside the tenant's process; only the host's measure holds "
        "against a tenant that bypasses it, and eviction is the operator's choice.",
    )
    overuse_tolerance_mib: int = setting(
        0,
        unit="MiB",
        min=0,
        max=1 << 20,
        help="Device memory a container may hold beyond its allocation, measured from "
        "the host, before it counts as over (Events, evictions).",
        why="the shim charges the CUDA context to the limit, so an honest container "
        "stays within it.",
    )
    scan_max_age_s: float = setting(
        5.0,
        flag="--scan-max-age",
        unit="seconds",
        min=0,
        max=300,
        help="Oldest scan /metrics and /healthz serve; requests within it share one scan.",
        why="a client looping /metrics costs one scan per period, not one per request, "
        "so Prometheus' scrape stays inside its timeout.",
    )
    scan_interval_s: float = setting(
        10.0,
        flag="--scan-interval",
        unit="seconds",
        min=1,
        max=300,
        help="The monitor scans on its own at least this often, scraped or not: the "
        "host-side overuse check (Events, evictions), the truncation of grown regions and "
        "the removal of gone pods' directories do not wait for a scrape.",
        why="enforcement that ran only when Prometheus or a probe asked would stop with "
        "them; 10 s is Prometheus' common scrape interval.",
    )
    legacy_metrics: bool | None = setting(
        None,
        show_default="off",
        help="Accepted as HAMi's chart passes it to its vGPUmonitor (legacy metric names "
        "beside the new ones); our metrics keep HAMi's names already (docs/monitoring.md), so "
        "it changes nothing.",
    )
    threads: int = 4


#: Where HAMi's device plugin reads its per-node config.json, no flag naming it
#: (``ConfigFilePath``, ``pkg/device-plugin/nvidiadevice/nvinternal/plugin/server.go``;
#: its chart mounts the ConfigMap at ``/config``).
HAMI_NODE_CONFIG_PATH = "/config/config.json"


@attrs.frozen(kw_only=True)
class DevicePluginOptions:
    """The settings of ``hami device-plugin`` (``hami device-plugin --help``)."""

    node_name: str = setting(
        env="NODE_NAME",
        help="This node's name: where the inventory is published and whose pods are "
        "allocated (in a DaemonSet: the downward API's spec.nodeName).",
    )
    backend: str = setting(
        "nvidia",
        env="HAMI_BACKEND",
        help="Backend (entry point of hami.backends) whose devices this process serves.",
    )
    vendor: str | None = setting(
        None,
        env="HAMI_VENDOR",
        show_default="the backend's first vendor key",
        help="Vendor key served, for backends with several (one resource per process).",
    )
    kubeconfig: str | None = kubeconfig_setting()
    config: str | None = config_file_setting(
        "split count, scaling, resource names and backend options (hami-nvidia: hookPath, "
        "libraryPath, corePolicy, unifiedMemoryMiB, ignoredXids, healthRecoverySeconds); "
        "--config-file is HAMi's name for it (its chart passes its device-config.yaml)",
        hami=True,
        hami_flag="--config-file",
    )
    mig_strategy: str | None = setting(
        None,
        choices=MIG_STRATEGIES,
        env="HAMI_MIG_STRATEGY",
        show_default="the per-node file's migstrategy, else none",
        help="NVIDIA's MIG strategy (HAMi's and NVIDIA's device-plugin flag): none, single "
        "(each MIG instance its own device) or mixed. A node's migstrategy in --node-config "
        "overrides it. Other backends have no MIG: a value but none is ignored with a "
        "warning.",
    )
    disable_core_limit: bool | None = setting(
        None,
        env="HAMI_DISABLE_CORE_LIMIT",
        show_default="off (the configuration's corePolicy)",
        help="HAMi's switch off of the compute limit: --disable-core-limit=true serves "
        "containers GPU_CORE_UTILIZATION_POLICY=disable (nvidia.corePolicy: disable, as HAMi's "
        "nvidia.disableCoreLimit), so libvgpu.so does not throttle kernels to the pod's "
        "cores (a pod's own core-policy annotation still applies to it); memory stays "
        "limited. Other backends: ignored with a warning.",
    )
    node_config: str | None = setting(
        None,
        env="HAMI_NODE_CONFIG",
        show_default=f"{HAMI_NODE_CONFIG_PATH} where that file exists, else none",
        help="Per-node overrides in HAMi's device-plugin config.json shape (JSON or YAML): "
        '{"nodeconfig": [{"name": NODE, "devicesplitcount": N, "devicememoryscaling": F, '
        '"devicecorescaling": F, "filterdevices": {"uuid": [...], "index": [...]}}]}. '
        f"HAMi's device plugin reads it at {HAMI_NODE_CONFIG_PATH}, where its chart "
        "mounts it without a flag.",
    )
    plugin_dir: str = setting(
        DEFAULT_PLUGIN_DIR,
        flag="--device-plugin-path",
        env="HAMI_DEVICE_PLUGIN_PATH",
        help="kubelet's device-plugin directory, holding kubelet.sock and our socket.",
        why="kubelet's DevicePluginPath (device plugin API v1beta1).",
    )
    pod_resources_socket: str = setting(
        "/var/lib/kubelet/pod-resources/kubelet.sock",
        flag="--pod-resources-socket",
        env="HAMI_POD_RESOURCES_SOCKET",
        help='kubelet\'s PodResources socket; "" to not read it. Allocate tells the pod '
        "kubelet is admitting by what kubelet lists there (PROTOCOL.md §4).",
        why="kubelet's podresources.Socket (API v1 and v1alpha1 in 1.20).",
    )
    socket_name: str | None = setting(
        None,
        env="HAMI_SOCKET_NAME",
        show_default="<backend>-<resource suffix>.sock, e.g. nvidia-gpu.sock",
        help="File name of the plugin's socket in --device-plugin-path.",
    )
    register_interval_s: float = setting(
        30.0,
        flag="--register-interval",
        env="HAMI_REGISTER_INTERVAL",
        unit="seconds",
        min=1,
        help="Time between checks of the inventory and handshake annotations (written "
        "only when they change or the scheduler asks; health changes publish at once).",
        why="HAMi's device plugin re-registers its node every 30 s.",
    )
    health_interval_s: float = setting(
        5.0,
        flag="--health-interval",
        env="HAMI_HEALTH_INTERVAL",
        unit="seconds",
        min=0.1,
        help="Longest wait for a device health event before discovering again "
        "(recovered devices are noticed at this pace).",
        why="NVIDIA's k8s-device-plugin waits 5 s per NVML event round.",
    )
    cdi: bool = setting(
        False,
        env="HAMI_CDI",
        help="Answer Allocate with CDI device names (and a CDI spec per container) instead "
        "of env, mounts and device nodes.",
    )
    cdi_spec_dir: str = setting(
        "/var/run/cdi",
        env="HAMI_CDI_SPEC_DIR",
        help="Directory the container runtime reads CDI specs from (--cdi).",
        why="the CDI specification's dynamic spec directory.",
    )
    state_dir: str = setting(
        "/usr/local/vgpu/state",
        env="HAMI_STATE_DIR",
        help="Host directory of the node-local records backends keep between Allocate "
        "calls (hami-amd: the CU ranges handed out), one JSON file per record.",
        why="beside the shim's /usr/local/vgpu, on the host so a restart keeps them.",
    )
    link_scores: bool = setting(
        False,
        env="HAMI_LINK_SCORES",
        help="Publish device link scores (hami.io/node-<backend>-score) for the "
        "topology-aware policy.",
    )
    fail_on_init_error: bool = setting(
        True,
        env="HAMI_FAIL_ON_INIT_ERROR",
        help="Exit when discovery fails at start (no driver, NVML error); with --no-..., "
        "log it and idle without registering (DaemonSets on nodes without devices).",
        why="NVIDIA's k8s-device-plugin default (failOnInitError).",
    )
    workers: int = 8
    api_timeout_s: float = setting(
        5.0,
        flag="--api-timeout",
        env="HAMI_API_TIMEOUT",
        unit="seconds",
        min=0.1,
        help="Longest one API server request may take (connect and read).",
    )
    allocate_timeout_s: float = setting(
        10.0,
        flag="--allocate-timeout",
        env="HAMI_ALLOCATE_TIMEOUT",
        unit="seconds",
        min=0.1,
        help="Longest an Allocate answer may take; past it kubelet gets UNAVAILABLE and its "
        "retry with the same device IDs gets the answer once it is ready.",
    )
    metrics_port: int = setting(
        0,
        env="HAMI_METRICS_PORT",
        min=0,
        max=65535,
        help="Serve the device plugin's metrics (Allocate durations, devices, health) on "
        "this port; 0: off.",
    )
    metrics_bind_address: str = setting(
        "0.0.0.0",
        env="HAMI_METRICS_BIND_ADDRESS",
        convert=address_text("--metrics-bind-address"),
        help="Address of --metrics-port.",
    )

    allocation_public_keys: str | None = setting(
        None,
        env="HAMI_ALLOCATION_PUBLIC_KEYS",
        metavar="configmap:NAMESPACE/NAME|PATH",
        show_default="none: only the pod a node lock names is served",
        help="The scheduler's Ed25519 public keys (PROTOCOL.md §4a): configmap:NAMESPACE/NAME "
        "(its *.pem entries, read through the API), a PEM file, or a directory of *.pem "
        "files; read again when a signature names a key not seen yet (rotation). A pod "
        "whose hami.io/allocation-signature does not verify for it, this node and its "
        "values is never served. A missing path, a refused read or a malformed key stops "
        "the start.",
        validator=object_name_valid("--allocation-public-keys", prefix="configmap:"),
    )
    unsigned_allocations: str = setting(
        "lock",
        choices=("lock", "refuse"),
        env="HAMI_UNSIGNED_ALLOCATIONS",
        help="With --allocation-public-keys, a pod without a signature (bound by HAMi's "
        "scheduler, e.g. during a rolling upgrade) is served only under a node lock naming "
        "it (lock), or never (refuse: once every scheduler signs).",
        why="HAMi's lock protocol kept for a mixed cluster (docs/threat-model.md).",
    )

    def resolved(self) -> DevicePluginOptions:
        """These options with HAMi's fixed per-node file: ``--node-config`` unset and
        ``HAMI_NODE_CONFIG_PATH`` a file (HAMi's chart mounts its config.json there and
        names it to no flag) reads that file; an explicit ``--node-config`` is kept."""
        if self.node_config is None and os.path.isfile(HAMI_NODE_CONFIG_PATH):
            return attrs.evolve(self, node_config=HAMI_NODE_CONFIG_PATH)
        return self


#: Each server command and its settings, in ``hami --help`` order (docs/settings.md).
COMMANDS: tuple[tuple[str, type], ...] = (
    ("hami scheduler", SchedulerOptions),
    ("hami webhook", WebhookOptions),
    ("hami device-plugin", DevicePluginOptions),
    ("hami monitor", MonitorOptions),
)
