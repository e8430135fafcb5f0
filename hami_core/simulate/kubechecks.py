"""kube-scheduler's own checks, for what a snapshot carries (the what-if must not lie).

kube-scheduler runs its filter plugins before it asks the extender, and only the nodes
that pass reach ``/filter``. The simulation does the same for the plugins whose inputs a
``kubectl get nodes,pods -o yaml`` snapshot holds: ``NodeName``, ``NodeUnschedulable``,
``NodeAffinity`` (``nodeSelector`` and required node affinity), ``TaintToleration``
(``NoSchedule`` / ``NoExecute``), ``NodePorts`` (host ports the node's pods already
use) and ``NodeResourcesFit`` (CPU, memory, ephemeral
storage and pod count against the node's allocatable minus the requests of the live pods
already there). Resources a node does not state in ``status.allocatable`` are not
checked (a hand-written cluster file rarely states CPU); device resources are the
extender's (``ignoredByScheduler`` in the chart's extender configuration), except an
extended resource no backend manages (another device plugin's), which a node has only
when it states it.

Messages are kube-scheduler 1.20's (``pkg/scheduler/framework/plugins/*``):
``node(s) didn't match the requested hostname``, ``node(s) were unschedulable``,
``node(s) didn't match Pod's node affinity``, ``node(s) had taint {k: v}, that the pod
didn't tolerate``, ``node(s) didn't have free ports for the requested pod ports``,
``Insufficient cpu``, ``Insufficient memory``, ``Too many pods``. The filters that look
at other pods' affinity and spread are ``podtopology``'s.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any

from hami_core.errors import QuantityError
from hami_core.model import effective_request
from hami_core.protocol.pods import containers, is_live
from hami_core.protocol.quantity import parse_quantity_exact

#: Resources NodeResourcesFit compares when the node states them.
CHECKED = ("cpu", "memory", "ephemeral-storage")
HOSTNAME = "node(s) didn't match the requested hostname"
UNSCHEDULABLE = "node(s) were unschedulable"
AFFINITY = "node(s) didn't match Pod's node affinity"
TOO_MANY_PODS = "Too many pods"
#: The host IP a port without ``hostIP`` binds (every address).
ANY_IP = "0.0.0.0"
PORTS = "node(s) didn't have free ports for the requested pod ports"
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"


def _quantity(value: object, resource: str) -> Decimal:
    try:
        return parse_quantity_exact(value, resource=resource)
    except QuantityError:
        return Decimal(0)  # the API server would have refused it; count nothing


def pod_requests(pod: Mapping[str, Any], names: Sequence[str] = CHECKED) -> dict[str, Decimal]:
    """The pod's effective request per resource of ``names``, by Kubernetes' rule
    (``hami_core.model.effective_request``: sidecars beside the app containers and beside
    the init containers declared after them); a container's request is its
    ``requests``, else its ``limits`` (the API server's default)."""

    def of(container: Mapping[str, Any]) -> dict[str, Decimal]:
        res = container.get("resources") or {}
        limits, requests = res.get("limits") or {}, res.get("requests") or {}
        out = {}
        for name in names:
            raw = requests.get(name, limits.get(name))
            if raw is not None:
                out[name] = _quantity(raw, name)
        return out

    return effective_request(((init, of(c)) for c, init, _ in containers(pod)), operator.add, max)


def _matches_expression(labels: Mapping[str, str], expr: Mapping[str, Any]) -> bool:
    key, op = str(expr.get("key", "")), expr.get("operator")
    values = [str(v) for v in expr.get("values") or []]
    present = key in labels
    if op == "In":
        return present and labels[key] in values
    if op == "NotIn":
        return not present or labels[key] not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt") and present and len(values) == 1:
        try:
            have, want = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want
    return False


def _matches_term(node: Mapping[str, Any], term: Mapping[str, Any]) -> bool:
    """A ``NodeSelectorTerm``: every expression and field matches; an empty term
    matches nothing (Kubernetes ``v1.NodeSelectorTerm``)."""
    exprs = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not exprs and not fields:
        return False
    meta = node.get("metadata") or {}
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    name_field = {"metadata.name": str(meta.get("name", ""))}
    return all(_matches_expression(labels, e) for e in exprs) and all(
        _matches_expression(name_field, f) for f in fields
    )


def matches_affinity(pod: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """``nodeSelector`` (every label equal) and required node affinity (any term)."""
    spec = pod.get("spec") or {}
    labels = (node.get("metadata") or {}).get("labels") or {}
    for k, v in (spec.get("nodeSelector") or {}).items():
        if labels.get(k) != v:
            return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or None
    if required is None:
        return True
    terms = required.get("nodeSelectorTerms") or []
    return any(_matches_term(node, t) for t in terms)


def tolerates(tolerations: Iterable[Mapping[str, Any]], taint: Mapping[str, Any]) -> bool:
    """Kubernetes ``Toleration.ToleratesTaint``: the effect matches (or is empty), the
    key matches (an empty key with ``Exists`` matches every key), and under ``Equal``
    (the default operator) the value too."""
    for t in tolerations:
        if t.get("effect") and t.get("effect") != taint.get("effect"):
            continue
        op = t.get("operator") or "Equal"
        if t.get("key"):
            if t.get("key") != taint.get("key"):
                continue
        elif op != "Exists":
            continue
        if op == "Exists" or str(t.get("value", "")) == str(taint.get("value", "")):
            return True
    return False


def untolerated_taint(pod: Mapping[str, Any], node: Mapping[str, Any]) -> str:
    """The reason for the first ``NoSchedule`` / ``NoExecute`` taint the pod does not
    tolerate, or ""."""
    tolerations = (pod.get("spec") or {}).get("tolerations") or []
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        if not tolerates(tolerations, taint):
            return (
                f"node(s) had taint {{{taint.get('key', '')}: {taint.get('value', '')}}}, "
                "that the pod didn't tolerate"
            )
    return ""


def host_ports(pod: Mapping[str, Any]) -> set[tuple[str, str, int]]:
    """``(hostIP, protocol, hostPort)`` of the pod's app containers' ports with a host
    port (kube-scheduler 1.20 ``nodeports.getContainerPorts``; ``HostPortInfo``'s
    defaults: IP ``0.0.0.0``, protocol ``TCP``); unreadable entries are left out."""
    out = set()
    for c in (pod.get("spec") or {}).get("containers") or []:
        ports = c.get("ports") if isinstance(c, Mapping) else None
        for p in ports if isinstance(ports, list) else ():
            port = p.get("hostPort") if isinstance(p, Mapping) else None
            if isinstance(port, int) and not isinstance(port, bool) and port > 0:
                ip = str(p.get("hostIP") or ANY_IP)
                out.add((ip, str(p.get("protocol") or "TCP"), port))
    return out


def ports_conflict(pod: Mapping[str, Any], pods_on_node: Sequence[Mapping[str, Any]]) -> bool:
    """``HostPortInfo.CheckConflict``: the same protocol and port on the same IP, or
    on any IP when either side binds ``0.0.0.0``; finished pods hold no port."""
    wanted = host_ports(pod)
    if not wanted:
        return False
    uid = (pod.get("metadata") or {}).get("uid")
    used: set[tuple[str, str, int]] = set()
    for p in pods_on_node:
        if is_live(p) and (p.get("metadata") or {}).get("uid") != uid:
            used |= host_ports(p)
    for ip, proto, port in wanted:
        for uip, uproto, uport in used:
            if (uproto, uport) == (proto, port) and (ANY_IP in (ip, uip) or ip == uip):
                return True
    return False


def insufficient(
    pod: Mapping[str, Any],
    node: Mapping[str, Any],
    pods_on_node: Sequence[Mapping[str, Any]],
    extended: Sequence[str] = (),
) -> list[str]:
    """``Insufficient <resource>`` / ``Too many pods`` for what the node states, and for
    each extended resource of ``extended`` (one the extender does not manage, so not
    ``ignoredByScheduler``): a node that does not state it has none."""
    status = node.get("status") or {}
    allocatable = status.get("allocatable") or status.get("capacity") or {}
    uid = (pod.get("metadata") or {}).get("uid")
    others = [p for p in pods_on_node if is_live(p) and (p.get("metadata") or {}).get("uid") != uid]
    out = []
    if "pods" in allocatable and len(others) + 1 > _quantity(allocatable["pods"], "pods"):
        out.append(TOO_MANY_PODS)
    names = (*CHECKED, *extended)
    want = pod_requests(pod, names)
    for name in names:
        if not want.get(name) or (name in CHECKED and name not in allocatable):
            continue
        used = sum((pod_requests(p, (name,)).get(name, Decimal(0)) for p in others), Decimal(0))
        if used + want[name] > _quantity(allocatable.get(name, 0), name):
            out.append(f"Insufficient {name}")
    return out


def kube_reason(
    pod: Mapping[str, Any],
    node: Mapping[str, Any],
    pods_on_node: Sequence[Mapping[str, Any]],
    extended: Sequence[str] = (),
) -> str:
    """Why kube-scheduler would not send ``node`` to the extender for ``pod``, or "";
    ``extended``: the pod's extended resources no backend manages (``insufficient``)."""
    spec = pod.get("spec") or {}
    name = str((node.get("metadata") or {}).get("name", ""))
    if spec.get("nodeName") and spec["nodeName"] != name:
        return HOSTNAME
    node_spec = node.get("spec") or {}
    if node_spec.get("unschedulable") and not tolerates(
        spec.get("tolerations") or [], {"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"}
    ):
        return UNSCHEDULABLE
    if not matches_affinity(pod, node):
        return AFFINITY
    taint = untolerated_taint(pod, node)
    if taint:
        return taint
    if ports_conflict(pod, pods_on_node):
        return PORTS
    return ", ".join(insufficient(pod, node, pods_on_node, extended))
